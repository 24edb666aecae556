"""Allocating the rollout TensorDict from gymnasium spaces: its keys, shapes, dtypes, device and backing.

The rollout of ``n_envs`` envs over ``buffer_size`` steps is one :class:`tensordict.TensorDict` with batch size
``(n_envs, buffer_size)``: the layout of a TorchRL collector batch, env-major, so that TorchRL's estimators
read it with no transpose and ``reshape(-1)`` gives sb3-contrib's flattened order (env 0's steps first).

=============================  =========================================  =====================================
key                            shape (after the batch dims)               dtype
=============================  =========================================  =====================================
``"observation"``              the space's shape (``(1,)`` for Discrete)  the space's own (uint8 stays uint8)
``("observation", *keys)``     per leaf of a (nested) Dict space          per leaf
``"action"``                   ``()`` for Discrete, else ``(action_dim,)`` the action space's (int64, int8)
``"action_mask"``              ``(mask_size,)``                           ``torch.bool``
``"is_init"``                  ``(1,)``: SB3's ``episode_starts``         ``torch.bool``
``"state_value"``              ``(1,)``                                   float32
``"action_log_prob"``          ``()``                                     float32
``("next", "reward")``         ``(1,)``                                   float32
``("next", "done")``           ``(1,)``, filled by GAE                    ``torch.bool``
``("next", "terminated")``     ``(1,)``, filled by GAE                    ``torch.bool``
``("next", "state_value")``    ``(1,)``, filled by GAE                    float32
``"advantage"``                ``(1,)``                                   float32
``"value_target"``             ``(1,)``: SB3's ``returns``                float32
=============================  =========================================  =====================================

These are the keys TorchRL's ``GAE`` and ``ClipPPOLoss`` read by default. A ``"/"`` in a Dict key stands for
nesting (:data:`KEY_SEPARATOR`): the leaf ``"board/cells"`` of a Dict flattened one level for SB3
(:mod:`torchrl_mask.torchrl.nested`) lives under ``("observation", "board", "cells")``, as that of the nested Dict does.
"""

from __future__ import annotations

import shutil
import tempfile
import weakref
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Literal

import numpy as np
import torch
from gymnasium import spaces
from tensordict import TensorDict
from tensordict.utils import NestedKey

from torchrl_mask.rollout.masks import mask_spec

__all__ = [
    "ACTION",
    "ACTION_MASK",
    "ADVANTAGE",
    "IS_INIT",
    "LOG_PROB",
    "NEXT_DONE",
    "NEXT_REWARD",
    "NEXT_TERMINATED",
    "NEXT_VALUE",
    "OBSERVATION",
    "VALUE",
    "VALUE_TARGET",
    "StorageKind",
    "action_dim",
    "action_shape",
    "allocate_rollout",
    "batch_observation_key",
    "check_observation_kind",
    "observation_key",
    "observation_leaves",
    "torch_dtype",
]

OBSERVATION = "observation"
ACTION = "action"
ACTION_MASK = "action_mask"
IS_INIT = "is_init"
VALUE = "state_value"
LOG_PROB = "action_log_prob"
ADVANTAGE = "advantage"
VALUE_TARGET = "value_target"
NEXT_REWARD = ("next", "reward")
NEXT_DONE = ("next", "done")
NEXT_TERMINATED = ("next", "terminated")
NEXT_VALUE = ("next", "state_value")
KEY_SEPARATOR = "/"  # in a Dict key, nests the leaf's storage and batch key ("board/cells": ("board", "cells"))

StorageKind = Literal["memory", "memmap"]


def torch_dtype(dtype: np.dtype | type | None) -> torch.dtype:
    """The torch dtype matching a numpy dtype.

    :param dtype: a numpy dtype (as gymnasium spaces carry it).
    :return: the torch dtype of the same kind and width.
    """
    return torch.from_numpy(np.empty(0, dtype=dtype)).dtype


