"""The one mask check of every model's ``predict``: :class:`~torchrl_mask.MaskablePPO` (self-play models are
MaskablePPO) and :class:`~torchrl_mask.MaskableRecurrentPPO`.

:func:`predict_masks` takes the masks where ``learn()`` takes them: the ``action_masks=`` argument (what the env's
``action_masks()`` or its ``info["action_mask"]`` gave), else a Dict observation's ``"action_mask"`` entry. It
checks them with the mask layout (:meth:`MaskSpec.check <torchrl_mask.rollout.masks.MaskSpec.check>`, as ``add()``
checks them), with one row per observation: a wrong size or row count, entries other than 0 and 1 (``NaN``, ``2``)
and a row (or sub-action) that allows nothing are refused with the same errors for every model. Without masks,
where the model's env has them (:func:`env_has_masks`), it warns (:class:`UnmaskedPredictWarning`).

Example:
    >>> import numpy as np
    >>> from gymnasium import spaces
    >>> space = spaces.Box(-1, 1, (3,))
    >>> masks, groups = predict_masks(spaces.Discrete(4), space, np.zeros((2, 3)), [[1, 0, 0, 0], [0, 1, 1, 0]], None)
    >>> masks.tolist(), groups
    ([[True, False, False, False], [False, True, True, False]], (4,))
    >>> predict_masks(spaces.Discrete(4), space, np.zeros((2, 3)), [1, 0, 0, 0], None)
    Traceback (most recent call last):
    ...
    ValueError: action_masks has shape (4,), but Discrete(4) with n_envs=2 needs (2, 4): one row ...
"""

from __future__ import annotations

import warnings
from collections.abc import Mapping
from typing import Any

import numpy as np
import torch
from gymnasium import spaces
from sb3_contrib.common.maskable.utils import is_masking_supported
from stable_baselines3.common.preprocessing import is_image_space
from stable_baselines3.common.utils import is_vectorized_observation

from torchrl_mask.rollout.masks import MaskArray, mask_spec
from torchrl_mask.rollout.storage import ACTION_MASK

__all__ = ["UnmaskedPredictWarning", "env_has_masks", "predict_masks"]


class UnmaskedPredictWarning(UserWarning):
    """``predict()`` without ``action_masks`` on a model whose env has masks: illegal actions can be drawn."""


def env_has_masks(env: Any) -> bool:
    """Whether a model's env gives masks in one of the conventions ``learn()`` reads: an ``action_masks()`` method
    (sb3-contrib's), a Dict observation's ``"action_mask"`` entry, or ``"action_mask"`` in every reset info.

    :param env: the model's VecEnv, or None.
    """
    if env is None:
        return False
    if is_masking_supported(env):
        return True
    space = env.observation_space
    if isinstance(space, spaces.Dict) and ACTION_MASK in space.spaces:
        return True
    reset_infos = getattr(env, "reset_infos", None) or []
    return bool(reset_infos) and all(ACTION_MASK in info for info in reset_infos)


def _observation_count(observation: Any, observation_space: spaces.Space) -> int:
    """How many observations ``predict`` got: a batch's size, 1 for one observation (SB3's rule, which also raises
    SB3's error on a shape that fits the space neither way)."""
    if isinstance(observation_space, spaces.Dict) and isinstance(observation, Mapping):
        key = next((key for key in observation_space.spaces if key in observation), None)
        return 1 if key is None else _observation_count(observation[key], observation_space.spaces[key])
    value = observation if isinstance(observation, torch.Tensor) else np.asarray(observation)
    if is_image_space(observation_space):  # SB3 transposes images before its check: count by the rank
        return 1 if value.ndim == len(observation_space.shape or ()) else len(value)
    return len(value) if is_vectorized_observation(value, observation_space) else 1  # type: ignore[arg-type]


def predict_masks(
    action_space: spaces.Space,
    observation_space: spaces.Space,
    observation: Any,
    action_masks: Any,
    env: Any,
) -> tuple[MaskArray | None, tuple[int, ...] | None]:
    """The masks a model's ``predict`` draws under, checked; None to draw unmasked (warned where ``env`` has masks).

    :param action_space: the model's action space.
    :param observation_space: the model's observation space (a nested Dict already flattened, as the model's).
    :param observation: what ``predict`` got: one observation or a batch of ``n``, as SB3's ``predict`` takes them.
    :param action_masks: ``(mask_dims,)`` for one observation, or ``(n, mask_dims)`` (also ``(n, *dims)`` with
        ``prod(dims) == mask_dims``); any dtype whose entries are 0 or 1; None reads a Dict observation's
        ``"action_mask"`` entry if it has one.
    :param env: the model's env (None: no warning).
    :return: bool rows ``(n, mask_dims)``, a numpy array (a tensor where a tensor was given), and the sizes of the
        sub-actions' groups (``MaskSpec.groups``); or ``(None, None)``.
    :raises ValueError: an action space that cannot be masked, a mask of the wrong size or row count, with entries
        other than 0 and 1, or a row (or sub-action) that allows no action.
    """
    if action_masks is None and isinstance(observation, Mapping) and ACTION_MASK in observation:
        action_masks = observation[ACTION_MASK]  # where learn() reads it too
    if action_masks is None:
        if env_has_masks(env):
            warnings.warn(
                "predict() without action_masks on an env that has masks draws from every action, illegal ones "
                "too. Pass action_masks=get_action_masks(env) (sb3_contrib.common.maskable.utils), or the step's "
                "info['action_mask'], and evaluate with sb3-contrib's evaluate_policy "
                "(sb3_contrib.common.maskable.evaluation) and use_masking=True, not SB3's.",
                UnmaskedPredictWarning,
                stacklevel=3,
            )
        return None, None
    try:
        spec = mask_spec(action_space)
    except TypeError:
        raise ValueError(
            f"action_masks were given for the action space {action_space}, which has none: masks need a Discrete, "
            "MultiDiscrete or MultiBinary action space. Predict without action_masks."
        ) from None
    if not isinstance(action_masks, torch.Tensor):
        action_masks = np.asarray(action_masks)
    n_observations = _observation_count(observation, observation_space)
    return spec.check(action_masks, n_observations, lambda row: f"observation {row}"), spec.groups
