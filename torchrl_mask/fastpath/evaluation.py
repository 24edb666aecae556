"""What ``MaskablePPO.train`` runs faster: sb3-contrib's ``evaluate_actions`` inlined, and Adam's step.

sb3-contrib's ``train`` (its loop, its losses, its optimizer step) runs unchanged; :func:`fast_train` only swaps
two things underneath it for the duration of the call, where the result is bit for bit the same:

- ``policy.evaluate_actions``, for sb3-contrib's stock policies and masked distributions with nothing hooked on
  the layers: the same torch operations in the same order (so the same gradients, summed in the same order),
  through :class:`~torchrl_mask.distributions.MaskedCategoricals` instead of one ``MaskableCategorical`` object
  per sub-action: all sub-actions at once, and only the work whose result is used (sb3-contrib normalises each
  sub-action's logits a third time and throws that away once the mask is applied, and every construction and
  ``log_prob`` re-checks its arguments). NaN logits raise ``ValueError`` (the distribution's own check does so
  only while ``torch.distributions`` validates arguments, which importing ``torchrl.modules`` turns off
  process-wide).
- ``torch.optim.Adam``'s step on the CPU: the same element-wise arithmetic over flat buffers, one torch call per
  stage instead of one per parameter tensor (:func:`torchrl_mask.fastpath.adam.fast_adam`). Restored after.

Anything else (a policy subclass, a custom distribution or extractor layer, forward or backward hooks, another
optimizer or Adam options, see :mod:`torchrl_mask.fastpath.adam`) runs as sb3-contrib runs it.

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
from sb3_contrib.common.maskable.policies import MaskableActorCriticPolicy
from torch import nn

from torchrl_mask.distributions import MaskedCategoricals
from torchrl_mask.fastpath.adam import fast_adam
from torchrl_mask.fastpath.stock import (
    _PlainLayers,
    _through,
    backward_hooked,
    forward_hooked,
    plain_layers,
    stock_policy,
)
from torchrl_mask.rollout.masks import mask_spec

__all__ = ["evaluate_actions", "fast_train"]


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
    dist: MaskedCategoricals | None = None,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """``MaskableActorCriticPolicy.evaluate_actions`` for a stock policy, operation for operation.

    :param policy: a stock sb3-contrib policy (see the module docstring); its layers are run through their
        ``forward`` (nothing is hooked on them, which :func:`fast_train` checks).
    :param obs: the minibatch's observations ``(B, ...)`` (a dict of them for Dict spaces).
    :param actions: the actions taken, ``(B,)`` for Discrete, ``(B, n_sub_actions)`` otherwise.
    :param action_masks: ``(B, mask_dims)`` masks; None evaluates without masking.
    :param plain: the policy's :func:`~torchrl_mask.fastpath.stock.plain_layers`, if already found.
    :param dist: the masked distribution of the policy's action space, if already made.
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
    dist = dist or MaskedCategoricals(mask_spec(policy.action_space).groups)
    flat = _through(plain.action, latent_pi).view(-1, dist.width)
    mask = None if action_masks is None else torch.as_tensor(action_masks).reshape(flat.shape).to(torch.bool)
    log_pmf = dist.log_pmf(flat, mask)
    log_prob = dist.log_prob(log_pmf, actions)
    # A NaN logit makes its whole row NaN through the normalisation, so the log-probabilities show it (where
    # sb3-contrib's distribution raises on constructing from NaN logits).
    if bool(torch.isnan(log_prob).any()):
        raise ValueError("The policy's action logits hold NaN: the network's parameters or inputs are not finite.")
    values = _through(plain.value, latent_vf)
    return values, log_prob, dist.entropy(log_pmf, mask)


@contextlib.contextmanager
def fast_train(policy: MaskableActorCriticPolicy) -> Iterator[bool]:
    """Within the block, ``policy.evaluate_actions`` is :func:`evaluate_actions` and Adam steps as
    :func:`~torchrl_mask.fastpath.adam.fast_adam` makes it, where the policy and optimizer are stock (see the module
    docstring); both are restored on exit.

    :param policy: the model's policy.
    :return: (as the ``with`` target) whether ``evaluate_actions`` was inlined.
    """
    plain = _inlinable(policy)
    inline = plain is not None
    if inline:
        dist = MaskedCategoricals(mask_spec(policy.action_space).groups)
        policy.evaluate_actions = functools.partial(evaluate_actions, policy, plain=plain, dist=dist)  # type: ignore[method-assign]
    try:
        with fast_adam(getattr(policy, "optimizer", None)):
            yield inline
    finally:
        if inline:
            vars(policy).pop("evaluate_actions", None)
