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
    >>> leaves = [torch.arange(6).reshape(6, 1), torch.ones(6, 3, dtype=torch.bool)]  # the mask leaf last
    >>> actions, masks = minibatch_columns(leaves, np.array([5, 0, 3, 1, 2, 4]), batch_size=4, host=True)
    >>> [rows.flatten().tolist() for rows in actions], next(iter(masks)).dtype
    ([[5, 0, 3, 1], [2, 4]], torch.float32)
"""

from __future__ import annotations

import functools
import itertools
import math
from collections.abc import Iterable

import numpy as np
import torch

from torchrl_mask.sb3_arrays import float_masks

__all__ = ["PER_EPOCH_SLICE_BYTES", "minibatch_columns"]

# A leaf whose minibatch slice is at most this many bytes is gathered once per epoch. Below it, the per-minibatch
# gather's call overhead is what a minibatch costs; from a few times it, gathering per minibatch is the faster of
# the two (each slice is copied while in cache, where an epoch-wide copy streams through memory twice), so the
# per-epoch copies stay small beside the storage (batch 64: at most 256 bytes a row per leaf) and an image
# rollout's peak memory stays at the storage plus a few minibatches. docs/benchmarks.md has the measurement.
PER_EPOCH_SLICE_BYTES = 16 * 1024


def minibatch_columns(
    leaves: list[torch.Tensor], indices: np.ndarray, batch_size: int, host: bool
) -> list[Iterable[torch.Tensor]]:
    """One epoch's minibatches, field by field.

    :param leaves: storage leaves flattened to rows, ``(total, ...)`` each, in namedtuple order; the last one is
        the bool mask, ``(total, mask_dims)``.
    :param indices: the epoch's order of the rows, ``(total,)`` int64.
    :param batch_size: rows per minibatch (the last may be smaller).
    :param host: the leaves are CPU tensors (numpy gathers), else on an accelerator (``index_select``).
    :return: one iterable per leaf, each yielding ``ceil(total / batch_size)`` tensors ``(rows, ...)``; the masks'
        as float32.
    """
    gather = _HostGather(indices, batch_size) if host else _DeviceGather(indices, batch_size)
    last = len(leaves) - 1
    columns = []
    for i, tensor in enumerate(leaves):
        is_mask = i == last
        row_bytes = math.prod(tensor.shape[1:]) * (4 if is_mask else tensor.element_size())
        if batch_size >= len(indices) or row_bytes * batch_size <= PER_EPOCH_SLICE_BYTES:
            columns.append(gather.per_epoch(tensor, is_mask))
        else:
            columns.append(gather.per_minibatch(tensor, is_mask))
    return columns


class _HostGather:
    """numpy gathers of CPU leaves; the tensors handed out share numpy's memory."""

    def __init__(self, indices: np.ndarray, batch_size: int) -> None:
        self.indices = indices
        self.batch_size = batch_size

    def per_epoch(self, tensor: torch.Tensor, is_mask: bool) -> Iterable[torch.Tensor]:
        rows = tensor.numpy().take(self.indices, axis=0)
        if is_mask:
            rows = rows.astype(np.float32)
        return torch.from_numpy(rows).split(self.batch_size)

    def per_minibatch(self, tensor: torch.Tensor, is_mask: bool) -> Iterable[torch.Tensor]:
        size = self.batch_size
        chunks = [self.indices[start : start + size] for start in range(0, len(self.indices), size)]
        column: Iterable[np.ndarray] = map(tensor.numpy().take, chunks, itertools.repeat(0))
        if is_mask:
            column = map(_float32, column)
        return map(torch.from_numpy, column)


class _DeviceGather:
    """``index_select`` on the leaves' device; masks become float32 there."""

    def __init__(self, indices: np.ndarray, batch_size: int) -> None:
        self.batch_size = batch_size
        self.index: torch.Tensor | None = None
        self.indices = indices

    def _index(self, device: torch.device) -> torch.Tensor:
        if self.index is None:
            self.index = torch.from_numpy(self.indices).to(device)
        return self.index

    def per_epoch(self, tensor: torch.Tensor, is_mask: bool) -> Iterable[torch.Tensor]:
        rows = tensor.index_select(0, self._index(tensor.device))
        return (float_masks(rows) if is_mask else rows).split(self.batch_size)

    def per_minibatch(self, tensor: torch.Tensor, is_mask: bool) -> Iterable[torch.Tensor]:
        chunks = self._index(tensor.device).split(self.batch_size)
        column = map(functools.partial(torch.index_select, tensor, 0), chunks)
        return map(float_masks, column) if is_mask else column


def _float32(masks: np.ndarray) -> np.ndarray:
    return masks.astype(np.float32)
