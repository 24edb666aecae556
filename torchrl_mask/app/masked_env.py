"""The env ``torchrl-mask train`` builds from a gymnasium id: masked whatever convention the env reports its mask
in, for SB3's VecEnvs (:func:`make_masked_env`) and for TorchRL's collectors (:func:`collector_env`).

Which convention an env uses is decided by :class:`~torchrl_mask.torchrl.envs.ActionMaskInInfo` (a Dict observation
entry, else an ``action_masks()`` method, else ``info["action_mask"]``), which serves the mask both in ``info`` and
through ``action_masks()``, as sb3-contrib's ``MaskablePPO`` asks for it. An id that
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

import gymnasium as gym
from stable_baselines3.common.monitor import Monitor
from torchrl.envs import TransformedEnv

from torchrl_mask.app.hyperparams import UsageError
from torchrl_mask.app.kinds import unregistered
from torchrl_mask.torchrl.envs import ActionMaskInInfo, masked_gym_env

__all__ = ["collector_env", "make_masked_env", "mask_env", "one_line", "user_env"]

MASK_KEY = "action_mask"


def user_env(env_id: str) -> gym.Env:
    """The env a gymnasium id names, made as gymnasium makes it (its warnings shown once it is made: gymnasium warns
    before it raises, e.g. "Taxi-v3 is out of date").

    :param env_id: a registered gymnasium id (``module:Id`` imports ``module`` first).
    """
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        env = gym.make(env_id)
    for warning in caught:
        warnings.warn_explicit(warning.message, warning.category, warning.filename, warning.lineno)
    return env


def make_masked_env(env_id: str) -> ActionMaskInInfo:
    """Make a gymnasium env whose masks MaskablePPO reads through ``action_masks()``, whatever the convention.

    The env is wrapped in :class:`~torchrl_mask.torchrl.envs.ActionMaskInInfo`, which finds the mask (an
    ``"action_mask"`` entry of a Dict observation, which leaves the observation; else an ``action_masks()``
    method; else ``info["action_mask"]``; the same order as :func:`~torchrl_mask.torchrl.envs.masked_gym_env` for
    the collectors) and serves it in ``info`` and through ``action_masks()``: the observation space is the one the
    collectors see.

    :param env_id: a registered gymnasium id (``module:Id`` imports ``module`` first).
    :return: the wrapped env.
    :raises UsageError: unknown id, a space that cannot be masked, or no mask (the env is reset once to look
        at ``info`` when it has neither of the other two).
    """
    try:
        env = user_env(env_id)
    except (gym.error.Error, ModuleNotFoundError) as err:  # unknown id or version, missing extra or module
        raise unregistered(env_id, err) from None
    return mask_env(env)


def mask_env(env: gym.Env) -> ActionMaskInInfo:
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
    return masked


def collector_env(make_env: Callable[[], gym.Env], monitor_file: str) -> TransformedEnv:
    """One env of a TorchRL collector: SB3's ``Monitor`` (for the learning curve) under the masked TorchRL env.

    :param make_env: makes the env, unmasked (``partial(user_env, "Taxi-v4")``); it runs in the collector's worker
        process with ``multisync``, so it pickles.
    :param monitor_file: where ``Monitor`` writes the episodes (``<file>.monitor.csv``).
    :return: the TorchRL env, its mask an ``"action_mask"`` observation entry.
    """
    return masked_gym_env(Monitor(make_env(), filename=monitor_file))


def one_line(err: BaseException) -> str:
    """``err``'s message on one line, ending in a full stop (to be followed by the fix)."""
    text = " ".join(str(err).split())
    return text if text.endswith((".", "?", "!")) else text + "."
