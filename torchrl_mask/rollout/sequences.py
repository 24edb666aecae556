"""Minibatches of whole sequences, as sb3-contrib's ``RecurrentRolloutBuffer`` cuts and pads them, by one gather.

sb3-contrib's recurrent buffer draws one ``split_index = np.random.randint(total)`` per epoch, rolls the env-major
flat order ``arange(total)`` by it, and cuts that order into minibatches of ``batch_size`` rows. Inside a minibatch
a sequence starts at its first row, at every episode start and at every env's first step (``env_change``); each
sequence is copied out (``th.tensor(rows[start:end + 1])``) and the sequences are padded to the longest one
(``pad_sequence``), ``n_seq * max_length`` rows in all.

:func:`padded_rows` computes the same cut as one ``(n_seq * max_length,)`` index into the flat rollout and a
validity mask, so that every field is one ``index_select`` from a flat view of the storage (no copy of the rollout,
no Python loop over sequences) and its padding one masked fill; :func:`gather_padded` does that. The values are the
storage's own, so the minibatches equal sb3-contrib's bit for bit under one numpy seed.

Example:
    >>> import numpy as np, torch
    >>> starts = np.array([0, 0, 1, 0, 0, 0], bool)  # env-major: 2 envs of 3 steps, an episode starts at row 2
    >>> env_change = np.array([1, 0, 0, 1, 0, 0], bool)
    >>> cut = padded_rows(np.array([1, 2, 3, 4]), starts, env_change)
    >>> cut.rows.view(cut.n_seq, cut.max_length).tolist(), cut.valid.view(cut.n_seq, cut.max_length).tolist()
    ([[1, 1], [2, 2], [3, 4]], [[True, False], [True, False], [True, True]])
    >>> gather_padded(torch.arange(6.0) * 10, cut, padding_value=-1.0).tolist()
    [10.0, -1.0, 20.0, -1.0, 30.0, 40.0]
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import NamedTuple

import numpy as np
import torch

__all__ = ["PaddedRows", "env_changes", "gather_padded", "padded_rows", "split_order"]


class PaddedRows(NamedTuple):
    """One minibatch's sequences as rows of the flat rollout: ``rows``, the flat-rollout row of each padded
    position (``(n_seq * max_length,)`` int64; a padded position points at its sequence's first row, whose value
    :func:`gather_padded` overwrites); ``valid``, whether each padded position holds a real step
    (``(n_seq * max_length,)`` bool); ``starts``, the row where each sequence starts (``(n_seq,)`` int64, its LSTM
    state's row); ``n_seq`` sequences, the longest ``max_length`` steps.
    """

    rows: torch.Tensor
    valid: torch.Tensor
    starts: torch.Tensor
    n_seq: int
    max_length: int


def split_order(total: int) -> np.ndarray:
    """sb3-contrib's epoch order: ``arange(total)`` rolled by one ``np.random.randint(total)`` draw.

    :param total: rows in the rollout, ``n_envs * buffer_size``.
    :return: ``(total,)`` int64 row order (the sequences' order is kept, only the split point is random).
    """
    split_index = np.random.randint(total)
    indices = np.arange(total)
    return np.concatenate((indices[split_index:], indices[:split_index]))


def env_changes(n_envs: int, buffer_size: int) -> np.ndarray:
    """True at each env's first step, in the env-major flat order: a sequence never spans two envs.

    :param n_envs: number of envs.
    :param buffer_size: steps per env.
    :return: ``(n_envs * buffer_size,)`` bool.
    """
    change = np.zeros((n_envs, buffer_size), dtype=bool)
    change[:, 0] = True
    return change.reshape(-1)


def minibatch_orders(order: np.ndarray, batch_size: int) -> Iterator[np.ndarray]:
    """The epoch's order cut into minibatches of ``batch_size`` rows (the last may be smaller).

    :param order: the epoch's row order, from :func:`split_order`.
    :param batch_size: rows per minibatch before padding.
    :return: an iterator of ``(<= batch_size,)`` row indices.
    """
    return (order[start : start + batch_size] for start in range(0, len(order), batch_size))


def padded_rows(
    batch_inds: np.ndarray, episode_starts: np.ndarray, env_change: np.ndarray, device: torch.device | str = "cpu"
) -> PaddedRows:
    """The sequences of one minibatch (sb3-contrib's ``create_sequencers`` and ``pad``) as an index.

    :param batch_inds: the minibatch's rows of the flat rollout, in order, ``(B,)``.
    :param episode_starts: whether each flat row starts an episode, ``(total,)`` (bool or 0/1).
    :param env_change: whether each flat row is an env's first step, ``(total,)`` (:func:`env_changes`).
    :param device: where the index tensors go (the storage's device).
    :return: the padded positions' rows and validity, and each sequence's first row.
    """
    seq_start = np.logical_or(episode_starts[batch_inds], env_change[batch_inds]).reshape(-1)
    seq_start[0] = True
    first = np.flatnonzero(seq_start)
    lengths = np.diff(np.append(first, len(batch_inds)))
    max_length = int(lengths.max())
    offsets = np.arange(max_length)
    valid = offsets[None, :] < lengths[:, None]  # (n_seq, max_length)
    positions = np.where(valid, first[:, None] + offsets[None, :], first[:, None])
    as_tensor = torch.as_tensor
    return PaddedRows(
        rows=as_tensor(batch_inds[positions].reshape(-1), dtype=torch.long, device=device),
        valid=as_tensor(valid.reshape(-1), device=device),
        starts=as_tensor(batch_inds[first], dtype=torch.long, device=device),
        n_seq=len(first),
        max_length=max_length,
    )


def gather_padded(
    flat: torch.Tensor, cut: PaddedRows, padding_value: float = 0.0, dtype: torch.dtype | None = None
) -> torch.Tensor:
    """One field of the minibatch: the rows of its sequences, padded, flattened in sequence order.

    :param flat: the field's flat view of the storage, ``(total, *shape)``.
    :param cut: the minibatch's sequences (:func:`padded_rows`).
    :param padding_value: the value of the padded positions (sb3-contrib pads with 0, the masks with 1 here).
    :param dtype: the minibatch's dtype (sb3-contrib's float32 for the bool leaves), None for the leaf's own.
    :return: ``(n_seq * max_length, *shape)``.
    """
    rows = flat.index_select(0, cut.rows)
    if dtype is not None:
        rows = rows.to(dtype)
    valid = cut.valid.view(-1, *([1] * (rows.dim() - 1)))
    return rows.masked_fill_(~valid, padding_value)
