"""How ``get()`` hands out minibatches without copying the rollout: one column per namedtuple field.

A column yields one field's minibatch rows, in the order of the epoch's shuffled indices. Which of two ways a
leaf takes depends on how many bytes one minibatch holds of it (``batch_size`` rows, masks counted as float32):

- narrow leaves (at most :data:`PER_EPOCH_SLICE_BYTES` per minibatch: vectors, values, actions, small masks)
  are gathered once per epoch into one contiguous copy (masks converted to sb3-contrib's float32 in the same
  pass) and split into minibatch views in one C++ call. A minibatch then costs one tensor object per field and
  no gather call: creating the tensor is the floor;
- wide leaves (images, big masks) are gathered when their minibatch is asked for, so the memory of an epoch
  stays about one minibatch above the storage. Their gather moves enough bytes that the call's overhead is
  small beside it, so a per-epoch copy would cost memory and gain no time.

On the host the gathers are numpy's (``ndarray.take`` costs a fraction of torch's ``index_select`` at these
sizes) and each minibatch tensor shares the memory numpy gathered. On an accelerator they are ``index_select``
on the device.

Consume the columns with ``map(make_samples, *columns)``, not ``zip``: ``zip`` keeps its previous result tuple
until the next one is built, i.e. one more wide minibatch alive while the next is gathered.

Example:
    >>> import numpy as np, torch
    >>> leaves = [np.arange(6).reshape(6, 1), np.ones((6, 3), dtype=bool)]  # the mask leaf last
    >>> actions, masks = minibatch_columns(leaves, np.array([5, 0, 3, 1, 2, 4]), batch_size=4)
    >>> [rows.flatten().tolist() for rows in actions], next(iter(masks)).dtype
    ([[5, 0, 3, 1], [2, 4]], torch.float32)
"""

from __future__ import annotations

import functools
import itertools
import math
from collections.abc import Iterable, Sequence
from typing import cast

import numpy as np
import torch

from torchrl_mask.rollout.sb3_arrays import float_masks

__all__ = ["PER_EPOCH_SLICE_BYTES", "minibatch_columns"]

# A leaf whose minibatch slice is at most this many bytes is gathered once per epoch. Below it, the per-minibatch
# gather's call overhead is what a minibatch costs; from a few times it, gathering per minibatch is the faster of
# the two (each slice is copied while in cache, where an epoch-wide copy streams through memory twice), so the
# per-epoch copies stay small beside the storage (batch 64: at most 256 bytes a row per leaf) and an image
# rollout's peak memory stays at the storage plus a few minibatches. docs/benchmarks.md has the measurement.
PER_EPOCH_SLICE_BYTES = 16 * 1024


def minibatch_columns(
    leaves: Sequence[np.ndarray] | Sequence[torch.Tensor], indices: np.ndarray, batch_size: int
) -> list[Iterable[torch.Tensor]]:
    """One epoch's minibatches, field by field.

    :param leaves: storage leaves flattened to rows, ``(total, ...)`` each, in namedtuple order; the last one is
        the bool mask, ``(total, mask_dims)``. numpy arrays (host storage: numpy gathers) or tensors (on an
        accelerator: ``index_select``).
    :param indices: the epoch's order of the rows, ``(total,)`` int64.
    :param batch_size: rows per minibatch (the last may be smaller).
    :return: one iterable per leaf, each yielding ``ceil(total / batch_size)`` tensors ``(rows, ...)``; the masks'
        as float32.
    """
    total = len(indices)
    sizes = [batch_size] * (total // batch_size) + ([total % batch_size] if total % batch_size else [])
    last = len(leaves) - 1
    if isinstance(leaves[0], np.ndarray):
        host = _HostGather(indices, sizes)
        return [host.column(leaf, i == last) for i, leaf in enumerate(cast(Sequence[np.ndarray], leaves))]
    device = _DeviceGather(indices, sizes)
    return [device.column(leaf, i == last) for i, leaf in enumerate(cast(Sequence[torch.Tensor], leaves))]


def _per_epoch(shape: Sequence[int], item_bytes: int, is_mask: bool, sizes: list[int]) -> bool:
    """Whether a leaf of this shape is gathered once per epoch (see :data:`PER_EPOCH_SLICE_BYTES`)."""
    row_bytes = math.prod(shape[1:]) * (4 if is_mask else item_bytes)  # masks are handed out as float32
    return len(sizes) == 1 or row_bytes * sizes[0] <= PER_EPOCH_SLICE_BYTES


class _HostGather:
    """numpy gathers of host leaves; the tensors handed out share numpy's memory."""

    def __init__(self, indices: np.ndarray, sizes: list[int]) -> None:
        self.indices = indices
        self.sizes = sizes

    def column(self, array: np.ndarray, is_mask: bool) -> Iterable[torch.Tensor]:
        if _per_epoch(array.shape, array.itemsize, is_mask, self.sizes):
            return self.per_epoch(array, is_mask)
        return self.per_minibatch(array, is_mask)

    def per_epoch(self, array: np.ndarray, is_mask: bool) -> Iterable[torch.Tensor]:
        rows = array.take(self.indices, axis=0)
        return torch.from_numpy(rows.astype(np.float32) if is_mask else rows).split_with_sizes(self.sizes)

    def per_minibatch(self, array: np.ndarray, is_mask: bool) -> Iterable[torch.Tensor]:
        chunks = np.split(self.indices, np.cumsum(self.sizes[:-1]))
        column: Iterable[np.ndarray] = map(array.take, chunks, itertools.repeat(0))
        return map(torch.from_numpy, map(_float32, column) if is_mask else column)


class _DeviceGather:
    """``index_select`` on the leaves' device; masks become float32 there."""

    def __init__(self, indices: np.ndarray, sizes: list[int]) -> None:
        self.indices = indices
        self.sizes = sizes
        self.index: torch.Tensor | None = None

    def _index(self, device: torch.device) -> torch.Tensor:
        if self.index is None:
            self.index = torch.from_numpy(self.indices).to(device)
        return self.index

    def column(self, tensor: torch.Tensor, is_mask: bool) -> Iterable[torch.Tensor]:
        if _per_epoch(tensor.shape, tensor.element_size(), is_mask, self.sizes):
            return self.per_epoch(tensor, is_mask)
        return self.per_minibatch(tensor, is_mask)

    def per_epoch(self, tensor: torch.Tensor, is_mask: bool) -> Iterable[torch.Tensor]:
        rows = tensor.index_select(0, self._index(tensor.device))
        return (float_masks(rows) if is_mask else rows).split_with_sizes(self.sizes)

    def per_minibatch(self, tensor: torch.Tensor, is_mask: bool) -> Iterable[torch.Tensor]:
        chunks = self._index(tensor.device).split_with_sizes(self.sizes)
        column = map(functools.partial(torch.index_select, tensor, 0), chunks)
        return map(float_masks, column) if is_mask else column


def _float32(masks: np.ndarray) -> np.ndarray:
    return masks.astype(np.float32)
