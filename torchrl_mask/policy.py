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
from typing import Any, NamedTuple

import torch
from gymnasium import spaces
from sb3_contrib.common.maskable.distributions import (
    MaskableBernoulliDistribution,
    MaskableCategoricalDistribution,
    MaskableMultiCategoricalDistribution,
    make_masked_proba_distribution,
)
from sb3_contrib.common.maskable.policies import (
    MaskableActorCriticCnnPolicy,
    MaskableActorCriticPolicy,
    MaskableMultiInputActorCriticPolicy,
)
from stable_baselines3.common.torch_layers import MlpExtractor
from tensordict import TensorDictBase
from tensordict.nn import InteractionType, TensorDictModule, skip_existing
from tensordict.nn.probabilistic import interaction_type
from tensordict.utils import NestedKey
from torch import nn

from torchrl_mask import storage as st
from torchrl_mask.masks import mask_spec
from torchrl_mask.workers import refuse_unguarded_spawn

__all__ = ["MaskablePolicyModule", "default_observation_keys"]

ACTION_MASK = st.ACTION_MASK


def default_observation_keys(observation_space: spaces.Space) -> list[NestedKey]:
    """Where a TorchRL env keeps each leaf of an observation space, in the space's leaf order.

    :param observation_space: the SB3 model's observation space.
    :return: ``["observation"]`` for a non-Dict space; the Dict's key paths (nested keys for nested Dicts, and
        for the ``"board/cells"`` keys of a Dict flattened one level), which is where TorchRL's ``GymWrapper``
        puts them.
    """
    return [st.batch_observation_key(path) for path in st.observation_leaves(observation_space)]


_STOCK_POLICIES = (MaskableActorCriticPolicy, MaskableActorCriticCnnPolicy, MaskableMultiInputActorCriticPolicy)
_STOCK_DISTRIBUTIONS = (
    MaskableCategoricalDistribution,
    MaskableMultiCategoricalDistribution,
    MaskableBernoulliDistribution,
)


def stock_policy(policy: nn.Module) -> bool:
    """Whether ``policy`` is exactly one of sb3-contrib's stock policy classes (``MlpPolicy``, ``CnnPolicy``,
    ``MultiInputPolicy``) with one of its stock masked distributions, whose methods the fast paths inline.

    :param policy: the model's policy.
    """
    return type(policy) in _STOCK_POLICIES and type(getattr(policy, "action_dist", None)) in _STOCK_DISTRIBUTIONS


# sb3-contrib's MaskableCategorical sets the logits of masked choices to this before normalising them.
_MASKED_LOGIT = -1e8


def _sample(logits: torch.Tensor, mask: torch.Tensor, deterministic: bool) -> tuple[torch.Tensor, torch.Tensor]:
    """One masked categorical per row: the action ``(B, 1)`` and its log-probability ``(B, 1)``.

    Sampling is the exponential race (``argmax(p / E)``, ``E ~ Exp(1)``), an exact draw from ``p`` in three small
    ops where ``torch.multinomial`` validates its input first (two to four times the cost on one row). Masked
    choices are kept out explicitly (they would need ``p = 0`` and ``E = 0`` together to win, but never can).

    :param logits: masked logits ``(B, n)``.
    :param mask: ``(B, n)`` bool, True where the choice is allowed; at least one per row.
    :param deterministic: take the most likely choice instead of sampling.
    """
    log_pmf = logits.log_softmax(-1)
    probs = log_pmf.exp()
    if deterministic:
        action = probs.argmax(-1, keepdim=True)
    else:
        race = torch.where(mask, probs / torch.empty_like(probs).exponential_(), -1.0)
        action = race.argmax(-1, keepdim=True)
    return action, log_pmf.gather(-1, action)


class _PlainLayers(NamedTuple):
    """The torch layers a stock ``MlpExtractor`` policy runs, in order: actor and critic MLPs and the two heads."""

    pi: list[nn.Module]
    vf: list[nn.Module]
    value: list[nn.Module]
    action: list[nn.Module]
    watched: tuple[nn.Module, ...]  # every module above and its containers, once each: where hooks would be


