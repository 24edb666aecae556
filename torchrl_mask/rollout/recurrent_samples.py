"""The minibatches of :mod:`torchrl_mask.rollout.recurrent_buffers`: sb3-contrib's recurrent samples namedtuples
with the steps' ``action_masks`` (re-exported there).
"""

from __future__ import annotations

from typing import NamedTuple

import torch
from sb3_contrib.common.recurrent.type_aliases import RNNStates
from tensordict.utils import NestedKey

from torchrl_mask.rollout import storage as st

__all__ = ["SCALAR_FIELDS", "MaskableRecurrentDictRolloutBufferSamples", "MaskableRecurrentRolloutBufferSamples"]

#: The samples' scalar fields, each gathered from one ``(n_envs, T, 1)`` leaf of the rollout.
SCALAR_FIELDS: dict[str, NestedKey] = {
    "old_values": st.VALUE,
    "old_log_prob": st.LOG_PROB,
    "advantages": st.ADVANTAGE,
    "returns": st.VALUE_TARGET,
    "episode_starts": st.IS_INIT,
}


class MaskableRecurrentRolloutBufferSamples(NamedTuple):
    """A minibatch of whole sequences: sb3-contrib's ``RecurrentRolloutBufferSamples`` and ``action_masks``.

    Every tensor's batch dimension is ``n_seq * max_length`` (padded sequences, flattened in order); the LSTM
    states are each sequence's first, ``(n_lstm_layers, n_seq, lstm_hidden_size)``; ``action_masks`` is
    ``(n_seq * max_length, mask_dims)`` float32.
    """

    observations: torch.Tensor
    actions: torch.Tensor
    old_values: torch.Tensor
    old_log_prob: torch.Tensor
    advantages: torch.Tensor
    returns: torch.Tensor
    lstm_states: RNNStates
    episode_starts: torch.Tensor
    mask: torch.Tensor
    action_masks: torch.Tensor


class MaskableRecurrentDictRolloutBufferSamples(NamedTuple):
    """A minibatch of whole sequences of ``Dict`` observations (a dict of tensors), with ``action_masks``."""

    observations: dict[str, torch.Tensor]
    actions: torch.Tensor
    old_values: torch.Tensor
    old_log_prob: torch.Tensor
    advantages: torch.Tensor
    returns: torch.Tensor
    lstm_states: RNNStates
    episode_starts: torch.Tensor
    mask: torch.Tensor
    action_masks: torch.Tensor