def leaf_shape(space: spaces.Space) -> tuple[int, ...]:
    """Shape of one observation of a non-Dict space, as SB3 stores it.

    :param space: a Box, Discrete, MultiDiscrete or MultiBinary space.
    :return: the per-env shape; ``(1,)`` for Discrete, as in SB3.
    :raises TypeError: a space SB3 cannot store.
    """
    if isinstance(space, spaces.Discrete):
        return (1,)
    if isinstance(space, spaces.MultiDiscrete):
        return tuple(int(n) for n in space.nvec.shape)
    if isinstance(space, (spaces.Box, spaces.MultiBinary)):
        return tuple(int(n) for n in space.shape)
    raise TypeError(
        f"Observation space {space!r} is not supported: use Box, Discrete, MultiDiscrete, MultiBinary, "
        "or a (nested) Dict of them."
    )


def observation_leaves(space: spaces.Space) -> dict[tuple[str, ...], spaces.Space]:
    """The leaves of an observation space, in the space's key order.

    :param space: any supported observation space; a Dict may nest Dicts.
    :return: ``{(): space}`` for a non-Dict space, else ``{(key, subkey, ...): leaf_space}``.
    """
    if not isinstance(space, spaces.Dict):
        leaf_shape(space)
        return {(): space}
    leaves: dict[tuple[str, ...], spaces.Space] = {}
    for key, subspace in space.spaces.items():
        for path, leaf in observation_leaves(subspace).items():
            leaves[(str(key), *path)] = leaf
    if not leaves:
        raise TypeError(f"Observation space {space!r} has no keys: a Dict space needs at least one entry.")
    return leaves


def check_observation_kind(observation_space: spaces.Space, buffer: str, dict_buffer: str, wants_dict: bool) -> None:
    """Refuse an observation space the buffer class cannot store, naming the class that can.

    :param observation_space: the space given to the buffer.
    :param buffer: the name of the buffer class for a single (non-Dict) observation space.
    :param dict_buffer: the name of its Dict counterpart.
    :param wants_dict: whether the buffer being made is ``dict_buffer``.
    :raises TypeError: a Dict space for ``buffer``, another space for ``dict_buffer``, or a space neither stores.
    """
    is_dict = isinstance(observation_space, spaces.Dict)
    if wants_dict and not is_dict:
        raise TypeError(
            f"{dict_buffer} needs a Dict observation space, got {observation_space!r}; use {buffer} for it."
        )
    if is_dict and not wants_dict:
        raise TypeError(
            f"{buffer} got a Dict observation space {observation_space!r}; use {dict_buffer} for Dict observations."
        )
    if is_dict:
        observation_leaves(observation_space)
    else:
        leaf_shape(observation_space)


def batch_observation_key(path: tuple[str, ...]) -> NestedKey:
    """Where a TorchRL env (``GymWrapper``) keeps an observation leaf: ``"observation"`` for a non-Dict space,
    else the key path, each ``"/"`` in a key one more level (``"image"``; ``("board", "cells")`` for either path).

    :param path: the leaf's key path, as :func:`observation_leaves` gives it (``()`` for a non-Dict space).
    :return: the leaf's key in a step or collector batch.
    """
    keys = tuple(KEY_SEPARATOR.join(path).split(KEY_SEPARATOR)) if path else (OBSERVATION,)
    return keys[0] if len(keys) == 1 else keys


def observation_key(path: tuple[str, ...]) -> NestedKey:
    """The rollout's key of an observation leaf: ``"observation"``, or ``("observation", *keys)`` in a Dict, each
    ``"/"`` in a key one more level (``("observation", "board", "cells")`` for ``"board/cells"`` too).

    :param path: the leaf's key path, as :func:`observation_leaves` gives it (``()`` for a non-Dict space).
    :return: the leaf's nested key in the rollout TensorDict.
    """
    return (OBSERVATION, *KEY_SEPARATOR.join(path).split(KEY_SEPARATOR)) if path else OBSERVATION


def _check_distinct_keys(paths: Sequence[tuple[str, ...]]) -> None:
    """Refuse leaves whose keys meet once ``"/"`` nests them (``"a/b"`` beside ``"a"``, or ``"a/b"`` twice)."""
    names = [KEY_SEPARATOR.join(path) for path in paths]
    inner = {name[:i] for name in names for i, char in enumerate(name) if char == KEY_SEPARATOR}
    clash = sorted({name for name in names if names.count(name) > 1} | (inner & set(names)))
    if clash:
        raise ValueError(
            f"Observation keys {clash} would each be both a leaf and a nested Dict (or two leaves) of the rollout: "
            "a '/' in a Dict key nests it, so rename the keys that clash."
        )


