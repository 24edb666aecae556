"""What ``MaskablePPO.train`` runs faster: sb3-contrib's ``evaluate_actions`` inlined, and Adam's step.

sb3-contrib's ``train`` (its loop, its losses, its optimizer step) runs unchanged; :func:`fast_train` only swaps
two things underneath it for the duration of the call, where the result is bit for bit the same:

- ``policy.evaluate_actions``, for sb3-contrib's stock policies and masked distributions with nothing hooked on
  the layers: the same torch operations in the same order (so the same autograd graph, the same gradients
  summed in the same order), without the ``torch.distributions`` objects around them: each
  ``MaskableCategorical`` is normalised two or three times (the unmasked normalisation is thrown away once the
  mask is applied), and every construction and ``log_prob`` re-checks its arguments. Only the work whose result
  is used is done. NaN logits raise ``ValueError`` (the distribution's own check does so only while
  ``torch.distributions`` validates arguments, which importing ``torchrl.modules`` turns off process-wide).
- ``torch.optim.Adam``'s step on the CPU: the same element-wise arithmetic over flat buffers, one torch call per
  stage instead of one per parameter tensor (:func:`torchrl_mask.adam.fast_adam`). Restored after.

Anything else (a policy subclass, a custom distribution or extractor layer, forward or backward hooks, another
optimizer or Adam options, see :mod:`torchrl_mask.adam`) runs as sb3-contrib runs it.

Example:
    >>> from sb3_contrib.common.envs import InvalidActionEnvDiscrete
    >>> from torchrl_mask import MaskablePPO
    >>> model = MaskablePPO("MlpPolicy", InvalidActionEnvDiscrete(dim=6, n_invalid_actions=3), n_steps=32)
    >>> with fast_train(model.policy) as inlined:
    ...     inlined
    True
    >>> "evaluate_actions" in vars(model.policy)
    False
"""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Iterator
from typing import Any

import torch
from sb3_contrib.common.maskable.distributions import (
    MaskableCategoricalDistribution,
)
from sb3_contrib.common.maskable.policies import MaskableActorCriticPolicy
from torch import nn

from torchrl_mask.adam import fast_adam
from torchrl_mask.stock import _PlainLayers, _through, backward_hooked, forward_hooked, plain_layers, stock_policy

__all__ = ["evaluate_actions", "fast_train"]

_MASKED_LOGIT = -1e8  # sb3-contrib's HUGE_NEG


def _inlinable(policy: nn.Module) -> _PlainLayers | None:
    """The plain layers of ``policy`` if it is a stock sb3-contrib policy whose ``evaluate_actions``
    :func:`evaluate_actions` is, with nothing hooked on them; else None."""
    if not stock_policy(policy) or "evaluate_actions" in vars(policy):
        return None
    plain = plain_layers(policy)  # type: ignore[arg-type]
    if plain is None or forward_hooked(*plain.watched) or backward_hooked(*plain.watched):
        return None
    return plain


