"""A run on a gymnasium env: masked whatever convention it reports its mask in, MaskablePPO (or
MaskableRecurrentPPO) on SB3's VecEnv or a TorchRL collector, with rl-zoo3's callbacks, evaluated with masks,
without masks, and against random legal actions.

It writes, besides ``model.zip`` (:mod:`torchrl_mask.app.pipeline`):

- ``learning_curve.csv``: every training episode's ``timestep,episode_return`` (right after training, also when it
  was interrupted);
- ``learning_curve.png``: that curve beside the evaluation;
- ``evaluation.json``: the evaluation, and the configuration that produced it;
- ``monitor/``: SB3's ``Monitor`` files, one per env, the curve's source;
- with ``save_freq``: ``rl_model_<steps>_steps.zip`` checkpoints (SB3's ``CheckpointCallback``);
- with ``eval_freq``: ``best_model.zip`` and ``evaluations.npz`` (sb3-contrib's ``MaskableEvalCallback``; for the
  recurrent model ``MaskableRecurrentEvalCallback``, which keeps the LSTM state).

``model.zip`` loads with ``torchrl_mask.MaskablePPO.load`` or sb3-contrib's ``MaskablePPO.load`` (with
``algo="ppo_lstm_mask"``, ``torchrl_mask.MaskableRecurrentPPO.load``). The env is made and masked by
:mod:`torchrl_mask.app.masked_env`; the evaluation, the curve and the PNG are :mod:`torchrl_mask.app.results`.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any

import gymnasium as gym
from gymnasium import spaces
from sb3_contrib.common.maskable.callbacks import MaskableEvalCallback
from stable_baselines3.common.callbacks import BaseCallback
from stable_baselines3.common.env_util import make_vec_env
from stable_baselines3.common.preprocessing import is_image_space
from stable_baselines3.common.vec_env import DummyVecEnv, VecEnv

from torchrl_mask.algorithms.collector_checks import was_shut_down
from torchrl_mask.algorithms.recurrent_evaluation import MaskableRecurrentEvalCallback
from torchrl_mask.app import results, run_folder
from torchrl_mask.app.config import ALGOS, TrainConfig
from torchrl_mask.app.files import write_json, write_text
from torchrl_mask.app.hyperparams import UsageError
from torchrl_mask.app.masked_env import make_masked_env, mask_env
from torchrl_mask.app.models import ALGORITHMS, Model, build_model, model_kwargs, recorded_policy_kwargs
from torchrl_mask.app.results import EVAL_SEED_OFFSET
from torchrl_mask.app.train_collectors import make_collector
from torchrl_mask.app.trained_agent import check_trained_agent
from torchrl_mask.torchrl.workers import shutdown as shutdown_collector

__all__ = ["COLLECTOR_TEXT", "GymTask"]

MASK_SOURCE_TEXT = {
    "method": "its action_masks()",
    "info": "info['action_mask']",
    "observation": "observation['action_mask']",
}
#: How each ``--collector`` is named in the first line a run prints.
COLLECTOR_TEXT = {
    "sync": "TorchRL Collector over a SerialEnv",
    "multisync": "TorchRL MultiSyncCollector, one worker process each",
}
_REPORT_ROWS = {
    "masked": "trained policy, with masks",
    "unmasked": "trained policy, without masks",
    "random": "random legal actions",
}


def fitting_policy(config: TrainConfig, observation_space: spaces.Space) -> str:
    """The policy a run builds: the one asked for, if it fits the observations, else the one that fits.

    :param config: the run (``hyperparams``' ``policy``, ``algo``).
    :param observation_space: the env's observations.
    :return: the policy's name (``MultiInputPolicy`` for a Dict observation, ``MlpPolicy`` otherwise; their LSTM
        twins for ``ppo_lstm_mask``; ``CnnPolicy`` where asked for and the observation is an image).
    :raises UsageError: a policy that does not fit.
    """
    policy = config.hyperparams.get("policy")
    fits = "MultiInputPolicy" if isinstance(observation_space, spaces.Dict) else "MlpPolicy"
    cnn = "CnnPolicy"
    if config.algo == "ppo_lstm_mask":  # sb3-contrib's names for the same three with an LSTM
        fits, cnn = fits.replace("Policy", "LstmPolicy"), "CnnLstmPolicy"
    if policy is None:
        return fits
    if policy != fits and (policy != cnn or not is_image_space(observation_space)):
        raise UsageError(
            f"policy={policy} does not fit {config.env_id}'s observation space {observation_space}; use policy={fits}."
        )
    return str(policy)


def _masked(make_env: Callable[[], gym.Env]) -> gym.Env:
    """``make_env()``, masked (:func:`~torchrl_mask.app.masked_env.mask_env`): a picklable maker of masked envs."""
    return mask_env(make_env())


class GymTask:
    """A gymnasium run (see the module), checked when made: the env (made once, to see its spaces and where its
    masks come from), the policy and its arguments, the ``-i`` model.

    :param config: the run.
    :param make_env: makes the env, unmasked (it must pickle, for the collectors' worker processes); None: the
        gymnasium id ``config.env_id``.
    :raises UsageError: an unknown env id, an env without masks, a policy or ``policy_kwargs`` that do not fit,
        or an ``-i`` model that does not load or is not for this env.
    """

    unit = "step"
    files_text = "learning_curve.csv, learning_curve.png or evaluation.json"

    def __init__(self, config: TrainConfig, make_env: Callable[[], gym.Env] | None = None) -> None:
        self.raw_make = make_env
        self.make = partial(make_masked_env, config.env_id) if make_env is None else partial(_masked, make_env)
        env = self.make()
        try:
            self.policy = self.choose_policy(config, env.observation_space)
            self.kwargs = model_kwargs(config.hyperparams, self.policy, config.algo)
            if config.trained_agent is not None:
                check_trained_agent(config.trained_agent, env, ALGORITHMS[config.algo], self.check_saved)
            self.mask_text = MASK_SOURCE_TEXT[env.get_wrapper_attr("source")]
        finally:
            env.close()
        self.config = config
        self.env: VecEnv | None = None
        self.monitor_dir: Path | None = None
        self.made_monitor_dir = False
        self.eval_envs: list[VecEnv] = []
        self.curve: list[tuple[int, float]] = []

    def choose_policy(self, config: TrainConfig, observation_space: spaces.Space) -> Any:
        """The policy the run builds (:func:`fitting_policy`): a name, or a policy class.

        :param config: the run.
        :param observation_space: the env's observations.
        """
        return fitting_policy(config, observation_space)

    def check_saved(self, path: Path, data: dict[str, Any]) -> None:
        """The task's own check of the ``-i`` model's saved data, before its spaces are compared
        (:func:`~torchrl_mask.app.trained_agent.check_trained_agent`'s ``check_saved``): none for a gymnasium env,
        whose spaces say it all.

        :param path: the ``-i`` file, for the message.
        :param data: the zip's saved data.
        """

    def first_line(self) -> str:
        config = self.config
        rollouts = "SB3's DummyVecEnv" if config.collector is None else COLLECTOR_TEXT[config.collector]
        return (
            f"Training {ALGOS[config.algo]} on {config.env_id} (masks from {self.mask_text}) for "
            f"{config.n_timesteps:,} steps: {config.n_envs} envs ({rollouts}), seed {config.seed}, device "
            f"{config.device}."
        )

    def build_model(self, device: str, out: Path | None) -> Model:
        config = self.config
        if out is not None:  # SB3's Monitor files, one per env: the learning curve's source
            self.monitor_dir = out / "monitor"
            self.made_monitor_dir = not self.monitor_dir.exists()
            self.monitor_dir.mkdir(exist_ok=True)
        if config.collector is not None:  # never stepped: it gives the spaces and the env count (the progress bar's)
            self.env = DummyVecEnv([self.make] * config.n_envs)
        else:
            monitor_dir = None if self.monitor_dir is None else str(self.monitor_dir)
            self.env = make_vec_env(self.make, n_envs=config.n_envs, seed=config.seed, monitor_dir=monitor_dir)
        return build_model(config, self.policy, self.kwargs, self.env, device)

    def callbacks(self, model: Model, out: Path) -> list[BaseCallback]:
        """rl-zoo3's periodic evaluation, every ``eval_freq`` env steps over all envs; none for ``eval_freq`` 0."""
        config = self.config
        if config.eval_freq <= 0:
            return []
        eval_env = make_vec_env(self.make, n_envs=1, seed=config.seed + EVAL_SEED_OFFSET)
        self.eval_envs.append(eval_env)
        # sb3-contrib's drops the LSTM state at every step (docs/reference/algorithms/recurrent_evaluation.md)
        evaluator = MaskableRecurrentEvalCallback if config.algo == "ppo_lstm_mask" else MaskableEvalCallback
        every = max(config.eval_freq // model.n_envs, 1)
        return [
            evaluator(
                eval_env,
                n_eval_episodes=config.eval_episodes,
                eval_freq=every,
                best_model_save_path=str(out),
                log_path=str(out),
                deterministic=True,
                verbose=config.verbose,
            )
        ]

    def learn(self, model: Model, callbacks: list[BaseCallback]) -> None:
        config = self.config
        reset = config.trained_agent is None  # continuing: num_timesteps goes on from the saved model's
        if config.collector is None:
            model.learn(config.n_timesteps, callbacks, progress_bar=config.progress_bar, reset_num_timesteps=reset)
            return
        if self.monitor_dir is None:
            raise ValueError("a collector's envs write their Monitor files into the run's folder: give build_model one")
        collector = make_collector(config, model, self.monitor_dir, self.raw_make)
        try:
            model.learn(
                config.n_timesteps,
                callbacks,
                progress_bar=config.progress_bar,
                reset_num_timesteps=reset,
                collector=collector,
            )
        finally:  # learn() shuts it down itself, but not a collector it refused before starting
            if not was_shut_down(collector):
                shutdown_collector(collector)

    def close(self) -> None:
        for env in [self.env, *self.eval_envs]:
            if env is not None:
                env.close()
        if self.made_monitor_dir and self.monitor_dir is not None:  # left empty: training ended before an episode
            run_folder.remove_if_empty(self.monitor_dir)

    def write_progress(self, model: Model, out: Path) -> list[str]:
        self.curve = results.learning_curve(out / "monitor")
        lines = ["timestep,episode_return", *(f"{step},{ret:g}" for step, ret in self.curve)]
        write_text(out / "learning_curve.csv", "\n".join(lines) + "\n")
        return ["learning_curve.csv"]

    def evaluate(self, model: Model) -> dict[str, Any]:
        config = self.config
        return results.evaluate(model, self.make, config.eval_episodes, config.seed)

    def write(self, model: Model, evaluation: dict[str, Any], out: Path) -> list[str]:
        config = self.config
        results.plot(
            self.curve,
            evaluation,
            config.env_id,
            config.eval_episodes,
            out / "learning_curve.png",
            algo_name=type(model).__name__,
        )
        recorded = config.record(out)
        if config.trained_agent is not None:  # its saved policy was kept: record that one
            recorded["hyperparams"]["policy_kwargs"] = recorded_policy_kwargs(model)
        write_json(out / "evaluation.json", {"config": recorded, "evaluation": evaluation})
        return ["learning_curve.png", "evaluation.json"]

    def report(self, evaluation: dict[str, Any]) -> list[str]:
        config = self.config
        lines = [f"\nEvaluation on {config.env_id}, {config.eval_episodes} episodes each (mean ± std episode return):"]
        for key, label in _REPORT_ROWS.items():
            stats = evaluation[key]
            if "error" in stats:  # the env raised (e.g. on an illegal move without masks): the model is saved
                lines.append(f"  {label:<31}raised {stats['error']}")
            else:
                lines.append(f"  {label:<31}{stats['mean']:>10.2f} ± {stats['std']:.2f}")
        return lines

    def score(self, model: Model, episodes: int, seed: int) -> float:
        """The mean return of the masked evaluation (:func:`~torchrl_mask.app.results.mean_return`)."""
        return results.mean_return(model, self.make, episodes, seed)
