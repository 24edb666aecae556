"""The env ``torchrl-mask train`` builds from a gymnasium id: masked whatever convention the env reports its mask
in, for SB3's VecEnvs (:func:`make_masked_env`) and for TorchRL's collectors (:func:`collector_env`).

Which convention an env uses is decided by :class:`~torchrl_mask.torchrl.envs.ActionMaskInInfo` (a Dict observation
entry, else an ``action_masks()`` method, else ``info["action_mask"]``); :class:`InfoActionMasker` serves the mask
it brings into ``info`` through ``action_masks()``, as sb3-contrib's ``MaskablePPO`` asks for it. An id that
cannot be made, an action space that cannot be masked or an env with no mask is a
:class:`~torchrl_mask.app.config.UsageError` that says the fix.

Example:
    >>> env = make_masked_env("Taxi-v4")
    >>> obs, info = env.reset(seed=0)
    >>> env.action_masks().dtype, env.action_masks().shape
    (dtype('bool'), (6,))
"""

from __future__ import annotations

import warnings
from collections.abc import Callable
from typing import Any

import gymnasium as gym
import numpy as np
from sb3_contrib.common.wrappers import ActionMasker
from stable_baselines3.common.monitor import Monitor
from torchrl.envs import TransformedEnv

from torchrl_mask.app.hyperparams import UsageError
from torchrl_mask.app.kinds import unregistered
from torchrl_mask.torchrl.envs import ActionMaskInInfo, masked_gym_env

__all__ = ["InfoActionMasker", "collector_env", "make_masked_env", "mask_env", "one_line", "user_env"]

MASK_KEY = "action_mask"


class InfoActionMasker(ActionMasker):
    """sb3-contrib's :class:`~sb3_contrib.common.wrappers.ActionMasker` for an env that reports its mask in ``info``.

    gymnasium's convention (``Taxi-v4``, ``CliffWalking``...) puts the mask of the new state in
    ``info["action_mask"]`` after ``reset`` and ``step``. This wrapper keeps the last one and serves it through
    ``action_masks()``, which MaskablePPO calls each step. :func:`make_masked_env` puts
    :class:`~torchrl_mask.torchrl.envs.ActionMaskInInfo` beneath it, which brings the other conventions (an
    ``action_masks()`` method, an entry of a Dict observation) into ``info``, as the collectors see them.

    :param env: the env to wrap; its ``info`` must hold ``"action_mask"`` after every ``reset`` and ``step``.
    """

    def __init__(self, env: gym.Env) -> None:
        super().__init__(env, self._last_mask)
        self._mask: np.ndarray | None = None

    def _last_mask(self, env: gym.Env) -> np.ndarray:
        if self._mask is None:
            raise RuntimeError("action_masks() was called before reset(); reset the env first.")
        return self._mask

    def _record(self, info: dict[str, Any]) -> None:
        if MASK_KEY not in info:
            raise KeyError(
                f"{self.env.spec.id if self.env.spec else self.env}: info has no {MASK_KEY!r} entry on this step; "
                "the env must report its mask after every reset and step."
            )
        self._mask = np.asarray(info[MASK_KEY]).astype(bool)

    def reset(self, **kwargs: Any) -> tuple[Any, dict[str, Any]]:
        obs, info = self.env.reset(**kwargs)
        self._record(info)
        return obs, info

    def step(self, action: Any) -> tuple[Any, Any, bool, bool, dict[str, Any]]:
        obs, reward, terminated, truncated, info = self.env.step(action)
        self._record(info)
        return obs, reward, terminated, truncated, info


def _make_env(env_id: str) -> gym.Env:
    # gymnasium warns before it raises (e.g. "Taxi-v3 is out of date"); show its warnings only if it succeeds.
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        env = gym.make(env_id)
    for warning in caught:
        warnings.warn_explicit(warning.message, warning.category, warning.filename, warning.lineno)
    return env


def _make_user_env(env_id: str) -> gym.Env:
    try:
        return _make_env(env_id)
    except (gym.error.Error, ModuleNotFoundError) as err:  # unknown id or version, missing extra or module
        raise unregistered(env_id, err) from None


def make_masked_env(env_id: str) -> InfoActionMasker:
    """Make a gymnasium env whose masks MaskablePPO reads through ``action_masks()``, whatever the convention.

    The env is wrapped in :class:`~torchrl_mask.torchrl.envs.ActionMaskInInfo`, which finds the mask (an
    ``"action_mask"`` entry of a Dict observation, which leaves the observation; else an ``action_masks()``
    method; else ``info["action_mask"]``; the same order as :func:`~torchrl_mask.torchrl.envs.masked_gym_env` for
    the collectors) and puts it in ``info``, and in :class:`InfoActionMasker`, which serves it through
    ``action_masks()``: the observation space is the one the collectors see.

    :param env_id: a registered gymnasium id (``module:Id`` imports ``module`` first).
    :return: the wrapped env.
    :raises UsageError: unknown id, a space that cannot be masked, or no mask (the env is reset once to look
        at ``info`` when it has neither of the other two).
    """
    return mask_env(_make_user_env(env_id))


def mask_env(env: gym.Env) -> InfoActionMasker:
    """An env already made, masked as :func:`make_masked_env` masks one (a job-shop instance's env, say).

    :param env: the env.
    :return: the wrapped env.
    :raises UsageError: as :func:`make_masked_env`.
    """
    name = env.spec.id if env.spec is not None else type(env.unwrapped).__name__
    try:
        masked = ActionMaskInInfo(env)
    except TypeError:
        env.close()
        raise UsageError(
            f"{name} has action space {env.action_space}, which cannot be masked; MaskablePPO needs Discrete, "
            "MultiDiscrete or MultiBinary actions. Pick an env with discrete actions, e.g. --env Taxi-v4."
        ) from None
    if masked.source == "info" and MASK_KEY not in env.reset()[1]:
        env.close()
        raise UsageError(
            f"{name} reports no action mask: it has no action_masks() method, no info['action_mask'] and no "
            "'action_mask' key in a Dict observation. Wrap it in sb3_contrib.common.wrappers.ActionMasker and "
            "register the wrapped env, or pick a masked env, e.g. --env Taxi-v4."
        )
    return InfoActionMasker(masked)


def collector_env(make_env: Callable[[], gym.Env], monitor_file: str) -> TransformedEnv:
    """One env of a TorchRL collector: SB3's ``Monitor`` (for the learning curve) under the masked TorchRL env.

    :param make_env: makes the env, unmasked (``partial(user_env, "Taxi-v4")``); it runs in the collector's worker
        process with ``multisync``, so it pickles.
    :param monitor_file: where ``Monitor`` writes the episodes (``<file>.monitor.csv``).
    :return: the TorchRL env, its mask an ``"action_mask"`` observation entry.
    """
    return masked_gym_env(Monitor(make_env(), filename=monitor_file))


def user_env(env_id: str) -> gym.Env:
    """The env a gymnasium id names, made as gymnasium makes it (its warnings shown once it is made).

    :param env_id: a registered gymnasium id (``module:Id`` imports ``module`` first).
    """
    return _make_env(env_id)


def one_line(err: BaseException) -> str:
    """``err``'s message on one line, ending in a full stop (to be followed by the fix)."""
    text = " ".join(str(err).split())
    return text if text.endswith((".", "?", "!")) else text + "."
