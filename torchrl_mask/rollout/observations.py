"""How observations are laid out: one step's observation split into the storage's leaves, minibatch leaves packed
back into what SB3's namedtuple holds. The one thing the flat and the Dict buffer differ in.

A non-Dict space has one leaf and the observation is that leaf (:class:`SingleLeaf`). A Dict space (nested
Dicts included) has one leaf per key path, in the space's order (:class:`DictLeaves`).

Example:
    >>> from gymnasium import spaces
    >>> layout = observation_layout(spaces.Dict({"a": spaces.Discrete(2), "b": spaces.Dict({"c": spaces.Discrete(3)})}))
    >>> layout.split({"a": 1, "b": {"c": 2}}), layout.pack([10, 20])
    ([1, 2], {'a': 10, 'b': {'c': 20}})
"""

from __future__ import annotations

import functools
import operator
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from gymnasium import spaces

from torchrl_mask.rollout import storage as st

__all__ = ["DictLeaves", "SingleLeaf", "observation_layout"]


class SingleLeaf:
    """A non-Dict observation: one leaf, the observation itself."""

    def split(self, obs: Any) -> list[Any]:
        """One step's observation as its leaves: ``[obs]``.

        :param obs: ``(n_envs, *obs_shape)``.
        :return: the leaves, in storage order.
        """
        return [obs]

    def pack(self, leaves: Sequence[Any]) -> Any:
        """Minibatch leaves as the namedtuple holds them: the one leaf.

        :param leaves: one item per leaf.
        :return: the observation.
        """
        return leaves[0]

    def column(self, columns: Sequence[Iterable[Any]]) -> Iterable[Any]:
        """An epoch's observation column from the leaves' columns (:mod:`torchrl_mask.rollout.minibatches`).

        :param columns: one iterable of minibatch tensors per leaf.
        :return: one observation per minibatch.
        """
        return columns[0]


class DictLeaves:
    """A Dict observation (nested Dicts included): one leaf per key path.

    :param paths: each leaf's key path, in the space's order (:func:`torchrl_mask.rollout.storage.observation_leaves`).
    """

    def __init__(self, paths: Sequence[tuple[str, ...]]) -> None:
        self.paths = list(paths)
        nested = any(len(path) > 1 for path in self.paths)
        # The top-level keys when no Dict is nested: the fast path of split() and pack().
        self._flat_keys = None if nested else [path[0] for path in self.paths]
        self._key_set = None if nested else set(self._flat_keys or ())
        # The leaves of a non-nested obs in one call (an itemgetter of one key returns the item, not a tuple).
        self._get_leaves = None
        if self._flat_keys:
            getter = operator.itemgetter(*self._flat_keys)
            self._get_leaves = getter if len(self._flat_keys) > 1 else lambda obs: (getter(obs),)

    def split(self, obs: Any) -> Sequence[Any]:
        """One step's observation as its leaves, in the paths' order.

        :param obs: a dict (nested for nested spaces) of ``(n_envs, *leaf_shape)`` arrays.
        :return: the leaves (a tuple or a list).
        :raises ValueError: not a mapping, or keys missing or unknown (all named).
        """
        if type(obs) is dict and obs.keys() == self._key_set:  # the common case, checked in one comparison
            return self._get_leaves(obs)  # type: ignore[misc]
        names = ["/".join(path) for path in self.paths]
        if not isinstance(obs, Mapping):
            raise ValueError(f"observation must be a dict with keys {names}, got {type(obs).__name__}.")
        items, missing = [], []
        for path in self.paths:
            node: Any = obs
            for key in path:
                if not isinstance(node, Mapping) or key not in node:
                    missing.append("/".join(path))
                    break
                node = node[key]
            else:
                items.append(node)
        extra = sorted(set(_leaf_names(obs)) - set(names))
        if missing or extra:
            raise ValueError(
                f"observation keys do not match the observation space: missing {missing}, unknown {extra}. "
                f"Expected exactly {names}."
            )
        return items

    def pack(self, leaves: Sequence[Any]) -> dict[str, Any]:
        """Leaves as the (nested) dict SB3 holds.

        :param leaves: one item per path.
        :return: ``{key: leaf}``, nested for nested paths.
        """
        if self._flat_keys is not None:  # no nested Dict: one zip instead of walking paths
            return dict(zip(self._flat_keys, leaves, strict=True))
        return st.nest_leaves(self.paths, leaves)

    def column(self, columns: Sequence[Iterable[Any]]) -> Iterable[dict[str, Any]]:
        """An epoch's observation column from the leaves' columns.

        :param columns: one iterable of minibatch tensors per leaf.
        :return: one dict per minibatch.
        """
        if self._flat_keys is not None:
            return map(functools.partial(_dict_of, self._flat_keys), *columns)
        return map(lambda *leaves: st.nest_leaves(self.paths, leaves), *columns)


def observation_layout(observation_space: spaces.Space) -> SingleLeaf | DictLeaves:
    """The layout of an observation space's observations.

    :param observation_space: a supported observation space.
    :return: :class:`DictLeaves` for a Dict space, else :class:`SingleLeaf`.
    """
    if isinstance(observation_space, spaces.Dict):
        return DictLeaves(list(st.observation_leaves(observation_space)))
    return SingleLeaf()


def _dict_of(keys: Sequence[str], *values: Any) -> dict[str, Any]:
    return dict(zip(keys, values, strict=True))


def _leaf_names(obs: Mapping[str, Any], prefix: str = "") -> list[str]:
    names = []
    for key, value in obs.items():
        name = f"{prefix}{key}"
        names += _leaf_names(value, name + "/") if isinstance(value, Mapping) else [name]
    return names
