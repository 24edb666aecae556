"""One ``MaskablePPO.learn`` for both rollout sources: a VecEnv and a TorchRL collector give SB3's callbacks,
progress bar, logger, ``num_timesteps`` and ``ep_info_buffer`` the same calls and figures.

The env is sb3-contrib's ``InvalidActionEnvDiscrete`` (an ``IdentityEnv``: every episode lasts 100 steps,
whatever the actions), two copies per path: a ``DummyVecEnv`` of Monitor-wrapped envs, and an in-process
``Collector`` over a TorchRL ``SerialEnv`` of the same envs. Episode ends, counts and lengths are therefore the
same on both paths, while the actions (and rewards) are drawn by different random streams.
"""

from __future__ import annotations

import csv
from pathlib import Path
from typing import Any

import pytest
from collector_envs import SMALL, invalid_discrete_env_gym, two_invalid_discrete_envs
from sb3_contrib.common.maskable.callbacks import MaskableEvalCallback
from stable_baselines3.common.callbacks import BaseCallback, ProgressBarCallback, StopTrainingOnMaxEpisodes
from stable_baselines3.common.env_util import make_vec_env
from stable_baselines3.common.logger import configure
from stable_baselines3.common.monitor import Monitor
from torchrl.collectors import Collector

from torchrl_mask import MaskablePolicyModule, MaskablePPO

PATHS = ["vecenv", "collector"]
N_ENVS, N_STEPS = 2, 64


def learn(path: str, total: int, callback: Any = None, logger_dir: Path | None = None) -> MaskablePPO:
    """Train on ``path``'s rollout source: ``N_ENVS`` envs, ``N_STEPS`` steps each per rollout."""
    venv = make_vec_env(invalid_discrete_env_gym, n_envs=N_ENVS, seed=0)
    model = MaskablePPO("MlpPolicy", venv, n_steps=N_STEPS, batch_size=64, n_epochs=1, policy_kwargs=SMALL, seed=0)
    if logger_dir is not None:
        model.set_logger(configure(str(logger_dir), ["csv"]))
    if path == "vecenv":
        return model.learn(total, callback=callback)
    collector = Collector(
        two_invalid_discrete_envs, MaskablePolicyModule(model.policy), frames_per_batch=N_ENVS * N_STEPS
    )
    return model.learn(total, callback=callback, collector=collector)


class Recorder(BaseCallback):
    """Every call SB3 makes into a callback, with ``num_timesteps`` and the per-step locals' shapes."""

    def __init__(self) -> None:
        super().__init__()
        self.calls: list[tuple[str, int]] = []
        self.step_locals: list[tuple[int, int, int]] = []

    def _on_training_start(self) -> None:
        self.calls.append(("training_start", self.num_timesteps))

    def _on_rollout_start(self) -> None:
        self.calls.append(("rollout_start", self.num_timesteps))

    def _on_step(self) -> bool:
        self.calls.append(("step", self.num_timesteps))
        dones, infos = self.locals["dones"], self.locals["infos"]
        self.step_locals.append((len(dones), len(infos), sum(int("episode" in info) for info in infos)))
        return True

    def _on_rollout_end(self) -> None:
        self.calls.append(("rollout_end", self.num_timesteps))

    def _on_training_end(self) -> None:
        self.calls.append(("training_end", self.num_timesteps))


def test_both_paths_make_the_same_callback_calls_with_the_same_step_counts() -> None:
    recorders = {path: Recorder() for path in PATHS}
    models = {path: learn(path, 3 * N_ENVS * N_STEPS, recorders[path]) for path in PATHS}
    vec, col = recorders["vecenv"], recorders["collector"]
    assert col.calls == vec.calls
    assert [name for name, _ in vec.calls].count("step") == 3 * N_STEPS
    assert col.n_calls == vec.n_calls == 3 * N_STEPS
    # same locals: one done flag and one info per env; Monitor's "episode" info where an episode ended (t = 100)
    assert col.step_locals == vec.step_locals
    assert sum(ended for _, _, ended in col.step_locals) == N_ENVS
    assert models["collector"].num_timesteps == models["vecenv"].num_timesteps == 3 * N_ENVS * N_STEPS
    assert models["collector"].rollout_buffer.tensordict.batch_size == (N_ENVS, N_STEPS)


def test_a_callback_returning_false_stops_both_paths_at_the_same_step() -> None:
    # Episodes end at step 100 of each env: 2 episodes at 200 steps, 4 at 400; max_episodes counts per env (x2).
    stops = {path: StopTrainingOnMaxEpisodes(max_episodes=2) for path in PATHS}
    models = {path: learn(path, 20 * N_ENVS * N_STEPS, stops[path]) for path in PATHS}
    assert models["collector"].num_timesteps == models["vecenv"].num_timesteps == 2 * 200
    assert stops["collector"].n_episodes == stops["vecenv"].n_episodes == 4


@pytest.mark.slow
def test_eval_callback_and_progress_bar_see_the_same_steps_on_both_paths(tmp_path: Path) -> None:
    evals = {
        path: MaskableEvalCallback(
            Monitor(invalid_discrete_env_gym()),
            n_eval_episodes=1,
            eval_freq=N_STEPS,
            log_path=str(tmp_path / path),
            verbose=0,
        )
        for path in PATHS
    }
    bars = {path: ProgressBarCallback() for path in PATHS}
    for path in PATHS:
        learn(path, 4 * N_ENVS * N_STEPS, [evals[path], bars[path]])
    assert evals["collector"].evaluations_timesteps == evals["vecenv"].evaluations_timesteps
    assert evals["vecenv"].evaluations_timesteps == [N_ENVS * N_STEPS * k for k in range(1, 5)]
    assert evals["collector"].evaluations_length == evals["vecenv"].evaluations_length == [[100]] * 4
    assert bars["collector"].pbar.n == bars["vecenv"].pbar.n == 4 * N_ENVS * N_STEPS


@pytest.mark.slow
def test_the_logger_writes_the_same_rollout_and_time_figures_on_both_paths(tmp_path: Path) -> None:
    rows: dict[str, list[dict[str, str]]] = {}
    models = {}
    for path in PATHS:
        models[path] = learn(path, 8 * N_ENVS * N_STEPS, logger_dir=tmp_path / path)
        with open(tmp_path / path / "progress.csv", newline="") as file:
            rows[path] = list(csv.DictReader(file))
    assert len(rows["collector"]) == len(rows["vecenv"]) == 8
    for key in ("time/iterations", "time/total_timesteps", "rollout/ep_len_mean"):
        assert [row[key] for row in rows["collector"]] == [row[key] for row in rows["vecenv"]], key
    # episodes end at step 100 of each env: ep_rew_mean appears from the second rollout on, on both paths
    for path in PATHS:
        assert [row["rollout/ep_len_mean"] for row in rows[path]][1:] == ["100.0"] * 7
        assert all(0.0 <= float(row["rollout/ep_rew_mean"]) <= 100.0 for row in rows[path][1:])
        assert rows[path][0]["rollout/ep_rew_mean"] == ""
    assert len(models["collector"].ep_info_buffer) == len(models["vecenv"].ep_info_buffer) == 2 * 5
    assert [info["l"] for info in models["collector"].ep_info_buffer] == [100] * 10
