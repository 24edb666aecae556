"""The rollout TensorDict and everything that reads or writes it: one step, a collector batch, GAE, minibatches.

:class:`TensorDictRollout` owns the storage :func:`torchrl_mask.rollout.storage.allocate_rollout` made (batch size
``(n_envs, buffer_size)``) and what is derived from it: its leaves, the slots one ``add()`` writes (numpy views on
the host), the reader that checks a step before anything is written, the GAE call and the flat views ``get()``
gathers minibatches from. :class:`torchrl_mask.MaskableRolloutBuffer` is SB3's face over it: it keeps ``pos`` and
``full``, the SB3 attributes and the namedtuples, and hands everything else to its rollout.

Only the storage and the spaces are pickled: a copy derives its views from its own storage, so that it writes
into that and never into the original's arrays.

Example:
    >>> import numpy as np, torch
    >>> from gymnasium import spaces
    >>> from torchrl_mask.rollout.storage import allocate_rollout
    >>> obs_space, action_space = spaces.Box(-1, 1, (3,)), spaces.Discrete(4)
    >>> storage = allocate_rollout(2, 1, obs_space, action_space, torch.device("cpu"))
    >>> rollout = TensorDictRollout(storage, obs_space, action_space)
    >>> step = (np.zeros(1), np.zeros(1), np.zeros(1), torch.zeros(1, 1), torch.zeros(1))
    >>> for pos in range(2):
    ...     rollout.write_step(pos, [np.ones((1, 3))], step, None, check_masks=True, check_values=True)
    >>> rollout.observations[0].sum().item()
    6.0
"""

from __future__ import annotations

import functools
from collections.abc import Iterable, Sequence
from typing import Any

import numpy as np
import torch
from gymnasium import spaces
from tensordict import TensorDict, TensorDictBase
from tensordict.utils import NestedKey

from torchrl_mask.rollout import storage as st
from torchrl_mask.rollout.advantage import GaeMethod, bootstrap_inputs, generalized_advantage, host_bootstrap
from torchrl_mask.rollout.batches import check_batch_values, entries_from_batch
from torchrl_mask.rollout.masks import mask_spec
from torchrl_mask.rollout.minibatches import minibatch_columns
from torchrl_mask.rollout.observations import observation_layout
from torchrl_mask.rollout.steps import StepReader

__all__ = ["TensorDictRollout"]

# The leaves besides the observation, and the order add() writes a step in after the observation leaves.
_LEAVES = (
    st.ACTION,
    st.ACTION_MASK,
    st.IS_INIT,
    st.VALUE,
    st.LOG_PROB,
    st.NEXT_REWARD,
    st.NEXT_VALUE,
    st.NEXT_DONE,
    st.NEXT_TERMINATED,
    st.ADVANTAGE,
    st.VALUE_TARGET,
)
_STEP_FIELDS = (st.ACTION, st.NEXT_REWARD, st.IS_INIT, st.VALUE, st.LOG_PROB, st.ACTION_MASK)
_PER_ENV = (st.NEXT_REWARD, st.IS_INIT, st.VALUE)  # (n_envs, T, 1) leaves SB3 passes as (n_envs,)
# The (n_envs, T, 1) leaves bootstrap() reads or writes on the host, in host_bootstrap's order.
_BOOTSTRAP_ROWS = (st.VALUE, st.IS_INIT, st.NEXT_VALUE, st.NEXT_DONE, st.NEXT_TERMINATED)


