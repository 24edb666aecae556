"""The one place that knows how big an action mask is, and that checks masks before they are stored.

A mask row holds one boolean per choice the policy can make, laid out as sb3-contrib lays it out:

- ``Discrete(n)``: ``n`` entries, one group.
- ``MultiDiscrete(nvec)``: ``sum(nvec)`` entries, one group per sub-action, in order.
- ``MultiBinary(n)`` (1-D only): ``2 * n`` entries, one group of two (``[0 allowed, 1 allowed]``) per bit.

Every group must allow at least one choice: a masked categorical over an empty set has no valid sample,
and sb3-contrib would silently train on ``NaN`` log-probabilities.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import cast

import numpy as np
import torch
from gymnasium import spaces

__all__ = ["MaskArray", "MaskSpec", "mask_spec"]

MaskArray = np.ndarray | torch.Tensor


class MaskSpec:
    """How a mask is laid out for one action space.

    :param groups: sizes of the independent choice groups, in order; a mask row has ``sum(groups)`` entries.
    :param space_repr: the action space as text, for error messages.
    """

    def __init__(self, groups: tuple[int, ...], space_repr: str) -> None:
        self.groups = groups
        self.size = int(sum(groups))
        self.space_repr = space_repr
        offsets = np.cumsum((0, *groups))
        self._starts = offsets[:-1]
        self._uniform = len(set(groups)) == 1
        self._limits = np.asarray(groups)
        self._unsigned_limits = self._limits.astype(np.uint64)
        self._row_starts: dict[int, np.ndarray] = {}  # see _flat_starts
        # Per row count, the index and result arrays check_actions fills in place every add (no per-step
        # allocation proportional to the action space).
        self._scratch: dict[int, tuple[np.ndarray, np.ndarray]] = {}

    def __repr__(self) -> str:
        return f"MaskSpec(groups={self.groups}, size={self.size})"

    def check(self, masks: MaskArray, n_envs: int, row_label: Callable[[int], str] | None = None) -> MaskArray:
        """Validate masks for one step of ``n_envs`` envs and return them as bool rows.

        Numpy masks are checked with numpy, tensors with torch on their own device (on CUDA the check
        costs a device sync).

        :param masks: the masks, shape ``(n_envs, size)``; also accepted: ``(n_envs, *dims)`` with
            ``prod(dims) == size`` (e.g. ``(n_envs, n, 2)`` for MultiBinary), and ``(size,)`` when
            ``n_envs == 1``. Any dtype; non-zero means allowed.
        :param n_envs: number of envs in the step (rows of masks).
        :param row_label: names a row in the error message; ``env {row}`` when None.
        :return: bool rows of shape ``(n_envs, size)``, a numpy array or a tensor as given.
        :raises ValueError: wrong shape, or a row (or sub-action group) that allows no action.
        """
        rows = self.reshape(masks, n_envs)
        if self._all_allowed(rows):
            return rows
        allowed = self._allowed_groups(rows)
        if isinstance(allowed, torch.Tensor):
            env, group = (int(i) for i in torch.nonzero(~allowed)[0])
        else:
            env, group = (int(i) for i in np.argwhere(~allowed)[0])
        if len(self.groups) == 1:
            where = f"all {self.size} entries are False"
        else:
            start = int(self._starts[group])
            where = f"sub-action {group} (mask entries {start}:{start + self.groups[group]}) is all False"
        label = f"env {env}" if row_label is None else row_label(env)
        raise ValueError(
            f"action_masks for {label} allow no action: {where} for {self.space_repr}. "
            "A masked policy cannot sample from an empty set; fix the env's action_masks(), "
            "or pass check_masks=False to the buffer to skip this check."
        )

    def reshape(self, masks: MaskArray, n_envs: int, row_label: Callable[[int], str] | None = None) -> MaskArray:
        """Bring masks to bool rows ``(n_envs, size)`` without checking that each group allows an action.

        :param masks: as for :meth:`check`.
        :param n_envs: number of envs in the step.
        :param row_label: unused; :meth:`check`'s signature, so that either serves as a mask reader.
        :return: bool rows of shape ``(n_envs, size)``, a numpy array or a tensor as given.
        :raises ValueError: wrong shape.
        """
        if isinstance(masks, np.ndarray) and masks.dtype == np.bool_ and masks.shape == (n_envs, self.size):
            return masks  # already bool rows: what the envs' mask reader gives every step
        masks = _mask_array(masks)
        shape = tuple(masks.shape)
        fits = (len(shape) >= 2 and shape[0] == n_envs and math.prod(shape[1:]) == self.size) or (
            n_envs == 1 and shape == (self.size,)
        )
        if not fits:
            raise ValueError(
                f"action_masks has shape {shape}, but {self.space_repr} with n_envs={n_envs} needs "
                f"({n_envs}, {self.size}): one row of {self.size} booleans per env. "
                "Pass the stacked masks of all envs for this step."
            )
        rows = masks.reshape(n_envs, self.size)
        if rows.dtype in (np.bool_, torch.bool):
            return rows
        if not bool(((rows == 0) | (rows == 1)).all()):
            raise ValueError(
                f"action_masks of dtype {rows.dtype} hold values other than 0 and 1: a mask entry is allowed (1, "
                "True) or not (0, False). Pass boolean masks."
            )
        return rows != 0

    def check_actions(
        self, actions: MaskArray, rows: MaskArray | None, row_label: Callable[[int], str] | None = None
    ) -> None:
        """Check that each action is integral, in its space's range, and allowed by its own mask row.

        Numpy actions are checked with numpy, tensors with torch. An action allowed by its own row also
        proves that every group of the row allows a choice, so :meth:`check` is not needed when this passes.

        :param actions: ``(n_rows,)`` or ``(n_rows, n_groups)``: one choice per group (a Discrete action, a
            MultiDiscrete one, or a MultiBinary one's bits), any integer, bool or float dtype.
        :param rows: bool mask rows ``(n_rows, size)`` as :meth:`reshape` returns them; None: all allowed.
        :param row_label: names a row in the error message; ``env {row}`` when None.
        :raises ValueError: an action that is fractional, out of range, or forbidden by its mask.
        """
        n_rows = actions.shape[0]
        choices = actions.reshape(n_rows, len(self.groups))
        self._check_choices(choices, row_label)
        if rows is None:
            return
        allowed: MaskArray
        if type(choices) is np.ndarray and choices.dtype == np.int64 and type(rows) is np.ndarray:
            # The common case (every add of a VecEnv rollout): each choice's own mask entry gathered into a
            # scratch array, with nothing allocated.
            index, allowed = self._scratch_for(n_rows)
            np.add(choices, self._flat_starts(n_rows), out=index)
            rows.take(index, out=allowed)
        elif isinstance(choices, np.ndarray):
            allowed = rows.take(choices.astype(np.int64) + self._flat_starts(n_rows))
        else:
            index_t = choices.long() + torch.as_tensor(self._starts, device=choices.device)
            allowed = torch.as_tensor(rows, device=choices.device).gather(1, index_t)
        if bool(allowed.all()):
            return
        self.check(rows, n_rows, row_label)  # an empty row is the mask's fault: say that first
        raise self._action_error(choices, allowed, row_label)

    def _check_choices(self, choices: MaskArray, row_label: Callable[[int], str] | None) -> None:
        """Each choice integral and in its group's range ``[0, n)``; bool, integer, float or tensor choices."""
        if isinstance(choices, np.ndarray) and choices.dtype.kind in "iu":
            # Seen as unsigned, a negative choice is a huge one: one max (groups of one size) or one comparison
            # checks both bounds.
            unsigned = choices.view(f"u{choices.dtype.itemsize}") if choices.dtype.kind == "i" else choices
            if choices.size and not (
                unsigned.max() < self.groups[0] if self._uniform else (unsigned < self._unsigned_limits).all()
            ):
                raise self._action_error(choices, None, row_label)
            return
        limits: MaskArray = self._limits
        if isinstance(choices, torch.Tensor):
            limits = torch.as_tensor(self._limits, device=choices.device)
            choices = choices.long() if choices.dtype == torch.bool else choices
        if not bool(((choices >= 0) & (choices < limits) & (choices % 1 == 0)).all()):
            raise self._action_error(choices, None, row_label)

    def _flat_starts(self, n_rows: int) -> np.ndarray:
        """``(n_rows, n_groups)``: the flat index, in ``(n_rows, size)`` rows, of each row's group starts (made once
        per row count: every ``add`` of a run has the same)."""
        starts = self._row_starts.get(n_rows)
        if starts is None:
            starts = np.arange(n_rows, dtype=np.int64)[:, None] * self.size + self._starts.astype(np.int64)
            self._row_starts[n_rows] = starts
        return starts

    def _scratch_for(self, n_rows: int) -> tuple[np.ndarray, np.ndarray]:
        """``(n_rows, n_groups)`` int64 and bool arrays for :meth:`check_actions` to fill (made once per row count)."""
        scratch = self._scratch.get(n_rows)
        if scratch is None:
            shape = (n_rows, len(self.groups))
            scratch = self._scratch[n_rows] = (np.empty(shape, np.int64), np.empty(shape, np.bool_))
        return scratch

    def _action_error(
        self, choices: MaskArray, allowed: MaskArray | None, row_label: Callable[[int], str] | None
    ) -> ValueError:
        """The error for the first bad choice: fractional or out of range (``allowed`` None), or masked."""
        values = np.asarray(choices.cpu() if isinstance(choices, torch.Tensor) else choices, dtype=np.float64)
        if allowed is None:
            bad = ~((values >= 0) & (values < self._limits) & (values % 1 == 0))
        else:
            bad = ~np.asarray(allowed.cpu() if isinstance(allowed, torch.Tensor) else allowed)
        env, group = (int(i) for i in np.argwhere(bad)[0])
        label = f"env {env}" if row_label is None else row_label(env)
        part = "" if len(self.groups) == 1 else f" (sub-action {group})"
        value = choices[env, group].item()
        if allowed is None:
            why = f"is not a choice of {self.space_repr}: choices are the integers 0 to {self.groups[group] - 1}"
        else:
            why = f"is forbidden by its own action mask (mask entry {int(self._starts[group]) + int(value)} is False)"
        return ValueError(
            f"action for {label}{part} is {value!r}, which {why}. Store the action the policy drew under this "
            "mask, or pass check_values=False to the buffer to skip this check."
        )

    def _all_allowed(self, rows: MaskArray) -> bool:
        """Whether every group of every row allows a choice (this runs on every ``add``)."""
        if not isinstance(rows, np.ndarray):
            return bool(self._allowed_groups(rows).all())
        if len(self.groups) == 1:
            return bool(rows.any(axis=1).all())
        return bool(np.logical_or.reduceat(rows, self._starts, axis=1).all())

    def _allowed_groups(self, rows: MaskArray) -> MaskArray:
        """``(n_envs, n_groups)``: whether each group of each row allows at least one choice."""
        if self._uniform:
            return cast(MaskArray, rows.reshape(rows.shape[0], len(self.groups), self.groups[0]).any(-1))
        if isinstance(rows, torch.Tensor):
            return torch.stack([part.any(-1) for part in rows.split(list(self.groups), dim=-1)], dim=-1)
        return np.logical_or.reduceat(rows, self._starts, axis=1)


def _mask_array(masks: object) -> MaskArray:
    """Masks as a numpy array or a tensor of a numeric dtype, or a ValueError that says what was given."""
    if isinstance(masks, torch.Tensor):
        if masks.device.type == "meta":
            raise ValueError("action_masks is a tensor on the meta device, which holds no data: pass real masks.")
        if masks.dtype.is_complex:
            raise ValueError(f"action_masks has dtype {masks.dtype}; pass boolean (or 0/1 integer) masks.")
        return masks
    try:
        array = np.asarray(masks)
    except ValueError as error:  # numpy's "inhomogeneous shape"
        raise ValueError(
            f"action_masks is ragged ({error}): every env's mask row must have the same number of entries."
        ) from None
    if array.dtype.kind not in "biuf":
        raise ValueError(
            f"action_masks has dtype {array.dtype} ({type(masks).__name__} of {array.dtype.kind!r} kind); masks "
            "must be bool, or integers or floats that are 0 or 1. Pass boolean masks."
        )
    return array


def mask_spec(action_space: spaces.Space) -> MaskSpec:
    """Return the mask layout for an action space, as sb3-contrib lays it out.

    :param action_space: the env's action space.
    :return: its :class:`MaskSpec`.
    :raises TypeError: the space cannot be masked (anything but Discrete, MultiDiscrete with a 1-D
        ``nvec``, and 1-D MultiBinary).
    """
    if isinstance(action_space, spaces.Discrete):
        return MaskSpec((int(action_space.n),), repr(action_space))
    if isinstance(action_space, spaces.MultiDiscrete):
        if action_space.nvec.ndim != 1:
            raise TypeError(
                f"{action_space!r} has a {action_space.nvec.ndim}-D nvec and cannot be masked; "
                "flatten it to a 1-D MultiDiscrete."
            )
        return MaskSpec(tuple(int(n) for n in action_space.nvec), repr(action_space))
    if isinstance(action_space, spaces.MultiBinary):
        if not isinstance(action_space.n, (int, np.integer)):
            raise TypeError(
                f"{action_space!r} is multi-dimensional and cannot be masked; "
                "flatten it to MultiBinary(n) with an int n."
            )
        return MaskSpec((2,) * int(action_space.n), repr(action_space))
    raise TypeError(
        f"Action space {action_space!r} cannot be masked: action masks exist for Discrete, "
        "MultiDiscrete and 1-D MultiBinary spaces only. Use a masked space, or an unmasked algorithm."
    )
