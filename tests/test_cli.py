"""The ``torchrl-mask`` command, driven as a user drives it: in a subprocess, reading its output and files."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import textwrap
from pathlib import Path

import numpy as np
import pytest
from PIL import Image
from sb3_contrib import MaskablePPO as SB3ContribMaskablePPO

from torchrl_mask import MaskablePPO

REPO = Path(__file__).resolve().parents[1]
SMALL = ["--steps", "1024", "--n-envs", "2", "--n-steps", "128", "--eval-episodes", "2"]
TINY = ["--steps", "256", "--n-envs", "2", "--n-steps", "64", "--eval-episodes", "1", "--no-progress"]

# Each case: the arguments, and a piece of the one-line message that names the problem or its fix.
BAD_INPUT = {
    "unknown_env_id": (["train", "--env", "NoSuchEnv-v0"], "Environment `NoSuchEnv` doesn't exist"),
    "deprecated_env_version": (["train", "--env", "Taxi-v3"], "Please use `Taxi-v4` instead"),
    "env_without_masks": (["train", "--env", "CartPole-v1"], "CartPole-v1 reports no action mask"),
    "continuous_actions": (["train", "--env", "Pendulum-v1"], "which cannot be masked"),
    "zero_steps": (["train", "--steps", "0"], "argument --steps: expected a positive integer, got '0'"),
    "non_numeric_n_envs": (["train", "--n-envs", "two"], "argument --n-envs: expected a positive integer, got 'two'"),
    "unknown_device": (["train", "--device", "banana"], "use cpu, cuda, cuda:0, mps or auto"),
    "unknown_option": (["train", "--bogus"], "unrecognized arguments: --bogus; see `torchrl-mask train --help`"),
    "output_is_a_file": (["train", "--out", "pyproject.toml"], "--out pyproject.toml is a file; pass a folder"),
    "output_under_a_file": (["train", "--out", "pyproject.toml/run"], "pyproject.toml, which is a file; pass a"),
    "output_under_proc": (["train", "--out", "/proc/torchrl_mask/run"], "cannot create a folder in /proc"),
}

# An env module a user might register: one env with sb3-contrib's action_masks() method, one with the mask
# as an entry of a Dict observation. gymnasium imports it from "--env cli_envs:<id>".
CLI_ENVS = textwrap.dedent(
    '''
    import gymnasium as gym
    import numpy as np
    from gymnasium import spaces
    from sb3_contrib.common.envs import InvalidActionEnvDiscrete


    class DictMaskEnv(gym.Env):
        """Pick the marked action among 4; the observation carries which actions are allowed."""

        def __init__(self):
            self.observation_space = spaces.Dict(
                {"target": spaces.Discrete(4), "action_mask": spaces.MultiBinary(4)}
            )
            self.action_space = spaces.Discrete(4)

        def _obs(self):
            mask = self.np_random.random(4) < 0.5
            self.target = int(self.np_random.integers(4))
            mask[self.target] = True
            return {"target": self.target, "action_mask": mask.astype(np.int8)}

        def reset(self, *, seed=None, options=None):
            super().reset(seed=seed)
            self.t = 0
            return self._obs(), {}

        def step(self, action):
            reward = float(action == self.target)
            self.t += 1
            return self._obs(), reward, False, self.t >= 20, {}


    gym.register("MethodMask-v0", entry_point=lambda: InvalidActionEnvDiscrete(dim=4, n_invalid_actions=2))
    gym.register("DictMask-v0", entry_point=DictMaskEnv)
    '''
)


def run_cli(*args: str, cwd: Path = REPO, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "torchrl_mask", *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=300
    )


@pytest.fixture(scope="module")
def bad_input_runs() -> dict[str, subprocess.CompletedProcess[str]]:
    """Run every bad-input case at once (each pays the import of torch), and collect what the user sees."""
    procs = {
        name: subprocess.Popen(
            [sys.executable, "-m", "torchrl_mask", *args],
            cwd=REPO,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for name, (args, _) in BAD_INPUT.items()
    }
    runs = {}
    for name, proc in procs.items():
        stdout, stderr = proc.communicate(timeout=300)
        runs[name] = subprocess.CompletedProcess(proc.args, proc.returncode, stdout, stderr)
    return runs


@pytest.fixture(scope="module")
def taxi_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[subprocess.CompletedProcess[str], Path]:
    out = tmp_path_factory.mktemp("taxi") / "run"
    return run_cli("train", *SMALL, "--out", str(out)), out


@pytest.mark.slow  # starts processes: kept out of make test-fast
@pytest.mark.parametrize("case", sorted(BAD_INPUT))
def test_bad_input_prints_one_line_with_the_fix_and_exits_2(
    case: str, bad_input_runs: dict[str, subprocess.CompletedProcess[str]]
) -> None:
    run = bad_input_runs[case]
    expected = BAD_INPUT[case][1]
    assert run.returncode == 2, run.stderr
    assert "Traceback" not in run.stderr
    lines = run.stderr.strip().splitlines()
    assert len(lines) == 1, run.stderr
    assert lines[0].startswith("torchrl-mask: error: ")
    assert expected in lines[0]
    assert run.stdout == ""


@pytest.mark.slow
def test_train_shows_progress_and_evaluation(taxi_run: tuple[subprocess.CompletedProcess[str], Path]) -> None:
    run, out = taxi_run
    assert run.returncode == 0, run.stderr
    assert "Training MaskablePPO on Taxi-v4 (masks from info['action_mask']) for 1,024 steps" in run.stdout
    assert "1,024/1,024" in run.stdout  # SB3's progress bar, finished
    for row in ("trained policy, with masks", "trained policy, without masks", "random legal actions"):
        assert row in run.stdout
    assert f"Saved to {out}/" in run.stdout


@pytest.mark.slow
def test_train_writes_a_learning_curve_png_worth_looking_at(
    taxi_run: tuple[subprocess.CompletedProcess[str], Path],
) -> None:
    _, out = taxi_run
    with Image.open(out / "learning_curve.png") as image:
        image.verify()
    with Image.open(out / "learning_curve.png") as image:
        assert image.format == "PNG"
        width, height = image.size
        pixels = np.asarray(image.convert("RGB"))
    assert 800 <= width <= 2000 and 300 <= height <= 1000
    drawn = (pixels < 250).any(axis=-1).mean()  # share of pixels that are not white background
    assert 0.02 < drawn < 0.6
    # the curve (blue), the masked evaluation bar (green) and the unmasked one (red) are all drawn
    colors = {tuple(c) for c in pixels.reshape(-1, 3)[::7].tolist()}
    assert len(colors) > 50


@pytest.mark.slow
def test_train_saves_a_model_both_libraries_load_and_an_evaluation_record(
    taxi_run: tuple[subprocess.CompletedProcess[str], Path],
) -> None:
    _, out = taxi_run
    record = json.loads((out / "evaluation.json").read_text())
    assert record["config"]["env_id"] == "Taxi-v4"
    assert record["config"]["steps"] == 1024
    assert set(record["evaluation"]) == {"masked", "unmasked", "random"}
    curve = (out / "learning_curve.csv").read_text().splitlines()
    assert curve[0] == "timestep,episode_return"
    assert len(curve) > 1  # 1024 steps of Taxi end at least one 200-step episode
    mask = np.zeros(6, dtype=bool)
    mask[[1, 3]] = True
    for cls in (MaskablePPO, SB3ContribMaskablePPO):
        model = cls.load(out / "model.zip", device="cpu")
        action, _ = model.predict(0, action_masks=mask, deterministic=True)
        assert int(action) in (1, 3)


@pytest.mark.slow
@pytest.mark.parametrize(
    ("env_id", "source"),
    [("cli_envs:MethodMask-v0", "its action_masks()"), ("cli_envs:DictMask-v0", "observation['action_mask']")],
)
def test_train_reads_masks_from_a_method_or_a_dict_observation(env_id: str, source: str, tmp_path: Path) -> None:
    (tmp_path / "cli_envs.py").write_text(CLI_ENVS)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(tmp_path), os.environ.get("PYTHONPATH")]))}
    run = run_cli("train", "--env", env_id, *TINY, "--out", str(tmp_path / "run"), env=env)
    assert run.returncode == 0, run.stderr
    assert f"(masks from {source})" in run.stdout
    record = json.loads((tmp_path / "run" / "evaluation.json").read_text())
    assert set(record["evaluation"]) == {"masked", "unmasked", "random"}


@pytest.mark.slow
def test_train_from_a_multiprocess_torchrl_collector(tmp_path: Path) -> None:
    out = tmp_path / "run"
    run = run_cli("train", "--collector", "multisync", *TINY, "--out", str(out))
    assert run.returncode == 0, run.stderr
    assert "2 envs (TorchRL MultiSyncCollector, one worker process each)" in run.stdout
    assert sorted(path.name for path in (out / "monitor").iterdir()) == ["0.monitor.csv", "1.monitor.csv"]
    assert json.loads((out / "evaluation.json").read_text())["config"]["collector"] == "multisync"
    with Image.open(out / "learning_curve.png") as image:
        assert image.size[0] >= 800


@pytest.mark.slow  # starts processes: kept out of make test-fast
def test_output_into_a_read_only_folder_is_one_line_exit_2_and_writes_nothing() -> None:
    # root writes through permission bits: as root the command runs as nobody, as an unprivileged user would.
    as_user = ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups"] if os.geteuid() == 0 else []
    with tempfile.TemporaryDirectory() as parent:
        os.chmod(parent, 0o755)
        read_only = Path(parent) / "read_only"
        read_only.mkdir(mode=0o555)
        out = read_only / "run"
        run = subprocess.run(
            [*as_user, sys.executable, "-m", "torchrl_mask", "train", *TINY, "--out", str(out)],
            cwd=REPO, capture_output=True, text=True, timeout=300,
        )  # fmt: skip
        assert run.returncode == 2, run.stderr
        assert run.stderr.strip().splitlines() == [
            f"torchrl-mask: error: --out {out}: cannot create a folder in {read_only} (Permission denied); "
            "pass a folder you can write to."
        ]
        assert run.stdout == ""
        assert list(read_only.iterdir()) == []


@pytest.mark.slow  # starts processes: kept out of make test-fast
def test_console_script_and_module_both_show_help() -> None:
    script = Path(sys.executable).with_name("torchrl-mask")
    run = subprocess.run([script, "train", "--help"], capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr
    for option in ("--env", "--steps", "--seed", "--n-envs", "--device", "--out", "--collector"):
        assert option in run.stdout


def test_bench_hands_its_arguments_to_the_benchmark() -> None:
    run = run_cli("bench", "--help")
    assert run.returncode == 0, run.stderr
    assert run.stdout.startswith("usage: torchrl-mask bench")
