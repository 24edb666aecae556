"""Nested Dict observations in SB3's machinery: flattened one level for SB3, stored under nested keys.

SB3's VecEnvs, ``BaseAlgorithm`` and policies take a Dict observation space one level deep (its
``check_for_nested_spaces``). A nested space such as ``{"board": {"cells": ..., "turn": ...}, "player": ...}``
becomes, through :class:`FlattenNestedDict`, the flat Dict ``{"board/cells", "board/turn", "player"}``: each leaf
keeps its space, its key is its path joined by ``"/"``, and the keys come in gymnasium's order for a Dict (sorted).
To SB3 this is an ordinary Dict space, so ``"MultiInputPolicy"`` runs SB3's ``CombinedExtractor``, one extractor
per leaf, exactly as sb3-contrib's ``MaskablePPO`` runs it on the same env flattened one level.

Everything else keeps the nesting:

- :class:`~torchrl_mask.MaskablePPO` applies :class:`FlattenNestedDict` itself to a gymnasium env with a nested
  Dict space; an SB3 ``VecEnv`` gets it from ``make_vec_env(..., wrapper_class=FlattenNestedDict)``;
- ``predict`` takes the observation as the env returns it, nested (:func:`flatten_observation`);
- the rollout stores each leaf under its nested key, ``model.rollout_buffer.tensordict["observation", "board",
  "cells"]``: a ``"/"`` in a Dict key nests the storage key (:func:`torchrl_mask.rollout.storage.observation_key`);
- on the collector path TorchRL's ``GymWrapper`` keeps the nested Dict as nested keys of the step
  (``("board", "cells")``), which is where :class:`~torchrl_mask.MaskablePolicyModule` and
  :meth:`~torchrl_mask.MaskableRolloutBuffer.extend` look for the ``"board/cells"`` leaf of the model's space;
- the mask is read as before: the wrapper forwards ``action_masks()`` (gymnasium's ``get_wrapper_attr``), and a
  top-level ``"action_mask"`` entry stays ``"action_mask"``.

Example:
    >>> import numpy as np
    >>> from gymnasium import spaces
    >>> space = spaces.Dict({"board": spaces.Dict({"cells": spaces.MultiBinary(4), "turn": spaces.Discrete(2)}),
    ...                      "player": spaces.Box(-1, 1, (2,))})
    >>> list(flatten_space(space).spaces)
    ['board/cells', 'board/turn', 'player']
    >>> sorted(flatten_observation({"board": {"cells": np.zeros(4), "turn": 1}, "player": np.ones(2)}))
    ['board/cells', 'board/turn', 'player']
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, TypeVar

import gymnasium as gym
from gymnasium import spaces

from torchrl_mask.rollout import storage as st

__all__ = ["FlattenNestedDict", "flatten_nested_env", "flatten_observation", "flatten_space", "is_nested"]

_Env = TypeVar("_Env")


def is_nested(space: spaces.Space) -> bool:
    """Whether ``space`` is a Dict with a Dict inside it (what SB3 refuses).

    :param space: an observation space.
    """
    return isinstance(space, spaces.Dict) and any(isinstance(sub, spaces.Dict) for sub in space.spaces.values())


def flatten_space(space: spaces.Dict) -> spaces.Dict:
    """A nested Dict space flattened one level: ``{"a/b": leaf}`` for each leaf at path ``("a", "b")``.

    :param space: a Dict space, nested or not, of Box, Discrete, MultiDiscrete and MultiBinary leaves.
    :return: the flat Dict space, keys in gymnasium's (sorted) order.
    :raises ValueError: a key already holds a ``"/"`` (it would read as a level of nesting).
    :raises TypeError: a leaf the rollout cannot store (a Tuple, say).
    """
    leaves = st.observation_leaves(space)
    for path in leaves:
        if any(st.KEY_SEPARATOR in key for key in path):
            raise ValueError(
                f"The observation key path {list(path)} has a key with {st.KEY_SEPARATOR!r}, which flattening uses "
                "to join nested keys: rename that key."
            )
    return spaces.Dict({st.KEY_SEPARATOR.join(path): leaf for path, leaf in leaves.items()})


def flatten_observation(obs: Mapping[str, Any]) -> dict[str, Any]:
    """A nested Dict observation flattened one level, as :class:`FlattenNestedDict` gives it.

    :param obs: ``{key: leaf or dict}``; leaves of any shape (one observation, or a batch of them).
    :return: ``{"a/b": leaf}`` for each leaf at path ``("a", "b")``; a flat observation comes back as it was.
    """
    flat: dict[str, Any] = {}
    for key, value in obs.items():
        if isinstance(value, Mapping):
            for sub_key, leaf in flatten_observation(value).items():
                flat[f"{key}{st.KEY_SEPARATOR}{sub_key}"] = leaf
        else:
            flat[key] = value
    return flat


class FlattenNestedDict(gym.ObservationWrapper):
    """A gymnasium wrapper that flattens a nested Dict observation one level, for SB3 (see the module).

    The observation space becomes :func:`flatten_space` of the env's, each observation
    :func:`flatten_observation` of the env's. Other attributes, ``action_masks()`` included, are the env's
    (through ``get_wrapper_attr``, as sb3-contrib and SB3's ``env_method`` look them up).

    :param env: a gymnasium env with a Dict observation space.
    :raises TypeError: the observation space is not a Dict.
    :raises ValueError: a key holds ``"/"``.
    """

    def __init__(self, env: gym.Env) -> None:
        super().__init__(env)
        if not isinstance(env.observation_space, spaces.Dict):
            raise TypeError(
                f"FlattenNestedDict flattens Dict observation spaces; the env's is {env.observation_space!r}: "
                "use the env as it is."
            )
        self.observation_space = flatten_space(env.observation_space)

    def observation(self, observation: Any) -> dict[str, Any]:
        """The observation flattened one level.

        :param observation: the env's nested dict observation.
        :return: ``{"a/b": leaf}``.
        """
        return flatten_observation(observation)


def flatten_nested_env(env: _Env) -> _Env | FlattenNestedDict:
    """``env`` in :class:`FlattenNestedDict` if it is a gymnasium env with a nested Dict space, else ``env``.

    :param env: a gymnasium env, an SB3 ``VecEnv`` (returned as it is: give its envs the wrapper), or anything
        SB3's ``_wrap_env`` takes.
    :return: what SB3's ``_wrap_env`` can take.
    """
    if isinstance(env, gym.Env) and is_nested(env.observation_space):
        return FlattenNestedDict(env)
    return env
