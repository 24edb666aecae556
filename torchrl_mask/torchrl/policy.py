"""The SB3 policy as a TorchRL policy: :class:`MaskablePolicyModule`, a ``TensorDictModule`` over a
``MaskableActorCriticPolicy`` that collectors run in their workers (and that ships to them by pickling).

It reads the observation keys and the bool ``"action_mask"`` and writes ``"action"``, ``"action_log_prob"`` and
``"state_value"``. A collector calls it once per env step, on one row, where per-call overhead, not arithmetic,
is the cost: for sb3-contrib's stock policies the masked forward is inlined (no ``torch.distributions``
objects), sampling is the exponential race instead of ``torch.multinomial``, the stock MLP's torch layers run
without ``nn.Module.__call__``'s dispatch when nothing is hooked, and a plain call skips ``TensorDictModule``'s
wrappers, which roughly halves the cost of a step (figures in the benchmarks page). Anything else
(a policy subclass, a custom extractor, forward hooks, ``tensordict_out``) takes the general path.

Example:
    >>> import gymnasium as gym, torch
    >>> from tensordict import TensorDict
    >>> from torchrl_mask import MaskablePPO
    >>> policy = MaskablePPO("MlpPolicy", gym.make("Taxi-v4")).policy
    >>> td = MaskablePolicyModule(policy)(TensorDict({"observation": torch.tensor(3),
    ...                                               "action_mask": torch.ones(6, dtype=torch.bool)}))
    >>> sorted(td.keys())
    ['action', 'action_log_prob', 'action_mask', 'observation', 'state_value']
"""

from __future__ import annotations

import copy
from collections.abc import Sequence
from typing import Any

import torch
from gymnasium import spaces
from sb3_contrib.common.maskable.distributions import make_masked_proba_distribution
from sb3_contrib.common.maskable.policies import MaskableActorCriticPolicy
from sb3_contrib.common.recurrent.policies import RecurrentActorCriticPolicy
from stable_baselines3.common.distributions import Distribution
from stable_baselines3.common.policies import BasePolicy
from tensordict import TensorDictBase
from tensordict.nn import InteractionType, TensorDictModule, skip_existing
from tensordict.nn.probabilistic import interaction_type
from tensordict.utils import NestedKey
from torch import nn

from torchrl_mask.distributions import MaskedCategoricals
from torchrl_mask.fastpath.stock import _PlainLayers, plain_layers, values_and_logits
from torchrl_mask.rollout import storage as st
from torchrl_mask.rollout.masks import mask_spec
from torchrl_mask.torchrl.workers import worker_job_pickled, worker_job_unpickled

__all__ = ["MaskablePolicyModule", "default_observation_keys", "shipped_policy"]

ACTION_MASK = st.ACTION_MASK


def default_observation_keys(observation_space: spaces.Space) -> list[NestedKey]:
    """Where a TorchRL env keeps each leaf of an observation space, in the space's leaf order.

    :param observation_space: the SB3 model's observation space.
    :return: ``["observation"]`` for a non-Dict space; the Dict's key paths (nested keys for nested Dicts, and
        for the ``"board/cells"`` keys of a Dict flattened one level), which is where TorchRL's ``GymWrapper``
        puts them.
    """
    return [st.batch_observation_key(path) for path in st.observation_leaves(observation_space)]


def shipped_policy(policy: BasePolicy) -> BasePolicy:
    """The copy of an SB3 policy that a collector's worker process receives: the same modules, without the optimizer
    and with fresh action distributions (SB3 keeps the last one, whose tensors carry the autograd graph of the last
    update and cannot cross a process boundary). The learner's policy is left as it is.

    :param policy: the model's policy (``MaskablePPO``'s or ``MaskableRecurrentPPO``'s).
    :return: a shallow copy sharing the parameters.
    """
    shipped = copy.copy(policy)
    shipped.__dict__ = {k: v for k, v in policy.__dict__.items() if k != "optimizer"}
    for name, dist in policy.__dict__.items():  # action_dist; the recurrent policies' masked_action_dist too
        if isinstance(dist, Distribution):
            fresh = copy.copy(dist)
            fresh.__dict__ = {k: None if k == "distribution" else _detached(v) for k, v in dist.__dict__.items()}
            shipped.__dict__[name] = fresh
    if isinstance(policy, MaskableActorCriticPolicy):
        shipped.__dict__["action_dist"] = make_masked_proba_distribution(policy.action_space)
    return shipped


