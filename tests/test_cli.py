"""The ``torchrl-mask`` command, driven as a user drives it: in a subprocess, reading its output and files."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import tempfile
import textwrap
from pathlib import Path

import cli_runs
import numpy as np
import pytest
import torch
from PIL import Image
from sb3_contrib import MaskablePPO as SB3ContribMaskablePPO

from torchrl_mask import MaskablePPO, MaskableRecurrentPPO

REPO = Path(__file__).resolve().parents[1]
SMALL = ["--steps", "1024", "--hyperparams", "n_envs=2", "n_steps=128", "--eval-episodes", "2"]
TINY = ["--steps", "256", "--hyperparams", "n_envs=2", "n_steps=64", "--eval-episodes", "1", "--no-progress"]
TORCHRL_MASK = Path(sys.executable).with_name("torchrl-mask")  # the console script, as a user runs it

# rl-zoo3's format: env ids at the top level, each with its hyperparameters (lin_<x>: linear schedule from x).
ZOO_FILE = textwrap.dedent(
    """
    Taxi-v4:
      n_timesteps: !!float 10240
      n_envs: 2
      policy: 'MlpPolicy'
      n_steps: 128
      batch_size: 64
      n_epochs: 2
      learning_rate: lin_1e-3
      clip_range: 0.2
      policy_kwargs: "dict(net_arch=[32], activation_fn=nn.ReLU)"
    CartPole-v1:
      n_timesteps: !!float 1e5
    """
)
# Files the bad-input cases name as {tmp}/<name>.
BAD_FILES = {
    "zoo.yml": ZOO_FILE,
    "broken.yml": "Taxi-v4: [n_steps: 64\n",
    "a_list.yml": "- Taxi-v4\n- CartPole-v1\n",
    "with_normalize.yml": "Taxi-v4:\n  n_timesteps: 1000\n  normalize: true\n",
    "no_timesteps.yml": "Taxi-v4:\n  n_envs: 2\n",
    "not_a_model.zip": "not a zip file\n",
}

# Each case: the arguments, and a piece of the one-line message that names the problem or its fix.
BAD_INPUT = {
    "unknown_env_id": (["train", "--env", "NoSuchEnv-v0"], "Environment `NoSuchEnv` doesn't exist"),
    "deprecated_env_version": (["train", "--env", "Taxi-v3"], "Please use `Taxi-v4` instead"),
    "env_without_masks": (["train", "--env", "CartPole-v1"], "CartPole-v1 reports no action mask"),
    "continuous_actions": (["train", "--env", "Pendulum-v1"], "which cannot be masked"),
    "zero_steps": (
        ["train", "--steps", "0"],
        "argument -n/--n-timesteps/--steps: expected a positive integer, got '0'",
    ),
    "non_numeric_n_envs": (["train", "--hyperparams", "n_envs=two"], "n_envs='two' is not valid; expected a positive"),
    "unknown_device": (["train", "--device", "banana"], "use cpu, cuda, cuda:0, mps or auto"),
    "unknown_option": (["train", "--bogus"], "unrecognized arguments: --bogus; see `torchrl-mask train --help`"),
    "output_is_a_file": (["train", "--out", "pyproject.toml"], "--out pyproject.toml is a file; pass a folder"),
    "output_under_a_file": (["train", "--out", "pyproject.toml/run"], "pyproject.toml, which is a file; pass a"),
    "output_under_proc": (["train", "--out", "/proc/torchrl_mask/run"], "cannot create a folder in /proc"),
    "unknown_hyperparameter": (["train", "--hyperparams", "learning_rat=0.1"], "unknown hyperparameter 'learning_rat'"),
    "hyperparameter_out_of_range": (["train", "--hyperparams", "gamma=1.5"], "gamma=1.5 is not valid; expected a"),
    "schedule_without_number": (["train", "-params", "learning_rate=lin_x"], "expected a number > 0 or lin_<number>"),
    "hyperparameter_without_value": (["train", "--hyperparams", "gamma"], "expected name=value, e.g. learning_rate"),
    "policy_kwargs_with_code": (
        ["train", "--hyperparams", "policy_kwargs=dict(net_arch=__import__('os'))"],
        "\"__import__('os')\" is not a literal; use literals",
    ),
    "unknown_policy_kwarg": (
        ["train", "--hyperparams", "policy_kwargs=dict(net_arch=[8], depth=3)"],
        "policy_kwargs: depth is not an argument of MlpPolicy; it takes activation_fn,",
    ),
    "unknown_activation": (
        ["train", "--hyperparams", "policy_kwargs=dict(activation_fn=nn.Relu)"],
        "activation_fn=nn.Relu is not a torch.nn module; use e.g. nn.ReLU",
    ),
    "policy_for_images": (["train", "--hyperparams", "policy=CnnPolicy"], "does not fit Taxi-v4's observation"),
    "missing_yaml": (["train", "--conf-file", "{tmp}/missing.yml"], "missing.yml: cannot read it (No such file"),
    "invalid_yaml": (["train", "--conf-file", "{tmp}/broken.yml"], "broken.yml: not valid YAML at line 2"),
    "yaml_not_env_ids": (["train", "-conf", "{tmp}/a_list.yml"], "expected env ids at the top level"),
    "yaml_without_the_env": (
        ["train", "--conf-file", "{tmp}/zoo.yml", "--env", "FrozenLake-v1"],
        "has no entry for 'FrozenLake-v1' and no 'default' (it has: Taxi-v4, CartPole-v1)",
    ),
    "yaml_with_rl_zoo_wrapper_key": (["train", "-conf", "{tmp}/with_normalize.yml"], "rl-zoo3's 'normalize' is not"),
    "yaml_without_n_timesteps": (["train", "-conf", "{tmp}/no_timesteps.yml"], "gives no n_timesteps for Taxi-v4"),
    "trained_agent_missing": (["train", "-i", "{tmp}/missing.zip"], "-i {tmp}/missing.zip: no such file"),
    "trained_agent_not_a_model": (["train", "-i", "{tmp}/not_a_model.zip"], "cannot continue from it: Error: the"),
    "verbose_out_of_range": (["train", "--verbose", "3"], "argument --verbose: invalid choice: 3"),
    "negative_eval_freq": (["train", "--eval-freq", "-5"], "argument --eval-freq: expected an integer >= 0"),
    "tensorboard_log_is_a_file": (["train", "--tensorboard-log", "pyproject.toml"], "--tensorboard-log pyproject"),
}

BAD_INPUT |= {
    "league_player_not_in_the_ladder": (
        ["train", "--env", "pettingzoo:tictactoe_v3", "--league-players", "perfect", "negamax_2"],
        "--league-players perfect negamax_2: negamax_2 not in tictactoe_v3's ladder; name each at most once, from "
        "heuristic perfect random",
    ),
}

# --algo ppo_lstm_mask: a policy without an LSTM, refused by name (in self-play too).
BAD_INPUT |= {
    "recurrent_self_play_with_a_feedforward_policy": (
        ["train", "--algo", "ppo_lstm_mask", "--env", "pettingzoo:tictactoe_v3", "--hyperparams", "policy=MlpPolicy"],
        "use policy=MlpLstmPolicy",
    ),
    "recurrent_with_a_feedforward_policy": (
        ["train", "--algo", "ppo_lstm_mask", "--hyperparams", "policy=MlpPolicy"],
        "use policy=MlpLstmPolicy",
    ),
}
RECURRENT_ZOO_FILE = textwrap.dedent(
    """
    Taxi-v4:
      n_timesteps: 512
      n_envs: 2
      policy: 'MlpLstmPolicy'
      n_steps: 64
      batch_size: 64
      n_epochs: 2
      policy_kwargs: "dict(net_arch=[32], lstm_hidden_size=16, enable_critic_lstm=False)"
    """
)

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
    return cli_runs.run_cli(*args, cwd=cwd, env=env, timeout=300)


@pytest.fixture(scope="module")
def bad_files(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("bad_files")
    for name, text in BAD_FILES.items():
        (folder / name).write_text(text)
    return folder


def _with_files(args: list[str], case: str, folder: Path) -> list[str]:
    """The case's arguments with ``{tmp}`` filled in, and an --out in ``folder`` when the case gives none."""
    args = [arg.replace("{tmp}", str(folder)) for arg in args]
    return args if "--out" in args else [*args, "--out", str(folder / f"out_{case}")]