def evaluate_actions(
    policy: MaskableActorCriticPolicy,
    obs: Any,
    actions: torch.Tensor,
    action_masks: Any = None,
    *,
    plain: _PlainLayers | None = None,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """``MaskableActorCriticPolicy.evaluate_actions`` for a stock policy, operation for operation.

    :param policy: a stock sb3-contrib policy (see the module docstring); its layers are run through their
        ``forward`` (nothing is hooked on them, which :func:`fast_train` checks).
    :param obs: the minibatch's observations ``(B, ...)`` (a dict of them for Dict spaces).
    :param actions: the actions taken, ``(B,)`` for Discrete, ``(B, n_sub_actions)`` otherwise.
    :param action_masks: ``(B, mask_dims)`` masks; None evaluates without masking.
    :param plain: the policy's :func:`~torchrl_mask.stock.plain_layers`, if already found.
    :return: values ``(B, 1)``, log-probabilities ``(B,)`` and entropies ``(B,)``, each equal bit for bit to
        sb3-contrib's, with the same autograd graph.
    :raises ValueError: the action logits hold NaN.
    """
    plain = plain or plain_layers(policy)
    assert plain is not None  # checked by fast_train
    features: Any = policy.extract_features(obs)
    pi_features, vf_features = (features, features) if policy.share_features_extractor else features
    latent_pi = _through(plain.pi, pi_features)
    latent_vf = _through(plain.vf, vf_features)
    dist: Any = policy.action_dist
    dims = [int(dist.action_dim)] if isinstance(dist, MaskableCategoricalDistribution) else list(dist.action_dims)
    flat = _through(plain.action, latent_pi).view(-1, sum(dims))
    # MaskableCategorical(logits) keeps the normalised logits as its "original" ones, then re-initialises itself
    # (unmasked: normalising them once more); apply_masking normalises where(mask, original, -1e8) instead.
    # One group (Discrete) is the logits themselves, as sb3-contrib's distribution takes them (no split node).
    groups = [_normalised(group) for group in (torch.split(flat, dims, dim=1) if len(dims) > 1 else [flat])]
    masks: list[torch.Tensor | None] = [None] * len(groups)
    if action_masks is None:
        groups = [_normalised(group) for group in groups]
    else:
        mask = torch.as_tensor(action_masks).view(-1, sum(dims))
        masks = [m.to(torch.bool).reshape(g.shape) for m, g in zip(torch.split(mask, dims, dim=1), groups, strict=True)]
        huge_neg = torch.tensor(_MASKED_LOGIT, dtype=flat.dtype, device=flat.device)
        groups = [_normalised(torch.where(m, g, huge_neg)) for m, g in zip(masks, groups, strict=True)]  # type: ignore[arg-type]
    columns = [actions] if len(dims) == 1 else list(torch.unbind(actions.view(-1, len(dims)), dim=1))
    log_probs = [g.gather(-1, a.long().unsqueeze(-1)).squeeze(-1) for g, a in zip(groups, columns, strict=True)]
    log_prob = log_probs[0] if len(dims) == 1 else torch.stack(log_probs, dim=1).sum(dim=1)
    # A NaN logit makes its whole row NaN through the normalisation, so the log-probabilities show it (where
    # sb3-contrib's distribution raises on constructing from NaN logits).
    if bool(torch.isnan(log_prob).any()):
        raise ValueError("The policy's action logits hold NaN: the network's parameters or inputs are not finite.")
    values = _through(plain.value, latent_vf)
    entropies = [_entropy(g, m) for g, m in zip(groups, masks, strict=True)]
    return values, log_prob, entropies[0] if len(dims) == 1 else torch.stack(entropies, dim=1).sum(dim=1)


def _normalised(logits: torch.Tensor) -> torch.Tensor:
    """``Categorical``'s normalisation of ``logits`` ``(B, n)``."""
    return logits - logits.logsumexp(dim=-1, keepdim=True)


def _entropy(logits: torch.Tensor, mask: torch.Tensor | None) -> torch.Tensor:
    """``MaskableCategorical.entropy()`` of normalised ``logits`` ``(B, n)``: ``(B,)``."""
    if mask is None:  # torch's Categorical.entropy
        min_real = torch.finfo(logits.dtype).min
        p_log_p = torch.clamp(logits, min=min_real) * torch.softmax(logits, dim=-1)
        return -p_log_p.sum(-1)
    p_log_p = logits * torch.softmax(logits, dim=-1)
    p_log_p = torch.where(mask, p_log_p, torch.tensor(0.0, device=logits.device))
    return -p_log_p.sum(-1)


@contextlib.contextmanager
def fast_train(policy: MaskableActorCriticPolicy) -> Iterator[bool]:
    """Within the block, ``policy.evaluate_actions`` is :func:`evaluate_actions` and Adam steps as
    :func:`~torchrl_mask.adam.fast_adam` makes it, where the policy and optimizer are stock (see the module
    docstring); both are restored on exit.

    :param policy: the model's policy.
    :return: (as the ``with`` target) whether ``evaluate_actions`` was inlined.
    """
    plain = _inlinable(policy)
    inline = plain is not None
    if inline:
        policy.evaluate_actions = functools.partial(evaluate_actions, policy, plain=plain)  # type: ignore[method-assign]
    try:
        with fast_adam(getattr(policy, "optimizer", None)):
            yield inline
    finally:
        if inline:
            vars(policy).pop("evaluate_actions", None)