class TensorDictRollout:
    """One rollout's storage with its views, step writes, GAE and minibatch sources.

    :param tensordict: the storage, batch size ``(n_envs, buffer_size)``, keys as in
        :mod:`torchrl_mask.rollout.storage`.
    :param observation_space: the space the observation leaves were allocated for.
    :param action_space: the maskable action space the action and mask leaves were allocated for.
    """

    def __init__(self, tensordict: TensorDict, observation_space: spaces.Space, action_space: spaces.Space) -> None:
        self.tensordict = tensordict
        self.observation_space = observation_space
        self.action_space = action_space
        self.n_envs, self.buffer_size = (int(size) for size in tensordict.batch_size)
        self.spec = mask_spec(action_space)
        #: Whether the storage is on the host: steps are written, minibatches gathered, through numpy views.
        self.host = tensordict.device is None or tensordict.device.type == "cpu"
        self.observation_paths = list(st.observation_leaves(observation_space))
        #: How a step's observation splits into the leaves and minibatch leaves pack back.
        self.layout = observation_layout(observation_space)
        #: The observation leaves, ``(n_envs, buffer_size, *leaf_shape)``, in the space's leaf order.
        self.observations: list[torch.Tensor] = [
            tensordict.get(st.observation_key(path)) for path in self.observation_paths
        ]
        #: The other leaves by key, ``(n_envs, buffer_size, ...)``.
        self.leaves: dict[NestedKey, torch.Tensor] = {key: tensordict.get(key) for key in _LEAVES}
        self.action_shape = st.action_shape(action_space)
        self.reader = StepReader(
            self.n_envs,
            self.observation_paths,
            [(self.n_envs, *leaf.shape[2:]) for leaf in self.observations],
            [torch.empty(0, dtype=leaf.dtype).numpy().dtype for leaf in self.observations],
            (self.n_envs, *self.action_shape),
            self.spec,
        )
        # The leaves add() writes, in write order, viewed time-major (T, n_envs, ...): step t's slot of each is
        # target[t], an integer index (cheaper than the tuple index [:, t]; the memory is the same). The (n_envs,
        # T, 1) leaves of rewards, starts and values are viewed as (n_envs, T) and the actions as (n_envs, T,
        # action_dim), so that SB3's (n_envs,) and (n_envs, action_dim) arrays fit their slot as they come. numpy
        # views on the host: numpy's per-call cost is a fraction of torch's at one step's sizes (and views made
        # per step cost less than views kept per position, which go cold).
        targets = [self.leaves[key][..., 0] if key in _PER_ENV else self.leaves[key] for key in _STEP_FIELDS]
        targets[0] = targets[0].reshape(self.n_envs, self.buffer_size, -1)  # (n_envs, T, action_dim), Discrete too
        targets = [target.transpose(0, 1) for target in (*self.observations, *targets)]
        self._targets: list[Any] = [target.numpy() for target in targets] if self.host else targets

    def __getstate__(self) -> dict[str, Any]:
        return {name: self.__dict__[name] for name in ("tensordict", "observation_space", "action_space")}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__init__(**state)  # type: ignore[misc]

    # ----------------------------------------------------------------------------------------- one step

    def write_step(
        self,
        pos: int,
        obs_items: Sequence[Any],
        fields: tuple[Any, Any, Any, Any, Any],
        action_masks: Any,
        check_masks: bool,
        check_values: bool,
    ) -> None:
        """Check one step of all envs (:meth:`torchrl_mask.rollout.steps.StepReader.read`), then write it at ``pos``.

        :param pos: the step's position, ``0 <= pos < buffer_size``.
        :param obs_items: one array per observation leaf, in leaf order, ``(n_envs, *leaf_shape)``.
        :param fields: SB3's ``(action, reward, episode_start, value, log_prob)``.
        :param action_masks: ``(n_envs, mask_dims)`` masks, or None (every action allowed).
        :param check_masks: check that each mask row allows an action.
        :param check_values: check the values (see :class:`torchrl_mask.rollout.steps.StepReader`).
        :raises ValueError: the first problem found; nothing is written then.
        """
        arrays = self.reader.read(obs_items, fields, action_masks, check_masks, check_values)
        if self.host:
            for target, array in zip(self._targets, arrays, strict=True):
                target[pos] = array
        else:
            device = self.tensordict.device
            for target, array in zip(self._targets, arrays, strict=True):
                target[pos] = array if array is True else torch.as_tensor(array, device=device)

    # ------------------------------------------------------------------------------------ whole batch

    def write_batch(self, batch: TensorDictBase, check_masks: bool, check_values: bool, **keys: Any) -> None:
        """Check a TorchRL collector batch (:func:`torchrl_mask.rollout.batches.entries_from_batch`), then copy it in.

        :param batch: ``(n_envs, buffer_size)`` or flat env-major ``(n_envs * buffer_size,)``.
        :param check_masks: check that each mask row allows an action.
        :param check_values: check the values (:func:`torchrl_mask.rollout.batches.check_batch_values`).
        :param keys: ``observation_keys``, ``reward_key``, ``episode_starts`` as
            :meth:`torchrl_mask.MaskableRolloutBuffer.extend` takes them.
        :raises ValueError: the first problem found; nothing is written then.
        """
        obs, entries = entries_from_batch(
            batch,
            self.n_envs,
            self.buffer_size,
            observation_paths=self.observation_paths,
            observation_shapes=[tuple(leaf.shape[2:]) for leaf in self.observations],
            action_shape=self.action_shape,
            masks=self.spec.check if check_masks else self.spec.reshape,
            spec=self.spec,
            **keys,
        )
        if check_values:
            rows = self.n_envs * self.buffer_size
            not_terminated = ~entries[st.NEXT_TERMINATED]
            check_batch_values(
                [
                    ("observation" + (f" {'/'.join(path)!r}" if path else ""), tensor, leaf.dtype)
                    for path, tensor, leaf in zip(self.observation_paths, obs, self.observations, strict=True)
                ],
                [
                    ("('next', 'reward')", entries[st.NEXT_REWARD]),
                    ("'state_value'", entries[st.VALUE]),
                    ("'action_log_prob'", entries[st.LOG_PROB]),
                    # V(next observation) is read only where the step did not terminate.
                    ("('next', 'state_value')", entries[st.NEXT_VALUE].where(not_terminated, 0.0)),
                ],
                entries[st.ACTION].reshape(rows, -1),
                entries[st.ACTION_MASK].reshape(rows, -1) if check_masks else None,
                self.spec,
                self.buffer_size,
            )
        for leaf, tensor in zip(self.observations, obs, strict=True):
            leaf.copy_(tensor)
        for key, tensor in entries.items():
            self.leaves[key].copy_(tensor)

    # -------------------------------------------------------------------------------------------- GAE

    def bootstrap(self, last_values: Any, dones: Any) -> None:
        """Write TorchRL's GAE inputs from SB3's: ``("next", "state_value")``, ``("next", "done")`` and
        ``("next", "terminated")`` (equal to done: SB3 folds truncation into the reward).

        :param last_values: ``V`` of the observation after the last step, ``n_envs`` entries (tensor or array).
        :param dones: whether the last step ended an episode, ``n_envs`` entries.
        :raises ValueError: either has another number of entries; nothing is written then.
        """
        last, done = self._per_env("last_values", last_values), self._per_env("dones", dones)
        if self.host:
            v, s, nv, d, term = (self._bootstrap_rows[key] for key in _BOOTSTRAP_ROWS)
            host_bootstrap(v, s, nv, d, last, done, term)
            return
        leaf = self.leaves
        out = (leaf[st.NEXT_VALUE], leaf[st.NEXT_DONE])
        bootstrap_inputs(leaf[st.VALUE], leaf[st.IS_INIT], last, done, out=out, terminated=leaf[st.NEXT_TERMINATED])

    def _per_env(self, name: str, value: Any) -> torch.Tensor | np.ndarray:
        """``value`` as it came (a tensor, else an array; ``bootstrap_inputs`` converts), or a ValueError naming
        it if it does not hold one entry per env."""
        array = value if isinstance(value, torch.Tensor) else np.asarray(value)
        size = array.numel() if isinstance(array, torch.Tensor) else array.size
        if size != self.n_envs:
            raise ValueError(
                f"{name} has shape {tuple(array.shape)} ({size} entries), expected ({self.n_envs},): "
                f"1 per env for n_envs={self.n_envs}."
            )
        return array

    def advantage(self, gamma: float, gae_lambda: float, method: GaeMethod, truncations: bool) -> None:
        """Fill ``"advantage"`` and ``"value_target"`` from the stored steps by TorchRL's estimator
        (:func:`torchrl_mask.rollout.advantage.generalized_advantage`).

        :param gamma: discount factor.
        :param gae_lambda: GAE's lambda.
        :param method: ``"loop"`` or ``"vec"``: which of TorchRL's functions.
        :param truncations: whether ``("next", "terminated")`` may differ from ``("next", "done")`` (a collector
            batch); False for SB3's steps, where every done is terminal (see :meth:`bootstrap`).
        """
        leaf = self.leaves
        generalized_advantage(
            leaf[st.NEXT_REWARD],
            leaf[st.VALUE],
            leaf[st.NEXT_VALUE],
            leaf[st.NEXT_DONE],
            gamma,
            gae_lambda,
            method=method,
            terminated=leaf[st.NEXT_TERMINATED] if truncations else None,
            out=(leaf[st.ADVANTAGE], leaf[st.VALUE_TARGET]),
        )

    @functools.cached_property
    def _bootstrap_rows(self) -> dict[NestedKey, np.ndarray]:
        """The leaves :meth:`bootstrap` writes from (``(n_envs, T, 1)``) as ``(n_envs, T)`` numpy views, on the
        host: made once per storage, as making them costs as much as the bootstrap itself."""
        return {key: self.leaves[key].numpy()[..., 0] for key in _BOOTSTRAP_ROWS}

    # ------------------------------------------------------------------------------------ minibatches

    def flat_leaves(self) -> list[torch.Tensor]:
        """The leaves in the minibatch namedtuple's order, flattened to env-major rows (views, no copy):
        observation leaves ``(total, *leaf_shape)`` (``(total, 1)`` for a scalar leaf, as SB3's
        ``swap_and_flatten`` gives), actions ``(total, action_dim)``, values, log-probs, advantages, returns
        ``(total,)``, masks ``(total, mask_dims)``."""
        total = self.buffer_size * self.n_envs
        leaf = self.leaves
        flat = [obs.reshape(total, *(obs.shape[2:] or (1,))) for obs in self.observations]
        flat.append(leaf[st.ACTION].reshape(total, -1))
        flat += [leaf[key].reshape(total) for key in (st.VALUE, st.LOG_PROB, st.ADVANTAGE, st.VALUE_TARGET)]
        flat.append(leaf[st.ACTION_MASK].reshape(total, -1))
        return flat

    @functools.cached_property
    def _gather_sources(self) -> list[np.ndarray] | list[torch.Tensor]:
        """:meth:`flat_leaves` as numpy views on the host, the tensors elsewhere; made once per storage, as
        ``get()`` runs every epoch and making the views costs as much as a small rollout's minibatches."""
        flat = self.flat_leaves()
        return [tensor.numpy() for tensor in flat] if self.host else flat

    def columns(self, indices: np.ndarray, batch_size: int) -> list[Iterable[torch.Tensor]]:
        """One epoch's minibatches, one column per namedtuple field (:mod:`torchrl_mask.rollout.minibatches`).

        :param indices: the epoch's order of the env-major rows, ``(n_envs * buffer_size,)`` int64.
        :param batch_size: rows per minibatch (the last may be smaller).
        :return: one iterable of ``(rows, ...)`` tensors per field, in :meth:`flat_leaves` order.
        """
        return minibatch_columns(self._gather_sources, indices, batch_size)