def _sequence(module: nn.Module) -> list[nn.Module] | None:
    """The layers ``module`` applies one after the other, if all are torch's own leaf layers; else None."""
    layers = list(module) if type(module) is nn.Sequential else [module]
    plain = all(
        type(layer).__module__.startswith("torch.nn.modules.") and next(layer.children(), None) is None
        for layer in layers
    )
    return layers if plain else None


# Where torch keeps forward hooks (private names, stable for years). Should a release move them, the lookups
# below see "hooked" and the policy takes nn.Module.__call__, never a path that would skip a hook.
_GLOBAL_HOOKS = [getattr(nn.modules.module, f"_global_forward{kind}hooks", None) for kind in ("_", "_pre_")]
_LAYER_HOOKS = ("_forward_hooks", "_forward_pre_hooks")


def forward_hooked(*modules: nn.Module) -> bool:
    """Whether a forward hook (or pre-hook) is registered globally or on any of ``modules`` itself (not its
    children), or whether torch keeps them somewhere else than this module knows.

    :param modules: the modules a path would run without ``nn.Module.__call__``.
    """
    if any(hooks is None or hooks for hooks in _GLOBAL_HOOKS):
        return True
    return any(getattr(module, name, True) for module in modules for name in _LAYER_HOOKS)


_GLOBAL_BACKWARD_HOOKS = [getattr(nn.modules.module, f"_global_backward{kind}hooks", None) for kind in ("_", "_pre_")]
_LAYER_BACKWARD_HOOKS = ("_backward_hooks", "_backward_pre_hooks")


def backward_hooked(*modules: nn.Module) -> bool:
    """Whether a module backward hook (or pre-hook) is registered globally or on any of ``modules`` itself, which
    ``nn.Module.__call__`` would attach to the outputs (or whether torch keeps them where this module doesn't look).

    :param modules: the modules a path would run without ``nn.Module.__call__`` with autograd on.
    """
    if any(hooks is None or hooks for hooks in _GLOBAL_BACKWARD_HOOKS):
        return True
    return any(getattr(module, name, True) for module in modules for name in _LAYER_BACKWARD_HOOKS)


def _hooked(plain: _PlainLayers) -> bool:
    """Whether a forward hook is registered on any of the layers, their containers, or globally."""
    return forward_hooked(*plain.watched)


def _through(layers: list[nn.Module], x: torch.Tensor) -> torch.Tensor:
    """``x`` through each layer's ``forward`` (what ``nn.Module.__call__`` does when nothing is hooked)."""
    for layer in layers:
        x = layer.forward(x)
    return x


def plain_layers(policy: MaskableActorCriticPolicy) -> _PlainLayers | None:
    """A stock ``MlpExtractor`` and heads of torch's own layers, to run without ``nn.Module.__call__``'s dispatch
    (half the network's time on one row), or None for anything else. Run them only while ``_hooked`` is False.

    :param policy: the sb3-contrib policy.
    """
    extractor = policy.mlp_extractor
    modules = [extractor.policy_net, extractor.value_net, policy.value_net, policy.action_net]
    parts = [_sequence(module) for module in modules] if type(extractor) is MlpExtractor else [None]
    found = [part for part in parts if part is not None]
    if len(found) != len(modules):
        return None
    pi, vf, value, action = found
    watched = tuple(dict.fromkeys([extractor, *modules, *pi, *vf, *value, *action]))
    return _PlainLayers(pi, vf, value, action, watched)


