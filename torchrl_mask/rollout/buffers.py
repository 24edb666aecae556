"""sb3-contrib's maskable rollout buffers, with the rollout in one TensorDict.

:class:`MaskableRolloutBuffer` and :class:`MaskableDictRolloutBuffer` keep sb3-contrib's API to the letter
(constructor, ``reset``/``add``/``compute_returns_and_advantage``/``get``, the SB3 attributes, the
minibatch namedtuples) and store the rollout in :attr:`MaskableRolloutBuffer.tensordict` (see
:mod:`torchrl_mask.rollout.storage`). The two differ in one thing only: how observations are laid out.

Example:
    >>> import numpy as np, torch
    >>> from gymnasium import spaces
    >>> from torchrl_mask import MaskableRolloutBuffer
    >>> buf = MaskableRolloutBuffer(4, spaces.Box(-1, 1, (3,)), spaces.Discrete(5), device="cpu", n_envs=2)
    >>> for _ in range(4):
    ...     buf.add(np.zeros((2, 3)), np.array([1, 2]), np.ones(2), np.zeros(2), torch.zeros(2, 1),
    ...             torch.zeros(2), action_masks=np.ones((2, 5), dtype=bool))
    >>> buf.compute_returns_and_advantage(last_values=torch.zeros(2, 1), dones=np.zeros(2))
    >>> batch = next(buf.get(batch_size=8))
    >>> tuple(batch.observations.shape), batch.action_masks.dtype
    ((8, 3), torch.float32)
"""

from __future__ import annotations

import numbers
from collections.abc import Generator, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch
from gymnasium import spaces
from sb3_contrib.common.maskable import buffers as sb3c_buffers
from sb3_contrib.common.maskable.buffers import (
    MaskableDictRolloutBufferSamples,
    MaskableRolloutBufferSamples,
)
from stable_baselines3.common.buffers import BaseBuffer
from tensordict import TensorDict, TensorDictBase
from tensordict.utils import NestedKey

from torchrl_mask.rollout import storage as st
from torchrl_mask.rollout.advantage import GaeMethod, check_gae_method
from torchrl_mask.rollout.masks import mask_spec
from torchrl_mask.rollout.sb3_arrays import ArrayLike, SB3Array, float_masks, to_numpy
from torchrl_mask.rollout.tensordict_rollout import TensorDictRollout

__all__ = [
    "MaskableDictRolloutBuffer",
    "MaskableDictRolloutBufferSamples",
    "MaskableRolloutBuffer",
    "MaskableRolloutBufferSamples",
]


