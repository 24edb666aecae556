"""A run's files are written whole or not at all, in a subprocess as a user runs ``torchrl-mask train``: a signal
that comes while ``model.zip`` is written, a disk that fills, a folder a killed run left; and the options a run
refuses in one line rather than ignoring (issue 49)."""

from __future__ import annotations

import contextlib
import errno
import itertools
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import cli_runs
import pytest
from cli_runs import one_line

from torchrl_mask import MaskablePPO
from torchrl_mask.app.run_folder import LOCK

REPO = Path(__file__).resolve().parents[1]
TESTS = Path(__file__).resolve().parent
TAXI = ["--env", "Taxi-v4", "-n", "512", "--hyperparams", "n_envs=2", "n_steps=128", "--eval-episodes", "1"]
QUIET = ["--no-progress", "--verbose", "0"]


def run_cli(*args: str, fault: str = "") -> subprocess.CompletedProcess[str]:
    """``torchrl-mask train ARGS`` in a subprocess, with :mod:`run_faults`' ``fault`` installed."""
    first = "import run_faults\nrun_faults.install()"
    return cli_runs.run_cli("train", *args, first=first, env={**os.environ, "RUN_FAULT": fault})


def _no_partial_files(out: Path) -> None:
    leftovers = [path.name for path in out.iterdir() if path.name.endswith(".part")]
    assert not leftovers, leftovers


@pytest.mark.slow
@pytest.mark.parametrize(
    ("fault", "status"),
    [("sigterm-at-save", 143), ("sigint-at-save", 130), ("sigint-in-training-and-at-save", 130)],
)
def test_a_signal_while_the_model_is_written_keeps_the_whole_model(fault: str, status: int, tmp_path: Path) -> None:
    out = tmp_path / "run"
    proc = run_cli(*TAXI, "--out", str(out), *QUIET, fault=fault)
    assert proc.returncode == status, proc.stderr[-3000:]
    line = one_line(proc)
    assert line.startswith("torchrl-mask: interrupted at ") and line.endswith(f"saved to {out / 'model.zip'}"), line
    model = MaskablePPO.load(out / "model.zip", device="cpu")  # whole: it loads
    assert model.num_timesteps >= 256
    _no_partial_files(out)


@contextlib.contextmanager
def _small_disk(tmp_path: Path) -> Iterator[tuple[Path, str]]:
    """A 1 MB tmpfs where the machine lets this process mount one (root, a kernel that allows it); else a plain
    folder whose model write fails with ENOSPC, as a full disk fails it (:mod:`run_faults`)."""
    disk = tmp_path / "disk"
    disk.mkdir()
    mounted = (
        os.geteuid() == 0
        and subprocess.run(
            ["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", str(disk)], capture_output=True
        ).returncode
        == 0
    )
    try:
        yield disk, "" if mounted else "enospc-at-save"
    finally:
        if mounted:
            subprocess.run(["umount", str(disk)], check=True)


@pytest.mark.slow
def test_a_disk_that_fills_while_the_model_is_written_leaves_no_model_and_says_so_inone_line(tmp_path: Path) -> None:
    # a network of about 3 MB of weights and Adam's state: the tmpfs holds the run's small files, not the model
    big = ["--hyperparams", "policy_kwargs=dict(net_arch=[512, 512])"]
    with _small_disk(tmp_path) as (disk, fault):
        out = disk / "run"
        proc = run_cli(*TAXI, *big, "--out", str(out), *QUIET, fault=fault)
        assert proc.returncode == 1, proc.stderr[-3000:]
        line = one_line(proc)
        assert "the model trained for" in line and "could not be saved" in line, line
        assert os.strerror(errno.ENOSPC) in line and "free space" in line, line
        assert not (out / "model.zip").exists()
        _no_partial_files(out)


@pytest.mark.slow
def test_a_folder_holding_only_the_lock_of_a_killed_run_is_taken_without_overwrite(tmp_path: Path) -> None:
    out = tmp_path / "run"
    out.mkdir()
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    (out / LOCK).write_text(dead.stdout)  # a SIGKILLed run's lock: its process is gone
    proc = run_cli(*TAXI, "--out", str(out), *QUIET)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert (out / "model.zip").is_file() and not (out / LOCK).exists()


@pytest.mark.slow
def test_self_play_checkpoints_come_every_save_freq_moves_not_every_few(tmp_path: Path) -> None:
    # the self-play model's callbacks run once per move (its VecEnv has one env): the frequency is in moves
    out = tmp_path / "run"
    proc = run_cli(
        "--env",
        "pettingzoo:tictactoe_v3",
        "-n",
        "3000",
        "--save-freq",
        "1500",
        "--eval-episodes",
        "2",
        "--out",
        str(out),
        *QUIET,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    trained = MaskablePPO.load(out / "model.zip", device="cpu").num_timesteps
    checkpoints = sorted(out.glob("rl_model_*_steps.zip"))
    assert 1 <= len(checkpoints) <= trained // 1500, [path.name for path in checkpoints]
    steps = sorted(int(path.name.split("_")[2]) for path in checkpoints)
    assert all(later - earlier == 1500 for earlier, later in itertools.pairwise(steps)), steps


# Options that do not fit the env, each refused in one line (exit 2, nothing written) where they were accepted and
# ignored: a gymnasium env has no league or images, a fixed share needs a league, images need symmetries.
REFUSED = {
    "pool-size-for-taxi": (["--env", "Taxi-v4", "--pool-size", "2"], "--pool-size is for a pettingzoo:<game>"),
    "league-for-taxi": (["--env", "Taxi-v4", "--league-players", "random"], "--league-players is for"),
    "fixed-share-for-taxi": (["--env", "Taxi-v4", "--fixed-share", "0.5"], "--fixed-share is for"),
    "self-share-for-taxi": (["--env", "Taxi-v4", "--self-share", "0.5"], "--self-share is for"),
    "images-for-taxi": (["--env", "Taxi-v4", "--images", "random"], "--images is for"),
    "symmetries-for-taxi": (["--env", "Taxi-v4", "--no-symmetries"], "--symmetries is for"),
    "fixed-share-without-league": (
        ["--env", "pettingzoo:tictactoe_v3", "--pool-size", "0", "--fixed-share", "0.5"],
        "--fixed-share 0.5 without a league",
    ),
    "images-without-symmetries": (
        ["--env", "pettingzoo:tictactoe_v3", "--no-symmetries", "--images", "all"],
        "--images all says how a move's images are trained on, but --no-symmetries",
    ),
    "images-for-leduc": (
        ["--env", "pettingzoo:leduc_holdem_v4", "--images", "all"],
        "but leduc_holdem_v4 has no symmetries",
    ),
    "threads-above-the-cores": (["--env", "Taxi-v4", "--threads", "1000"], "--threads 1000: this process may use"),
    "a-folder-as-the-model": (["--env", "Taxi-v4", "-i", "{tmp}"], "a folder; pass a model saved by"),
}


@pytest.mark.parametrize("case", sorted(REFUSED))
def test_an_option_that_does_not_fit_the_env_is_refused_in_one_line_and_writes_nothing(
    case: str, tmp_path: Path
) -> None:
    args, says = REFUSED[case]
    out = tmp_path / "run"
    proc = run_cli(*[arg.format(tmp=tmp_path) for arg in args], "--out", str(out), *QUIET)
    assert proc.returncode == 2, proc.stderr[-3000:]
    assert says in one_line(proc), proc.stderr
    assert not out.exists()
