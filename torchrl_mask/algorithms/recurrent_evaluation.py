"""Masked evaluation that keeps the LSTM state: an ``evaluate_policy`` and an ``EvalCallback``.

sb3-contrib's masked ``evaluate_policy`` (``sb3_contrib/common/maskable/evaluation.py``) keeps only legal actions,
but with masks it stores the state ``predict`` returns as ``state`` and passes ``states`` (always None) back in,
so a recurrent policy is evaluated with a fresh LSTM state at every step (see the report in
``docs/reference/algorithms/recurrent_evaluation.md``). SB3's own ``evaluate_policy`` carries the state and the
episode starts correctly but passes no masks. Here SB3's loop runs unchanged, given a player whose ``predict`` reads
the evaluation env's masks (sb3-contrib's ``get_action_masks``) at each step: one loop, the state carried, the
actions masked. It works for ``MaskablePPO`` too (its state is None throughout).

>>> from stable_baselines3.common.env_util import make_vec_env
>>> from sb3_contrib.common.envs import InvalidActionEnvDiscrete
>>> from torchrl_mask import MaskableRecurrentPPO
>>> env = make_vec_env(InvalidActionEnvDiscrete, n_envs=1, seed=0, env_kwargs={"dim": 4, "n_invalid_actions": 2})
>>> model = MaskableRecurrentPPO("MlpLstmPolicy", env, n_steps=16, batch_size=16, seed=0,
...                              policy_kwargs={"lstm_hidden_size": 8})
>>> returns, lengths = evaluate_policy(model, env, n_eval_episodes=2, return_episode_rewards=True)
>>> len(returns), len(lengths)
(2, 2)
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, cast

import gymnasium as gym
from sb3_contrib.common.maskable.utils import get_action_masks, is_masking_supported
from stable_baselines3.common.base_class import BaseAlgorithm
from stable_baselines3.common.callbacks import EvalCallback
from stable_baselines3.common.evaluation import evaluate_policy as sb3_evaluate_policy
from stable_baselines3.common.vec_env import DummyVecEnv, VecEnv

__all__ = ["MaskableRecurrentEvalCallback", "evaluate_policy"]


class MaskedPlayer:
    """A model whose ``predict`` reads the env's masks at each call; every other attribute is the model's.

    :param model: a MaskableRecurrentPPO or MaskablePPO (any model whose ``predict`` takes ``action_masks=``).
    :param env: the evaluation VecEnv, whose ``action_masks()`` give the masks of its current observations.
    """

    def __init__(self, model: Any, env: VecEnv) -> None:
        self.model, self.env = model, env

    def predict(
        self, observation: Any, state: Any = None, episode_start: Any = None, deterministic: bool = False
    ) -> Any:
        """``model.predict`` under the env's masks, shape ``(n_envs, sum of the action dims)``."""
        masks = get_action_masks(self.env)
        return self.model.predict(observation, state, episode_start, deterministic, action_masks=masks)

    def __getattr__(self, name: str) -> Any:
        # only reached for names the player lacks: save(), logger, get_vec_normalize_env(), ... are the model's
        return getattr(self.model, name)


def _no_masks_error() -> ValueError:
    return ValueError(
        "Environment does not support action masking: evaluate_policy(use_masking=True) reads the masks from the "
        "env's action_masks(). Wrap the env in sb3-contrib's ActionMasker, or pass use_masking=False."
    )


def evaluate_policy(
    model: Any,
    env: gym.Env | VecEnv,
    n_eval_episodes: int = 10,
    deterministic: bool = True,
    render: bool = False,
    callback: Callable[[dict[str, Any], dict[str, Any]], None] | None = None,
    reward_threshold: float | None = None,
    return_episode_rewards: bool = False,
    warn: bool = True,
    use_masking: bool = True,
) -> tuple[float, float] | tuple[list[float], list[int]]:
    """sb3-contrib's masked ``evaluate_policy``, same arguments and results, with the LSTM state carried.

    SB3's ``evaluate_policy`` runs the episodes; with ``use_masking`` the model sees the env's masks at each step.

    :param model: a MaskableRecurrentPPO (or MaskablePPO).
    :param env: the evaluation env or VecEnv, with ``action_masks()`` when masking.
    :param n_eval_episodes: episodes to play, divided among the VecEnv's envs as SB3 divides them.
    :param deterministic: take the most likely legal action.
    :param render: render the env at each step.
    :param callback: called after each step with ``locals()`` and ``globals()``.
    :param reward_threshold: raise ``AssertionError`` if the mean return is not above it.
    :param return_episode_rewards: return each episode's return and length instead of their mean and std.
    :param warn: warn if the env is not wrapped in a ``Monitor``.
    :param use_masking: read the env's masks at each step and apply them.
    :return: ``(mean, std)`` of the returns, or ``(returns, lengths)``, one per episode.
    :raises ValueError: masking with an env that has no ``action_masks()``.
    """
    if use_masking and not is_masking_supported(env):
        raise _no_masks_error()
    vec_env = env if isinstance(env, VecEnv) else DummyVecEnv([lambda: env])
    player = MaskedPlayer(model, vec_env) if use_masking else model
    return sb3_evaluate_policy(
        player,
        vec_env,
        n_eval_episodes=n_eval_episodes,
        deterministic=deterministic,
        render=render,
        callback=callback,
        reward_threshold=reward_threshold,
        return_episode_rewards=return_episode_rewards,
        warn=warn,
    )


class MaskableRecurrentEvalCallback(EvalCallback):
    """SB3's ``EvalCallback`` with masks, the LSTM state carried: sb3-contrib's ``MaskableEvalCallback`` fixed.

    Takes SB3's ``EvalCallback`` arguments (``eval_env``, ``n_eval_episodes``, ``eval_freq``, ``log_path``,
    ``best_model_save_path``, ``deterministic``, ...) and writes the same ``evaluations.npz`` and ``best_model.zip``.

    :param use_masking: read the eval env's masks at each step and apply them (its envs need ``action_masks()``).
    """

    def __init__(self, *args: Any, use_masking: bool = True, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        if use_masking and not is_masking_supported(self.eval_env):
            raise _no_masks_error()
        self.use_masking = use_masking

    def _on_step(self) -> bool:
        # Overridden because SB3's _on_step calls evaluate_policy(self.model, ...) without masks: for the length of
        # the call the model is the player that reads them (saving the best model still saves the model itself).
        if not self.use_masking:
            return super()._on_step()
        model = self.model
        self.model = cast(BaseAlgorithm, MaskedPlayer(model, self.eval_env))
        try:
            return super()._on_step()
        finally:
            self.model = model
