"""sb3-contrib's recurrent rollout buffers with the action masks, the rollout in one TensorDict.

:class:`MaskableRecurrentRolloutBuffer` and :class:`MaskableRecurrentDictRolloutBuffer` keep the API of sb3-contrib's
``RecurrentRolloutBuffer`` and ``RecurrentDictRolloutBuffer`` (constructor, ``add(..., lstm_states=)``,
``compute_returns_and_advantage``, ``get``, the samples namedtuples with one more field, ``action_masks``) and hold
the rollout in :attr:`MaskableRecurrentRolloutBuffer.tensordict`: the storage of the other buffers
(:mod:`torchrl_mask.rollout.storage`, batch size ``(n_envs, buffer_size)``) plus the LSTM states each step started
from, under the keys TorchRL's ``LSTMModule`` gives them, one level per network:

==========================================  ======================================  ========
key                                         shape (after the batch dims)            dtype
==========================================  ======================================  ========
``("recurrent_state", "actor", "hidden")``  ``(n_lstm_layers, lstm_hidden_size)``   float32
``("recurrent_state", "actor", "cell")``    ``(n_lstm_layers, lstm_hidden_size)``   float32
``("recurrent_state", "critic", "hidden")`` ``(n_lstm_layers, lstm_hidden_size)``   float32
``("recurrent_state", "critic", "cell")``   ``(n_lstm_layers, lstm_hidden_size)``   float32
``"is_init"``                               ``(1,)``: True where an episode starts  bool
``"action_mask"``                           ``(mask_dims,)``                        bool
==========================================  ======================================  ========

(``"is_init"`` is what ``LSTMModule`` reads to reset its state; the critic's state is the actor's when the LSTM is
shared, zeros without a critic LSTM, as sb3-contrib records them.) GAE is the other buffers' (TorchRL's function,
bit for bit sb3-contrib's on the CPU). ``get`` cuts minibatches of whole sequences as sb3-contrib does (the same
split, padding and sequence masks under one numpy seed, :mod:`torchrl_mask.rollout.sequences`), each field one
gather from a flat view of the storage: no flattened copy of the rollout. The masks are padded with ones (the
padded steps are left out of the loss by ``mask``).

SB3's array names (``observations``, ``actions``, ``episode_starts``, ``hidden_states_pi`` ...) are numpy arrays of
the storage in the layout ``RecurrentPPO.train`` reads: env-major flat, ``(n_envs * buffer_size, ...)``;
``rewards`` keeps SB3's ``(buffer_size, n_envs)``.

>>> import numpy as np, torch
>>> from gymnasium import spaces
>>> from sb3_contrib.common.recurrent.type_aliases import RNNStates
>>> buffer = MaskableRecurrentRolloutBuffer(2, spaces.Box(-1, 1, (3,)), spaces.Discrete(4), (2, 1, 1, 8), "cpu")
>>> zeros = (torch.zeros(1, 1, 8), torch.zeros(1, 1, 8))
>>> for step in range(2):
...     buffer.add(np.zeros((1, 3)), np.array([[1]]), np.zeros(1), np.array([step == 0]), torch.zeros(1, 1),
...                torch.zeros(1), lstm_states=RNNStates(zeros, zeros), action_masks=np.array([[0, 1, 1, 0]]))
>>> buffer.compute_returns_and_advantage(torch.zeros(1, 1), np.zeros(1))
>>> batch = next(buffer.get(2))
>>> batch.action_masks.shape, batch.mask.shape, buffer.tensordict["recurrent_state", "actor", "hidden"].shape
(torch.Size([2, 4]), torch.Size([2]), torch.Size([1, 2, 1, 8]))
"""

from __future__ import annotations

import numbers
from collections.abc import Generator, Sequence
from typing import Any

import numpy as np
import torch
from gymnasium import spaces
from sb3_contrib.common.recurrent.buffers import RecurrentDictRolloutBuffer, RecurrentRolloutBuffer
from sb3_contrib.common.recurrent.type_aliases import RNNStates
from stable_baselines3.common.buffers import BaseBuffer
from tensordict import TensorDict, TensorDictBase
from tensordict.utils import NestedKey

from torchrl_mask.rollout import storage as st
from torchrl_mask.rollout.batches import batch_states
from torchrl_mask.rollout.masks import mask_spec
from torchrl_mask.rollout.recurrent_samples import (
    SCALAR_FIELDS,
    MaskableRecurrentDictRolloutBufferSamples,
    MaskableRecurrentRolloutBufferSamples,
)
from torchrl_mask.rollout.sb3_arrays import FlatArray, SB3Array, to_numpy
from torchrl_mask.rollout.sequences import (
    PaddedRows,
    env_changes,
    gather_padded,
    minibatch_orders,
    padded_rows,
    split_order,
)
from torchrl_mask.rollout.tensordict_rollout import TensorDictRollout