class MaskableRolloutBuffer(sb3c_buffers.MaskableRolloutBuffer):
    """Rollout buffer for maskable on-policy algorithms (MaskablePPO), stored in a TensorDict.

    It holds ``buffer_size`` steps of ``n_envs`` envs collected with the current policy, with each step's
    action mask, and is discarded after the policy update. Drop-in for sb3-contrib's buffer of the same
    name: same constructor, methods, attributes and minibatches.

    SB3's arrays (``rewards``, ``values``, ``episode_starts``, ``action_masks`` ...) read and write the storage
    (:class:`torchrl_mask.rollout.sb3_arrays.SB3Array`): on the CPU most are numpy views of it; ``episode_starts``
    and ``action_masks`` (bool in the storage, float32 in sb3-contrib) are float32 copies whose item assignments
    (``buf.episode_starts[1, :] = 1``) are written back, so that GAE and minibatches see them.

    :param buffer_size: steps per env in one rollout (``n_steps`` of the algorithm).
    :param observation_space: a Box, Discrete, MultiDiscrete or MultiBinary observation space.
    :param action_space: a Discrete, MultiDiscrete (1-D ``nvec``) or 1-D MultiBinary action space.
    :param device: where the rollout and the minibatches live; ``"auto"`` picks CUDA when available.
    :param gae_lambda: factor for the bias/variance trade-off of GAE; 1 gives Monte-Carlo advantages.
    :param gamma: discount factor.
    :param n_envs: number of parallel envs.
    :param check_masks: check in ``add()`` that each mask row (each sub-action group) allows an action;
        False skips the check for speed (and on CUDA, the device sync it costs).
    :param check_values: check in ``add()`` and ``extend()`` that rewards, values and log-probabilities are
        finite, that each action is in its space's range, integral and allowed by its own mask (when
        ``check_masks``), and that no observation value wraps around an integer leaf (300 into uint8). On by
        default; False skips these checks (shapes and dtypes are always checked).
    :param storage: ``"memory"`` (tensors on ``device``) or ``"memmap"`` (memory-mapped files on the host,
        for rollouts larger than RAM).
    :param memmap_dir: folder in which the rollout gets a memmap folder of its own, removed with the buffer;
        the system's temporary folder when None.
    :param gae_method: which of TorchRL's GAE functions computes the advantages (:mod:`torchrl_mask.rollout.advantage`),
        on the rollout's device: ``"loop"`` (``generalized_advantage_estimate``; on the CPU bit-identical to
        sb3-contrib's) or ``"vec"`` (``vec_generalized_advantage_estimate``, equal to float32 rounding).
    :raises TypeError: an action space that cannot be masked, or a Dict observation space (use
        :class:`MaskableDictRolloutBuffer`).
    """

    _samples_type: type = MaskableRolloutBufferSamples
    _rollout: TensorDictRollout

    observations = SB3Array(st.OBSERVATION)
    actions = SB3Array(st.ACTION, layout="rows")
    rewards = SB3Array(st.NEXT_REWARD, layout="squeeze")
    episode_starts = SB3Array(st.IS_INIT, layout="squeeze", dtype=np.dtype(np.float32))
    values = SB3Array(st.VALUE, layout="squeeze")
    log_probs = SB3Array(st.LOG_PROB)
    advantages = SB3Array(st.ADVANTAGE, layout="squeeze")
    returns = SB3Array(st.VALUE_TARGET, layout="squeeze")
    action_masks = SB3Array(st.ACTION_MASK, dtype=np.dtype(np.float32))

    def __init__(
        self,
        buffer_size: int,
        observation_space: spaces.Space,
        action_space: spaces.Space,
        device: torch.device | str = "auto",
        gae_lambda: float = 1,
        gamma: float = 0.99,
        n_envs: int = 1,
        *,
        check_masks: bool = True,
        check_values: bool = True,
        storage: st.StorageKind = "memory",
        memmap_dir: str | Path | None = None,
        gae_method: GaeMethod = "loop",
    ) -> None:
        for name, size in (("buffer_size", buffer_size), ("n_envs", n_envs)):
            if isinstance(size, bool) or not isinstance(size, numbers.Integral) or size < 1:
                raise ValueError(f"{name} must be an int of at least 1, got {size!r}.")
        self._check_observation_space(observation_space)
        mask_spec(action_space)  # TypeError before SB3 looks at an unmaskable space
        # SB3's BaseBuffer sets the common attributes (pos, full, device, obs_shape, action_dim ...);
        # RolloutBuffer.__init__ is skipped on purpose: it would allocate numpy arrays we never use.
        BaseBuffer.__init__(self, buffer_size, observation_space, action_space, device, n_envs=n_envs)
        self.gae_lambda = gae_lambda
        self.gamma = gamma
        self.check_masks = check_masks
        self.check_values = check_values
        check_gae_method(gae_method)  # an unknown method fails here, not after a whole rollout
        self.gae_method: GaeMethod = gae_method
        self._storage_kind: st.StorageKind = storage
        self._memmap_dir = memmap_dir
        self._allocate()
        self.reset()

    @staticmethod
    def _check_observation_space(observation_space: spaces.Space) -> None:
        st.check_observation_kind(observation_space, "MaskableRolloutBuffer", "MaskableDictRolloutBuffer", False)

    # ------------------------------------------------------------------------------------------ state

    @property
    def tensordict(self) -> TensorDict:
        """The rollout: batch size ``(n_envs, buffer_size)``, keys as in :mod:`torchrl_mask.rollout.storage`."""
        return self._rollout.tensordict

    def reset(self) -> None:
        """Start a new rollout: ``pos`` back to 0, ``full`` False; the storage is reused, not reallocated.

        :raises TypeError: the action space cannot be masked (anything but Discrete, MultiDiscrete and 1-D
            MultiBinary).
        """
        self.mask_dims = mask_spec(self.action_space).size
        BaseBuffer.reset(self)  # pos = 0, full = False

    def _allocate(self) -> None:
        tensordict = st.allocate_rollout(
            self.buffer_size,
            self.n_envs,
            self.observation_space,
            self.action_space,
            self.device,
            storage=self._storage_kind,
            memmap_dir=self._memmap_dir,
        )
        self._rollout = TensorDictRollout(tensordict, self.observation_space, self.action_space)

    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        if self._storage_kind == "memmap":
            # A copy gets its own files: the data travels in memory and __setstate__ writes it to a new folder.
            state["_rollout"] = self.tensordict.to_tensordict()
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        if self._storage_kind == "memmap":
            # Never the original's folder, even one the user named: two buffers must not share files.
            data, self._memmap_dir = state["_rollout"], None
            self._allocate()
            self.tensordict.update_(data)

    # -------------------------------------------------------------------------------------------- add

    def add(  # type: ignore[override]
        self,
        obs: Any,
        action: ArrayLike,
        reward: ArrayLike,
        episode_start: ArrayLike,
        value: torch.Tensor,
        log_prob: torch.Tensor,
        action_masks: np.ndarray | torch.Tensor | None = None,
    ) -> None:
        """Add one step of all envs, in SB3's positional order.

        Every input is checked before anything is written (:class:`torchrl_mask.rollout.steps.StepReader`): a rejected
        call leaves ``pos`` and the data as they were. Inputs may be numpy arrays or tensors on any device.

        :param obs: observation, ``(n_envs, *obs_shape)`` (``(n_envs,)`` allowed for Discrete).
        :param action: action, ``n_envs * action_dim`` entries (``(n_envs,)`` or ``(n_envs, action_dim)``).
        :param reward: reward, ``(n_envs,)``.
        :param episode_start: whether ``obs`` begins an episode, ``(n_envs,)``.
        :param value: ``V(obs)`` from the policy, ``(n_envs, 1)`` or ``(n_envs,)``.
        :param log_prob: log-probability of ``action``, ``(n_envs,)``.
        :param action_masks: masks the action was drawn under, ``(n_envs, mask_dims)``, bool (or 0/1 numbers);
            None means all actions allowed.
        :raises RuntimeError: the buffer already holds ``buffer_size`` steps.
        :raises ValueError: an input of the wrong shape or of a non-numeric dtype (named), an observation key
            missing or unknown, a mask row (sub-action group) that allows no action; with ``check_values``, a
            reward, value or log_prob that is not finite, an action that is out of range, fractional or
            forbidden by its own mask, an observation value that an integer leaf would wrap around.
        """
        if self.full:
            raise RuntimeError(
                f"add() past capacity: the buffer holds buffer_size={self.buffer_size} steps per env and all "
                "are filled. Call reset() to start a new rollout."
            )
        fields = (action, reward, episode_start, value, log_prob)
        obs_items = self._rollout.layout.split(obs)
        self._rollout.write_step(self.pos, obs_items, fields, action_masks, self.check_masks, self.check_values)
        self.pos += 1
        if self.pos == self.buffer_size:
            self.full = True

    # -------------------------------------------------------------------------------------------- GAE

    def compute_returns_and_advantage(self, last_values: torch.Tensor, dones: np.ndarray | torch.Tensor) -> None:
        """Compute GAE(lambda) advantages and TD(lambda) returns by TorchRL's function that ``gae_method`` names
        (by default ``generalized_advantage_estimate``: on the CPU the same bits as sb3-contrib's buffer).

        Fills ``"advantage"``, ``"value_target"`` and the TorchRL inputs ``("next", "state_value")``,
        ``("next", "done")``, ``("next", "terminated")`` of the storage.

        :param last_values: ``V`` of the observation after the last step, ``(n_envs, 1)`` or ``(n_envs,)``.
        :param dones: whether the last step ended an episode, ``(n_envs,)``.
        :raises RuntimeError: the rollout is not full.
        :raises ValueError: ``last_values`` or ``dones`` of the wrong size.
        """
        if not self.full:
            raise RuntimeError(
                f"compute_returns_and_advantage() needs a full rollout: {self.pos} of buffer_size="
                f"{self.buffer_size} steps were added. Add the remaining steps first."
            )
        self._rollout.bootstrap(last_values, dones)
        self._rollout.advantage(self.gamma, self.gae_lambda, self.gae_method, truncations=False)

    # ----------------------------------------------------------------------------------------- extend

    def extend(
        self,
        batch: TensorDictBase,
        observation_keys: Sequence[NestedKey] | None = None,
        reward_key: NestedKey = st.NEXT_REWARD,
        episode_starts: torch.Tensor | np.ndarray | None = None,
    ) -> None:
        """Fill the whole rollout from one TorchRL collector batch and compute GAE, as TorchRL does.

        The collector path's ``add`` (every step at once, no per-step loop) plus
        ``compute_returns_and_advantage``. Truncation stays as TorchRL records it: where a step is
        ``("next", "done")`` but not ``("next", "terminated")`` the advantage bootstraps from
        ``("next", "state_value")``, the value of the final observation; where terminated it does not.
        (SB3's ``add`` path folds the same bootstrap into the reward instead; the advantages are equal.)

        The keys it reads, and their shapes, are listed in :mod:`torchrl_mask.rollout.batches`.

        :param batch: a collector batch: ``(n_envs, buffer_size)`` (env-major, as ``MultiSyncCollector``
            stacks it), or flat ``(n_envs * buffer_size,)`` holding each env's steps contiguously (a
            ``Collector`` over one env gives ``(buffer_size,)``). Any device; copied into the storage.
        :param observation_keys: the batch key of each observation leaf, in the order of the observation
            space's leaves; None means ``"observation"`` for a non-Dict space and the Dict's key paths at the
            top level (where TorchRL's ``GymWrapper`` puts them) for a Dict space.
        :param reward_key: where the reward is, ``(*B, 1)``.
        :param episode_starts: whether each env's first step in the batch begins an episode, ``(n_envs,)``;
            used only when the batch has no ``"is_init"`` entry.
        :raises RuntimeError: the buffer already holds steps (call ``reset()`` first).
        :raises TypeError: ``batch`` is not a TensorDict.
        :raises ValueError: the batch's size does not fit the buffer, a key is missing, an entry has the wrong
            size (masks of another width than the action space needs), rows are not one env's steps in order, or
            a mask allows no action. Nothing is written on any error.
        """
        if self.pos != 0 or self.full:
            raise RuntimeError(
                f"extend() fills a whole rollout, but the buffer already holds {self.pos} steps per env. "
                "Call reset() first."
            )
        self._rollout.write_batch(
            batch,
            self.check_masks,
            self.check_values,
            observation_keys=observation_keys,
            reward_key=reward_key,
            episode_starts=episode_starts,
        )
        self._rollout.advantage(self.gamma, self.gae_lambda, self.gae_method, truncations=True)
        self.pos = self.buffer_size
        self.full = True

    # -------------------------------------------------------------------------------------------- get

    def get(self, batch_size: int | None = None) -> Generator[Any, None, None]:
        """Minibatches over the whole rollout in a random order, as sb3-contrib draws it.

        The order is ``np.random.permutation(buffer_size * n_envs)`` over the env-major flat order, so under
        one numpy seed the minibatches equal sb3-contrib's, field for field. No copy of the whole rollout is
        made: large leaves (images) are gathered per minibatch, small ones shuffled once per call.

        :param batch_size: rows per minibatch (the last may be smaller); None yields the whole rollout once.
        :return: a generator of :class:`MaskableRolloutBufferSamples` (or the Dict variant): observations
            ``(B, *obs_shape)`` in the space's dtype, actions ``(B, action_dim)`` in the action space's dtype,
            old_values, old_log_prob, advantages, returns ``(B,)`` float32, action_masks ``(B, mask_dims)``
            float32.
        :raises RuntimeError: the rollout is not full.
        :raises ValueError: ``batch_size`` is not a positive int.
        """
        if not self.full:
            raise RuntimeError(
                f"get() needs a full rollout: {self.pos} of buffer_size={self.buffer_size} steps were added. "
                "Add the remaining steps and call compute_returns_and_advantage() first."
            )
        total = self.buffer_size * self.n_envs
        if batch_size is not None and (
            isinstance(batch_size, bool) or not isinstance(batch_size, (int, np.integer)) or batch_size < 1
        ):
            raise ValueError(f"batch_size must be a positive int or None, got {batch_size!r}.")
        indices = np.random.permutation(total)
        return self._minibatches(indices, total if batch_size is None else int(batch_size))

    def _minibatches(self, indices: np.ndarray, batch_size: int) -> Generator[Any, None, None]:
        columns = self._rollout.columns(indices, batch_size)
        n_obs = len(self._rollout.observations)
        # One Python call per minibatch beyond the tensors themselves: the namedtuple's. map, not zip: see
        # torchrl_mask.rollout.minibatches.
        yield from map(self._samples_type, self._rollout.layout.column(columns[:n_obs]), *columns[n_obs:])

    def _get_samples(self, batch_inds: np.ndarray, env: Any = None) -> Any:
        """The minibatch of the given env-major flat indices (SB3's hook behind ``sample``).

        :param batch_inds: indices into ``buffer_size * n_envs`` rows, env-major.
        :param env: unused (sb3-contrib ignores it too).
        :return: the samples namedtuple.
        """
        index = torch.as_tensor(np.asarray(batch_inds), dtype=torch.long, device=self.device)
        rows = [tensor.index_select(0, index) for tensor in self._rollout.flat_leaves()]  # flat_leaves' order
        rows[-1] = float_masks(rows[-1])
        n_obs = len(self._rollout.observations)
        return self._samples_type(self._rollout.layout.pack(rows[:n_obs]), *rows[n_obs:])


