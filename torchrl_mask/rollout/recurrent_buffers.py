"""sb3-contrib's recurrent rollout buffers with an ``action_masks`` array.

The buffers are sb3-contrib's ``RecurrentRolloutBuffer`` and ``RecurrentDictRolloutBuffer``: the same storage,
the same minibatches of whole sequences (the same split of the rollout, the same padding, the same sequence masks
under one seed), and one more field in each minibatch, ``action_masks``, padded like the rest (with ones: the
padded steps are left out of the loss by ``mask``). ``add`` takes ``action_masks=`` as sb3-contrib's
``MaskableRolloutBuffer`` does; ``RecurrentPPO``'s rollout loop, which cannot pass it, leaves them to
:attr:`MaskableRecurrentRolloutBuffer.mask_source`. The rollout lives in sb3-contrib's NumPy arrays here, not in
the package's TensorDict storage.

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
>>> batch.action_masks.shape, batch.mask.shape
(torch.Size([2, 4]), torch.Size([2]))
"""

from __future__ import annotations

from collections.abc import Callable, Generator
from typing import Any, NamedTuple

import numpy as np
import torch as th
from gymnasium import spaces
from sb3_contrib.common.recurrent.buffers import RecurrentDictRolloutBuffer, RecurrentRolloutBuffer
from sb3_contrib.common.recurrent.type_aliases import RNNStates
from stable_baselines3.common.type_aliases import TensorDict
from stable_baselines3.common.vec_env import VecNormalize


class MaskableRecurrentRolloutBufferSamples(NamedTuple):
    """A minibatch of whole sequences: sb3-contrib's ``RecurrentRolloutBufferSamples`` and ``action_masks``.

    Every tensor's batch dimension is ``n_seq * max_length`` (padded sequences, flattened in order).
    """

    observations: th.Tensor
    actions: th.Tensor
    old_values: th.Tensor
    old_log_prob: th.Tensor
    advantages: th.Tensor
    returns: th.Tensor
    lstm_states: RNNStates
    episode_starts: th.Tensor
    mask: th.Tensor
    action_masks: th.Tensor


class MaskableRecurrentDictRolloutBufferSamples(NamedTuple):
    """A minibatch of whole sequences of ``Dict`` observations, with ``action_masks``."""

    observations: TensorDict
    actions: th.Tensor
    old_values: th.Tensor
    old_log_prob: th.Tensor
    advantages: th.Tensor
    returns: th.Tensor
    lstm_states: RNNStates
    episode_starts: th.Tensor
    mask: th.Tensor
    action_masks: th.Tensor


def mask_dims(action_space: spaces.Space) -> int:
    """How many mask entries one step has (sb3-contrib's ``MaskableRolloutBuffer`` convention).

    :param action_space: the action space.
    :return: ``n`` (Discrete), ``sum(nvec)`` (MultiDiscrete), ``2 * n`` (MultiBinary), else the flat size.
    """
    if isinstance(action_space, spaces.Discrete):
        return int(action_space.n)
    if isinstance(action_space, spaces.MultiDiscrete):
        return int(sum(action_space.nvec))
    if isinstance(action_space, spaces.MultiBinary):
        return 2 * int(np.prod(action_space.n))
    return int(np.prod(action_space.shape or (1,)))