__all__ = [
    "RECURRENT_STATE",
    "MaskableRecurrentDictRolloutBuffer",
    "MaskableRecurrentDictRolloutBufferSamples",
    "MaskableRecurrentRolloutBuffer",
    "MaskableRecurrentRolloutBufferSamples",
]

RECURRENT_STATE = "recurrent_state"
#: The LSTM state leaves, in sb3-contrib's order: ``hidden_states_pi``, ``cell_states_pi``, ``hidden_states_vf``,
#: ``cell_states_vf``.
STATE_KEYS: tuple[NestedKey, ...] = tuple(
    (RECURRENT_STATE, net, part) for net in ("actor", "critic") for part in ("hidden", "cell")
)


_BUFFER, _DICT_BUFFER = "MaskableRecurrentRolloutBuffer", "MaskableRecurrentDictRolloutBuffer"  # for the errors


class MaskableRecurrentRolloutBuffer(RecurrentRolloutBuffer):
    """sb3-contrib's ``RecurrentRolloutBuffer`` with the action mask of every step, stored in a TensorDict.

    :param buffer_size: steps per env in one rollout (``n_steps``).
    :param observation_space: a Box, Discrete, MultiDiscrete or MultiBinary observation space.
    :param action_space: a Discrete, MultiDiscrete or MultiBinary action space.
    :param hidden_state_shape: sb3-contrib's ``(n_steps, n_lstm_layers, n_envs, lstm_hidden_size)``.
    :param device: where the rollout and the minibatches live; ``"auto"`` picks CUDA when available.
    :param gae_lambda: GAE's lambda.
    :param gamma: the discount factor.
    :param n_envs: envs stepped together.
    :raises TypeError: an action space that cannot be masked, or a Dict observation space (use
        :class:`MaskableRecurrentDictRolloutBuffer`).
    """

    _samples_type: type = MaskableRecurrentRolloutBufferSamples
    _rollout: TensorDictRollout
    #: The masks the next ``add`` stores when it is given none (read by ``MaskableRecurrentPPO``'s rollout).
    pending_masks: np.ndarray | None = None
    #: The masks of the minibatch ``get`` yielded last, ``(n_seq * max_length, mask_dims)`` float32.
    last_action_masks: torch.Tensor | None = None

    observations = FlatArray(st.OBSERVATION)
    actions = FlatArray(st.ACTION)
    rewards = SB3Array(st.NEXT_REWARD, layout="squeeze")
    episode_starts = FlatArray(st.IS_INIT, as_float=True)
    values = FlatArray(st.VALUE)
    log_probs = FlatArray(st.LOG_PROB)
    advantages = FlatArray(st.ADVANTAGE)
    returns = FlatArray(st.VALUE_TARGET)
    action_masks = FlatArray(st.ACTION_MASK, as_float=True)
    hidden_states_pi, cell_states_pi, hidden_states_vf, cell_states_vf = (FlatArray(key) for key in STATE_KEYS)

    def __init__(
        self,
        buffer_size: int,
        observation_space: spaces.Space,
        action_space: spaces.Space,
        hidden_state_shape: tuple[int, int, int, int],
        device: torch.device | str = "auto",
        gae_lambda: float = 1,
        gamma: float = 0.99,
        n_envs: int = 1,
    ) -> None:
        for name, size in (("buffer_size", buffer_size), ("n_envs", n_envs)):
            if isinstance(size, bool) or not isinstance(size, numbers.Integral) or size < 1:
                raise ValueError(f"{name} must be an int of at least 1, got {size!r}.")
        self._check_observation_space(observation_space)
        self.mask_dims = mask_spec(action_space).size  # TypeError before SB3 looks at an unmaskable space
        if tuple(hidden_state_shape[::2]) != (buffer_size, n_envs):
            raise ValueError(
                f"hidden_state_shape {tuple(hidden_state_shape)} is not (buffer_size={buffer_size}, n_lstm_layers, "
                f"n_envs={n_envs}, lstm_hidden_size): pass RecurrentPPO's (n_steps, layers, n_envs, hidden)."
            )
        # RolloutBuffer.__init__ is skipped on purpose: it would allocate numpy arrays that are never used.
        BaseBuffer.__init__(self, buffer_size, observation_space, action_space, device, n_envs=n_envs)
        self.hidden_state_shape = hidden_state_shape
        self.gae_lambda, self.gamma = gae_lambda, gamma
        self._rollout = TensorDictRollout(self._allocate(), observation_space, action_space)
        # The state leaves viewed time-major, (T, n_envs, n_lstm_layers, hidden): step t's slot of each is [t].
        self._state_slots = [self.tensordict.get(key).transpose(0, 1) for key in STATE_KEYS]
        self._env_change = self._sequence_cuts = env_changes(n_envs, buffer_size)
        self.reset()

    @staticmethod
    def _check_observation_space(observation_space: spaces.Space) -> None:
        st.check_observation_kind(observation_space, _BUFFER, _DICT_BUFFER, False)

    def _allocate(self) -> TensorDict:
        """The other buffers' storage (:func:`~torchrl_mask.rollout.storage.allocate_rollout`) and the LSTM states."""
        storage = st.allocate_rollout(
            self.buffer_size, self.n_envs, self.observation_space, self.action_space, self.device
        )
        _, layers, _, hidden = self.hidden_state_shape
        for key in STATE_KEYS:
            storage.set(key, torch.zeros(self.n_envs, self.buffer_size, layers, hidden, device=self.device))
        return storage

    @property
    def tensordict(self) -> TensorDict:
        """The rollout: batch size ``(n_envs, buffer_size)``, keys as in the module table."""
        return self._rollout.tensordict

    def reset(self) -> None:
        """Start a new rollout: ``pos`` back to 0, ``full`` False; the storage is reused, not reallocated."""
        BaseBuffer.reset(self)
        self.pending_masks = None
        self._sequence_cuts = self._env_change

    def add(  # type: ignore[override]
        self,
        obs: Any,
        action: Any,
        reward: Any,
        episode_start: Any,
        value: torch.Tensor,
        log_prob: torch.Tensor,
        *,
        lstm_states: RNNStates,
        action_masks: Any = None,
    ) -> None:
        """Add one step of all envs, with the LSTM states it started from and its masks, in SB3's order.

        Everything is checked before anything is written (as :meth:`torchrl_mask.MaskableRolloutBuffer.add`).

        :param obs: observation, ``(n_envs, *obs_shape)`` (a dict of them for Dict spaces).
        :param action: action, ``(n_envs, action_dim)`` or ``(n_envs,)``.
        :param reward: reward, ``(n_envs,)``.
        :param episode_start: whether ``obs`` begins an episode, ``(n_envs,)``.
        :param value: ``V(obs)``, ``(n_envs, 1)``.
        :param log_prob: log-probability of ``action``, ``(n_envs,)``.
        :param lstm_states: the states before the step, each ``(n_lstm_layers, n_envs, lstm_hidden_size)``.
        :param action_masks: the masks the action was drawn under, ``(n_envs, mask_dims)``; None:
            :attr:`pending_masks`, else every action allowed.
        :raises RuntimeError: the buffer already holds ``buffer_size`` steps.
        :raises ValueError: a field of the wrong shape or value (named), as the other buffers raise.
        """
        if self.full:
            raise RuntimeError(
                f"add() past capacity: the buffer holds buffer_size={self.buffer_size} steps per env and all "
                "are filled. Call reset() to start a new rollout."
            )
        states = self._checked_states(lstm_states)
        masks = self.pending_masks if action_masks is None else action_masks
        fields = (action, reward, episode_start, value, log_prob)
        obs_items = self._rollout.layout.split(obs)
        self._rollout.write_step(self.pos, obs_items, fields, masks, check_masks=True, check_values=True)
        for slots, state in zip(self._state_slots, states, strict=True):
            slots[self.pos].copy_(state.detach().transpose(0, 1))
        self.pending_masks = None
        self.pos += 1
        self.full = self.pos == self.buffer_size

    def _checked_states(self, lstm_states: RNNStates) -> tuple[torch.Tensor, ...]:
        """The four states in :data:`STATE_KEYS` order, or a ValueError naming one of the wrong shape."""
        _, layers, n_envs, hidden = self.hidden_state_shape
        tensors = (*lstm_states.pi, *lstm_states.vf)
        for name, tensor in zip(("pi[0]", "pi[1]", "vf[0]", "vf[1]"), tensors, strict=True):
            if tensor.shape != (layers, n_envs, hidden):
                raise ValueError(
                    f"lstm_states.{name} has shape {tuple(tensor.shape)}, expected (n_lstm_layers={layers}, "
                    f"n_envs={n_envs}, lstm_hidden_size={hidden}) as hidden_state_shape says."
                )
        return tensors

    def compute_returns_and_advantage(self, last_values: torch.Tensor, dones: np.ndarray) -> None:
        """GAE(lambda) advantages and TD(lambda) returns by TorchRL's function, as the other buffers compute them.

        :param last_values: ``V`` of the observation after the last step, ``(n_envs, 1)``.
        :param dones: whether the last step ended an episode, ``(n_envs,)``.
        :raises RuntimeError: the rollout is not full.
        """
        if not self.full:
            raise RuntimeError(
                f"compute_returns_and_advantage() needs a full rollout: {self.pos} of buffer_size="
                f"{self.buffer_size} steps were added. Add the remaining steps first."
            )
        self._rollout.bootstrap(last_values, dones)
        self._rollout.advantage(self.gamma, self.gae_lambda, "loop", truncations=False)

    def extend(
        self,
        batch: TensorDictBase,
        observation_keys: Sequence[NestedKey] | None = None,
        reward_key: NestedKey = st.NEXT_REWARD,
        episode_starts: torch.Tensor | np.ndarray | None = None,
        sequence_starts: torch.Tensor | np.ndarray | None = None,
    ) -> None:
        """Fill the whole rollout from one TorchRL collector batch and compute GAE, as
        :meth:`torchrl_mask.MaskableRolloutBuffer.extend` does (a truncated step bootstraps from
        ``("next", "state_value")``), with the LSTM states each step started from.

        ``sequence_starts`` cuts sequences where no episode starts, for rows that lay several trajectories end to
        end (self-play's seats, :mod:`torchrl_mask.games.recurrent_selfplay`): there the LSTM restarts from the
        stored state (not zeros, as at an episode start), as sb3-contrib's does at each env's first step.

        :param batch: a collector batch ``(n_envs, buffer_size)`` (or flat env-major) with the keys
            :mod:`torchrl_mask.rollout.batches` lists and the states under :data:`STATE_KEYS`, each
            ``(*B, n_lstm_layers, lstm_hidden_size)``, as
            :class:`~torchrl_mask.torchrl.recurrent_policy.MaskableRecurrentPolicyModule` reads them.
        :param observation_keys: the batch key of each observation leaf; None: the default keys.
        :param reward_key: where the reward is, ``(*B, 1)``.
        :param episode_starts: whether each env's first step begins an episode, ``(n_envs,)``; used only when the
            batch has no ``"is_init"``.
        :param sequence_starts: bool ``(n_envs, buffer_size)``, where a sequence starts from its stored state;
            None: only at each env's first step and the episode starts, as sb3-contrib cuts them.
        :raises RuntimeError: the buffer already holds steps (call ``reset()`` first).
        :raises ValueError: as ``MaskableRolloutBuffer.extend``, or a state missing or of the wrong shape. Nothing
            is written on any error.
        """
        if self.pos != 0 or self.full:
            raise RuntimeError(
                f"extend() fills a whole rollout, but the buffer already holds {self.pos} steps per env. "
                "Call reset() first."
            )
        _, layers, _, hidden = self.hidden_state_shape
        states = batch_states(batch, STATE_KEYS, (layers, hidden))
        keys = {"observation_keys": observation_keys, "reward_key": reward_key, "episode_starts": episode_starts}
        cuts = self._env_change
        if sequence_starts is not None:
            starts = np.asarray(to_numpy(torch.as_tensor(sequence_starts)), dtype=bool)
            if starts.size != cuts.size:
                raise ValueError(
                    f"sequence_starts has shape {starts.shape}; give one flag per step, (n_envs="
                    f"{self.n_envs}, buffer_size={self.buffer_size})."
                )
            cuts = cuts | starts.reshape(cuts.shape)
        self._rollout.write_batch(batch, check_masks=True, check_values=True, **keys)
        self._sequence_cuts = cuts
        for key, state in zip(STATE_KEYS, states, strict=True):
            self.tensordict.get(key).copy_(state.reshape(self.tensordict.get(key).shape))
        self._rollout.advantage(self.gamma, self.gae_lambda, "loop", truncations=True)
        self.pos, self.full = self.buffer_size, True

    def get(self, batch_size: int | None = None) -> Generator[Any, None, None]:
        """sb3-contrib's minibatches of whole sequences, with their masks (the same ones under one numpy seed).

        :param batch_size: steps per minibatch before padding; None: the whole rollout in one.
        :return: a generator of the buffer's samples namedtuples.
        :raises RuntimeError: the rollout is not full.
        """
        if not self.full:
            raise RuntimeError(
                f"get() needs a full rollout: {self.pos} of buffer_size={self.buffer_size} steps were added. "
                "Add the remaining steps and call compute_returns_and_advantage() first."
            )
        total = self.buffer_size * self.n_envs
        for batch_inds in minibatch_orders(split_order(total), total if batch_size is None else batch_size):
            yield self._get_samples(batch_inds, self._sequence_cuts)

    def _get_samples(self, batch_inds: np.ndarray, env_change: np.ndarray, env: Any = None) -> Any:  # type: ignore[override]
        """The minibatch of the given env-major flat rows, cut into padded sequences (sb3-contrib's hook).

        :param batch_inds: rows of the flat rollout, in order.
        :param env_change: True at each env's first row.
        :param env: unused (sb3-contrib ignores it too).
        :return: the samples namedtuple.
        """
        starts = self.tensordict.get(st.IS_INIT).reshape(-1)
        cut = padded_rows(batch_inds, to_numpy(starts), env_change, self.device)
        flat = self._flat_leaves()
        obs = [gather_padded(leaf, cut) for leaf in flat["observations"]]
        states = [self._start_states(leaf, cut) for leaf in flat["states"]]
        padded = {name: gather_padded(flat[name], cut, dtype=torch.float32) for name in SCALAR_FIELDS}
        self.last_action_masks = gather_padded(flat["action_masks"], cut, 1.0, torch.float32)
        return self._samples_type(
            observations=self._rollout.layout.pack(obs),
            actions=gather_padded(flat["actions"], cut),
            **padded,
            lstm_states=RNNStates((states[0], states[1]), (states[2], states[3])),
            mask=cut.valid.to(torch.float32),
            action_masks=self.last_action_masks,
        )

    @staticmethod
    def _start_states(flat: torch.Tensor, cut: PaddedRows) -> torch.Tensor:
        """Each sequence's first LSTM state, ``(n_lstm_layers, n_seq, hidden)``."""
        return flat.index_select(0, cut.starts).transpose(0, 1).contiguous()

    def _flat_leaves(self) -> dict[str, Any]:
        """The leaves as env-major flat views ``(n_envs * buffer_size, ...)``: no copy."""
        total, rollout = self.buffer_size * self.n_envs, self._rollout
        flat: dict[str, Any] = {name: rollout.leaves[key].reshape(total) for name, key in SCALAR_FIELDS.items()}
        flat["observations"] = [leaf.reshape(total, *leaf.shape[2:]) for leaf in rollout.observations]
        flat["actions"] = rollout.leaves[st.ACTION].reshape(total, -1)
        flat["action_masks"] = rollout.leaves[st.ACTION_MASK].reshape(total, -1)
        flat["states"] = [self.tensordict.get(key).reshape(total, *self.hidden_state_shape[1::2]) for key in STATE_KEYS]
        return flat