def nest_leaves(paths: Sequence[tuple[str, ...]], leaves: Sequence[Any]) -> dict[str, Any]:
    """Nested dicts of ``leaves`` at their key ``paths`` (the inverse of :func:`observation_leaves`' flattening).

    :param paths: each leaf's key path, as :func:`observation_leaves` gives them (non-empty paths).
    :param leaves: one item per path (arrays, tensors, anything).
    :return: ``{key: {subkey: leaf}}`` and so on, in the paths' order.
    """
    nested: dict[str, Any] = {}
    for path, leaf in zip(paths, leaves, strict=True):
        node = nested
        for key in path[:-1]:
            node = node.setdefault(key, {})
        node[path[-1]] = leaf
    return nested


def action_shape(action_space: spaces.Space) -> tuple[int, ...]:
    """Shape of one stored action, as TorchRL's specs shape it: ``()`` for Discrete (a categorical index),
    ``(len(nvec),)`` for MultiDiscrete, ``(n,)`` for MultiBinary. SB3's view adds the trailing 1 for Discrete.

    :param action_space: a maskable action space.
    :return: the per-env action shape.
    """
    return () if isinstance(action_space, spaces.Discrete) else (action_dim(action_space),)


def action_dim(action_space: spaces.Space) -> int:
    """SB3's ``action_dim``: entries per stored action.

    :param action_space: a maskable action space.
    :return: 1 for Discrete, ``len(nvec)`` for MultiDiscrete, ``n`` for MultiBinary.
    """
    if isinstance(action_space, spaces.Discrete):
        return 1
    if isinstance(action_space, spaces.MultiDiscrete):
        return len(action_space.nvec)
    return int(np.prod(action_space.shape or (1,)))


def allocate_rollout(
    buffer_size: int,
    n_envs: int,
    observation_space: spaces.Space,
    action_space: spaces.Space,
    device: torch.device,
    storage: StorageKind = "memory",
    memmap_dir: str | Path | None = None,
) -> TensorDict:
    """Allocate the rollout TensorDict of batch size ``(n_envs, buffer_size)``; see the module table.

    Every entry starts at zero and every mask row all-allowed, as sb3-contrib's ``reset`` leaves its arrays.
    In memory the zero fill also faults the pages in once, in order, rather than on the first rollout's
    strided writes.

    Memmap files are ours to clean up: each rollout gets a folder of its own, created with
    :func:`tempfile.mkdtemp` inside ``memmap_dir`` (or the system's temporary folder), so two buffers never share
    files even when given the same ``memmap_dir``; that folder and its files are removed when the rollout is
    garbage-collected or the process exits. A ``memmap_dir`` chooses the disk; the folder itself and anything
    else in it are left alone.

    :param buffer_size: steps per env.
    :param n_envs: number of envs.
    :param observation_space: the observation space; Dict leaves go under ``("observation", *keys)``.
    :param action_space: a maskable action space.
    :param device: where the tensors live.
    :param storage: ``"memory"`` for ordinary tensors on ``device``; ``"memmap"`` for memory-mapped files
        (CPU only), for rollouts larger than RAM.
    :param memmap_dir: folder in which the rollout's own memmap folder is created; the system's temporary
        folder when None. Created if missing.
    :return: the storage, zero-filled, masks all True.
    :raises ValueError: memmap storage on a non-CPU device, an unknown storage kind, a ``memmap_dir`` that is
        a file or lies under one, or a ``memmap_dir`` given to in-memory storage (where it would be unused).
    """
    batch = (n_envs, buffer_size)
    on_disk = storage == "memmap"
    if storage not in ("memory", "memmap"):
        raise ValueError(f"storage={storage!r} is not a storage kind: use 'memory' or 'memmap'.")
    if on_disk and device.type != "cpu":
        raise ValueError(
            f"storage='memmap' keeps the rollout in files on the host; it needs device='cpu', not {device}."
        )
    if not on_disk and memmap_dir is not None:
        raise ValueError(
            f"memmap_dir={str(memmap_dir)!r} is only used by storage='memmap'; this rollout is in memory. Pass "
            "storage='memmap' to keep it in files there, or drop memmap_dir."
        )
    if on_disk and memmap_dir is not None:
        _check_memmap_dir(Path(memmap_dir))
    # On disk, torch.empty touches no page (a memmapped rollout never takes its size in RAM) and a new file
    # reads as zeros; in memory, the zero fill writes every page once, here rather than in the first add().
    alloc_device = torch.device("cpu") if on_disk else device

    def leaf(*shape: int, dtype: torch.dtype) -> torch.Tensor:
        if on_disk:
            return torch.empty(*batch, *shape, dtype=dtype)
        if device.type == "cpu":
            return _host_zeros((*batch, *shape), dtype)
        return torch.zeros(*batch, *shape, dtype=dtype, device=device)

    entries: dict[NestedKey, torch.Tensor] = {}
    leaves = observation_leaves(observation_space)
    _check_distinct_keys(list(leaves))
    for path, obs_space in leaves.items():
        entries[observation_key(path)] = leaf(*leaf_shape(obs_space), dtype=torch_dtype(obs_space.dtype))
    entries[ACTION] = leaf(*action_shape(action_space), dtype=torch_dtype(action_space.dtype))
    entries[ACTION_MASK] = leaf(mask_spec(action_space).size, dtype=torch.bool)
    entries[IS_INIT] = leaf(1, dtype=torch.bool)
    entries[VALUE] = leaf(1, dtype=torch.float32)
    entries[LOG_PROB] = leaf(dtype=torch.float32)
    for key in (NEXT_REWARD, NEXT_VALUE, ADVANTAGE, VALUE_TARGET):
        entries[key] = leaf(1, dtype=torch.float32)
    for key in (NEXT_DONE, NEXT_TERMINATED):
        entries[key] = leaf(1, dtype=torch.bool)

    rollout = TensorDict(batch_size=batch, device=alloc_device)
    for key, tensor in entries.items():
        rollout.set(key, tensor)
    if on_disk:
        rollout = _memmap_rollout(rollout, memmap_dir)
    rollout.get(ACTION_MASK).fill_(True)
    return rollout


