"""``MaskableRecurrentPPO``'s policy as a TorchRL policy: :class:`MaskableRecurrentPolicyModule` carries the LSTM
states in the collector's TensorDict.

At each step it reads the observation keys, the bool ``"action_mask"``, ``"is_init"`` (TorchRL's ``InitTracker``
writes it: True at an episode's first step, where the states restart from zeros, as sb3-contrib's
``episode_starts`` reset them) and the states the step starts from, and writes ``"action"``,
``"action_log_prob"``, ``"state_value"`` and the states after the step under ``"next"``, which TorchRL's
collectors move to the root for the next step (``step_mdp``). The state keys are the recurrent rollout's
(:mod:`torchrl_mask.rollout.recurrent_buffers`), one level per network, as TorchRL's ``LSTMModule`` names its
``"recurrent_state_h"`` and ``"recurrent_state_c"``; each is ``(*B, n_lstm_layers, lstm_hidden_size)``. The env
needs the module's :meth:`~MaskableRecurrentPolicyModule.make_tensordict_primer` (so that the states are in its
specs and the collector carries them) and an ``InitTracker``, as for ``LSTMModule``.
"""

from __future__ import annotations

import inspect
from collections.abc import Sequence
from typing import Any

import torch
from sb3_contrib.common.recurrent.policies import RecurrentActorCriticPolicy
from sb3_contrib.common.recurrent.type_aliases import RNNStates
from tensordict import TensorDictBase
from tensordict.nn import InteractionType, TensorDictModule
from tensordict.nn.probabilistic import interaction_type
from tensordict.utils import NestedKey
from torch import nn
from torchrl.data import Unbounded
from torchrl.envs import TensorDictPrimer

from torchrl_mask.rollout import storage as st
from torchrl_mask.rollout.recurrent_buffers import STATE_KEYS
from torchrl_mask.torchrl.policy import default_observation_keys

__all__ = ["MaskableRecurrentPolicyModule"]


class _RecurrentForward(nn.Module):
    """Calls the recurrent policy's ``forward`` on one step of ``n`` envs, the states batch-first."""

    def __init__(self, policy: RecurrentActorCriticPolicy) -> None:
        super().__init__()
        self.policy = policy
        self._n_leaves = len(st.observation_leaves(policy.observation_space))
        self._paths = list(st.observation_leaves(policy.observation_space))

    @torch.no_grad()
    def forward(self, *inputs: torch.Tensor) -> tuple[torch.Tensor, ...]:
        observations, (mask, is_init, *states) = inputs[: self._n_leaves], inputs[self._n_leaves :]
        batch = mask.shape[:-1]
        rows = mask.reshape(-1, mask.shape[-1])
        obs: Any = observations[0].reshape(len(rows), *observations[0].shape[len(batch) :])
        if self._paths != [()]:
            flat = [leaf.reshape(len(rows), *leaf.shape[len(batch) :]) for leaf in observations]
            obs = st.nest_leaves(self._paths, flat)
        layers_first = [state.reshape(len(rows), *state.shape[-2:]).transpose(0, 1).contiguous() for state in states]
        lstm_states = RNNStates((layers_first[0], layers_first[1]), (layers_first[2], layers_first[3]))
        starts = is_init.reshape(len(rows)).float()
        deterministic = interaction_type() in (InteractionType.DETERMINISTIC, InteractionType.MODE)
        actions, values, log_prob, after = self.policy(obs, lstm_states, starts, deterministic, action_masks=rows)
        nexts = [part.transpose(0, 1).reshape((*batch, *part.shape[::2])) for net in after for part in net]
        action_shape = tuple(self.policy.action_space.shape or ())
        return actions.reshape((*batch, *action_shape)), log_prob.reshape(batch), values.reshape((*batch, 1)), *nexts


class MaskableRecurrentPolicyModule(TensorDictModule):
    """A ``MaskableRecurrentPPO``'s LSTM policy as a TorchRL policy, its states carried in the TensorDict.

    :param policy: the model's policy (``model.policy``), a masked sb3-contrib ``RecurrentActorCriticPolicy``.
    :param observation_keys: the env's key for each leaf of ``policy.observation_space``, in leaf order; None
        means ``"observation"``, or the Dict's keys.
    :param mask_key: the env's mask entry, bool ``(*B, mask_dims)``.
    :raises TypeError: ``policy`` is not a recurrent policy that takes masks (MaskableRecurrentPPO's).
    """

    def __init__(
        self,
        policy: RecurrentActorCriticPolicy,
        observation_keys: Sequence[NestedKey] | None = None,
        mask_key: NestedKey = st.ACTION_MASK,
    ) -> None:
        takes_masks = "action_masks" in inspect.signature(policy.forward).parameters
        if not (isinstance(policy, RecurrentActorCriticPolicy) and takes_masks):
            raise TypeError(
                f"MaskableRecurrentPolicyModule needs MaskableRecurrentPPO's policy (model.policy), got "
                f"{type(policy).__name__}; for MaskablePPO use MaskablePolicyModule."
            )
        keys = (
            list(observation_keys)
            if observation_keys is not None
            else default_observation_keys(policy.observation_space)
        )
        super().__init__(
            _RecurrentForward(policy),
            in_keys=[*keys, mask_key, st.IS_INIT, *STATE_KEYS],
            out_keys=[st.ACTION, st.LOG_PROB, st.VALUE, *(("next", *key) for key in STATE_KEYS)],
        )
        self.observation_keys: list[NestedKey] = keys

    @property
    def policy(self) -> RecurrentActorCriticPolicy:
        """The SB3 policy this module runs."""
        return self.module.policy

    def make_tensordict_primer(self) -> TensorDictPrimer:
        """The transform that puts the LSTM states, zeros, in the env's specs (as ``LSTMModule``'s does).

        :return: a ``TensorDictPrimer``: ``env.append_transform(primer)`` (``masked_gym_env`` has the ``InitTracker``).
        """
        layers, _, size = self.policy.lstm_hidden_state_shape
        specs = {key: Unbounded(shape=(layers, size), dtype=torch.float32) for key in STATE_KEYS}
        return TensorDictPrimer(specs, expand_specs=True)

    def forward(self, tensordict: TensorDictBase, *args: Any, **kwargs: Any) -> TensorDictBase:
        """One step: actions, log-probs and values, and the next LSTM states under ``"next"``.

        :param tensordict: the step(s), batch dims ``B``: observation keys, the mask, ``"is_init"`` ``(*B, 1)``
            and the states (zeros where absent, as at a rollout's first step).
        :param args: passed to ``TensorDictModule.forward``.
        :param kwargs: passed to ``TensorDictModule.forward``.
        :return: ``tensordict``, with the outputs set.
        """
        batch = tensordict.batch_size
        layers, _, size = self.policy.lstm_hidden_state_shape
        for key in STATE_KEYS:
            if tensordict.get(key, None) is None:
                tensordict.set(key, torch.zeros((*batch, layers, size)))
        if tensordict.get(st.IS_INIT, None) is None:
            tensordict.set(st.IS_INIT, torch.ones((*batch, 1), dtype=torch.bool))
        return super().forward(tensordict, *args, **kwargs)
