"""GAE as a pure function: tensors in, TorchRL's estimator, advantages and returns out.

SB3 marks episode boundaries by ``episode_starts`` (the step *after* an episode ends) plus the final
``dones``; TorchRL reads ``("next", "done")`` on the step that ends it. :func:`bootstrap_inputs` maps one
onto the other; :func:`generalized_advantage` then computes ``A_t = delta_t + gamma * lambda * (1 - done_t) * A_{t+1}``
by one of TorchRL's functions, on the device the tensors are on, as ``gae_method`` names it:

- ``"loop"`` (the default): ``torchrl.objectives.value.functional.generalized_advantage_estimate``, TorchRL's
  reverse loop over time. It computes ``delta`` and the discount ``gamma * lambda * (1 - done)`` for the whole
  rollout, then ``A_t = delta_t + A_{t+1} * discount_t`` one step at a time: the float32 roundings of
  sb3-contrib's loop in its order, so on the CPU the advantages and returns are bit-identical to sb3-contrib's.
  On an accelerator the same elementwise operations run there; only the CPU's bits are tested.
- ``"vec"``: ``vec_generalized_advantage_estimate``, which pads every trajectory to the longest one and sums
  the discounted deltas by a convolution: equal to float32 rounding, not bit for bit (its cost grows with the
  episode ends).

SB3 folds a truncation into the reward (``r + gamma * V(terminal_obs)``) and then treats every ``done`` as
terminal, so there ``terminated`` equals ``done``; a TorchRL collector batch keeps them apart.

Example:
    >>> import torch
    >>> from torchrl_mask.rollout.advantage import bootstrap_inputs, generalized_advantage
    >>> values = torch.zeros(1, 3, 1)
    >>> starts = torch.zeros(1, 3, 1, dtype=torch.bool)
    >>> next_values, done = bootstrap_inputs(values, starts, torch.zeros(1, 1), torch.ones(1, 1, dtype=torch.bool))
    >>> adv, ret = generalized_advantage(torch.ones(1, 3, 1), values, next_values, done, gamma=0.5, gae_lambda=1.0)
    >>> ret.flatten().tolist()
    [1.75, 1.5, 1.0]
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Literal, TypeVar

import numpy as np
import torch
from torchrl.objectives.value.functional import (
    generalized_advantage_estimate,
    vec_generalized_advantage_estimate,
)

__all__ = [
    "GAE_METHODS",
    "GaeMethod",
    "bootstrap_inputs",
    "check_gae_method",
    "gae_estimator",
    "generalized_advantage",
    "host_bootstrap",
    "next_step",
]

GaeMethod = Literal["loop", "vec"]
GAE_METHODS: tuple[str, ...] = ("loop", "vec")
# Values gae_method took before GAE was TorchRL's alone, and what replaces each.
_REMOVED = {
    "auto": "'loop' (the default, wherever the rollout lives)",
    "exact": "'loop' (TorchRL's loop gives sb3-contrib's bits on the CPU)",
    "fast": "'loop' (the default) or 'vec'",
}
_Steps = TypeVar("_Steps", torch.Tensor, np.ndarray)
_Estimator = Callable[..., tuple[torch.Tensor, torch.Tensor]]


def check_gae_method(method: str) -> None:
    """Fail unless ``method`` is one of :data:`GAE_METHODS`.

    :param method: the ``gae_method`` a caller passed.
    :raises ValueError: an unknown or removed method; the message names the accepted values (and, for a
        removed one, its replacement).
    """
    if method in GAE_METHODS:
        return
    accepted = ", ".join(map(repr, GAE_METHODS))
    if method in _REMOVED:
        raise ValueError(
            f"gae_method={method!r} was removed: GAE is TorchRL's estimator; use {_REMOVED[method]}. "
            f"Accepted: {accepted}."
        )
    raise ValueError(f"gae_method={method!r} is not a GAE method: use one of {accepted}.")


def gae_estimator(method: GaeMethod) -> _Estimator:
    """TorchRL's function that ``method`` names, looked up in this module at each call (so that a test can
    replace it here).

    :param method: ``"loop"`` or ``"vec"``.
    :return: ``generalized_advantage_estimate`` or ``vec_generalized_advantage_estimate``.
    :raises ValueError: another method (:func:`check_gae_method`).
    """
    check_gae_method(method)
    return generalized_advantage_estimate if method == "loop" else vec_generalized_advantage_estimate


def bootstrap_inputs(
    values: torch.Tensor,
    episode_starts: torch.Tensor,
    last_values: torch.Tensor | np.ndarray,
    dones: torch.Tensor | np.ndarray,
    out: tuple[torch.Tensor, torch.Tensor] | None = None,
    terminated: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Map SB3's episode starts and final dones onto TorchRL's next-step values and dones.

    :param values: ``V(s_t)``, shape ``(n_envs, T, 1)``.
    :param episode_starts: SB3's ``episode_starts`` (obs ``t`` begins an episode), bool, ``(n_envs, T, 1)``.
    :param last_values: ``V(s_T)`` of the observation after the rollout, ``n_envs`` entries (a tensor, detached
        here, or an array).
    :param dones: whether the rollout's last step ended an episode, ``n_envs`` entries (a tensor or an array).
    :param out: optional ``(next_values, done)`` tensors, ``(n_envs, T, 1)``, to write into.
    :param terminated: optional bool ``(n_envs, T, 1)`` tensor, also written with ``done`` (SB3 folds a truncation
        into the reward, so each of its dones is terminal).
    :return: ``(next_values, done)``: ``V(s_{t+1})`` float and ``done_t`` bool, both ``(n_envs, T, 1)``.
    """
    if out is None:
        next_values = torch.empty_like(values)
        done = torch.empty_like(episode_starts, dtype=torch.bool)
    else:
        next_values, done = out
    n_envs = values.shape[0]
    if values.device.type == "cpu":  # numpy views: a slice assignment costs a fraction of torch's on the host
        v, s, nv, d = (_rows(tensor) for tensor in (values, episode_starts, next_values, done))
        host_bootstrap(v, s, nv, d, last_values, dones, None if terminated is None else _rows(terminated))
        return next_values, done
    last = torch.as_tensor(last_values).detach().reshape(n_envs, 1)
    next_step(values, last.to(next_values), out=next_values)
    ends = torch.as_tensor(dones).reshape(n_envs, 1).to(device=done.device, dtype=torch.bool)
    next_step(episode_starts, ends, out=done)
    if terminated is not None:
        terminated.copy_(done)
    return next_values, done


