"""Reading one SB3 ``add()`` step into arrays that fit the storage's slots, checking all of it, writing nothing.

:class:`StepReader` is the checking half of :meth:`torchrl_mask.MaskableRolloutBuffer.add`: it brings each input
to its slot's shape on the host, refuses what the storage cannot hold as given (a field of the wrong shape or of
a non-numeric dtype, a ragged or string mask), and with ``check_values`` refuses values that would train on
nonsense: a reward, value or log-probability that is not finite, an action out of its space's range, fractional,
or forbidden by its own mask, an observation that does not fit an integer leaf's dtype (300 into uint8). The
buffer writes only what :meth:`StepReader.read` returns, so a rejected step leaves the storage as it was.

The reader runs on every env step. The common case (numpy arrays of the slot's shape, tensors for the value and
log-probability, boolean masks) costs a type test, a shape comparison and a dtype-kind test per field; the
value and log-probability tensors are copied byte for byte into a packed float32 stage beside the reward (no
array is made of them); the value checks are fused: one np.isfinite over the stage (its bytes compared with all
ones), and one gather of each action's own mask entry (an allowed action also proves its mask row allows a choice).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np
import torch

from torchrl_mask.rollout.masks import MaskSpec

__all__ = ["StepReader"]

_NUMERIC = "biuf"  # numpy dtype kinds the storage takes: bool, signed and unsigned integers, floats
_FLOATS = ("reward", "value", "log_prob")
_BOOL = np.dtype(np.bool_)


def _observation_name(path: tuple[str, ...]) -> str:
    return f"observation[{']['.join(map(repr, path))}]" if path else "observation"


class StepReader:
    """Checks one step of ``n_envs`` envs and returns it as host arrays shaped like the storage's slots.

    :param n_envs: envs per step.
    :param obs_paths: per observation leaf, its key path in a Dict space (``()`` for a non-Dict space).
    :param obs_slots: per observation leaf, its slot ``(n_envs, *leaf_shape)``.
    :param obs_dtypes: per observation leaf, its numpy dtype in the storage.
    :param action_slot: the action's slot as stored, ``(n_envs,)`` for Discrete else ``(n_envs, action_dim)``; the
        action is read and returned as ``(n_envs, action_dim)`` (Discrete's ``(n_envs, 1)``, as SB3 passes it).
    :param spec: the action space's mask layout.
    """

    def __init__(
        self,
        n_envs: int,
        obs_paths: Sequence[tuple[str, ...]],
        obs_slots: Sequence[tuple[int, ...]],
        obs_dtypes: Sequence[np.dtype],
        action_slot: tuple[int, ...],
        spec: MaskSpec,
    ) -> None:
        self.n_envs = n_envs
        self.obs_paths = list(obs_paths)
        self.obs_slots = list(obs_slots)
        self.obs_dtypes = list(obs_dtypes)
        self.action_slot = action_slot
        # What the action is read as and written from: ``(n_envs, action_dim)``, Discrete's ``(n_envs, 1)`` too,
        # as SB3's collect_rollouts passes it.
        self._action_rows = (n_envs, math.prod(action_slot[1:]))
        self.spec = spec
        self._stage = np.empty((3, n_envs), dtype=np.float32)  # reward, value, log_prob: one finite check
        self._finite = np.ones((3, n_envs), dtype=np.bool_)  # np.isfinite of the stage
        # The stage's rows, made once: reward, value and log_prob, each (n_envs,); value and log_prob also
        # as (n_envs, 1), the shape SB3's value tensor comes in.
        self._rows = (self._stage[0], self._stage[1], self._stage[2])
        self._columns = (self._stage[1].reshape(n_envs, 1), self._stage[2].reshape(n_envs, 1))
        self._value_row, self._log_prob_row = (torch.from_numpy(self._stage[row]) for row in (1, 2))  # shared memory
        self._env_slot = (n_envs,)
        self._column_slot = (n_envs, 1)
        self._mask_slot = (n_envs, spec.size)
        self._n_leaves = len(self.obs_slots)
        self._fits: dict[tuple[int, np.dtype], bool] = {}  # (leaf, input dtype): every value fits the leaf

    def read(
        self,
        obs_items: Sequence[Any],
        fields: tuple[Any, Any, Any, Any, Any],
        action_masks: Any,
        check_masks: bool,
        check_values: bool,
    ) -> list[Any]:
        """Check one step; return its arrays in write order: observation leaves, action, reward,
        episode_start, value, log_prob, masks (``True`` when None: every action allowed).

        :param obs_items: one array per observation leaf, in storage order.
        :param fields: SB3's ``(action, reward, episode_start, value, log_prob)``.
        :param action_masks: ``(n_envs, mask_dims)`` masks or None.
        :param check_masks: check that each mask row allows an action.
        :param check_values: check the values (finite floats, valid actions, no integer wrap-around).
        :raises ValueError: the first problem found, naming the field and what it expected.
        """
        # An observation leaf of its slot's shape and of the leaf's own dtype needs no other test (a loop over
        # indices: a list comprehension is a function call per step before Python 3.12).
        arrays = list(obs_items)
        if len(arrays) != self._n_leaves:
            raise ValueError(f"{len(arrays)} observation leaves given, expected {self._n_leaves}.")
        dtypes, slots = self.obs_dtypes, self.obs_slots
        for index, item in enumerate(arrays):
            if type(item) is not np.ndarray or item.dtype is not dtypes[index] or item.shape != slots[index]:
                arrays[index] = self._observation(index, item, check_values)
        action, reward, start, value, log_prob = fields
        if type(action) is not np.ndarray or action.shape != self._action_rows or action.dtype.kind not in _NUMERIC:
            action = self._array("action", action, self._action_rows)
        slot = self._env_slot
        if type(start) is not np.ndarray or start.shape != slot or start.dtype.kind not in _NUMERIC:
            start = self._array("episode_start", start, slot)
        reward_row, value_row, log_prob_row = self._rows
        if type(reward) is not np.ndarray or reward.shape != slot or reward.dtype.kind not in _NUMERIC:
            reward = self._array("reward", reward, slot)
        reward_row[...] = reward
        # SB3's value (n_envs, 1) and log_prob (n_envs,) as float32 tensors: copied into the stage through torch
        # views of its rows (what numpy's float32 assignment would store), without making an array of each tensor.
        # Anything else: the slow path, which names what is wrong.
        if (
            type(value) is type(log_prob) is torch.Tensor
            and value.shape == self._column_slot
            and log_prob.shape == slot
            and value.dtype is log_prob.dtype is torch.float32
            and value.layout is log_prob.layout is torch.strided
            and value.is_cpu
            and log_prob.is_cpu
        ):
            self._value_row.copy_(value.detach().view(-1))
            self._log_prob_row.copy_(log_prob.detach())
        else:
            self._stage_row(1, "value", value)
            self._stage_row(2, "log_prob", log_prob)
        if check_values:
            np.isfinite(self._stage, out=self._finite)
            if not self._finite.all():
                self._check_finite()
        masks: Any = True
        if action_masks is not None:
            masks = action_masks
            if type(masks) is not np.ndarray or masks.dtype is not _BOOL or masks.shape != self._mask_slot:
                masks = self.spec.reshape(self._host("action_masks", masks), self.n_envs)
        if check_values:
            # An action allowed by its own mask row also proves that the row allows a choice.
            self.spec.check_actions(action, masks if check_masks and masks is not True else None)
        elif check_masks and masks is not True:
            self.spec.check(masks, self.n_envs)
        arrays += [action, reward_row, start, value_row, log_prob_row, masks]
        return arrays

    def _observation(self, index: int, item: Any, check_values: bool) -> np.ndarray:
        """The slow path of one observation leaf: converted, reshaped, checked to fit (with ``check_values``),
        or refused naming it."""
        where = _observation_name(self.obs_paths[index])
        slot = self.obs_slots[index]
        array = self._host(where, item)
        if array.shape != slot:
            if slot[1:] == (1,) and tuple(array.shape) == slot[:1]:  # Discrete observations come flat
                array = array.reshape(slot)
            else:
                raise ValueError(
                    f"{where} has shape {tuple(array.shape)}, expected {slot} "
                    f"(n_envs={self.n_envs} times the space's shape {slot[1:]})."
                )
        if array.dtype.kind not in _NUMERIC:
            raise ValueError(f"{where} has dtype {array.dtype}; observations must be numbers (bool, int or float).")
        if check_values and array.dtype is not self.obs_dtypes[index]:
            self._check_fits(index, array)
        return array

    def _check_fits(self, index: int, array: np.ndarray) -> None:
        """Refuse values an integer leaf would wrap around; only for inputs its dtype cannot hold safely."""
        leaf = self.obs_dtypes[index]
        key = (index, array.dtype)
        safe = self._fits.get(key)
        if safe is None:
            safe = self._fits[key] = leaf.kind not in "iu" or bool(np.can_cast(array.dtype, leaf, "safe"))
        if safe or array.size == 0:
            return
        info = np.iinfo(leaf)
        low, high = array.min(), array.max()
        if not (info.min <= low and high <= info.max):  # False for NaN too
            bad = (low if not info.min <= low else high).item()
            where = _observation_name(self.obs_paths[index])
            raise ValueError(
                f"{where} holds {bad!r}, which does not fit the leaf's dtype {leaf} ({info.min} to {info.max}) and "
                "would be stored wrapped around. Clip or rescale it, or pass check_values=False to skip this check."
            )

    def _stage_row(self, row: int, name: str, item: Any) -> None:
        """Stage a value or log-probability: SB3 passes CPU tensors, ``(n_envs, 1)`` or ``(n_envs,)``."""
        if type(item) is torch.Tensor and item.is_cpu:
            array = item.numpy(force=True)  # detached, lazy negation resolved
            if array.dtype.kind in _NUMERIC:
                if array.shape == self._column_slot:
                    self._columns[row - 1][...] = array
                    return
                if array.shape == self._env_slot:
                    self._rows[row][...] = array
                    return
        self._rows[row][...] = self._array(name, item, self._env_slot)

    def _array(self, name: str, item: Any, slot: tuple[int, ...]) -> np.ndarray:
        """``item`` on the host in its slot's shape and of a numeric dtype, or a ValueError naming ``name``."""
        if type(item) is np.ndarray:
            array = item
        elif type(item) is torch.Tensor and item.device.type == "cpu":
            array = item.numpy(force=True)  # SB3's values and log-probabilities: the common case first
        else:
            array = self._host(name, item)
        if array.shape != slot:
            size = math.prod(slot)
            if array.size != size:
                shown = self.action_slot if name == "action" else slot  # Discrete's (n_envs,), as documented
                expected = f"({self.n_envs},)" if len(shown) == 1 else str(shown)
                raise ValueError(
                    f"{name} has shape {tuple(array.shape)} ({array.size} entries), expected {expected}: "
                    f"{size // self.n_envs} per env for n_envs={self.n_envs}."
                )
            array = array.reshape(slot)
        if array.dtype.kind not in _NUMERIC:
            raise ValueError(f"{name} has dtype {array.dtype}; it must hold numbers (bool, int or float).")
        return array

    @staticmethod
    def _host(name: str, item: Any) -> np.ndarray:
        """A numpy array of ``item`` (zero-copy for CPU tensors), or a ValueError naming ``name``."""
        if isinstance(item, torch.Tensor):
            if item.device.type == "meta":
                raise ValueError(f"{name} is a tensor on the meta device, which holds no data: pass real values.")
            return item.numpy(force=True)
        try:
            return np.asarray(item)
        except ValueError as error:  # numpy's "inhomogeneous shape"
            raise ValueError(f"{name} is ragged ({error}): give one value per env.") from None

    def _check_finite(self) -> None:
        finite = np.isfinite(self._stage)
        for name, row in zip(_FLOATS, finite, strict=True):
            if not row.all():
                env = int(np.argmin(row))
                raise ValueError(
                    f"{name} for env {env} is {self._stage[_FLOATS.index(name), env]} as float32: rewards, values "
                    "and log-probabilities must be finite. Fix the env or policy, or pass check_values=False."
                )