def _detached(value: Any) -> Any:
    """``value`` with its tensors (alone or in a list) detached from the autograd graph."""
    if isinstance(value, torch.Tensor):
        return value.detach()
    if isinstance(value, list):
        return [_detached(item) for item in value]
    return value


class _SB3Forward(nn.Module):
    """Calls a MaskableActorCriticPolicy on tensors with any leading batch dims (none, ``(n,)``, ``(n, T)``)."""

    def __init__(self, policy: MaskableActorCriticPolicy) -> None:
        super().__init__()
        self.policy = policy
        leaves = st.observation_leaves(policy.observation_space)
        self._paths = list(leaves)
        self._shapes = [tuple(space.shape or ()) for space in leaves.values()]
        self._action_shape = tuple(policy.action_space.shape or ())
        self._spec = mask_spec(policy.action_space)
        self._dist = MaskedCategoricals(self._spec.groups)
        self._mask_size = self._spec.size
        # sb3-contrib's own forward(), inlined for its stock policies: the same masked distribution
        # (torchrl_mask.distributions), without building torch.distributions objects, which cost more than the
        # network itself on one row. A policy subclass that changes either method runs its own forward().
        self._inline = (
            type(policy).forward is MaskableActorCriticPolicy.forward
            and type(policy)._get_action_dist_from_latent is MaskableActorCriticPolicy._get_action_dist_from_latent
        )
        self._plain: _PlainLayers | bool | None = False  # found on the first call (False: not looked for yet)

    @torch.no_grad()
    def forward(self, *inputs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        *observations, mask = inputs
        batch = mask.shape[:-1]
        obs = self._observation(observations)
        # A bool mask passes as it is; 0/1 numbers become bool, anything else (NaN, 2) is refused naming it.
        flat = mask.reshape(-1, self._mask_size)
        rows = torch.as_tensor(self._spec.reshape(flat, len(flat)))
        deterministic = interaction_type() in (InteractionType.DETERMINISTIC, InteractionType.MODE)
        if self._inline:
            actions, values, log_prob = self._masked_forward(obs, rows, deterministic)
        else:
            actions, values, log_prob = self.policy(obs, deterministic=deterministic, action_masks=rows)
        return actions.reshape((*batch, *self._action_shape)), log_prob.reshape(batch), values.reshape((*batch, 1))

    def _masked_forward(
        self, obs: Any, mask: torch.Tensor, deterministic: bool
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """``MaskableActorCriticPolicy.forward``: actions ``(B, n_groups)``, values ``(B, 1)``, log-probs ``(B,)``."""
        values, logits = values_and_logits(self.policy, obs, self._plain_layers())
        log_pmf = self._dist.log_pmf(logits.view(-1, self._mask_size), mask)
        actions, log_prob = self._dist.sample_and_log_prob(log_pmf, deterministic)
        return actions, values, log_prob

    def _plain_layers(self) -> _PlainLayers | None:
        """:func:`plain_layers` of the policy, found on the first call."""
        if self._plain is False:
            self._plain = plain_layers(self.policy)
        return self._plain if isinstance(self._plain, _PlainLayers) else None

    def _observation(self, leaves: Sequence[torch.Tensor]) -> Any:
        flat = [leaf.reshape(-1, *shape) for leaf, shape in zip(leaves, self._shapes, strict=True)]
        if self._paths == [()]:
            return flat[0]
        return st.nest_leaves(self._paths, flat)

    def value(self, leaves: Sequence[torch.Tensor]) -> torch.Tensor:
        return self.policy.predict_values(self._observation(leaves))

    def __getstate__(self) -> dict[str, Any]:
        # What a worker process receives: the policy without its optimizer, and with a fresh action
        # distribution (SB3 keeps the last one, whose logits carry the autograd graph of the last update and
        # cannot cross a process boundary). The learner's policy is left as it is.
        state = self.__dict__.copy()
        state["_errors_parent"] = worker_job_pickled()  # refuses an unguarded script; where errors go
        state["_plain"] = False  # found again, on the worker's own modules
        state["_modules"] = {**state["_modules"], "policy": shipped_policy(self.policy)}
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        worker_job_unpickled(state.pop("_errors_parent", None))  # in a spawned worker: record what ends it
        super().__setstate__(state)


class MaskablePolicyModule(TensorDictModule):
    """An sb3-contrib ``MaskableActorCriticPolicy`` as a TorchRL policy.

    Reads the observation and ``"action_mask"`` and writes, under TorchRL's keys, ``"action"`` (shape
    ``(*B,)`` for Discrete, ``(*B, k)`` for MultiDiscrete/MultiBinary), ``"action_log_prob"`` ``(*B,)`` and
    ``"state_value"`` ``(*B, 1)``, for any batch dims ``B`` (an unbatched env step included). It samples
    (``deterministic=False``) unless TorchRL's exploration type is ``DETERMINISTIC`` or ``MODE``. It holds the
    policy itself, so a ``Collector`` in the learner's process runs the trained weights, and multi-process and
    distributed collectors copy it to their workers and take new weights through
    ``collector.update_policy_weights_()``.

    :param policy: the model's policy (``model.policy``).
    :param observation_keys: the env's key for each leaf of ``policy.observation_space``, in leaf order; None
        means ``"observation"``, or the Dict's keys (see :func:`default_observation_keys`).
    :param mask_key: the env's mask entry, bool ``(*B, mask_dims)``.
    :raises TypeError: ``policy`` is not a ``MaskableActorCriticPolicy``; for ``MaskableRecurrentPPO``'s LSTM policy
        the error names :class:`~torchrl_mask.torchrl.recurrent_policy.MaskableRecurrentPolicyModule`, the module that
        carries its states.

    Example:
        >>> import gymnasium as gym, torch
        >>> from tensordict import TensorDict
        >>> from sb3_contrib import MaskablePPO
        >>> policy = MaskablePPO("MlpPolicy", gym.make("Taxi-v4")).policy
        >>> td = TensorDict({"observation": torch.tensor([3, 7]),
        ...                  "action_mask": torch.tensor([[1, 0, 0, 0, 0, 0]] * 2, dtype=torch.bool)}, [2])
        >>> MaskablePolicyModule(policy)(td)["action"].tolist()
        [0, 0]
    """

    def __init__(
        self,
        policy: MaskableActorCriticPolicy,
        observation_keys: Sequence[NestedKey] | None = None,
        mask_key: NestedKey = ACTION_MASK,
    ) -> None:
        if isinstance(policy, RecurrentActorCriticPolicy):
            raise TypeError(
                f"MaskablePolicyModule got the LSTM policy {type(policy).__name__} (model.policy of a "
                "MaskableRecurrentPPO), whose states a collector must carry: use "
                "torchrl_mask.torchrl.recurrent_policy.MaskableRecurrentPolicyModule(model.policy), and append its "
                "make_tensordict_primer() to the env."
            )
        if not isinstance(policy, MaskableActorCriticPolicy):
            raise TypeError(
                f"MaskablePolicyModule needs sb3-contrib's MaskableActorCriticPolicy (model.policy of a "
                f"MaskablePPO), got {type(policy).__name__}."
            )
        keys = (
            list(observation_keys)
            if observation_keys is not None
            else default_observation_keys(policy.observation_space)
        )
        n_leaves = len(st.observation_leaves(policy.observation_space))
        if len(keys) != n_leaves:
            raise ValueError(
                f"observation_keys has {len(keys)} keys, but the policy's observation space has {n_leaves} leaves: "
                "give one env key per leaf, in the space's order."
            )
        super().__init__(
            _SB3Forward(policy),
            in_keys=[*keys, mask_key],
            out_keys=[st.ACTION, st.LOG_PROB, st.VALUE],
        )
        self.observation_keys: list[NestedKey] = keys

    def forward(self, tensordict: TensorDictBase, *args: Any, **kwargs: Any) -> TensorDictBase:
        """Write the action, its log-probability and the state value into ``tensordict``; see the class.

        :param tensordict: the step(s): observation keys and the mask, batch dims ``B``.
        :param args: passed to ``TensorDictModule.forward`` (which then does the work).
        :param kwargs: passed to ``TensorDictModule.forward`` (e.g. ``tensordict_out``).
        :return: ``tensordict``, with ``"action"``, ``"action_log_prob"`` and ``"state_value"`` set.
        """
        if args or kwargs or not isinstance(tensordict, TensorDictBase) or skip_existing():
            return super().forward(tensordict, *args, **kwargs)
        # A collector's call, once per step: the keys in, the module, the keys out. TensorDictModule's forward
        # (dispatch, skip-existing and strict-key wrappers) costs more per call than the module on one row.
        inputs = [tensordict.get(key, None) for key in self.in_keys]
        if any(tensor is None for tensor in inputs):
            self._refuse_missing(tensordict)
        outputs = self.module(*inputs)
        for key, tensor in zip(self.out_keys_source, outputs, strict=True):
            tensordict.set(key, tensor)
        return tensordict

    def _refuse_missing(self, tensordict: TensorDictBase) -> None:
        """Raise the error that names the keys this module reads and the step does not have."""
        keys = set(tensordict.keys(True, True))
        missing = [key for key in self.in_keys if key not in keys]
        has = sorted(map(str, keys))
        if self.in_keys[-1] in missing:
            raise ValueError(
                f"MaskablePolicyModule reads the mask from {self.in_keys[-1]!r}, which the env's step does not have "
                f"(it has {has}): the env gives no masks. Make it with torchrl_mask.masked_gym_env (it writes "
                "'action_mask' from action_masks(), info['action_mask'] or a Dict observation's entry), or pass "
                "mask_key= the env's mask entry."
            )
        raise ValueError(
            f"MaskablePolicyModule reads the observation from {missing}, which the env's step does not have (it has "
            f"{has}): pass observation_keys= the env's key for each leaf of the policy's observation space."
        )

    def _write_to_tensordict(
        self,
        tensordict: TensorDictBase,
        tensors: list[torch.Tensor],
        tensordict_out: TensorDictBase | None = None,
        out_keys: Sequence[NestedKey] | None = None,
    ) -> TensorDictBase:
        # TensorDictModule passes each output through TensorDict.from_any, which looks up optional packages
        # on every call, which costs more than the step's arithmetic; the outputs here are plain tensors.
        out = tensordict if tensordict_out is None else tensordict_out
        for key, tensor in zip(self.out_keys_source if out_keys is None else out_keys, tensors, strict=True):
            out.set(key, tensor)
        return out

    @property
    def policy(self) -> MaskableActorCriticPolicy:
        """The wrapped sb3-contrib policy."""
        return self.module.policy

    @torch.no_grad()
    def add_next_state_value(self, batch: TensorDictBase) -> TensorDictBase:
        """Write ``("next", "state_value")``, ``V`` of ``("next", observation)``, where GAE reads it.

        GAE needs ``V(s_{t+1})`` at every step that did not terminate. Inside an episode it is the next step's
        ``"state_value"``, already in the batch; the policy runs only where an episode was truncated (the final
        observation) and on each env's last step, in one batched call. Terminated steps get 0.

        :param batch: a collector batch ``(n_envs, T)`` or flat ``(T,)`` with the observation, ``"state_value"``,
            ``("next", observation)``, ``("next", "done")`` and ``("next", "terminated")``.
        :return: ``batch``, with ``("next", "state_value")`` ``(*B, 1)`` float32 set in place.
        """
        flat = batch.ndim == 1
        rows = batch.unsqueeze(0) if flat else batch
        value = rows.get(st.VALUE)
        done = rows.get(st.NEXT_DONE)
        terminated = rows.get(st.NEXT_TERMINATED)
        next_value = torch.zeros_like(value)
        next_value[:, :-1] = value[:, 1:]
        need = done & ~terminated
        need[:, -1] = ~terminated[:, -1]
        need = need[..., 0]
        if bool(need.any()):
            leaves = [
                rows.get(("next", *((key,) if isinstance(key, str) else key)))[need] for key in self.observation_keys
            ]
            self.policy.set_training_mode(False)
            computed = self.module.value(leaves).to(next_value)
            next_value[need] = computed.reshape(-1, 1)
        next_value[terminated] = 0.0
        rows.set(st.NEXT_VALUE, next_value)
        if flat:
            batch.set(st.NEXT_VALUE, next_value[0])
        return batch