class _MaskStore:
    """What the two buffers add to their sb3-contrib bases, written once: the mask array, ``add``'s
    ``action_masks=``, and the masks of each minibatch. A buffer names its samples type; the rest is its base's.

    :param buffer_size: steps per env in a rollout.
    :param observation_space: the observation space.
    :param action_space: the action space.
    :param hidden_state_shape: ``(n_steps, n_lstm_layers, n_envs, lstm_hidden_size)``.
    :param device: where the minibatches' tensors go.
    :param gae_lambda: GAE's lambda.
    :param gamma: the discount factor.
    :param n_envs: envs stepped together.
    """

    buffer_size: int
    n_envs: int
    pos: int
    generator_ready: bool
    action_masks: np.ndarray
    _samples_type: Any
    #: The masks of the minibatch ``get`` yielded last, shape ``(n_seq * max_length, mask_dims)``.
    last_action_masks: th.Tensor | None = None

    def __init__(
        self,
        buffer_size: int,
        observation_space: spaces.Space,
        action_space: spaces.Space,
        hidden_state_shape: tuple[int, int, int, int],
        device: th.device | str = "auto",
        gae_lambda: float = 1,
        gamma: float = 0.99,
        n_envs: int = 1,
    ) -> None:
        #: Called for a step's masks when ``add`` is given none (None: all actions legal).
        self.mask_source: Callable[[], Any] | None = None
        self.mask_dims = mask_dims(action_space)
        super().__init__(  # type: ignore[call-arg]
            buffer_size, observation_space, action_space, hidden_state_shape, device, gae_lambda, gamma, n_envs
        )

    def reset(self) -> None:
        """Empty the buffer; every action legal until ``add`` says otherwise."""
        super().reset()  # type: ignore[misc]
        self.action_masks = np.ones((self.buffer_size, self.n_envs, self.mask_dims), dtype=np.float32)

    def add(self, *args: Any, action_masks: np.ndarray | None = None, **kwargs: Any) -> None:
        """sb3-contrib's ``add``, with the step's masks.

        :param args: ``obs, action, reward, episode_start, value, log_prob`` as sb3-contrib's buffer takes them.
        :param action_masks: masks, shape ``(n_envs, mask_dims)``; None: ``mask_source``'s, or all legal.
        :param kwargs: ``lstm_states=`` (required) and the rest of sb3-contrib's keyword arguments.
        """
        if action_masks is None and self.mask_source is not None:
            action_masks = self.mask_source()
        if action_masks is not None:
            self.action_masks[self.pos] = np.asarray(action_masks).reshape((self.n_envs, self.mask_dims))
        super().add(*args, **kwargs)  # type: ignore[misc]

    def get(self, batch_size: int | None = None) -> Generator[Any, None, None]:
        """sb3-contrib's minibatches of whole sequences, each with its ``action_masks``.

        :param batch_size: steps per minibatch before padding; None: the whole rollout.
        :return: a generator of the buffer's samples namedtuples.
        """
        if not self.generator_ready:
            self.action_masks = self.swap_and_flatten(self.action_masks)  # type: ignore[attr-defined]
        yield from super().get(batch_size)  # type: ignore[misc]

    def _get_samples(self, batch_inds: np.ndarray, env_change: np.ndarray, env: VecNormalize | None = None) -> Any:
        samples = super()._get_samples(batch_inds, env_change, env)  # type: ignore[misc]
        masks = self.pad(self.action_masks[batch_inds], padding_value=1.0)  # type: ignore[attr-defined]
        self.last_action_masks = masks.reshape((-1, self.mask_dims))
        return self._samples_type(*samples, action_masks=self.last_action_masks)


class MaskableRecurrentRolloutBuffer(_MaskStore, RecurrentRolloutBuffer):  # type: ignore[misc]
    """sb3-contrib's ``RecurrentRolloutBuffer`` with the action masks of every step; ``get`` yields
    :class:`MaskableRecurrentRolloutBufferSamples`. Arguments: sb3-contrib's (see ``_MaskStore``)."""

    _samples_type = MaskableRecurrentRolloutBufferSamples


class MaskableRecurrentDictRolloutBuffer(_MaskStore, RecurrentDictRolloutBuffer):  # type: ignore[misc]
    """sb3-contrib's ``RecurrentDictRolloutBuffer`` with the action masks of every step; ``get`` yields
    :class:`MaskableRecurrentDictRolloutBufferSamples`. Arguments: sb3-contrib's (see ``_MaskStore``)."""

    _samples_type = MaskableRecurrentDictRolloutBufferSamples