# Also sb3-contrib's Dict buffer, so that code checking isinstance(buf, MaskableDictRolloutBuffer) (or SB3's
# DictRolloutBuffer) finds it; every method that class defines is overridden by MaskableRolloutBuffer.
class MaskableDictRolloutBuffer(MaskableRolloutBuffer, sb3c_buffers.MaskableDictRolloutBuffer):  # type: ignore[misc]
    """Dict-observation rollout buffer for maskable on-policy algorithms, stored in a TensorDict.

    Extends :class:`MaskableRolloutBuffer` to Dict observation spaces, nested Dicts included: each leaf
    lives under ``("observation", *keys)`` in its own dtype (uint8 images stay uint8). Minibatch
    observations are a dict of tensors (nested dicts for nested spaces). Drop-in for sb3-contrib's buffer
    of the same name.

    :param buffer_size: steps per env in one rollout (``n_steps`` of the algorithm).
    :param observation_space: a Dict space whose leaves are Box, Discrete, MultiDiscrete or MultiBinary.
    :param action_space: a Discrete, MultiDiscrete (1-D ``nvec``) or 1-D MultiBinary action space.
    :param device: where the rollout and the minibatches live; ``"auto"`` picks CUDA when available.
    :param gae_lambda: factor for the bias/variance trade-off of GAE; 1 gives Monte-Carlo advantages.
    :param gamma: discount factor.
    :param n_envs: number of parallel envs.
    :param check_masks: check in ``add()`` that each mask row (each sub-action group) allows an action.
    :param check_values: check values in ``add()`` and ``extend()`` (see :class:`MaskableRolloutBuffer`).
    :param storage: ``"memory"`` or ``"memmap"``.
    :param memmap_dir: folder in which the rollout gets a memmap folder of its own, removed with the buffer;
        the system's temporary folder when None.
    :param gae_method: ``"loop"`` or ``"vec"`` (see :class:`MaskableRolloutBuffer`).
    :raises TypeError: an action space that cannot be masked, or an observation space that is not a Dict.
    """

    _samples_type = MaskableDictRolloutBufferSamples

    observation_space: spaces.Dict

    @staticmethod
    def _check_observation_space(observation_space: spaces.Space) -> None:
        st.check_observation_kind(observation_space, "MaskableRolloutBuffer", "MaskableDictRolloutBuffer", True)

    @property
    def observations(self) -> dict[str, Any]:  # type: ignore[override]
        """Observations as SB3 holds them: ``{key: (buffer_size, n_envs, *shape)}``, nested for nested Dicts."""
        return self._rollout.layout.pack([to_numpy(leaf.transpose(0, 1)) for leaf in self._rollout.observations])
