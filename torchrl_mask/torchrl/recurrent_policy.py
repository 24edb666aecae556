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
specs and the collector carries them; a collector created with ``auto_register_policy_transforms=True`` appends it)
and an ``InitTracker``, as for ``LSTMModule``.

``MaskableRecurrentPPO.learn(collector=...)`` reads such a collector's batches
(:mod:`torchrl_mask.algorithms.recurrent_collector_source`): :meth:`~MaskableRecurrentPolicyModule.add_next_state_value`
bootstraps them from the critic's state after the step, and worker processes receive the policy as they receive
:class:`~torchrl_mask.MaskablePolicyModule`'s (without its optimizer; new weights through
``collector.update_policy_weights_()``). ``MaskablePolicyModule`` refuses the LSTM policy, naming this module: a
module that silently dropped the states would collect from a fresh state at every step.
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
from torchrl_mask.torchrl.policy import default_observation_keys, shipped_policy
from torchrl_mask.torchrl.workers import worker_job_pickled, worker_job_unpickled

__all__ = ["MaskableRecurrentPolicyModule"]


class _RecurrentForward(nn.Module):
    """Calls the recurrent policy's ``forward`` on one step of ``n`` envs, the states batch-first."""

    def __init__(self, policy: RecurrentActorCriticPolicy) -> None:
        super().__init__()
        self.policy = policy
        self._n_leaves = len(st.observation_leaves(policy.observation_space))
        self._paths = list(st.observation_leaves(policy.observation_space))

    def _observation(self, observations: Sequence[torch.Tensor], batch: torch.Size, n_rows: int) -> Any:
        """The observation leaves, batch dims ``batch`` flattened to ``n_rows`` rows, as the policy takes them."""
        flat = [leaf.reshape(n_rows, *leaf.shape[len(batch) :]) for leaf in observations]
        return flat[0] if self._paths == [()] else st.nest_leaves(self._paths, flat)

    @torch.no_grad()
    def forward(self, *inputs: torch.Tensor) -> tuple[torch.Tensor, ...]:
        observations, (mask, is_init, *states) = inputs[: self._n_leaves], inputs[self._n_leaves :]
        batch = mask.shape[:-1]
        rows = mask.reshape(-1, mask.shape[-1])
        obs = self._observation(observations, batch, len(rows))
        layers_first = [state.reshape(len(rows), *state.shape[-2:]).transpose(0, 1).contiguous() for state in states]
        lstm_states = RNNStates((layers_first[0], layers_first[1]), (layers_first[2], layers_first[3]))
        starts = is_init.reshape(len(rows)).float()
        deterministic = interaction_type() in (InteractionType.DETERMINISTIC, InteractionType.MODE)
        actions, values, log_prob, after = self.policy(obs, lstm_states, starts, deterministic, action_masks=rows)
        nexts = [part.transpose(0, 1).reshape((*batch, *part.shape[::2])) for net in after for part in net]
        action_shape = tuple(self.policy.action_space.shape or ())
        return actions.reshape((*batch, *action_shape)), log_prob.reshape(batch), values.reshape((*batch, 1)), *nexts

    @torch.no_grad()
    def value(
        self, observations: Sequence[torch.Tensor], critic: Sequence[torch.Tensor], starts: torch.Tensor
    ) -> torch.Tensor:
        """``V`` of ``n`` observations from the critic's LSTM states, as ``RecurrentPPO`` bootstraps its rollout
        (``policy.predict_values(obs, lstm_states.vf, episode_starts)``).

        :param observations: one tensor per observation leaf, ``(n, *leaf_shape)``.
        :param critic: the critic's hidden and cell states, each ``(n, n_lstm_layers, lstm_hidden_size)``.
        :param starts: where the state restarts from zeros, ``(n,)`` bool.
        :return: the values, ``(n, 1)``.
        """
        n_rows = len(starts)
        obs = self._observation(observations, torch.Size([n_rows]), n_rows)
        hidden, cell = (state.transpose(0, 1).contiguous() for state in critic)
        return self.policy.predict_values(obs, (hidden, cell), starts.float())

    def __getstate__(self) -> dict[str, Any]:
        # What a worker process receives, as for MaskablePolicyModule (torchrl_mask.torchrl.policy.shipped_policy):
        # the policy without its optimizer or the last update's distributions.
        state = self.__dict__.copy()
        state["_errors_parent"] = worker_job_pickled()  # refuses an unguarded script; where errors go
        state["_modules"] = {**state["_modules"], "policy": shipped_policy(self.policy)}
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        worker_job_unpickled(state.pop("_errors_parent", None))  # in a spawned worker: record what ends it
        super().__setstate__(state)


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

    @torch.no_grad()
    def add_next_state_value(self, batch: TensorDictBase) -> TensorDictBase:
        """Write ``("next", "state_value")``, ``V`` of ``("next", observation)`` from the critic's LSTM state after
        the step (``("next", "recurrent_state", "critic", ...)``), where GAE reads it.

        As ``RecurrentPPO`` bootstraps: inside an episode it is the next step's ``"state_value"``, already in the
        batch; the policy runs on each env's last step (all envs in one call, as ``RecurrentPPO``'s last values;
        the state restarts where that step terminated, whose value GAE does not read) and, one step per call as
        ``RecurrentPPO`` does, where an episode was truncated inside the batch (the final observation, the state
        carried on). Terminated steps get 0.

        :param batch: a collector batch ``(n_envs, T)`` with the observation keys, ``"state_value"``, the LSTM
            states under ``"next"``, ``("next", "done")`` and ``("next", "terminated")``.
        :return: ``batch``, with ``("next", "state_value")`` ``(n_envs, T, 1)`` float32 set in place.
        """
        value, terminated = batch.get(st.VALUE), batch.get(st.NEXT_TERMINATED)
        next_value = torch.zeros_like(value)
        next_value[:, :-1] = value[:, 1:]
        self.policy.set_training_mode(False)
        next_value[:, -1] = self._next_values(batch[:, -1], terminated[:, -1, 0]).to(next_value)
        truncated = (batch.get(st.NEXT_DONE) & ~terminated)[..., 0]
        truncated[:, -1] = False
        for env, t in truncated.nonzero().tolist():  # one call each, as RecurrentPPO bootstraps a truncation
            step = batch[env : env + 1, t]
            next_value[env, t] = self._next_values(step, torch.zeros(1, dtype=torch.bool)).to(next_value)[0]
        next_value[terminated] = 0.0
        batch.set(st.NEXT_VALUE, next_value)
        return batch

    def _next_values(self, steps: TensorDictBase, starts: torch.Tensor) -> torch.Tensor:
        """``V`` of ``n`` steps' next observations from the critic's states after them, ``(n, 1)``."""
        leaves = [steps.get(("next", *((key,) if isinstance(key, str) else key))) for key in self.observation_keys]
        critic = [steps.get(("next", *key)) for key in STATE_KEYS[2:]]
        return self.module.value(leaves, critic, starts)

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
            and the states (zeros where absent, as at a rollout's first step; ``"is_init"`` may be absent only
            while the states are zeros).
        :param args: passed to ``TensorDictModule.forward``.
        :param kwargs: passed to ``TensorDictModule.forward``.
        :return: ``tensordict``, with the outputs set.
        :raises ValueError: non-zero states without ``"is_init"`` (an env without TorchRL's ``InitTracker``).
        """
        batch = tensordict.batch_size
        layers, _, size = self.policy.lstm_hidden_state_shape
        for key in STATE_KEYS:
            if tensordict.get(key, None) is None:
                tensordict.set(key, torch.zeros((*batch, layers, size)))
        if tensordict.get(st.IS_INIT, None) is None:
            # Without "is_init" every step would restart from zeros: only harmless while the states are zeros.
            if any(bool(tensordict.get(key).any()) for key in STATE_KEYS):
                raise ValueError(
                    'The step carries LSTM states but no "is_init": without it the policy cannot tell where an '
                    "episode starts and would reset its memory at every step. Append TorchRL's InitTracker() to "
                    "the env (masked_gym_env adds it) before the primer of make_tensordict_primer()."
                )
            tensordict.set(st.IS_INIT, torch.ones((*batch, 1), dtype=torch.bool))
        return super().forward(tensordict, *args, **kwargs)