def values_and_logits(
    policy: MaskableActorCriticPolicy, obs: Any, plain: _PlainLayers | None
) -> tuple[torch.Tensor, torch.Tensor]:
    """The first half of ``MaskableActorCriticPolicy.forward``: features, latents, values and action logits.

    :param policy: a policy whose ``forward`` is sb3-contrib's.
    :param obs: the observation tensor(s), batch ``(B, ...)``, as ``policy.extract_features`` takes them.
    :param plain: :func:`plain_layers` of the policy: run without module dispatch while nothing is hooked.
    :return: values ``(B, 1)`` and the raw action logits ``(B, mask_dims)``.
    """
    features: Any = policy.extract_features(obs)
    pi_features, vf_features = (features, features) if policy.share_features_extractor else features
    if plain is not None and not _hooked(plain):
        latent_pi, latent_vf = _through(plain.pi, pi_features), _through(plain.vf, vf_features)
        return _through(plain.value, latent_vf), _through(plain.action, latent_pi)
    if policy.share_features_extractor:
        latent_pi, latent_vf = policy.mlp_extractor(features)
    else:
        latent_pi = policy.mlp_extractor.forward_actor(pi_features)
        latent_vf = policy.mlp_extractor.forward_critic(vf_features)
    return policy.value_net(latent_vf), policy.action_net(latent_pi)


class _SB3Forward(nn.Module):
    """Calls a MaskableActorCriticPolicy on tensors with any leading batch dims (none, ``(n,)``, ``(n, T)``)."""

    def __init__(self, policy: MaskableActorCriticPolicy) -> None:
        super().__init__()
        self.policy = policy
        leaves = st.observation_leaves(policy.observation_space)
        self._paths = list(leaves)
        self._shapes = [tuple(space.shape or ()) for space in leaves.values()]
        self._action_shape = tuple(policy.action_space.shape or ())
        spec = mask_spec(policy.action_space)
        self._mask_size = spec.size
        self._groups = list(spec.groups)
        # sb3-contrib's own forward(), inlined for its stock policies: the same masked categorical per sub-action
        # (logits of masked choices set to -1e8, then normalised), without building torch.distributions objects,
        # which cost more than the network itself on one row. A policy subclass that changes either method runs
        # its own forward().
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
        rows = mask.reshape(-1, self._mask_size)
        deterministic = interaction_type() in (InteractionType.DETERMINISTIC, InteractionType.MODE)
        if self._inline:
            actions, values, log_prob = self._masked_forward(obs, rows.to(torch.bool), deterministic)
        else:
            actions, values, log_prob = self.policy(obs, deterministic=deterministic, action_masks=rows)
        return actions.reshape((*batch, *self._action_shape)), log_prob.reshape(batch), values.reshape((*batch, 1))

    def _masked_forward(
        self, obs: Any, mask: torch.Tensor, deterministic: bool
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """``MaskableActorCriticPolicy.forward``: actions ``(B, n_groups)``, values ``(B, 1)``, log-probs ``(B,)``."""
        policy = self.policy
        values, logits = values_and_logits(policy, obs, self._plain_layers())
        logits = logits.masked_fill(~mask, _MASKED_LOGIT)
        if len(self._groups) == 1:  # Discrete: no split and concatenation (a few us each on one row)
            action, log_prob = _sample(logits, mask, deterministic)
            return action, values, log_prob[:, 0]
        actions, log_probs = [], []
        for group_logits, group_mask in zip(
            logits.split(self._groups, dim=-1), mask.split(self._groups, dim=-1), strict=True
        ):
            action, log_prob = _sample(group_logits, group_mask, deterministic)
            actions.append(action)
            log_probs.append(log_prob)
        return torch.cat(actions, dim=-1), values, torch.cat(log_probs, dim=-1).sum(-1)

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
        refuse_unguarded_spawn()  # before a spawned worker is started from an unguarded script
        state = self.__dict__.copy()
        state["_plain"] = False  # found again, on the worker's own modules
        shipped = copy.copy(self.policy)
        shipped.__dict__ = {k: v for k, v in self.policy.__dict__.items() if k != "optimizer"}
        shipped.action_dist = make_masked_proba_distribution(self.policy.action_space)
        state["_modules"] = {**state["_modules"], "policy": shipped}
        return state


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
        outputs = self.module(*[tensordict.get(key) for key in self.in_keys])
        for key, tensor in zip(self.out_keys_source, outputs, strict=True):
            tensordict.set(key, tensor)
        return tensordict

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
