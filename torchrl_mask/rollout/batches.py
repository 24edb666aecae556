"""Reading a TorchRL collector batch into the rollout's entries, checking all of it, writing nothing.

:meth:`torchrl_mask.MaskableRolloutBuffer.extend` fills a whole rollout from one collector batch: it takes the
batch env-major, ``(n_envs, buffer_size)`` (flat env-major batches are reshaped), reads each entry under the
storage's key (:mod:`torchrl_mask.rollout.storage`), checks shapes, masks, row order and, with ``check_values``, the
values (:func:`check_batch_values`), and copies only what passed.

Keys read (``B`` = the batch dims, ``(n_envs, buffer_size)``):

- the observation: ``observation_keys``, one per leaf of the observation space (by default ``"observation"``, or
  the Dict's key paths at the top level, where TorchRL's ``GymWrapper`` puts them);
- ``"action"`` (``(*B,)`` or ``(*B, action_dim)``), ``"action_mask"`` (``(*B, mask_dims)``),
  ``"state_value"`` (``(*B, 1)``), ``"action_log_prob"`` (``(*B,)``), as
  :class:`torchrl_mask.torchrl.policy.MaskablePolicyModule` writes them;
- ``reward_key``, ``("next", "done")``, ``("next", "terminated")`` (``(*B, 1)``), as the env writes them;
- ``("next", "state_value")`` (``(*B, 1)``): ``V`` of ``("next", observation)``, read where not
  terminated (:meth:`torchrl_mask.torchrl.policy.MaskablePolicyModule.add_next_state_value` writes it);
- ``"is_init"`` (``(*B, 1)``, TorchRL's ``InitTracker``) when present; else the episode starts are
  derived from ``("next", "done")`` and ``episode_starts``;
- ``("collector", "traj_ids")`` when present, to check that each row is one env's steps in order.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import torch
from tensordict import TensorDictBase
from tensordict.utils import NestedKey

from torchrl_mask.rollout.masks import MaskSpec
from torchrl_mask.rollout.storage import (
    ACTION,
    ACTION_MASK,
    IS_INIT,
    LOG_PROB,
    NEXT_DONE,
    NEXT_REWARD,
    NEXT_TERMINATED,
    NEXT_VALUE,
    OBSERVATION,
    VALUE,
    batch_observation_key,
)

__all__ = ["batch_states", "check_batch_values", "entries_from_batch"]


def _env_major(batch: TensorDictBase, n_envs: int, buffer_size: int) -> TensorDictBase:
    """A collector batch as ``(n_envs, buffer_size)``: as it comes, or a flat env-major batch reshaped."""
    if ("collector", "mask") in batch.keys(True):
        raise ValueError(
            "The batch is split into padded trajectories (a collector with split_trajs=True); "
            "extend() needs the steps as collected: create the collector with split_trajs=False."
        )
    shape = tuple(batch.batch_size)
    if shape == (n_envs, buffer_size):
        return batch
    if shape == (n_envs * buffer_size,):
        return batch.reshape(n_envs, buffer_size)
    raise ValueError(
        f"The batch has batch size {shape}, but this buffer holds n_envs={n_envs} envs times "
        f"buffer_size={buffer_size} steps: give a batch of ({n_envs}, {buffer_size}) or ({n_envs * buffer_size},), "
        "i.e. a buffer whose n_envs and buffer_size match the collector's envs and frames_per_batch."
    )


def entries_from_batch(
    batch: TensorDictBase,
    n_envs: int,
    buffer_size: int,
    *,
    observation_paths: Sequence[tuple[str, ...]],
    observation_shapes: Sequence[tuple[int, ...]],
    action_shape: tuple[int, ...],
    masks: Callable[[torch.Tensor, int, Callable[[int], str]], Any],
    observation_keys: Sequence[NestedKey] | None = None,
    reward_key: NestedKey = NEXT_REWARD,
    episode_starts: torch.Tensor | np.ndarray | None = None,
    spec: MaskSpec | None = None,
) -> tuple[list[torch.Tensor], dict[NestedKey, torch.Tensor]]:
    """Read a TorchRL collector batch into the storage's entries, checking every one; nothing is written.

    :param batch: ``(n_envs, buffer_size)`` or flat env-major ``(n_envs * buffer_size,)``; see
        :meth:`torchrl_mask.MaskableRolloutBuffer.extend` for the keys read.
    :param n_envs: envs of the storage.
    :param buffer_size: steps per env of the storage.
    :param observation_paths: the storage's observation leaves (:func:`observation_leaves`' keys).
    :param observation_shapes: per-env shape of each observation leaf.
    :param action_shape: per-env shape of a stored action (:func:`action_shape`).
    :param masks: checks (or only reshapes) ``(rows, n_rows, row_label)`` masks into bool rows, e.g.
        ``MaskSpec.check``.
    :param observation_keys: the batch key of each observation leaf; None means ``"observation"`` for a
        non-Dict space and the Dict's key paths at the top level (where TorchRL's ``GymWrapper`` puts them).
    :param reward_key: where the reward is, ``(*B, 1)``.
    :param episode_starts: whether each env's first step begins an episode, ``(n_envs,)``; read only when the
        batch has no ``"is_init"``.
    :param spec: the action space's mask layout, to name the mask width it needs; None leaves the width to
        ``masks``.
    :return: ``(observation leaves, {storage key: tensor})``, each ``(n_envs, buffer_size, ...)``.
    :raises TypeError: ``batch`` is not a TensorDict (a plain dict, say).
    :raises ValueError: a size that does not fit, a missing key, an entry of the wrong size (masks of another
        width than the action space's), rows that are not one env's consecutive steps, or a mask that allows no
        action.
    """
    if not isinstance(batch, TensorDictBase):
        raise TypeError(
            f"extend() takes a TensorDict (a TorchRL collector's batch), got a {type(batch).__name__}: wrap it, e.g. "
            f"TensorDict(batch, batch_size=[{n_envs}, {buffer_size}]), with the keys listed in "
            "torchrl_mask.rollout.batches."
        )
    n, steps = n_envs, buffer_size
    rows = _env_major(batch, n, steps)
    keys = _observation_batch_keys(observation_paths, observation_keys)
    read = _reader(rows, n, steps)
    obs = [read(key, shape) for key, shape in zip(keys, observation_shapes, strict=True)]
    mask_rows = _mask_rows(read(ACTION_MASK), n, steps, masks, spec)
    done = read(NEXT_DONE, (1,)).to(torch.bool)
    terminated = read(NEXT_TERMINATED, (1,)).to(torch.bool)
    is_init = _is_init(rows, read, done, episode_starts)
    _check_row_order(rows, done, n, steps)
    entries: dict[NestedKey, torch.Tensor] = {
        ACTION: read(ACTION, (math.prod(action_shape),)).reshape(n, steps, *action_shape),
        ACTION_MASK: mask_rows.reshape(n, steps, -1),
        IS_INIT: is_init,
        VALUE: read(VALUE, (1,)),
        LOG_PROB: read(LOG_PROB, (1,)).reshape(n, steps),
        NEXT_REWARD: read(reward_key, (1,)),
        NEXT_VALUE: read(NEXT_VALUE, (1,)),
        NEXT_DONE: done,
        NEXT_TERMINATED: terminated,
    }
    return obs, entries


def batch_states(batch: TensorDictBase, keys: Sequence[NestedKey], state_shape: tuple[int, int]) -> list[torch.Tensor]:
    """The LSTM states each step of a collector batch started from, checked (the recurrent buffers' ``extend``).

    :param batch: the collector batch, batch dims ``B``.
    :param keys: the state keys (``STATE_KEYS`` of :mod:`torchrl_mask.rollout.recurrent_buffers`).
    :param state_shape: ``(n_lstm_layers, lstm_hidden_size)``.
    :return: one tensor per key, ``(*B, *state_shape)``, as in the batch.
    :raises ValueError: a state missing, or of another shape; the message names the key and the fix.
    """
    states = []
    for key in keys:
        state = batch.get(key, None)
        if state is None:
            raise ValueError(
                f"The batch has no {key!r} entry: the LSTM states each step started from are kept with the rollout. "
                "Collect with MaskableRecurrentPolicyModule(model.policy) and append its make_tensordict_primer() "
                "to the env."
            )
        if tuple(state.shape) != (*batch.batch_size, *state_shape):
            raise ValueError(
                f"The batch's {key!r} has shape {tuple(state.shape)}, expected (*{tuple(batch.batch_size)}, "
                f"n_lstm_layers={state_shape[0]}, lstm_hidden_size={state_shape[1]}): collect with the model's own "
                "policy module."
            )
        states.append(state)
    return states


def _observation_batch_keys(
    observation_paths: Sequence[tuple[str, ...]], observation_keys: Sequence[NestedKey] | None
) -> list[NestedKey]:
    """The batch key of each observation leaf: the given ones (one per leaf), else the default ones."""
    if observation_keys is None:
        return [batch_observation_key(path) for path in observation_paths]
    keys = list(observation_keys)
    if len(keys) != len(observation_paths):
        leaf_names = str(["/".join(path) or OBSERVATION for path in observation_paths])
        raise ValueError(
            f"observation_keys has {len(keys)} keys but the observation space has {len(observation_paths)} "
            f"leaves {leaf_names}: give one batch key per leaf, in that order."
        )
    return keys


def _reader(rows: TensorDictBase, n: int, steps: int) -> Callable[..., torch.Tensor]:
    """``read(key, shape=None)``: the batch entry ``key``, as ``(n, steps, *shape)`` when a shape is given, or a
    ValueError naming the missing key or the entry's wrong size."""

    def read(key: NestedKey, shape: tuple[int, ...] | None = None) -> torch.Tensor:
        tensor = rows.get(key, None)
        if tensor is None:
            fix = " (the env gives no masks: make it with torchrl_mask.masked_gym_env)" if key == ACTION_MASK else ""
            raise ValueError(
                f"The batch has no {key!r} entry{fix}; its keys are {sorted(map(str, rows.keys(True, True)))}."
            )
        if shape is None:
            return tensor
        if tensor.numel() != n * steps * math.prod(shape):
            raise ValueError(f"Batch entry {key!r} has shape {tuple(tensor.shape)}, expected {(n, steps, *shape)}.")
        return tensor.reshape(n, steps, *shape)

    return read


def _mask_rows(
    raw_masks: torch.Tensor,
    n: int,
    steps: int,
    masks: Callable[[torch.Tensor, int, Callable[[int], str]], Any],
    spec: MaskSpec | None,
) -> torch.Tensor:
    """The batch's masks as checked bool rows ``(n * steps, size)``, or the error naming the width needed."""
    if spec is not None and raw_masks.numel() != n * steps * spec.size:
        width = raw_masks.shape[-1] if raw_masks.ndim else 1
        raise ValueError(
            f"Batch entry 'action_mask' has shape {tuple(raw_masks.shape)} (width {width}), but {spec.space_repr} "
            f"needs masks of width {spec.size}: give ({n}, {steps}, {spec.size}), one row of {spec.size} booleans per "
            "step, laid out as torchrl_mask.rollout.masks describes."
        )
    rows = raw_masks.reshape(n * steps, -1)
    return torch.as_tensor(masks(rows, n * steps, lambda row: f"env {row // steps}, step {row % steps}"))


def _is_init(
    rows: TensorDictBase,
    read: Callable[..., torch.Tensor],
    done: torch.Tensor,
    episode_starts: torch.Tensor | np.ndarray | None,
) -> torch.Tensor:
    """Whether each step begins an episode ``(n, steps, 1)``: the batch's ``"is_init"``, else ``episode_starts``
    for the first step and ``("next", "done")`` for the rest."""
    if rows.get(IS_INIT, None) is not None:
        return read(IS_INIT, (1,))
    if episode_starts is None:
        raise ValueError(
            'The batch has no "is_init" entry and no episode_starts were given: append TorchRL\'s '
            "InitTracker() to the env (masked_gym_env does), or pass episode_starts."
        )
    first = torch.as_tensor(np.asarray(episode_starts)).reshape(done.shape[0], 1, 1).to(done)
    return torch.cat([first, done[:, :-1]], dim=1)


def _check_row_order(rows: TensorDictBase, done: torch.Tensor, n: int, steps: int) -> None:
    """Refuse rows that are not each one env's consecutive steps, where the collector says so (its trajectory
    ids change only where an episode ended)."""
    traj_ids = rows.get(("collector", "traj_ids"), None)
    if traj_ids is None:
        return
    ids = traj_ids.reshape(n, steps)
    if not torch.equal(ids[:, 1:] != ids[:, :-1], done[:, :-1, 0].to(ids.device)):
        raise ValueError(
            "The batch rows are not each one env's consecutive steps (trajectory ids change where no "
            "episode ended): pass the collector's batch as it comes, (n_envs, buffer_size) or flat "
            "env-major, not split or shuffled."
        )


def check_batch_values(
    observations: Sequence[tuple[str, torch.Tensor, torch.dtype]],
    floats: Sequence[tuple[str, torch.Tensor]],
    actions: torch.Tensor,
    masks: torch.Tensor | None,
    spec: MaskSpec,
    steps: int,
) -> None:
    """``extend()``'s value checks over a whole collector batch, in torch on the batch's device.

    :param observations: ``(name, batch leaf, storage dtype)`` per observation leaf.
    :param floats: ``(name, tensor)`` of the entries that must be finite (reward, values, log-probabilities).
    :param actions: ``(n_envs * steps, n_groups)`` actions, one choice per mask group.
    :param masks: ``(n_envs * steps, mask_dims)`` bool masks, or None to skip the allowed-by-mask check.
    :param spec: the action space's mask layout.
    :param steps: steps per env, to name a row as ``env e, step t``.
    :raises ValueError: the first value that is not finite, does not fit its leaf, or is not a valid action.
    """
    for name, tensor, dtype in observations:
        # Float and bool leaves take any number (bool as non-zero); a bool input fits any leaf.
        fits_any = dtype.is_floating_point or torch.bool in (dtype, tensor.dtype)
        if tensor.dtype != dtype and not fits_any and tensor.numel():
            info = torch.iinfo(dtype)
            wider = tensor.is_floating_point() or info.min > torch.iinfo(tensor.dtype).min
            if wider or info.max < torch.iinfo(tensor.dtype).max:
                low, high = tensor.min().item(), tensor.max().item()
                if not (info.min <= low and high <= info.max):
                    raise ValueError(
                        f"Batch entry {name} holds {low if low < info.min else high!r}, which does not fit the "
                        f"storage dtype {dtype} ({info.min} to {info.max}) and would be stored wrapped around. "
                        "Clip or rescale it, or pass check_values=False to skip this check."
                    )
    for name, tensor in floats:
        finite = torch.isfinite(tensor.reshape(-1, steps))
        if not bool(finite.all()):
            env, step = (int(i) for i in torch.nonzero(~finite)[0])
            raise ValueError(
                f"Batch entry {name} is {tensor.reshape(-1, steps)[env, step].item()} at env {env}, step {step}: "
                "rewards, values and log-probabilities must be finite. Pass check_values=False to skip this check."
            )
    spec.check_actions(actions, masks, lambda row: f"env {row // steps}, step {row % steps}")
