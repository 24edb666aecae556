"""``torchrl-mask tune``: driven as a user drives it (a subprocess), its study read back with Optuna, its best
trial retrained with ``train --conf-file``, its study served by optuna-dashboard and opened in a headless browser.

The env is ``tune_envs:PickLegal-v0`` (tests/tune_envs.py), which ends an episode on an illegal move: a model
scored without its masks is scored on illegal moves, as rl-zoo3's ``TrialEvalCallback`` scores it.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import cli_runs
import optuna
import pytest
import tune_envs  # noqa: F401  (registers PickLegal-v0)
import yaml
from PIL import Image

from torchrl_mask import MaskablePPO
from torchrl_mask.app import search_spaces
from torchrl_mask.app.cli import main
from torchrl_mask.app.conf_file import load_conf_file
from torchrl_mask.app.config import train_config
from torchrl_mask.app.hyperparams import check_hyperparams, check_minibatches
from torchrl_mask.app.masked_env import make_masked_env
from torchrl_mask.app.prepare import make_task
from torchrl_mask.app.results import mean_return
from torchrl_mask.app.tune_outputs import conf_text
from torchrl_mask.games.evaluation import ladder_score

REPO = Path(__file__).resolve().parents[1]
ENV = "tune_envs:PickLegal-v0"
TINY = ["--env", ENV, "-n", "512", "--hyperparams", "n_envs=2", "--no-progress"]


def cli_env() -> dict[str, str]:
    """The process's environment, with the tests folder (tune_envs) and the repository on the path."""
    paths = [str(REPO / "tests"), str(REPO), os.environ.get("PYTHONPATH", "")]
    return {**os.environ, "PYTHONPATH": os.pathsep.join(path for path in paths if path)}


