"""How ``get()`` hands out minibatches without copying the rollout: one lazy column per namedtuple field.

A column is an iterable of one field's minibatch rows, in the order of the epoch's shuffled indices:

- small leaves (at most :data:`PER_EPOCH_LEAF_BYTES`) are shuffled once per epoch into one contiguous copy, and
  every minibatch is a slice of it (no call per minibatch);
- large leaves (images, big masks) are gathered when their minibatch is asked for, so the memory of an epoch
  stays about one minibatch above the storage;
- masks become sb3-contrib's float32 per minibatch (float32 is four times the bool bytes).

On the host the gathers are numpy's (``np.take`` and slices cost a fraction of torch's ``index_select`` and
views at these sizes: measured, about a third less time per epoch) and each minibatch tensor shares the memory
numpy gathered. On an accelerator they are ``index_select`` on the device.

Consume the columns with ``map(make_samples, *columns)``, not ``zip``: ``zip`` keeps its first result tuple
while the caller holds a minibatch, i.e. one more image minibatch alive for the whole epoch (measured: +250 KiB).

Example:
    >>> import numpy as np, torch
    >>> leaves = [torch.arange(6).reshape(6, 1), torch.ones(6, 3, dtype=torch.bool)]  # the mask leaf last
    >>> actions, masks = minibatch_columns(leaves, np.array([5, 0, 3, 1, 2, 4]), batch_size=4, host=True)
    >>> [rows.flatten().tolist() for rows in actions], next(iter(masks)).dtype
    ([[5, 0, 3, 1], [2, 4]], torch.float32)
"""

from __future__ import annotations

import functools
from collections.abc import Iterable

import numpy as np
import torch

from torchrl_mask.sb3_arrays import float_masks

__all__ = ["PER_EPOCH_LEAF_BYTES", "minibatch_columns"]

# Leaves of at most this many bytes are shuffled once per epoch. Measured on the benchmark's image workload: at
# 64 KiB its per-epoch copies cost under 0.1 MiB (its peak memory is at the floor of storage plus two image
# minibatches), while the small-vector workload still slices every leaf.
PER_EPOCH_LEAF_BYTES = 64 * 1024


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
    total = len(indices)
    epoch_wide = [
        tensor.numel() * tensor.element_size() <= PER_EPOCH_LEAF_BYTES or batch_size >= total for tensor in leaves
    ]
    return (_host_columns if host else _device_columns)(leaves, epoch_wide, indices, batch_size)


def _host_columns(
    leaves: list[torch.Tensor], epoch_wide: list[bool], indices: np.ndarray, batch_size: int
) -> list[Iterable[torch.Tensor]]:
    bounds = [slice(start, start + batch_size) for start in range(0, len(indices), batch_size)]
    chunks = [indices[bound] for bound in bounds]
    columns: list[Iterable[np.ndarray]] = []
    for tensor, wide in zip(leaves, epoch_wide, strict=True):
        array = tensor.numpy()
        if wide:
            shuffled = np.take(array, indices, axis=0)
            columns.append([shuffled[bound] for bound in bounds])
        else:
            columns.append(map(functools.partial(np.take, array, axis=0), chunks))
    columns[-1] = map(_float32, columns[-1])
    return [map(torch.from_numpy, column) for column in columns]


def _device_columns(
    leaves: list[torch.Tensor], epoch_wide: list[bool], indices: np.ndarray, batch_size: int
) -> list[Iterable[torch.Tensor]]:
    index = torch.from_numpy(indices).to(leaves[0].device)
    chunks = index.split(batch_size)
    columns: list[Iterable[torch.Tensor]] = [
        tensor.index_select(0, index).split(batch_size)
        if wide
        else map(functools.partial(torch.index_select, tensor, 0), chunks)
        for tensor, wide in zip(leaves, epoch_wide, strict=True)
    ]
    columns[-1] = map(float_masks, columns[-1])
    return columns


def _float32(masks: np.ndarray) -> np.ndarray:
    return masks.astype(np.float32)