def host_bootstrap(
    values: np.ndarray,
    episode_starts: np.ndarray,
    next_values: np.ndarray,
    done: np.ndarray,
    last_values: torch.Tensor | np.ndarray,
    dones: torch.Tensor | np.ndarray,
    terminated: np.ndarray | None = None,
) -> None:
    """:func:`bootstrap_inputs` on the host, on ``(n_envs, T)`` numpy views (which a caller can keep: making
    them costs as much as this).

    :param values: ``V(s_t)``, ``(n_envs, T)`` float32.
    :param episode_starts: SB3's episode starts, ``(n_envs, T)`` bool.
    :param next_values: ``(n_envs, T)`` float32, receives ``V(s_{t+1})``.
    :param done: ``(n_envs, T)`` bool, receives ``done_t``.
    :param last_values: ``V(s_T)``, ``n_envs`` entries (a tensor, detached here, or an array).
    :param dones: whether the last step ended an episode, ``n_envs`` entries.
    :param terminated: optional ``(n_envs, T)`` bool, also receives ``done_t``.
    """
    n_envs = values.shape[0]
    next_step(values, _host_array(last_values).reshape(n_envs), out=next_values)
    next_step(episode_starts, _host_array(dones).reshape(n_envs), out=done)
    if terminated is not None:
        np.copyto(terminated, done)