def run_cli(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return cli_runs.run_cli(*args, cwd=cwd, timeout=400)


def load(storage: str, name: str) -> optuna.Study:
    return optuna.load_study(study_name=name, storage=storage)


@pytest.mark.parametrize("n_envs", [1, 3, 8])
@pytest.mark.parametrize("algo", sorted(search_spaces.SEARCH_SPACES))
def test_every_drawn_trial_is_a_valid_configuration_without_one_row_minibatches(algo: str, n_envs: int) -> None:
    study = optuna.create_study(sampler=optuna.samplers.RandomSampler(seed=n_envs))
    for _ in range(200):
        params = search_spaces.sample(algo, study.ask(), {"n_envs": n_envs}, n_timesteps=4096)
        assert check_hyperparams(params, "drawn") == params
        check_minibatches(params["n_steps"], n_envs, params["batch_size"])
        assert params["n_steps"] * n_envs <= 4096 or params["n_steps"] == 32
        assert ("lstm_hidden_size" in params["policy_kwargs"]) == (algo == "ppo_lstm_mask")


def test_a_fixed_hyperparameter_is_not_searched() -> None:
    trial = optuna.create_study().ask()
    fixed = {"n_envs": 3, "gamma": 0.9, "n_steps": 33, "policy_kwargs": {"net_arch": [8]}}
    params = search_spaces.sample("ppo_lstm_mask", trial, fixed, n_timesteps=1000)
    assert {key: params[key] for key in fixed} == fixed
    assert not {"one_minus_gamma", "n_steps", "net_arch", "lstm_hidden_size"} & set(trial.params)
    check_minibatches(33, 3, params["batch_size"])  # 99 rows: the drawn batch size leaves no one-row minibatch


def test_best_yaml_reads_back_as_the_trial_and_names_the_command_that_retrains_it(tmp_path: Path) -> None:
    policy_kwargs = {"net_arch": {"pi": [64], "vf": [64]}, "activation_fn": "nn.ReLU", "lstm_hidden_size": 32}
    hyperparams = {
        "n_envs": 2,
        "n_steps": 64,
        "learning_rate": 1.2345e-05,
        "gamma": 0.9912,
        "policy_kwargs": policy_kwargs,
    }
    trial = optuna.trial.create_trial(value=3.5, user_attrs={"hyperparams": hyperparams, "seed": 7})
    path = tmp_path / "best_hyperparams.yml"
    path.write_text(conf_text(ENV, 512, trial, eval_episodes=5, algo="ppo_lstm_mask"))
    assert load_conf_file(path, ENV)[0] == {"n_timesteps": 512, **hyperparams}
    assert (
        f"train --env {ENV} --algo ppo_lstm_mask --conf-file best_hyperparams.yml --seed 7 --eval-episodes 5"
        in path.read_text().splitlines()[1]
    )


def test_a_study_whose_trials_all_scored_the_same_gets_no_importance_plot_but_a_line_saying_why(
    tmp_path: Path,
) -> None:
    from torchrl_mask.app.tune_outputs import write_plots

    study = optuna.create_study(direction="maximize", sampler=optuna.samplers.RandomSampler(seed=0))
    study.optimize(lambda trial: trial.suggest_float("learning_rate", 1e-4, 1e-2) * 0 - 200.0, n_trials=3)
    written, skipped = write_plots(study, tmp_path)
    assert written == ["optimization_history.png"] and sorted(p.name for p in tmp_path.iterdir()) == written
    assert skipped == ["param_importances.png: not drawn (every completed trial scored -200: no parameter mattered)"]


def test_a_trial_is_scored_with_masks_higher_than_the_same_model_without() -> None:
    # The rl-zoo3 trap: an illegal move ends PickLegal's episode, so the same model scores lower without masks. A
    # trial's score is its task's (GymTask.score), the masked mean return.
    model = MaskablePPO("MlpPolicy", make_masked_env(ENV), seed=0, n_steps=64, batch_size=32)
    model.learn(128)
    masked = make_task(train_config(ENV)).score(model, 10, 0)
    assert masked == mean_return(model, lambda: make_masked_env(ENV), 10, 0)
    assert masked > mean_return(model, lambda: make_masked_env(ENV), 10, 0, use_masking=False)


BAD_CONF = textwrap.dedent(
    """
    tune_envs:PickLegal-v0:
      learning_rate: -1
    """
)
BAD_POLICY = 'default:\n  policy_kwargs: "dict(net_arch=[8], lstm_hidden_size=8)"\n'
# Each: the arguments, and a piece of the one-line message.
BAD_INPUT = {
    "no_trials": (["--n-trials", "0"], "argument --n-trials: expected a positive integer, got '0'"),
    "unknown_sampler": (["--sampler", "grid"], "argument --sampler: invalid choice: 'grid'"),
    "unknown_pruner": (["--pruner", "hyperband"], "argument --pruner: invalid choice: 'hyperband'"),
    "no_jobs": (["--n-jobs", "0"], "argument --n-jobs: expected a positive integer, got '0'"),
    "unknown_algo": (["--algo", "dqn"], "argument --algo: invalid choice: 'dqn'"),
    "not_a_url": (["--storage", "my study"], "--storage 'my study' is not a storage URL"),
    "unknown_database": (["--storage", "oracle2://host/db"], "SQLAlchemy has no dialect 'oracle2'"),
    "bad_conf_value": (["--conf-file", "{tmp}/bad.yml"], "learning_rate=-1 is not valid; expected a number > 0"),
    "bad_policy_kwargs": (["--conf-file", "{tmp}/policy.yml"], "lstm_hidden_size is not an argument of MlpPolicy"),
    "one_row_minibatch": (
        ["--hyperparams", "n_envs=1", "n_steps=3", "batch_size=2"],
        "leaves a last minibatch of one row",
    ),
    "more_evaluations_than_steps": (["--n-evaluations", "300"], "more evaluations than steps per env"),
    "unmasked_game": (["--env", "pettingzoo:rps_v2"], "without an action mask"),
    "unknown_env": (["--env", "NoSuchEnv-v0"], "cannot make env 'NoSuchEnv-v0'"),
    "one_row_rollout": (["--hyperparams", "n_envs=1", "n_steps=1"], "a rollout of one row trains on minibatches"),
    "budget_below_the_smallest_rollout": (
        ["--env", "pettingzoo:tictactoe_v3", "-n", "2048", "--hyperparams", "n_envs=512"],
        "the smallest rollout a trial draws (n_steps=32) is 16,384 steps",
    ),
}


@pytest.mark.slow
def test_bad_input_is_refused_in_one_line_before_anything_is_written(tmp_path: Path) -> None:
    (tmp_path / "bad.yml").write_text(BAD_CONF)
    (tmp_path / "policy.yml").write_text(BAD_POLICY)
    procs = {}
    for name, (args, _) in BAD_INPUT.items():
        args = [arg.format(tmp=tmp_path) for arg in args]
        command = [sys.executable, "-m", "torchrl_mask", "tune", *TINY, *args, "--out", str(tmp_path / name)]
        procs[name] = subprocess.Popen(
            command, env=cli_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
        )
    for name, proc in procs.items():
        stdout, stderr = proc.communicate(timeout=300)
        assert proc.returncode == 2, (name, stdout, stderr)
        assert stderr.count("\n") == 1 and stderr.startswith("torchrl-mask: error: "), (name, stderr)
        assert BAD_INPUT[name][1] in stderr, (name, stderr)
        assert not (tmp_path / name).exists(), name


@pytest.fixture(scope="module")
def tuned(tmp_path_factory: pytest.TempPathFactory) -> tuple[subprocess.CompletedProcess[str], Path]:
    folder = tmp_path_factory.mktemp("tune")
    run = run_cli("tune", *TINY, "--n-trials", "6", "--seed", "3", "--out", "study", cwd=folder)
    return run, folder


@pytest.mark.slow
def test_tune_writes_the_study_the_best_yaml_the_csv_and_the_plots(
    tuned: tuple[subprocess.CompletedProcess[str], Path],
) -> None:
    run, folder = tuned
    assert run.returncode == 0, run.stderr
    out = folder / "study"
    study = load(f"sqlite:///{out / 'study.db'}", f"ppo_mask-{ENV}")
    assert len(study.trials) == 6 and all(trial.state.is_finished() for trial in study.trials)
    assert [trial.user_attrs["seed"] for trial in study.trials] == [3, 4, 5, 6, 7, 8]
    rows = (out / "trials.csv").read_text().splitlines()
    assert rows[0].startswith("number,value,") and len(rows) == 7
    for plot in ("optimization_history.png", "param_importances.png"):
        with Image.open(out / plot) as image:
            assert image.format == "PNG" and image.width >= 400
    best = study.best_trial
    assert load_conf_file(out / "best_hyperparams.yml", ENV)[0] == {
        "n_timesteps": 512,
        **best.user_attrs["hyperparams"],
    }
    assert (
        f"Best: trial {best.number}, masked mean return {best.value:g}, seed {best.user_attrs['seed']}." in run.stdout
    )


@pytest.mark.slow
def test_train_with_the_best_yaml_retrains_the_best_trial_to_its_recorded_value(
    tuned: tuple[subprocess.CompletedProcess[str], Path],
) -> None:
    _, folder = tuned
    study = load(f"sqlite:///{folder / 'study' / 'study.db'}", f"ppo_mask-{ENV}")
    best = study.best_trial
    # The command best_hyperparams.yml names, as a user copies it.
    command = (folder / "study" / "best_hyperparams.yml").read_text().splitlines()[1].split("Retrain it: ")[1]
    args = [*command.split()[1:], "--out", "retrained", "--no-progress"]
    args[args.index("best_hyperparams.yml")] = "study/best_hyperparams.yml"
    run = run_cli(*args, cwd=folder)
    assert run.returncode == 0, run.stderr
    evaluation = json.loads((folder / "retrained" / "evaluation.json").read_text())["evaluation"]
    assert evaluation["masked"]["mean"] == best.value
    assert evaluation["unmasked"]["mean"] != best.value  # scored without masks, the same model loses its value


@pytest.mark.slow
def test_two_workers_on_one_sqlite_study_run_every_trial_once(tmp_path: Path) -> None:
    storage = f"sqlite:///{tmp_path / 'shared.db'}"
    common = ["tune", *TINY, "-n", "256", "--n-trials", "3", "--storage", storage, "--study-name", "shared"]
    workers = [
        subprocess.Popen(
            [sys.executable, "-m", "torchrl_mask", *common, "--seed", str(seed), "--out", f"worker{seed}"],
            cwd=tmp_path,
            env=cli_env(),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for seed in (0, 1000)
    ]
    for worker in workers:
        _, stderr = worker.communicate(timeout=400)
        assert worker.returncode == 0, stderr
    trials = load(storage, "shared").trials
    assert sorted(trial.number for trial in trials) == list(range(6))
    assert all(trial.state.is_finished() for trial in trials)
    by_worker = [trial.user_attrs["worker"] for trial in trials]
    assert sorted(by_worker.count(worker) for worker in set(by_worker)) == [3, 3]
    assert not (tmp_path / "worker0" / "study.db").exists()  # the study is the shared one


@pytest.mark.slow
def test_a_failing_trial_is_marked_failed_with_its_message_and_the_study_goes_on(tmp_path: Path) -> None:
    run = run_cli(
        "tune",
        "--env",
        "tune_envs:BreaksAfter-v0",
        "-n",
        "64",
        "--n-trials",
        "2",
        "--no-progress",
        "--hyperparams",
        "n_envs=1",
        "n_steps=32",
        "batch_size=16",
        "--out",
        "out",
        cwd=tmp_path,
    )
    assert run.returncode == 1, run.stderr  # no trial completed: said in one line, no traceback of Optuna's
    assert run.stderr.startswith("torchrl-mask: no trial completed") and run.stderr.count("\n") == 1, run.stderr
    assert not list((tmp_path / "out").glob("*.png"))  # nothing to plot
    trials = load(f"sqlite:///{tmp_path / 'out' / 'study.db'}", "ppo_mask-tune_envs:BreaksAfter-v0").trials
    assert [trial.state for trial in trials] == [optuna.trial.TrialState.FAIL] * 2
    assert all(trial.user_attrs["fail_reason"] == "ValueError: the env broke on step 40." for trial in trials)
    assert "trial 1: fail: ValueError: the env broke on step 40." in run.stdout
    assert (tmp_path / "out" / "trials.csv").read_text().count("FAIL") == 2
    assert not (tmp_path / "out" / "best_hyperparams.yml").exists()  # no trial completed: no best to write


@pytest.mark.slow
def test_ctrl_c_stops_the_study_and_keeps_its_trials_and_the_best_so_far(tmp_path: Path) -> None:
    command = [sys.executable, "-m", "torchrl_mask", "tune", *TINY, "--n-trials", "50", "--out", "out"]
    proc = subprocess.Popen(
        command, cwd=tmp_path, env=cli_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    assert proc.stdout is not None
    for line in proc.stdout:  # the first trial ends: interrupt the second
        if line.startswith("trial 0: complete"):
            break
    proc.send_signal(signal.SIGINT)
    _, stderr = proc.communicate(timeout=120)
    assert proc.returncode == 130, stderr
    assert "interrupted; the trials so far are kept" in stderr
    study = load(f"sqlite:///{tmp_path / 'out' / 'study.db'}", f"ppo_mask-{ENV}")
    assert 1 <= len(study.trials) < 50
    best = yaml.safe_load((tmp_path / "out" / "best_hyperparams.yml").read_text())[ENV]
    assert best["learning_rate"] == study.best_trial.user_attrs["hyperparams"]["learning_rate"]
    assert not (tmp_path / "out" / ".torchrl-mask.lock").exists()


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def _listening(port: int) -> bool:
    with socket.socket() as probe:
        return probe.connect_ex(("127.0.0.1", port)) == 0


@pytest.mark.slow
def test_optuna_dashboard_serves_the_study_as_a_web_page_a_browser_renders(
    tuned: tuple[subprocess.CompletedProcess[str], Path],
) -> None:
    browser = shutil.which("chromium") or shutil.which("chromium-browser")
    assert browser is not None, "no chromium on PATH: run `make browser` (root, apt-get) or install chromium"
    _, folder = tuned
    port = _free_port()
    dashboard = Path(sys.executable).with_name("optuna-dashboard")
    server = subprocess.Popen(
        [
            dashboard,
            f"sqlite:///{folder / 'study' / 'study.db'}",
            "--host",
            "127.0.0.1",
            "--port",
            str(port),
            "--quiet",
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    try:
        deadline = time.monotonic() + 60
        while not _listening(port):
            assert server.poll() is None and time.monotonic() < deadline, "optuna-dashboard did not start"
            time.sleep(0.2)
        page = subprocess.run(
            [
                browser,
                "--headless",
                "--no-sandbox",
                "--disable-gpu",
                "--disable-dev-shm-usage",
                "--virtual-time-budget=20000",
                "--dump-dom",
                f"http://127.0.0.1:{port}/dashboard",
            ],
            capture_output=True,
            text=True,
            timeout=120,
        )
    finally:
        server.terminate()
        server.wait(timeout=30)
    assert f"ppo_mask-{ENV}" in page.stdout  # rendered by the page's script from the study: not in the HTML served


@pytest.mark.slow
def test_a_game_is_tuned_by_its_ladder_score_and_its_best_trial_retrains_to_it(tmp_path: Path) -> None:
    # Self-play trials on tic-tac-toe, each scored against the game's whole ladder (random, one-ply, perfect) by
    # the evaluation `train` writes; the best trial, retrained by the YAML's own command, scores the same.
    study_dir = tmp_path / "study"
    tune = run_cli(
        "tune",
        "--env",
        "pettingzoo:tictactoe_v3",
        "--n-trials",
        "2",
        "-n",
        "1024",
        "--n-evaluations",
        "1",
        "--eval-episodes",
        "4",
        "--hyperparams",
        "n_envs=2",
        "--no-progress",
        "--out",
        str(study_dir),
        cwd=tmp_path,
    )
    assert tune.returncode == 0, tune.stderr
    study = load(f"sqlite:///{study_dir / 'study.db'}", "ppo_mask-pettingzoo:tictactoe_v3")
    assert [trial.state for trial in study.trials] == [optuna.trial.TrialState.COMPLETE] * 2
    assert all(-1.0 <= trial.value <= 1.0 for trial in study.trials)  # mean win - loss over three opponents
    command = (study_dir / "best_hyperparams.yml").read_text().splitlines()[1].split("Retrain it: ")[1]
    args = [*command.split()[1:], "--out", "retrained", "--no-progress"]
    args[args.index("best_hyperparams.yml")] = "study/best_hyperparams.yml"
    run = run_cli(*args, cwd=tmp_path)
    assert run.returncode == 0, run.stderr
    evaluation = json.loads((tmp_path / "retrained" / "evaluation.json").read_text())
    assert evaluation["illegal_moves"] == 0
    assert ladder_score(evaluation) == study.best_trial.value


def test_best_yaml_comes_from_the_trials_own_settings_not_the_workers() -> None:
    # a trial of 4,096 steps of MaskablePPO, written by a worker started with -n 2048 --algo ppo_lstm_mask
    settings = {"env_id": ENV, "algo": "ppo_mask", "n_timesteps": 4096, "eval_episodes": 9}
    attrs = {"hyperparams": {"n_envs": 2, "learning_rate": 3e-4}, "seed": 1, "settings": settings}
    trial = optuna.trial.create_trial(value=1.0, user_attrs=attrs)
    text = conf_text(ENV, 2048, trial, eval_episodes=5, algo="ppo_lstm_mask")
    assert yaml.safe_load(text)[ENV]["n_timesteps"] == 4096
    command = text.splitlines()[1]
    assert "--algo" not in command and "--eval-episodes 9" in command, command


@pytest.mark.slow
def test_a_worker_with_other_settings_is_refused_before_any_trial(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    storage = f"sqlite:///{tmp_path / 'shared.db'}"
    first = run_cli(
        "tune", *TINY, "--n-trials", "1", "--storage", storage, "--study-name", "s", "--out", "a", cwd=tmp_path
    )
    assert first.returncode == 0, first.stderr
    capsys.readouterr()
    for other in (["-n", "1024"], ["--algo", "ppo_lstm_mask"], ["--eval-episodes", "7"]):
        # in this process: the workers' refusal is the CLI's main, without paying a process's imports three times
        status = main(
            [
                "tune",
                *TINY,
                *other,
                "--n-trials",
                "1",
                "--storage",
                storage,
                "--study-name",
                "s",
                "--out",
                str(tmp_path / "b"),
            ]
        )
        stderr = capsys.readouterr().err
        assert status == 2, (other, stderr)
        assert stderr.count("\n") == 1 and "the study was started with" in stderr, stderr
        assert not (tmp_path / "b").exists()
    study = load(storage, "s")
    assert len(study.trials) == 1 and study.trials[0].user_attrs["settings"]["n_timesteps"] == 512


@pytest.mark.slow
def test_a_study_torchrl_mask_did_not_write_is_refused_before_any_trial(tmp_path: Path) -> None:
    storage = f"sqlite:///{tmp_path / 'theirs.db'}"
    study = optuna.create_study(storage=storage, study_name="theirs", direction="maximize")
    study.optimize(lambda trial: trial.suggest_float("x", 0, 1), n_trials=1)  # plain Optuna's trial
    run = run_cli("tune", *TINY, "--storage", storage, "--study-name", "theirs", "--out", "out", cwd=tmp_path)
    assert run.returncode == 2, run.stderr
    assert run.stderr.count("\n") == 1 and "was not written by torchrl-mask tune" in run.stderr, run.stderr
    assert len(load(storage, "theirs").trials) == 1 and not (tmp_path / "out").exists()


@pytest.mark.slow
def test_the_default_study_lands_in_out_whatever_its_name_holds(tmp_path: Path) -> None:
    folder = "q?mark%41b#tag"  # each of which a SQLite URL reads as something else, unescaped
    run = run_cli("tune", *TINY, "--n-trials", "1", "--out", folder, cwd=tmp_path)
    assert run.returncode == 0, run.stderr
    assert (tmp_path / folder / "study.db").is_file()
    assert sorted(path.name for path in tmp_path.iterdir()) == [folder]  # nothing beside it (no "q", no "pct")


@pytest.mark.slow
def test_sigterm_stops_the_study_as_ctrl_c_does(tmp_path: Path) -> None:
    command = [sys.executable, "-m", "torchrl_mask", "tune", *TINY, "--n-trials", "50", "--out", "out"]
    proc = subprocess.Popen(
        command, cwd=tmp_path, env=cli_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    assert proc.stdout is not None
    for line in proc.stdout:  # the first trial ends: stop the second
        if line.startswith("trial 0: complete"):
            break
    proc.send_signal(signal.SIGTERM)
    _, stderr = proc.communicate(timeout=120)
    assert proc.returncode == 143, stderr
    assert "interrupted; the trials so far are kept" in stderr and "Traceback" not in stderr
    study = load(f"sqlite:///{tmp_path / 'out' / 'study.db'}", f"ppo_mask-{ENV}")
    assert optuna.trial.TrialState.RUNNING not in [trial.state for trial in study.trials]
    assert (tmp_path / "out" / "best_hyperparams.yml").is_file()
    assert not (tmp_path / "out" / ".torchrl-mask.lock").exists()


@pytest.mark.parametrize(("signum", "status"), [(signal.SIGINT, 130), (signal.SIGTERM, 143)])
def test_a_signal_during_a_storage_write_waits_for_the_write_then_stops_the_trial(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, signum: int, status: int
) -> None:
    # The signal is sent to this process from inside Optuna's write of the trial's "worker" attribute to SQLite.
    # Raised there, it would cut that write short (a cut commit leaves the file locked, and Optuna fails on the
    # trial's state); held, the write and the trial's other attributes land, and training stops at its first step.
    write = optuna.storages.RDBStorage.set_trial_user_attr

    def write_then_signal(self: optuna.storages.RDBStorage, trial_id: int, key: str, value: object) -> None:
        if key == "worker":
            os.kill(os.getpid(), signum)
        write(self, trial_id, key, value)

    monkeypatch.setattr(optuna.storages.RDBStorage, "set_trial_user_attr", write_then_signal)
    monkeypatch.chdir(tmp_path)
    assert main(["tune", *TINY, "--n-trials", "5", "--out", "out"]) == status
    (trial,) = load(f"sqlite:///{tmp_path / 'out' / 'study.db'}", f"ppo_mask-{ENV}").trials
    assert trial.state == optuna.trial.TrialState.FAIL
    assert {"seed", "hyperparams", "worker", "settings"} <= set(trial.user_attrs)
    assert "timesteps" not in trial.user_attrs  # training stopped: it never ended
    assert not (tmp_path / "out" / ".torchrl-mask.lock").exists()


@pytest.mark.slow
def test_ctrl_c_while_tune_starts_up_is_one_line(tmp_path: Path) -> None:
    command = [sys.executable, "-m", "torchrl_mask", "tune", *TINY, "--out", "out"]
    proc = subprocess.Popen(
        command, cwd=tmp_path, env=cli_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    time.sleep(1.0)  # inside its imports (torch, Optuna), before the study begins
    proc.send_signal(signal.SIGINT)
    _, stderr = proc.communicate(timeout=120)
    assert proc.returncode == 130, stderr
    assert "Traceback" not in stderr and stderr.strip().count("\n") == 0, stderr


@pytest.mark.slow
def test_a_game_trial_reports_its_evaluations_and_trains_about_its_budget(tmp_path: Path) -> None:
    # self-play's callbacks run once per move: the evaluations are n_evaluations, spaced in moves
    run = run_cli(
        "tune",
        "--env",
        "pettingzoo:tictactoe_v3",
        "--n-trials",
        "2",
        "-n",
        "1024",
        "--n-evaluations",
        "2",
        "--eval-episodes",
        "2",
        "--pruner",
        "none",
        "--hyperparams",
        "n_envs=2",
        "--no-progress",
        "--out",
        "out",
        cwd=tmp_path,
    )
    assert run.returncode == 0, run.stderr
    for trial in load(f"sqlite:///{tmp_path / 'out' / 'study.db'}", "ppo_mask-pettingzoo:tictactoe_v3").trials:
        assert sorted(trial.intermediate_values) == [1, 2], trial.intermediate_values
        rollout = trial.user_attrs["hyperparams"]["n_steps"] * 2  # the moves of one rollout, both seats
        assert 1024 <= trial.user_attrs["timesteps"] < 1024 + rollout, trial.user_attrs


@pytest.mark.slow
def test_recurrent_self_play_is_tuned_as_train_runs_it(tmp_path: Path) -> None:
    run = run_cli(
        "tune",
        "--env",
        "pettingzoo:leduc_holdem_v4",
        "--algo",
        "ppo_lstm_mask",
        "--n-trials",
        "1",
        "-n",
        "256",
        "--n-evaluations",
        "1",
        "--eval-episodes",
        "2",
        "--hyperparams",
        "n_envs=2",
        "--no-progress",
        "--out",
        "out",
        cwd=tmp_path,
    )
    assert run.returncode == 0, run.stderr
    (trial,) = load(f"sqlite:///{tmp_path / 'out' / 'study.db'}", "ppo_lstm_mask-pettingzoo:leduc_holdem_v4").trials
    assert trial.state == optuna.trial.TrialState.COMPLETE
    assert "lstm_hidden_size" in trial.user_attrs["hyperparams"]["policy_kwargs"]
