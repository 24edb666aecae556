"""SB3's names for the rollout: numpy arrays in SB3's ``(buffer_size, n_envs, ...)`` layout, and float32 masks.

SB3 code reads and writes a rollout buffer's ``rewards``, ``values``, ``returns`` ... as numpy arrays (sb3-contrib's
``MaskablePPO.train`` calls ``explained_variance`` on two of them; reward-shaping callbacks write ``rewards``).
:class:`SB3Array` serves each as a view of one storage leaf, so nothing is copied on the host.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch
from tensordict.utils import NestedKey

__all__ = ["ArrayLike", "FlatArray", "SB3Array", "WriteThroughArray", "float_masks", "to_numpy"]

ArrayLike = np.ndarray | torch.Tensor | float | int | bool


def to_numpy(tensor: torch.Tensor) -> np.ndarray:
    """A numpy array of the tensor: a view on the host, a host copy from an accelerator.

    :param tensor: any tensor without grad.
    :return: the array, same shape and dtype.
    """
    return tensor.numpy() if tensor.device.type == "cpu" else tensor.cpu().numpy()


def float_masks(masks: torch.Tensor) -> torch.Tensor:
    """sb3-contrib's float32 masks from bool ones, same shape.

    Through numpy on the host (numpy's per-call cost is lower than torch's at minibatch sizes), through uint8
    elsewhere (a bool-to-float cast is slower than a uint8-to-float one); docs/benchmarks.md has the figures.

    :param masks: bool masks, ``(B, mask_dims)``.
    :return: float32 masks, ``(B, mask_dims)``, on the same device.
    """
    if masks.device.type == "cpu":
        return torch.from_numpy(masks.numpy().astype(np.float32))
    return masks.view(torch.uint8).to(torch.float32)


class WriteThroughArray(np.ndarray):
    """A host copy of a storage leaf whose item assignments write through to the leaf (``arr[1, :] = 1``).

    SB3 code writes buffer attributes in place (a reward-shaping callback writes ``rewards[t, env]``); where the
    attribute cannot be a view of the storage (a bool leaf served as float32, or a leaf on an accelerator), the
    attribute is this copy: ``arr[key] = value`` updates the copy and writes the whole array back to the leaf.
    Other in-place writes (a view's items, ``+=``, ``out=``) raise, as the copy is read-only for them.
    """

    _write_back: Any = None

    def __array_ufunc__(self, ufunc: np.ufunc, method: str, *inputs: Any, **kwargs: Any) -> Any:
        if any(isinstance(out, WriteThroughArray) for out in kwargs.get("out", ())):
            raise ValueError(
                f"In-place {ufunc.__name__} on a copy of the rollout storage would be lost: assign instead, "
                "e.g. buf.episode_starts[t] = buf.episode_starts[t] + 1."
            )
        plain = tuple(x.view(np.ndarray) if isinstance(x, WriteThroughArray) else x for x in inputs)
        return getattr(ufunc, method)(*plain, **kwargs)  # results are plain arrays

    def __setitem__(self, key: Any, value: Any) -> None:
        if self._write_back is None:
            if self.base is not None and isinstance(self.base, WriteThroughArray):
                raise ValueError(
                    "This is a view of a copy of the rollout storage: writes to it would be lost. Index the "
                    "buffer attribute itself, e.g. buf.episode_starts[1, :] = 1, or assign the whole attribute."
                )
            super().__setitem__(key, value)
            return
        self.flags.writeable = True
        try:
            super().__setitem__(key, value)
        finally:
            self.flags.writeable = False
        self._write_back(self)


class SB3Array:
    """A buffer attribute read and written as a ``(buffer_size, n_envs, ...)`` numpy array (a descriptor).

    On the CPU the array is a view of the storage leaf (writes land in the rollout). Where it cannot be a view (a
    ``dtype`` other than the leaf's, such as the float32 ``episode_starts`` and ``action_masks`` of bool leaves,
    or a leaf on an accelerator), it is a :class:`WriteThroughArray`: a copy whose item assignments
    (``buf.episode_starts[1, :] = 1``) are written back to the leaf, as in sb3-contrib where these arrays are the
    storage; a bool leaf stores non-zero as True. ``layout`` adapts the leaf to SB3's per-env shape:
    ``"squeeze"`` drops the leaf's trailing 1
    (SB3 keeps rewards, values ... as ``(T, n_envs)``); ``"rows"`` makes it ``(T, n_envs, width)`` (SB3's
    ``(T, n_envs, 1)`` Discrete actions).

    :param key: the storage leaf, in the buffer's ``tensordict`` of batch size ``(n_envs, buffer_size)``.
    :param layout: ``"as-is"``, ``"squeeze"`` or ``"rows"``.
    :param dtype: numpy dtype to read it as (a copy), None for the leaf's own (a view).
    """

    def __init__(self, key: NestedKey, layout: str = "as-is", dtype: np.dtype | None = None) -> None:
        self.key = key
        self.layout = layout
        self.dtype = dtype

    def _sb3_view(self, buf: Any) -> torch.Tensor:
        leaf = buf.tensordict.get(self.key)
        if self.layout == "squeeze":
            leaf = leaf[..., 0]
        elif self.layout == "rows":
            leaf = leaf.reshape(*leaf.shape[:2], -1)
        return leaf.transpose(0, 1)

    def __get__(self, buf: Any, owner: type) -> Any:
        if buf is None:
            return self
        view = self._sb3_view(buf)
        array = to_numpy(view)
        if self.dtype is None and view.device.type == "cpu":
            return array
        copy = np.array(array, dtype=self.dtype or array.dtype).view(WriteThroughArray)
        copy.flags.writeable = False
        copy._write_back = lambda written: self.__set__(buf, written)
        return copy

    def __set__(self, buf: Any, value: ArrayLike) -> None:
        view = self._sb3_view(buf)
        view.copy_(torch.as_tensor(np.array(value)).reshape(view.shape))


class FlatArray:
    """A buffer attribute as sb3-contrib's flattened array (a descriptor; the recurrent buffers' names, in the layout
    sb3-contrib's recurrent buffer has once ``get`` ran): the leaf ``(n_envs, T, ...)`` as ``(n_envs * T, ...)``
    (a trailing 1 for scalars, as ``swap_and_flatten`` gives), a numpy view on the host (a float32 copy of a bool
    leaf).

    :param key: the storage leaf.
    :param as_float: read a bool leaf as sb3-contrib's float32.
    """

    def __init__(self, key: NestedKey, as_float: bool = False) -> None:
        self.key, self.as_float = key, as_float

    def __get__(self, buf: Any, owner: type) -> Any:
        if buf is None:
            return self
        leaf = buf.tensordict.get(self.key)
        flat = to_numpy(leaf.reshape(leaf.shape[0] * leaf.shape[1], *(leaf.shape[2:] or (1,))))
        return flat.astype(np.float32) if self.as_float else flat
