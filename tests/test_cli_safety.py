"""``torchrl-mask train`` keeps what it trained and refuses what would lose it, driven in a subprocess as a user
drives it: an evaluation that raises, Ctrl-C and SIGTERM, a reused output folder, and input that used to end
in a traceback."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import textwrap
import zipfile
from pathlib import Path

import cli_runs
import psutil
import pytest
from sb3_contrib import RecurrentPPO

from torchrl_mask import MaskablePPO, MaskableRecurrentPPO
from torchrl_mask.app.run_folder import LOCK

REPO = Path(__file__).resolve().parents[1]
TINY = ["--steps", "256", "--hyperparams", "n_envs=2", "n_steps=64", "--eval-episodes", "1", "--no-progress"]

# An env that refuses an illegal move, as a board game does: its observation does not show the mask, so the
# policy played without masks soon picks an action the mask forbids.
STRICT_ENVS = textwrap.dedent(
    '''
    import inspect

    import gymnasium as gym
    import numpy as np
    from gymnasium import spaces


    class StrictEnv(gym.Env):
        """Four actions, two of them allowed at each step; an illegal one raises."""

        observation_space = spaces.Discrete(1)
        action_space = spaces.Discrete(4)

        def _mask(self):
            self.mask = np.zeros(4, dtype=bool)
            self.mask[self.np_random.choice(4, size=2, replace=False)] = True
            return {"action_mask": self.mask.copy()}

        def reset(self, *, seed=None, options=None):
            super().reset(seed=seed)
            self.t = 0
            return 0, self._mask()

        def step(self, action):
            if not self.mask[action]:
                raise ValueError(f"illegal move {action}")
            self.t += 1
            return 0, float(action), False, self.t >= 10, self._mask()


    gym.register("Strict-v0", entry_point=StrictEnv)


    class InterruptedEnv(StrictEnv):
        """Ctrl-C as the training envs are made (inside SB3's DummyVecEnv), before any of them wrote a file."""

        def __init__(self):
            if any(frame.function == "__init__" and "dummy_vec_env" in frame.filename for frame in inspect.stack()):
                raise KeyboardInterrupt


    gym.register("Interrupted-v0", entry_point=InterruptedEnv)
    '''
)

LSTM = ["--algo", "ppo_lstm_mask", "--hyperparams"]
# Each case: the arguments (the files named {tmp}/<name> are BAD_FILES or _saved_models'), and a piece of the
# one-line message.
BAD_FILES: dict[str, str | bytes] = {
    "huge_n_steps.yml": "Taxi-v4:\n  n_timesteps: 1000\n  n_steps: 1e300\n",
    "big_n_steps.yml": "Taxi-v4:\n  n_timesteps: 1000\n  n_steps: 100000000000\n",
    "many_envs.yml": "Taxi-v4:\n  n_timesteps: 1000\n  n_envs: 1000000000\n",
    "latin1.yml": "Taxi-v4:\n  n_timesteps: 1000  # caf\xe9\n".encode("latin-1"),
    "python_tag.yml": "Taxi-v4:\n  n_timesteps: 1000\n  policy_kwargs: !!python/name:torch.nn.ReLU\n",
}
BAD_INPUT = {
    "n_steps_1e300": (["-conf", "{tmp}/huge_n_steps.yml"], "n_steps=1e+300 is not valid; expected a positive integer"),
    "n_steps_1e11": (["-conf", "{tmp}/big_n_steps.yml"], "up to 16,777,216 (the rollout buffer holds n_steps"),
    "n_envs_1e9": (["-conf", "{tmp}/many_envs.yml"], "n_envs=1000000000 is not valid; expected a positive integer up"),
    "yaml_not_utf8": (["-conf", "{tmp}/latin1.yml"], "latin1.yml: not UTF-8 text (byte 0xe9"),
    "yaml_python_tag": (["-conf", "{tmp}/python_tag.yml"], "the tag !!python/name:torch.nn.ReLU at line 3 is refused"),
    "infinite_learning_rate": (["--hyperparams", "learning_rate=1e999"], "learning_rate=inf is not valid"),
    "negative_layer": (["--hyperparams", "policy_kwargs=dict(net_arch=[-5])"], "net_arch lists layer sizes > 0"),
    "text_net_arch": (["--hyperparams", "policy_kwargs=dict(net_arch='abc')"], "net_arch lists layer sizes > 0"),
    "linear_activation": (
        ["--hyperparams", "policy_kwargs=dict(activation_fn=nn.Linear)"],
        "activation_fn=nn.Linear is not an activation function",
    ),
    "zip_without_data": (["-i", "{tmp}/no_data.zip"], "cannot continue from it: No data found in the saved file"),
    "one_row_minibatch": (
        ["--hyperparams", "n_envs=1", "n_steps=65", "batch_size=64"],
        "leaves a last minibatch of one row",
    ),
    "batch_size_1": (["--hyperparams", "batch_size=1"], "use batch_size >= 2"),
    "activation_with_arguments": (
        ["--hyperparams", "policy_kwargs=dict(activation_fn=nn.Threshold)"],
        "activation_fn=nn.Threshold needs constructor arguments (threshold, value)",
    ),
    "n_timesteps_1e30": (["-n", "1" + "0" * 30], "expected a positive integer up to 4,611,686,018,427,387,904, got"),
    # The recurrent model's policy_kwargs and -i files: refused before --out is made (they used to leave monitor/).
    "lstm_hidden_size_0": (
        [*LSTM, "policy_kwargs=dict(lstm_hidden_size=0)"],
        "expected a dict whose lstm_hidden_size is a whole number > 0, e.g. lstm_hidden_size=64",
    ),
    "lstm_hidden_size_float": (
        [*LSTM, "policy_kwargs=dict(lstm_hidden_size=8.5)"],
        "expected a dict whose lstm_hidden_size is a whole number > 0",
    ),
    "shared_and_critic_lstm": (
        [*LSTM, "policy_kwargs=dict(shared_lstm=True, enable_critic_lstm=True)"],
        "expected shared_lstm=True with enable_critic_lstm=False",
    ),
    "lstm_dropout_2": (
        [*LSTM, "policy_kwargs=dict(lstm_kwargs=dict(dropout=2.0))"],
        "lstm_kwargs sets only bias (True or False) and dropout (0 to 1)",
    ),
    "maskable_zip_with_ppo_lstm_mask": (
        ["--algo", "ppo_lstm_mask", "-i", "{tmp}/maskable.zip"],
        "holds a model without an LSTM (MaskableActorCriticPolicy, MaskablePPO's), which --algo ppo_lstm_mask cannot "
        "continue; drop --algo ppo_lstm_mask",
    ),
    "recurrent_zip_with_ppo_mask": (
        ["-i", "{tmp}/recurrent.zip"],
        "holds an LSTM model (RecurrentActorCriticPolicy), which MaskablePPO cannot continue; add --algo ppo_lstm_mask",
    ),
    "policy_kwargs_with_trained_agent": (
        ["-i", "{tmp}/no_data.zip", "--hyperparams", "policy_kwargs=dict(net_arch=[8])"],
        "keeps the saved model's policy (its net_arch and activation_fn), which --hyperparams policy_kwargs cannot",
    ),
}


def _saved_models(folder: Path) -> None:
    """``maskable.zip`` (MaskablePPO) and ``recurrent.zip`` (sb3-contrib's RecurrentPPO), untrained, for Taxi-v4."""
    from torchrl_mask.app.masked_env import make_masked_env

    env = make_masked_env("Taxi-v4")
    MaskablePPO("MlpPolicy", env, n_steps=64, policy_kwargs={"net_arch": [8]}).save(folder / "maskable.zip")
    kwargs = {"net_arch": [8], "lstm_hidden_size": 8}
    RecurrentPPO("MlpLstmPolicy", env, n_steps=64, batch_size=64, policy_kwargs=kwargs).save(folder / "recurrent.zip")


def _env_with(folder: Path) -> dict[str, str]:
    """The environment of a CLI subprocess that can import ``strict_envs`` from ``folder``, unbuffered."""
    (folder / "strict_envs.py").write_text(STRICT_ENVS)
    path = os.pathsep.join(filter(None, [str(folder), os.environ.get("PYTHONPATH")]))
    return {**os.environ, "PYTHONPATH": path, "PYTHONUNBUFFERED": "1"}


def run_cli(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return cli_runs.run_cli("train", *args, env=env, timeout=300)


@pytest.fixture(scope="module")
def bad_input_runs(
    tmp_path_factory: pytest.TempPathFactory,
) -> tuple[dict[str, subprocess.CompletedProcess[str]], Path]:
    """Every bad-input case at once, each with an --out of its own in the folder of the bad files."""
    folder = tmp_path_factory.mktemp("bad")
    for name, content in BAD_FILES.items():
        (folder / name).write_bytes(content.encode() if isinstance(content, str) else content)
    with zipfile.ZipFile(folder / "no_data.zip", "w") as archive:
        archive.writestr("notes.txt", "no data member")
    _saved_models(folder)
    procs = {}
    for name, (args, _) in BAD_INPUT.items():
        command = [sys.executable, "-m", "torchrl_mask", "train", *(arg.replace("{tmp}", str(folder)) for arg in args)]
        command += ["--out", str(folder / f"out_{name}")]
        procs[name] = subprocess.Popen(command, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    runs = {}
    for name, proc in procs.items():
        stdout, stderr = proc.communicate(timeout=300)
        runs[name] = subprocess.CompletedProcess(proc.args, proc.returncode, stdout, stderr)
    return runs, folder


@pytest.mark.slow
@pytest.mark.parametrize("case", sorted(BAD_INPUT))
def test_input_that_gave_a_traceback_is_one_line_exit_2_and_writes_nothing(
    case: str, bad_input_runs: tuple[dict[str, subprocess.CompletedProcess[str]], Path]
) -> None:
    runs, folder = bad_input_runs
    run = runs[case]
    assert run.returncode == 2, run.stderr
    lines = run.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("torchrl-mask: error: "), run.stderr
    assert BAD_INPUT[case][1].replace("{tmp}", str(folder)) in lines[0]
    assert not (folder / f"out_{case}").exists(), "a bad input wrote its output folder"


@pytest.mark.slow
def test_an_evaluation_that_raises_is_reported_and_the_model_is_saved_first(tmp_path: Path) -> None:
    out = tmp_path / "run"
    run = run_cli(
        "--env", "strict_envs:Strict-v0", *TINY, "--eval-episodes", "5", "--out", str(out), env=_env_with(tmp_path)
    )
    assert run.returncode == 0, run.stderr
    assert re.search(r"trained policy, without masks +raised ValueError: illegal move \d", run.stdout), run.stdout
    evaluation = json.loads((out / "evaluation.json").read_text())["evaluation"]
    assert evaluation["unmasked"]["error"].startswith("ValueError: illegal move")
    assert set(evaluation["masked"]) == {"mean", "std"} and set(evaluation["random"]) == {"mean", "std"}
    assert MaskablePPO.load(out / "model.zip", device="cpu").num_timesteps == 256
    assert (out / "learning_curve.csv").read_text().startswith("timestep,episode_return\n")
    assert (out / "learning_curve.png").is_file() and not (out / LOCK).exists()


def _ignores_sigint(pid: int) -> bool:
    """Whether process ``pid`` ignores SIGINT (Linux: the ``SigIgn`` mask of ``/proc/<pid>/status``)."""
    status = Path(f"/proc/{pid}/status").read_text()
    ignored = int(next(line.split()[1] for line in status.splitlines() if line.startswith("SigIgn:")), 16)
    return bool(ignored >> (signal.SIGINT - 1) & 1)


@pytest.mark.slow
@pytest.mark.parametrize(
    ("signum", "collector", "code", "group"),
    [
        (signal.SIGINT, None, 130, False),
        (signal.SIGINT, "multisync", 130, True),  # Ctrl-C in a terminal: the workers get SIGINT too
        (signal.SIGTERM, None, 143, False),
        (signal.SIGTERM, "multisync", 143, False),
    ],
)
def test_an_interrupted_training_saves_its_model_and_leaves_no_process(
    signum: int, collector: str | None, code: int, group: bool, tmp_path: Path
) -> None:
    out = tmp_path / "run"
    command = [sys.executable, "-m", "torchrl_mask", "train", "--steps", "100000000", "--no-progress"]
    command += ["--hyperparams", "n_envs=2", "n_steps=32", "--out", str(out)]
    command += [] if collector is None else ["--collector", collector]
    proc = subprocess.Popen(
        command,
        cwd=REPO,
        env=_env_with(tmp_path),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=group,
    )
    assert proc.stdout is not None
    for line in proc.stdout:  # SB3's logger table: the first rollout was collected and trained on
        if "total_timesteps" in line:
            break
    children = psutil.Process(proc.pid).children(recursive=True)
    if collector == "multisync":  # the learner alone handles Ctrl-C; its workers ignore it and end at its shutdown
        workers = [child for child in children if "spawn_main" in " ".join(child.cmdline())]
        assert len(workers) == 2 and all(_ignores_sigint(worker.pid) for worker in workers)
    if group:
        os.killpg(proc.pid, signum)
    else:
        proc.send_signal(signum)
    _, stderr = proc.communicate(timeout=300)
    assert proc.returncode == code, stderr
    lines = stderr.strip().splitlines()
    assert len(lines) == 1, stderr
    steps = MaskablePPO.load(out / "model.zip", device="cpu").num_timesteps
    assert lines[0] == f"torchrl-mask: interrupted at {steps:,} steps; saved to {out / 'model.zip'}"
    assert steps >= 64 and (out / "learning_curve.csv").is_file() and not (out / LOCK).exists()
    _, alive = psutil.wait_procs(children, timeout=60)
    assert not alive, f"{alive} outlived the command"
    if collector == "multisync":
        assert len(children) >= 2


@pytest.mark.slow
def test_a_reused_out_is_refused_unless_overwrite_and_hyperparams_given_twice_merge(tmp_path: Path) -> None:
    out = tmp_path / "run"
    first = run_cli(*TINY, "--save-freq", "128", "--hyperparams", "n_steps=32", "gamma=0.9", "--out", str(out))
    assert first.returncode == 0, first.stderr
    config = json.loads((out / "evaluation.json").read_text())["config"]
    assert config["n_envs"] == 2 and config["hyperparams"]["n_steps"] == 32 and config["hyperparams"]["gamma"] == 0.9
    assert (out / "rl_model_128_steps.zip").is_file()
    before = sorted(path.relative_to(out) for path in out.rglob("*"))

    again = run_cli(*TINY, "--out", str(out))
    assert again.returncode == 2, again.stderr
    assert again.stderr.strip().splitlines() == [
        f"torchrl-mask: error: --out {out} is not empty (an earlier run's files?); pass an empty or new folder, "
        "or add --overwrite to replace the earlier run."
    ]
    assert sorted(path.relative_to(out) for path in out.rglob("*")) == before

    (out / "notes.txt").write_text("mine\n")
    replaced = run_cli(*TINY, "--overwrite", "--out", str(out))
    assert replaced.returncode == 0, replaced.stderr
    assert not (out / "rl_model_128_steps.zip").exists() and "rl_model_128" not in replaced.stdout
    assert (out / "notes.txt").read_text() == "mine\n"  # not ours: kept
    assert json.loads((out / "evaluation.json").read_text())["config"]["hyperparams"]["n_steps"] == 64


@pytest.mark.slow
def test_a_folder_another_run_is_writing_to_is_refused_even_with_overwrite(tmp_path: Path) -> None:
    out = tmp_path / "run"
    out.mkdir()
    (out / LOCK).write_text(f"{os.getpid()}\n")  # a live process holds the lock, as a running train does
    run = run_cli(*TINY, "--overwrite", "--out", str(out))
    assert run.returncode == 2, run.stderr
    assert f"another torchrl-mask train (pid {os.getpid()}) is writing to it" in run.stderr
    assert sorted(path.name for path in out.iterdir()) == [LOCK]


@pytest.mark.slow
def test_an_interrupt_before_anything_was_written_leaves_no_folder_behind(tmp_path: Path) -> None:
    out = tmp_path / "runs" / "run"
    run = run_cli("--env", "strict_envs:Interrupted-v0", *TINY, "--out", str(out), env=_env_with(tmp_path))
    assert run.returncode == 130, run.stderr
    assert run.stderr.strip().splitlines() == ["torchrl-mask: interrupted before a model was saved; nothing to keep."]
    assert not out.exists(), sorted(out.rglob("*"))  # neither the folder nor its monitor/ nor the lock


@pytest.mark.slow
def test_continuing_a_model_records_its_own_policy_kwargs_not_the_defaults(tmp_path: Path) -> None:
    first = run_cli(*TINY, "--hyperparams", "policy_kwargs=dict(net_arch=[16])", "--out", str(tmp_path / "first"))
    assert first.returncode == 0, first.stderr
    again = run_cli(*TINY, "-i", str(tmp_path / "first" / "model.zip"), "--out", str(tmp_path / "again"))
    assert again.returncode == 0, again.stderr
    recorded = json.loads((tmp_path / "again" / "evaluation.json").read_text())["config"]["hyperparams"]
    assert recorded["policy_kwargs"] == {"net_arch": [16], "activation_fn": "nn.Tanh"}
    assert MaskablePPO.load(tmp_path / "again" / "model.zip", device="cpu").policy.net_arch == [16]


@pytest.mark.slow
def test_an_sb3_contrib_recurrent_ppo_zip_continues_as_a_masked_recurrent_model(tmp_path: Path) -> None:
    _saved_models(tmp_path)
    out = tmp_path / "run"
    run = run_cli("--algo", "ppo_lstm_mask", "-i", str(tmp_path / "recurrent.zip"), *TINY, "--out", str(out))
    assert run.returncode == 0, run.stderr
    model = MaskableRecurrentPPO.load(out / "model.zip", device="cpu")
    assert type(model.policy).__name__ == "MaskableRecurrentActorCriticPolicy" and model.num_timesteps == 256
    evaluation = json.loads((out / "evaluation.json").read_text())["evaluation"]
    assert set(evaluation["masked"]) == {"mean", "std"}, evaluation
