"""The one place that knows how big an action mask is, and that checks masks before they are stored.

A mask row holds one boolean per choice the policy can make, laid out as sb3-contrib lays it out:

- ``Discrete(n)``: ``n`` entries, one group.
- ``MultiDiscrete(nvec)``: ``sum(nvec)`` entries, one group per sub-action, in order.
- ``MultiBinary(n)`` (1-D only): ``2 * n`` entries, one group of two (``[0 allowed, 1 allowed]``) per bit.

Every group must allow at least one choice: a masked categorical over an empty set has no valid sample,
and sb3-contrib would silently train on ``NaN`` log-probabilities.
"""

from __future__ import annotations

import numpy as np
import torch
from gymnasium import spaces

__all__ = ["MaskSpec", "mask_spec"]


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

    def __repr__(self) -> str:
        return f"MaskSpec(groups={self.groups}, size={self.size})"

    def check(self, masks: np.ndarray | torch.Tensor, n_envs: int) -> torch.Tensor:
        """Validate masks for one step of ``n_envs`` envs and return them as a bool tensor.

        :param masks: the masks, shape ``(n_envs, size)``; also accepted: ``(n_envs, *dims)`` with
            ``prod(dims) == size`` (e.g. ``(n_envs, n, 2)`` for MultiBinary), and ``(size,)`` when
            ``n_envs == 1``. Any dtype; non-zero means allowed.
        :param n_envs: number of envs in the step.
        :return: bool tensor of shape ``(n_envs, size)`` on the device the masks came on.
        :raises ValueError: wrong shape, or a row (or sub-action group) that allows no action.
        """
        tensor = masks if isinstance(masks, torch.Tensor) else torch.from_numpy(np.asarray(masks))
        tensor = self._reshape(tensor, n_envs)
        if tensor.dtype != torch.bool:
            tensor = tensor != 0
        self._check_nonempty(tensor)
        return tensor

    def reshape(self, masks: np.ndarray | torch.Tensor, n_envs: int) -> torch.Tensor:
        """Bring masks to ``(n_envs, size)`` bool without checking that each group allows an action.

        :param masks: as for :meth:`check`.
        :param n_envs: number of envs in the step.
        :return: bool tensor of shape ``(n_envs, size)``.
        :raises ValueError: wrong shape.
        """
        tensor = masks if isinstance(masks, torch.Tensor) else torch.from_numpy(np.asarray(masks))
        tensor = self._reshape(tensor, n_envs)
        return tensor if tensor.dtype == torch.bool else tensor != 0

    def _reshape(self, tensor: torch.Tensor, n_envs: int) -> torch.Tensor:
        shape = tuple(tensor.shape)
        fits = (len(shape) >= 2 and shape[0] == n_envs and int(np.prod(shape[1:])) == self.size) or (
            n_envs == 1 and shape == (self.size,)
        )
        if not fits:
            raise ValueError(
                f"action_masks has shape {shape}, but {self.space_repr} with n_envs={n_envs} needs "
                f"({n_envs}, {self.size}): one row of {self.size} booleans per env. "
                "Pass the stacked masks of all envs for this step."
            )
        return tensor.reshape(n_envs, self.size)

    def _check_nonempty(self, tensor: torch.Tensor) -> None:
        if self._uniform:
            allowed = tensor.reshape(tensor.shape[0], len(self.groups), self.groups[0]).any(-1)
        else:
            allowed = torch.stack([part.any(-1) for part in tensor.split(list(self.groups), dim=-1)], dim=-1)
        if bool(allowed.all()):
            return
        env, group = (int(i) for i in torch.nonzero(~allowed)[0])
        if len(self.groups) == 1:
            where = f"all {self.size} entries are False"
        else:
            start = int(self._starts[group])
            where = f"sub-action {group} (mask entries {start}:{start + self.groups[group]}) is all False"
        raise ValueError(
            f"action_masks for env {env} allow no action: {where} for {self.space_repr}. "
            "A masked policy cannot sample from an empty set; fix the env's action_masks(), "
            "or pass check_masks=False to the buffer to skip this check."
        )


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