def _host_array(entries: torch.Tensor | np.ndarray) -> np.ndarray:
    """A tensor (detached, copied to the host if need be) or anything array-like, as a numpy array."""
    if isinstance(entries, torch.Tensor):
        return entries.numpy(force=entries.requires_grad or not entries.is_cpu)
    return np.asarray(entries)


def next_step(steps: _Steps, last: _Steps | float, out: _Steps) -> _Steps:
    """Each step's entry for the step after it, along the time dim (dim 1): the one place the rollout shifts.

    ``out[:, t] = steps[:, t + 1]`` for every step but the last, and ``out[:, -1] = last``: how ``V(s_{t+1})``
    and ``done_t`` are read off ``V(s_t)`` and SB3's episode starts.

    :param steps: ``(n_envs, T, ...)``, a tensor or a numpy array.
    :param last: the entry after the last step, ``(n_envs, ...)`` (or a number for all envs).
    :param out: where to write, ``(n_envs, T, ...)``, same kind as ``steps``; must not overlap it.
    :return: ``out``.
    """
    out[:, :-1] = steps[:, 1:]
    out[:, -1] = last
    return out


def generalized_advantage(
    reward: torch.Tensor,
    value: torch.Tensor,
    next_value: torch.Tensor,
    done: torch.Tensor,
    gamma: float,
    gae_lambda: float,
    method: GaeMethod = "loop",
    terminated: torch.Tensor | None = None,
    out: tuple[torch.Tensor, torch.Tensor] | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """GAE(lambda) advantages and TD(lambda) returns, by TorchRL's estimator on the tensors' device.

    ``A_t = delta_t + gamma * lambda * (1 - done_t) * A_{t+1}`` with
    ``delta_t = r_t + gamma * V(s_{t+1}) * (1 - terminated_t) - V(s_t)``; returns are ``A_t + V(s_t)``.

    :param reward: ``r_t``, float32, shape ``(n_envs, T, 1)``.
    :param value: ``V(s_t)``, float32, ``(n_envs, T, 1)``.
    :param next_value: ``V(s_{t+1})``, float32, ``(n_envs, T, 1)``.
    :param done: bool, ``(n_envs, T, 1)``: step ``t`` ended its episode (no carry-over of the advantage).
    :param gamma: discount factor.
    :param gae_lambda: bias/variance trade-off; 1 gives Monte-Carlo advantages.
    :param method: ``"loop"`` (``generalized_advantage_estimate``) or ``"vec"``
        (``vec_generalized_advantage_estimate``); see the module.
    :param terminated: bool, ``(n_envs, T, 1)``: step ``t`` ended in a terminal state (no bootstrap from
        ``next_value``); None means every ``done`` is terminal (SB3's convention). Where ``done`` but not
        ``terminated`` (a truncation, TorchRL's convention) ``delta_t`` bootstraps from ``next_value``.
    :param out: optional ``(advantage, returns)`` tensors, ``(n_envs, T, 1)`` float32, to copy the results into.
    :return: ``(advantage, returns)``, float32, ``(n_envs, T, 1)`` (``out`` when given).
    :raises ValueError: an unknown or removed method (:func:`check_gae_method`).
    """
    estimator = gae_estimator(method)
    terminal = done if terminated is None else terminated
    advantage, returns = estimator(gamma, gae_lambda, value, next_value, reward, done, terminal, time_dim=-2)
    if out is None:
        return advantage, returns
    out[0].copy_(advantage)
    out[1].copy_(returns)
    return out


def _rows(tensor: torch.Tensor) -> np.ndarray:
    """An ``(n_envs, T, 1)`` host tensor as an ``(n_envs, T)`` numpy view (numpy's indexing costs a fraction of a
    torch call, and a view writes through)."""
    return tensor.numpy()[..., 0]