@pytest.fixture(scope="module")
def bad_input_runs(bad_files: Path) -> dict[str, subprocess.CompletedProcess[str]]:
    """Run every bad-input case at once (some pay the import of torch), and collect what the user sees."""
    procs = {
        name: subprocess.Popen(
            [sys.executable, "-m", "torchrl_mask", *_with_files(args, name, bad_files)],
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
def test_bad_input_prints_one_line_with_the_fix_exits_2_and_writes_nothing(
    case: str, bad_input_runs: dict[str, subprocess.CompletedProcess[str]], bad_files: Path
) -> None:
    run = bad_input_runs[case]
    expected = BAD_INPUT[case][1].replace("{tmp}", str(bad_files))
    assert run.returncode == 2, run.stderr
    assert "Traceback" not in run.stderr
    lines = run.stderr.strip().splitlines()
    assert len(lines) == 1, run.stderr
    assert lines[0].startswith("torchrl-mask: error: ")
    assert expected in lines[0]
    assert run.stdout == ""
    assert sorted(path.name for path in bad_files.iterdir() if not path.name.startswith("out_")) == sorted(BAD_FILES)
    assert not list(bad_files.glob("out_*")), "a bad input wrote its output folder"


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
    assert record["config"]["n_timesteps"] == 1024
    config = record["config"]  # a gymnasium run has no league, and its record says so
    assert (config["pool_size"], config["league_players"], config["fixed_share"]) == (0, [], None)
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
    # root writes through permission bits: as root the command runs without the capabilities that bypass them
    # (still root, so it reads the checkout and its .venv wherever they are, whatever their folders' modes).
    as_user = ["setpriv", "--bounding-set=-dac_override,-dac_read_search"] if os.geteuid() == 0 else []
    with tempfile.TemporaryDirectory() as parent:
        read_only = Path(parent) / "read_only"
        read_only.mkdir(mode=0o555)
        out = read_only / "run"
        run = subprocess.run(
            [*as_user, sys.executable, "-m", "torchrl_mask", "train", *TINY, "--out", str(out)],
            cwd=REPO,
            capture_output=True,
            text=True,
            timeout=300,
        )
        assert run.returncode == 2, run.stderr
        assert run.stderr.strip().splitlines() == [
            f"torchrl-mask: error: --out {out}: cannot create a folder in {read_only} (Permission denied); "
            "pass a folder you can write to."
        ]
        assert run.stdout == ""
        assert list(read_only.iterdir()) == []


@pytest.mark.slow  # starts processes: kept out of make test-fast
def test_console_script_shows_help_with_rl_zoo_options_and_each_default_once() -> None:
    run = subprocess.run([TORCHRL_MASK, "train", "--help"], capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr
    options = ("--env", "--conf-file", "--hyperparams", "--n-timesteps", "--steps", "--seed", "--device", "--out")
    options += ("--trained-agent", "--eval-freq", "--save-freq", "--tensorboard-log", "--verbose", "--collector")
    for option in options:
        assert option in run.stdout
    assert "(default: None)" not in run.stdout
    out_help = " ".join(run.stdout.split("\n  --out DIR", 1)[1].split("\n  --eval-freq N", 1)[0].split())
    assert out_help.count("default") == 1 and "checkpoints" in out_help, out_help


# Help, an option refused before any file or env is looked at, for each command, and an --env that names nothing
# (found by its registry alone): each case's arguments, and what its one line says (help: nothing on stderr).
ANSWERED_WITHOUT_TORCH = {
    "train-help": (["train", "--help"], ""),
    "train-refused": (["train", "--env", "Taxi-v4", "--pool-size", "2"], "--pool-size is for a pettingzoo:<game>"),
    "tune-refused": (
        ["tune", "--env", "Taxi-v4", "-n", "8", "--n-evaluations", "9"],
        "the smallest rollout a trial draws",
    ),
    "play-refused": (["play", "--env", "pettingzoo:foo_v1", "-i", "model.zip"], "'foo_v1' is not a PettingZoo"),
    "train-unknown-env": (["train", "--env", "NoSuchEnv-v0"], "Environment `NoSuchEnv` doesn't exist"),
    "train-unknown-game": (["train", "--env", "pettingzoo:foo_v1"], "'foo_v1' is not a PettingZoo classic game"),
    "train-unknown-instance": (["train", "--env", "jobshop:nosuch"], "unknown job-shop instance 'nosuch'"),
    "tune-unknown-env": (["tune", "--env", "Taxi-v1"], "version v1 for `Taxi` is deprecated"),
}


@pytest.mark.parametrize("case", sorted(ANSWERED_WITHOUT_TORCH))
def test_help_and_a_refused_option_answer_before_torch_is_imported(case: str, tmp_path: Path) -> None:
    argv, says = ANSWERED_WITHOUT_TORCH[case]
    code = (
        "import sys\nfrom torchrl_mask.app.cli import main\n"
        "try:\n    main(sys.argv[1:])\nfinally:\n    print('torch imported:', 'torch' in sys.modules)\n"
    )
    run = subprocess.run([sys.executable, "-c", code, *argv], cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert run.stdout.endswith("torch imported: False\n"), run.stdout[-500:] + run.stderr
    if says:
        assert run.stderr.startswith("torchrl-mask: error: ") and says in run.stderr, run.stderr
    else:
        assert run.stderr == ""
    assert list(tmp_path.iterdir()) == []


@pytest.fixture(scope="module")
def zoo_runs(tmp_path_factory: pytest.TempPathFactory) -> tuple[list[subprocess.CompletedProcess[str]], Path]:
    """rl-zoo3's workflow with the console script: train from a YAML file with evaluation, checkpoints and
    TensorBoard, then continue the saved model with a new learning rate."""
    folder = tmp_path_factory.mktemp("zoo")
    (folder / "f.yml").write_text(ZOO_FILE)
    common = ["--eval-episodes", "2", "--no-progress"]
    first = [TORCHRL_MASK, "train", "--conf-file", "f.yml", "--eval-freq", "5000", "--save-freq", "10000"]
    first += ["--tensorboard-log", "tb/", "--out", "first", *common]
    again = [TORCHRL_MASK, "train", "-conf", "f.yml", "-i", "first/model.zip", "-n", "1024", "--verbose", "0"]
    again += ["--hyperparams", "learning_rate=0.0005", "n_epochs:3", "--out", "again", *common]
    runs = []
    for args in (first, again):
        runs.append(subprocess.run(args, cwd=folder, capture_output=True, text=True, timeout=300))
        assert runs[-1].returncode == 0, runs[-1].stderr
    return runs, folder


@pytest.mark.slow
def test_train_from_an_rl_zoo_file_writes_checkpoints_best_model_and_tensorboard_events(
    zoo_runs: tuple[list[subprocess.CompletedProcess[str]], Path],
) -> None:
    (first, _), folder = zoo_runs
    out = folder / "first"
    assert "for 10,240 steps: 2 envs" in first.stdout
    assert re.findall(r"total_timesteps\s*\|\s*(\d+)", first.stdout)[-1] == "10240"  # SB3's logger, --verbose 1
    assert (out / "rl_model_10000_steps.zip").is_file()
    assert not list(out.glob("rl_model_5000_*"))  # every 10000 steps only
    evaluations = np.load(out / "evaluations.npz")
    assert evaluations["timesteps"].tolist() == [5000, 10000]
    assert evaluations["results"].shape == (2, 2)  # two evaluations of --eval-episodes 2
    best = MaskablePPO.load(out / "best_model.zip", device="cpu")
    assert best.policy.net_arch == [32] and best.policy.activation_fn is torch.nn.ReLU  # the file's policy_kwargs
    assert list((folder / "tb").glob("MaskablePPO_1/events.out.tfevents.*"))
    assert "Saved to first/: model.zip" in first.stdout and "best_model.zip" in first.stdout


@pytest.mark.slow
def test_trained_agent_continues_its_timesteps_with_the_hyperparams_given(
    zoo_runs: tuple[list[subprocess.CompletedProcess[str]], Path],
) -> None:
    (first, again), folder = zoo_runs
    model = MaskablePPO.load(folder / "again" / "model.zip", device="cpu")
    assert model.num_timesteps == 10240 + 1024
    assert model.learning_rate == 0.0005 and model.n_epochs == 3  # --hyperparams, both separators
    assert model.policy.net_arch == [32]  # the saved policy, kept
    assert again.stdout.count("\n") < first.stdout.count("\n")  # --verbose 0: no logger tables
    assert "| train/" in first.stdout and "| train/" not in again.stdout


def test_bench_hands_its_arguments_to_the_benchmark() -> None:
    run = run_cli("bench", "--help")
    assert run.returncode == 0, run.stderr
    assert run.stdout.startswith("usage: torchrl-mask bench")


@pytest.mark.parametrize("collector", [None, "multisync"])  # SB3's VecEnv, or TorchRL worker processes
def test_train_with_algo_ppo_lstm_mask_saves_a_recurrent_model_that_loads_and_evaluates_with_masks(
    collector: str | None, tmp_path: Path
) -> None:
    (tmp_path / "zoo.yml").write_text(RECURRENT_ZOO_FILE)
    out = tmp_path / "run"
    args = ["--conf-file", str(tmp_path / "zoo.yml"), "--eval-episodes", "2", "--no-progress", "--out", str(out)]
    args += [] if collector is None else ["--collector", collector]
    run = run_cli("train", "--algo", "ppo_lstm_mask", *args)
    assert run.returncode == 0, run.stderr
    assert "Training MaskableRecurrentPPO on Taxi-v4 (masks from info['action_mask']) for 512 steps" in run.stdout
    record = json.loads((out / "evaluation.json").read_text())
    assert record["config"]["algo"] == "ppo_lstm_mask" and record["config"]["n_timesteps"] == 512
    assert "mean" in record["evaluation"]["masked"]  # evaluated with the masks (and the LSTM state kept)
    model = MaskableRecurrentPPO.load(out / "model.zip", device="cpu")
    assert model.policy.lstm_actor.hidden_size == 16 and model.num_timesteps == 512
    mask = np.zeros((1, 6), dtype=bool)
    mask[0, [1, 3]] = True
    state, start = None, np.array([True])
    for obs in (0, 17, 230):
        action, state = model.predict(np.array([obs]), state, start, deterministic=True, action_masks=mask)
        assert int(action[0]) in (1, 3)
        start = np.array([False])


def test_a_ctrl_c_during_an_import_is_raised_once_the_import_is_done(tmp_path: Path) -> None:
    # torch's C++ initialisation cannot unwind a KeyboardInterrupt raised inside it: the command's handler holds a
    # Ctrl-C that comes during an import until the import is done, then raises it
    (tmp_path / "slow_module.py").write_text(
        "import os, signal, time\nos.kill(os.getpid(), signal.SIGINT)\ntime.sleep(0.3)\n"
    )
    code = (
        "import signal, sys, time\nfrom torchrl_mask.__main__ import _interrupt\n"
        "signal.signal(signal.SIGINT, _interrupt)\n"
        "try:\n    import slow_module\n    time.sleep(30)\nexcept KeyboardInterrupt:\n"
        "    print('raised after the import:', 'slow_module' in sys.modules)\n"
    )
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path), str(REPO)])}
    run = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=60)
    assert run.stdout == "raised after the import: True\n", run.stdout + run.stderr
