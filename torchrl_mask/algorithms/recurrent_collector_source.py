"""The TorchRL collector as the rollout source of :class:`~torchrl_mask.MaskableRecurrentPPO`.

``MaskableRecurrentPPO.learn(total_timesteps, collector=collector)`` runs sb3-contrib's own ``RecurrentPPO.learn``
loop; each rollout is one collector batch, read by :class:`RecurrentCollectorRollout`, which is
:class:`~torchrl_mask.algorithms.collector_source.CollectorRollout` (weights sent, batch fetched and watched, callbacks
once per collected step, the collector shut down at the end) with the LSTM states:

1. the collector runs :class:`~torchrl_mask.torchrl.recurrent_policy.MaskableRecurrentPolicyModule` over
   ``model.policy``, and its envs carry the states (the module's ``make_tensordict_primer()``, or the collector's
   ``auto_register_policy_transforms=True``, with which TorchRL appends it) and ``"is_init"`` (TorchRL's
   ``InitTracker``, which :func:`~torchrl_mask.masked_gym_env` appends); each batch is checked for both;
2. ``("next", "state_value")`` is ``V`` of the next observation from the critic's LSTM state after the step, as
   ``RecurrentPPO`` bootstraps (the module's ``add_next_state_value``);
3. :meth:`~torchrl_mask.rollout.recurrent_buffers.MaskableRecurrentRolloutBuffer.extend` keeps each step's states,
   ``"is_init"`` (sb3-contrib's ``episode_starts``) and masks with the rollout, and computes GAE.

An in-process ``Collector`` whose envs and torch generator are seeded as the VecEnv path's gives the VecEnv path's
parameters bit for bit (``tests/test_recurrent_collector.py``). The one stored difference: at an episode's first
step the collector's states are zeros (TorchRL's primer resets them), where ``RecurrentPPO`` stores the last
episode's final states; the LSTM multiplies the states by ``1 - episode_start`` there, so training reads zeros on
both paths.

Example (the env carries the states and ``"is_init"``):
    >>> from torchrl.collectors import Collector
    >>> from sb3_contrib.common.envs import InvalidActionEnvDiscrete
    >>> from torchrl_mask import MaskableRecurrentPPO, masked_gym_env
    >>> from torchrl_mask.torchrl.recurrent_policy import MaskableRecurrentPolicyModule
    >>> model = MaskableRecurrentPPO("MlpLstmPolicy", InvalidActionEnvDiscrete(dim=4, n_invalid_actions=2),
    ...                              n_steps=16, batch_size=16, n_epochs=1, policy_kwargs={"lstm_hidden_size": 8})
    >>> module = MaskableRecurrentPolicyModule(model.policy)
    >>> def make_env():
    ...     env = masked_gym_env(InvalidActionEnvDiscrete(dim=4, n_invalid_actions=2))
    ...     return env.append_transform(module.make_tensordict_primer())
    >>> collector = Collector(make_env, module, frames_per_batch=16)
    >>> model = model.learn(32, collector=collector)
    >>> model.num_timesteps, model.rollout_buffer.tensordict["recurrent_state", "actor", "hidden"].shape
    (32, torch.Size([1, 16, 1, 8]))
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch
from tensordict import TensorDictBase
from tensordict.utils import NestedKey

from torchrl_mask.algorithms.collector_source import CollectorRollout, check_masks_kept
from torchrl_mask.rollout import storage as st
from torchrl_mask.rollout.recurrent_buffers import STATE_KEYS, MaskableRecurrentRolloutBuffer
from torchrl_mask.torchrl.recurrent_policy import MaskableRecurrentPolicyModule

__all__ = ["RecurrentCollectorRollout", "check_states_carried"]


class RecurrentCollectorRollout(CollectorRollout):
    """One collector batch per ``collect_rollouts`` call of a ``MaskableRecurrentPPO``, its LSTM states kept.

    Takes :class:`~torchrl_mask.algorithms.collector_source.CollectorRollout`'s arguments, with a
    ``MaskableRecurrentPPO`` as ``model`` and a collector running
    :class:`~torchrl_mask.torchrl.recurrent_policy.MaskableRecurrentPolicyModule` over ``model.policy``; refuses
    what it refuses (``use_masking=False``, off-policy or shut-down collectors).

    :raises TypeError: the collector's policy is not a ``MaskableRecurrentPolicyModule``, or the model's rollout
        buffer cannot be masked (a ``Box`` action space).
    :raises ValueError: the module is over another policy than the model's.
    """

    module: MaskableRecurrentPolicyModule
    _module_name = "MaskableRecurrentPolicyModule"

    def _check_buffer(self, model: Any) -> None:
        if not isinstance(model.rollout_buffer, MaskableRecurrentRolloutBuffer):
            raise TypeError(
                f"Learning from a collector needs MaskableRecurrentPPO's masked rollout buffer (it has extend()); the "
                f"model has {type(model.rollout_buffer).__name__}, as for an action space that cannot be masked "
                f"({model.action_space}). Learn from the VecEnv (collector=None) with use_masking=False."
            )

    def _learner_module(self, model: Any, observation_keys: Sequence[NestedKey] | None) -> Any:
        return MaskableRecurrentPolicyModule(model.policy, observation_keys=observation_keys)

    def _check_policy(self, shipped: Any, model: Any) -> None:
        if shipped is None:  # a policy_factory: built in each worker, nothing to look at here
            return
        if not isinstance(shipped, MaskableRecurrentPolicyModule):
            raise TypeError(
                f"The collector runs a {type(shipped).__name__}, not a MaskableRecurrentPolicyModule: "
                "MaskableRecurrentPPO learns from the actions its LSTM policy drew under the masks, from the states "
                "it carried, and sends that policy's weights to the collector. Build the collector with "
                "MaskableRecurrentPolicyModule(model.policy) and append its make_tensordict_primer() to the env."
            )
        if shipped.policy is not model.policy:
            raise ValueError(
                "The collector runs a MaskableRecurrentPolicyModule over another policy than this model's: its actions "
                "and states would not be this model's, and the weights learn() trains would never reach it. Build "
                "the collector with MaskableRecurrentPolicyModule(model.policy) of the model that learns."
            )

    def _fill(self) -> tuple[Any, TensorDictBase]:
        batch = self._next_batch()
        check_masks_kept(batch)
        check_states_carried(batch)
        self.module.add_next_state_value(batch)
        buffer = self._buffer_for(batch.shape[0], batch.shape[1])
        buffer.reset()
        buffer.extend(batch, self.module.observation_keys, self.reward_key)
        return buffer, batch

    def _new_buffer(self, n_envs: int, steps: int) -> MaskableRecurrentRolloutBuffer:  # type: ignore[override]
        model: Any = self.model
        _, layers, _, hidden = model.rollout_buffer.hidden_state_shape
        return type(model.rollout_buffer)(
            steps,
            model.observation_space,
            model.action_space,
            (steps, layers, n_envs, hidden),
            model.device,
            gamma=model.gamma,
            gae_lambda=model.gae_lambda,
            n_envs=n_envs,
        )


def check_states_carried(batch: TensorDictBase) -> None:
    """Refuse a batch whose env does not carry the LSTM states from step to step or mark the episode starts.

    :param batch: a collector batch ``(n_envs, T)`` of a :class:`MaskableRecurrentPolicyModule`.
    :raises ValueError: ``"is_init"`` does not follow ``("next", "done")`` (no ``InitTracker``: every step would
        restart the LSTM), or a step inside an episode does not start from the state the step before ended with
        (no primer: the states are not carried).
    """
    starts = batch.get(st.IS_INIT)[:, 1:, 0]
    if not torch.equal(starts, batch.get(st.NEXT_DONE)[:, :-1, 0]):
        raise ValueError(
            "The collector's batch marks episode starts ('is_init') that do not follow the episode ends "
            "(('next', 'done')): its env has no TorchRL InitTracker, and the LSTM would restart at every step. Make "
            "the envs with torchrl_mask.masked_gym_env (it appends InitTracker), or append InitTracker() yourself."
        )
    going_on = ~starts
    for key in STATE_KEYS:
        if not torch.equal(batch.get(key)[:, 1:][going_on], batch.get(("next", *key))[:, :-1][going_on]):
            raise ValueError(
                f"The collector did not carry the LSTM state {key!r} from one step to the next: the env's specs lack "
                "it. Append the module's primer to each env: env.append_transform(module.make_tensordict_primer()) "
                "for module = MaskableRecurrentPolicyModule(model.policy), or create the collector with "
                "auto_register_policy_transforms=True (TorchRL then appends it)."
            )