def _host_zeros(shape: tuple[int, ...], dtype: torch.dtype) -> torch.Tensor:
    """A zero tensor of host memory that numpy allocated, its pages faulted in by the fill.

    numpy asks Linux to back arrays of 4 MiB and more with transparent huge pages (``madvise``); torch's
    allocator does not. Row gathers from such a leaf (``get()``'s image minibatches) and the strided writes of
    ``add()`` take fewer TLB misses (``torchrl-mask bench`` shows it on the image cells). The tensor shares the
    array's memory.

    :param shape: ``(n_envs, buffer_size, *leaf_shape)``.
    :param dtype: the leaf's torch dtype.
    :return: the zero tensor.
    """
    array = np.empty(shape, dtype=torch.empty(0, dtype=dtype).numpy().dtype)
    array.fill(0)
    return torch.from_numpy(array)


def _check_memmap_dir(folder: Path) -> None:
    """Refuse a ``memmap_dir`` that cannot be a folder: an existing file, or a path under one."""
    for path in (folder, *folder.absolute().parents):
        if path.exists():
            if path.is_dir():
                return
            where = "is an existing file" if path == folder else f"lies under {path}, which is a file"
            raise ValueError(
                f"memmap_dir={str(folder)!r} {where}: it must be a folder, in which the rollout gets a memmap "
                "folder of its own. Pass a folder (created if missing), or memmap_dir=None for the system's "
                "temporary folder."
            )


def _memmap_rollout(rollout: TensorDict, memmap_dir: str | Path | None) -> TensorDict:
    """``rollout``'s layout in memory-mapped files, in a new folder that goes with the returned TensorDict."""
    parent = Path(memmap_dir) if memmap_dir is not None else None
    if parent is not None:
        parent.mkdir(parents=True, exist_ok=True)
    folder = Path(tempfile.mkdtemp(prefix="torchrl_mask_rollout_", dir=parent))
    try:
        on_disk = rollout.memmap_like(prefix=folder)
    except BaseException:
        shutil.rmtree(folder, ignore_errors=True)
        raise
    # Open mappings stay valid after the unlink (POSIX); the folder goes when nothing uses the rollout.
    weakref.finalize(on_disk, shutil.rmtree, str(folder), ignore_errors=True)
    return on_disk