class MaskableRecurrentDictRolloutBuffer(MaskableRecurrentRolloutBuffer):
    """sb3-contrib's ``RecurrentDictRolloutBuffer`` with the action mask of every step, stored in a TensorDict:
    each observation leaf under ``("observation", *keys)`` in its own dtype; ``get`` yields
    :class:`MaskableRecurrentDictRolloutBufferSamples`.

    :param buffer_size: steps per env in one rollout (``n_steps``).
    :param observation_space: a Dict space whose leaves are Box, Discrete, MultiDiscrete or MultiBinary.
    :param action_space: a Discrete, MultiDiscrete or MultiBinary action space.
    :param hidden_state_shape: sb3-contrib's ``(n_steps, n_lstm_layers, n_envs, lstm_hidden_size)``.
    :param device: where the rollout and the minibatches live.
    :param gae_lambda: GAE's lambda.
    :param gamma: the discount factor.
    :param n_envs: envs stepped together.
    :raises TypeError: an action space that cannot be masked, or an observation space that is not a Dict.
    """

    _samples_type = MaskableRecurrentDictRolloutBufferSamples
    observation_space: spaces.Dict

    @staticmethod
    def _check_observation_space(observation_space: spaces.Space) -> None:
        st.check_observation_kind(observation_space, _BUFFER, _DICT_BUFFER, True)

    @property
    def observations(self) -> dict[str, Any]:  # type: ignore[override]
        """Observations as sb3-contrib's flattened arrays: ``{key: (n_envs * buffer_size, *shape)}``."""
        total = self.buffer_size * self.n_envs
        leaves = [to_numpy(leaf.reshape(total, *leaf.shape[2:])) for leaf in self._rollout.observations]
        return self._rollout.layout.pack(leaves)


# The Dict buffer is registered with sb3-contrib's (BaseBuffer is an ABC), so RecurrentPPO's isinstance checks and
# code that looks for a RecurrentDictRolloutBuffer find it where they expect it.
RecurrentDictRolloutBuffer.register(MaskableRecurrentDictRolloutBuffer)
