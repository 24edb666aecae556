"""sb3-contrib's stock policies, and what the fast paths need to run them without their wrappers.

The VecEnv rollout's forward (:class:`StockForward`, used by :mod:`torchrl_mask.algorithms.vecenv_source`), the
collectors' policy module (:mod:`torchrl_mask.torchrl.policy`) and ``train()``'s inlined ``evaluate_actions``
(:mod:`torchrl_mask.fastpath.evaluation`) run the same torch operations as sb3-contrib's policy, without
``torch.distributions`` objects and, where nothing is hooked, without ``nn.Module.__call__``'s dispatch on the
stock MLP's layers. This module says when that is allowed (:func:`stock_policy`, :func:`forward_hooked`,
:func:`backward_hooked`), which layers to run (:func:`plain_layers`) and runs the network's half of the forward
(:func:`values_and_logits`). :func:`stock_predict` has ``predict`` draw through the one masked distribution too.

Example:
    >>> from sb3_contrib.common.envs import InvalidActionEnvDiscrete
    >>> from torchrl_mask import MaskablePPO
    >>> policy = MaskablePPO("MlpPolicy", InvalidActionEnvDiscrete(dim=6, n_invalid_actions=3)).policy
    >>> stock_policy(policy), plain_layers(policy) is not None, forward_hooked(policy)
    (True, True, False)
"""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Iterator, Sequence
from typing import Any, NamedTuple

import numpy as np
import torch
from sb3_contrib.common.maskable.distributions import (
    MaskableBernoulliDistribution,
    MaskableCategoricalDistribution,
    MaskableMultiCategoricalDistribution,
)
from sb3_contrib.common.maskable.policies import (
    MaskableActorCriticCnnPolicy,
    MaskableActorCriticPolicy,
    MaskableMultiInputActorCriticPolicy,
)
from stable_baselines3.common.policies import BasePolicy
from stable_baselines3.common.torch_layers import MlpExtractor
from torch import nn

from torchrl_mask.distributions import MaskedCategoricals
from torchrl_mask.rollout.masks import mask_spec

__all__ = [
    "StockForward",
    "backward_hooked",
    "forward_hooked",
    "plain_layers",
    "stock_policy",
    "stock_predict",
    "values_and_logits",
]

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


class StockForward:
    """``MaskableActorCriticPolicy.forward(obs, action_masks=masks)`` for sb3-contrib's stock policies, sampling:
    the VecEnv rollout's forward (:mod:`torchrl_mask.algorithms.vecenv_source`), the same operations and random
    draws, through :func:`values_and_logits` and the one masked distribution.

    :param policy: a stock policy (exact class) with a stock masked distribution.
    """

    def __init__(self, policy: MaskableActorCriticPolicy) -> None:
        self.policy = policy
        self._spec = mask_spec(policy.action_space)
        self._dist = MaskedCategoricals(self._spec.groups)
        self._action_shape = tuple(policy.action_space.shape or ())
        self._plain = plain_layers(policy)

    def __call__(self, obs: Any, masks: np.ndarray) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """:return: actions ``(B, *action_shape)``, values ``(B, 1)``, log-probabilities ``(B,)``."""
        values, action_logits = values_and_logits(self.policy, obs, self._plain)
        logits = action_logits.view(-1, self._dist.width)
        # The buffers' mask reader: bool rows (n_envs, mask_dims), or an error naming a wrong shape or value
        # before the policy's output is used (add() checks each row's choices once the step is taken).
        mask = torch.as_tensor(self._spec.reshape(masks, len(logits)), device=logits.device)
        actions, log_prob = self._dist.sample_and_log_prob(self._dist.log_pmf(logits, mask))
        if actions.shape[1:] != self._action_shape:  # Discrete's (B, 1) to (B,); the others are shaped already
            actions = actions.reshape((-1, *self._action_shape))
        return actions, values, log_prob


def _stock_predict(
    policy: MaskableActorCriticPolicy,
    dist: MaskedCategoricals,
    observation: Any,
    deterministic: bool = False,
    action_masks: np.ndarray | None = None,
) -> torch.Tensor:
    """``MaskableActorCriticPolicy._predict`` through the one masked distribution: the actor's logits as
    ``get_distribution`` computes them (each module called as it is, so hooks run), then the mode or a draw.

    :param policy: a stock policy.
    :param dist: the masked distribution of its action space.
    :param observation: the observation tensor(s), batch ``(B, ...)``.
    :param deterministic: the most likely action instead of a draw.
    :param action_masks: ``(B, mask_dims)`` (or ``(mask_dims,)`` for one observation) masks; None: unmasked.
    :return: ``(B, n_sub_actions)`` actions (``predict`` reshapes them to the action space's shape).
    """
    features = BasePolicy.extract_features(policy, observation, policy.pi_features_extractor)
    logits = policy.action_net(policy.mlp_extractor.forward_actor(features)).view(-1, dist.width)
    mask = None
    if action_masks is not None:  # sb3-contrib's apply_masking: bool, shaped like the logits
        mask = torch.as_tensor(action_masks, dtype=torch.bool, device=logits.device).reshape(logits.shape)
    return dist.sample(dist.log_pmf(logits, mask), deterministic)


@contextlib.contextmanager
def stock_predict(policy: nn.Module, groups: Sequence[int] | None = None) -> Iterator[bool]:
    """Within the block, a stock policy's ``_predict`` (what SB3's ``predict`` calls after its checks and before
    reshaping) draws through :class:`~torchrl_mask.distributions.MaskedCategoricals`: sb3-contrib's actions bit
    for bit, the same random numbers consumed, without distribution objects. Anything else, a policy whose
    ``get_distribution`` or ``_predict`` is replaced on the instance included, keeps sb3-contrib's path. Restored
    on exit, so a copy of the policy never holds a method bound to this one.

    :param policy: the model's policy.
    :param groups: the sub-actions' sizes of its action space (``MaskSpec.groups``), if the caller has them.
    :return: (as the ``with`` target) whether ``_predict`` was replaced.
    """
    inline = stock_policy(policy) and not {"get_distribution", "_predict"} & set(vars(policy))
    if inline:
        assert isinstance(policy, MaskableActorCriticPolicy)  # stock_policy: one of its exact classes
        dist = MaskedCategoricals(mask_spec(policy.action_space).groups if groups is None else groups)
        policy._predict = functools.partial(_stock_predict, policy, dist)  # type: ignore[method-assign]
    try:
        yield inline
    finally:
        if inline:
            vars(policy).pop("_predict", None)
