"""GAE as a pure function: tensors in, advantages and returns out.

SB3 marks episode boundaries by ``episode_starts`` (the step *after* an episode ends) plus the final
``dones``; TorchRL reads ``("next", "done")`` on the step that ends it. :func:`bootstrap_inputs` maps one
onto the other; :func:`generalized_advantage` computes ``A_t = delta_t + gamma * lambda * (1 - done_t) * A_{t+1}``
by one of four routes:

- ``"exact"``: the reverse scan in sb3-contrib's float32 operation order, so the advantages are bit-identical to
  sb3-contrib's (and to TorchRL's ``generalized_advantage_estimate``). Everything that does not depend on the
  next step's advantage is computed for the whole rollout at once; the scan itself is two float32 operations a
  step. The default on the CPU.
- ``"fast"``: equal to the exact values to float32 rounding (within 1e-6 of the largest advantage, as close as
  sb3-contrib's own float32 loop), not in sb3-contrib's order. On the host, the recurrence by recursive doubling:
  ``log2(T)`` rounds, each adding every step's partial sum from ``2^k`` steps ahead, weighted by the product of
  the discounts in between (zero across an episode end); three numpy calls a round on the whole rollout, no loop
  over time, whatever the episode ends. On an accelerator, the rollout folded into blocks of ``~sqrt(T)`` steps:
  TorchRL's ``generalized_advantage_estimate`` inside all blocks at once, then a scan across the blocks carries
  each block's first advantage into the block before it (``~2 sqrt(T)`` sequential steps, where a step-by-step
  scan launches kernels every step). The default on an accelerator.
- ``"loop"`` and ``"vec"``: TorchRL's ``generalized_advantage_estimate`` and ``vec_generalized_advantage_estimate``
  as they are (``"vec"`` pads every trajectory to the longest one, so its cost grows with the episode ends).

SB3 folds a truncation into the reward (``r + gamma * V(terminal_obs)``) and then treats every ``done`` as
terminal, so there ``terminated`` equals ``done``; a TorchRL collector batch keeps them apart.

Example:
    >>> import torch
    >>> from torchrl_mask.advantage import bootstrap_inputs, generalized_advantage
    >>> values = torch.zeros(1, 3, 1)
    >>> starts = torch.zeros(1, 3, 1, dtype=torch.bool)
    >>> next_values, done = bootstrap_inputs(values, starts, torch.zeros(1, 1), torch.ones(1, 1, dtype=torch.bool))
    >>> adv, ret = generalized_advantage(torch.ones(1, 3, 1), values, next_values, done, gamma=0.5, gae_lambda=1.0)
    >>> ret.flatten().tolist()
    [1.75, 1.5, 1.0]
"""

from __future__ import annotations

from typing import Literal, TypeVar

import numpy as np
import torch
from torchrl.objectives.value.functional import (
    generalized_advantage_estimate,
    vec_generalized_advantage_estimate,
)

from torchrl_mask.advantage_device import blocked_device, exact_device

__all__ = [
    "GAE_METHODS",
    "GaeMethod",
    "bootstrap_inputs",
    "generalized_advantage",
    "host_advantage",
    "host_bootstrap",
    "next_step",
    "resolve_gae_method",
]

GaeMethod = Literal["auto", "exact", "fast", "loop", "vec"]
GAE_METHODS: tuple[str, ...] = ("auto", "exact", "fast", "loop", "vec")
_Steps = TypeVar("_Steps", torch.Tensor, np.ndarray)

# Up to this many envs the exact scan runs env by env on numpy float32 scalars (a scalar operation costs less
# than a ufunc call on a short row); above it, step by step on rows of all envs.
_SCALAR_SCAN_MAX_ENVS = 2


def resolve_gae_method(method: str, device: torch.device) -> str:
    """The route ``method`` names on ``device``: ``"auto"`` is ``"exact"`` on the CPU and ``"fast"`` elsewhere.

    :param method: one of :data:`GAE_METHODS`.
    :param device: where the rollout lives.
    :return: ``"exact"``, ``"fast"``, ``"loop"`` or ``"vec"``.
    :raises ValueError: an unknown method.
    """
    if method not in GAE_METHODS:
        raise ValueError(f"gae_method={method!r} is not a GAE method: use one of {', '.join(map(repr, GAE_METHODS))}.")
    if method == "auto":
        return "exact" if device.type == "cpu" else "fast"
    return method


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
    method: GaeMethod = "auto",
    terminated: torch.Tensor | None = None,
    out: tuple[torch.Tensor, torch.Tensor] | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """GAE(lambda) advantages and TD(lambda) returns.

    ``A_t = delta_t + gamma * lambda * (1 - done_t) * A_{t+1}`` with
    ``delta_t = r_t + gamma * V(s_{t+1}) * (1 - terminated_t) - V(s_t)``; returns are ``A_t + V(s_t)``.

    :param reward: ``r_t``, float32, shape ``(n_envs, T, 1)``.
    :param value: ``V(s_t)``, float32, ``(n_envs, T, 1)``.
    :param next_value: ``V(s_{t+1})``, float32, ``(n_envs, T, 1)``.
    :param done: bool, ``(n_envs, T, 1)``: step ``t`` ended its episode (no carry-over of the advantage).
    :param gamma: discount factor.
    :param gae_lambda: bias/variance trade-off; 1 gives Monte-Carlo advantages.
    :param method: ``"exact"``, ``"fast"``, ``"loop"``, ``"vec"`` (see the module) or ``"auto"``
        (:func:`resolve_gae_method`).
    :param terminated: bool, ``(n_envs, T, 1)``: step ``t`` ended in a terminal state (no bootstrap from
        ``next_value``); None means every ``done`` is terminal (SB3's convention). Where ``done`` but not
        ``terminated`` (a truncation, TorchRL's convention) ``delta_t`` bootstraps from ``next_value``.
    :param out: optional ``(advantage, returns)`` tensors, ``(n_envs, T, 1)`` float32, to write into (not overlapping
        the inputs: the fast route keeps intermediate values in them).
    :return: ``(advantage, returns)``, float32, ``(n_envs, T, 1)``.
    :raises ValueError: an unknown method.
    """
    route = resolve_gae_method(method, value.device)
    terminal = done if terminated is None else terminated
    if route in ("exact", "fast") and value.device.type == "cpu":
        if out is None:
            out = (torch.empty_like(value), torch.empty_like(value))
        r, v, nv, d, adv, ret = (_rows(tensor) for tensor in (reward, value, next_value, done, *out))
        term = None if terminated is None else _rows(terminated)
        host_advantage(r, v, nv, d, gamma, gae_lambda, route, adv, ret, terminated=term)
        return out
    if route == "exact":
        advantage = exact_device(reward, value, next_value, done, terminal, gamma, gae_lambda)
    elif route == "fast":
        advantage = blocked_device(reward, value, next_value, done, terminal, gamma, gae_lambda)
    else:
        estimator = generalized_advantage_estimate if route == "loop" else vec_generalized_advantage_estimate
        advantage = estimator(gamma, gae_lambda, value, next_value, reward, done, terminal, time_dim=-2)[0]
    if out is None:
        return advantage, advantage + value
    out[0].copy_(advantage)
    torch.add(out[0], value, out=out[1])
    return out


def host_advantage(
    reward: np.ndarray,
    value: np.ndarray,
    next_value: np.ndarray,
    done: np.ndarray,
    gamma: float,
    gae_lambda: float,
    route: str,
    advantage: np.ndarray,
    returns: np.ndarray,
    terminated: np.ndarray | None = None,
    scratch: np.ndarray | None = None,
) -> None:
    """:func:`generalized_advantage`'s ``"exact"`` and ``"fast"`` routes on the host, on ``(n_envs, T)`` numpy views
    (which a caller can keep: making them costs as much as the fast route's maths).

    :param reward: ``r_t``, ``(n_envs, T)`` float32.
    :param value: ``V(s_t)``, ``(n_envs, T)`` float32.
    :param next_value: ``V(s_{t+1})``, ``(n_envs, T)`` float32.
    :param done: ``(n_envs, T)`` bool.
    :param gamma: discount factor.
    :param gae_lambda: GAE's lambda.
    :param route: ``"exact"`` or ``"fast"``.
    :param advantage: ``(n_envs, T)`` float32, receives the advantages.
    :param returns: ``(n_envs, T)`` float32, receives the returns. Neither output may overlap an input.
    :param terminated: ``(n_envs, T)`` bool, or None: every ``done`` is terminal.
    :param scratch: optional ``(n_envs, T)`` float32 array the fast route may overwrite; a caller that keeps one
        saves an allocation per call (a fresh one can fault its pages in, which costs as much as the maths).
    """
    terminal = done if terminated is None else terminated
    if route == "exact":
        advantage[...] = _exact_host(*_host_terms(reward, value, next_value, done, terminal, gamma, gae_lambda))
    else:  # the returns' storage holds weights until the returns are written
        spares = (returns, np.empty_like(advantage) if scratch is None else scratch)
        _doubling_host(reward, value, next_value, done, terminal, gamma, gae_lambda, out=advantage, spares=spares)
    np.add(advantage, value, out=returns)


def _rows(tensor: torch.Tensor) -> np.ndarray:
    """An ``(n_envs, T, 1)`` host tensor as an ``(n_envs, T)`` numpy view (numpy's indexing costs a fraction of a
    torch call, and a view writes through)."""
    return tensor.numpy()[..., 0]


def _host_terms(
    reward: np.ndarray,
    value: np.ndarray,
    next_value: np.ndarray,
    done: np.ndarray,
    terminated: np.ndarray,
    gamma: float,
    gae_lambda: float,
) -> tuple[np.ndarray, np.ndarray]:
    """``delta`` and the discount ``gamma * lambda * (1 - done)`` as ``(n_envs, T)`` float32 numpy arrays.

    sb3-contrib's expressions in its order, over the whole rollout at once: each element rounds as in its loop.
    All inputs are ``(n_envs, T)`` numpy arrays (float32, ``done`` and ``terminated`` bool).
    """
    not_done = 1.0 - done.astype(np.float32)
    not_term = not_done if terminated is done else 1.0 - terminated.astype(np.float32)
    return reward + gamma * next_value * not_term - value, gamma * gae_lambda * not_done


def _exact_host(delta: np.ndarray, discount: np.ndarray) -> np.ndarray:
    """The exact reverse scan of ``(n_envs, T)`` terms on the host; returns ``(n_envs, T)``."""
    n_envs, steps = delta.shape
    if n_envs <= _SCALAR_SCAN_MAX_ENVS:
        advantage = np.empty((n_envs, steps), dtype=np.float32)
        for env in range(n_envs):
            _scalar_scan(delta[env], discount[env], advantage[env])
        return advantage
    return _row_scan(np.ascontiguousarray(delta.T), np.ascontiguousarray(discount.T)).T


def _doubling_host(
    reward: np.ndarray,
    value: np.ndarray,
    next_value: np.ndarray,
    done: np.ndarray,
    terminated: np.ndarray,
    gamma: float,
    gae_lambda: float,
    out: np.ndarray,
    spares: tuple[np.ndarray, np.ndarray],
) -> None:
    """The ``"fast"`` route on the host: the recurrence by recursive doubling, ``log2(T)`` rounds of three numpy
    calls on the whole rollout, no loop over time and no allocation, whatever the episode ends.

    With ``w_t = gamma * lambda * (1 - done_t)``: after the round of shift ``s``, ``out[t]`` holds the sum over the
    next ``2s`` steps ``sum_{j<2s} (w_t ... w_{t+j-1}) delta_{t+j}`` and ``weight[t]`` the product
    ``w_t ... w_{t+2s-1}``; the next round adds ``weight[t] * out[t + 2s]`` and doubles the span of ``weight``. An
    episode end zeroes every product across it, and so does the rollout's last step (GAE carries nothing past
    it), so the envs' rows run as one flat array. Each sum is a tree at most ``log2(T)`` roundings deep: float32
    stays as close to the exact values as sb3-contrib's own step-by-step float32 loop.

    :param reward: ``r_t``, ``(n_envs, T)`` float32.
    :param value: ``V(s_t)``, ``(n_envs, T)`` float32.
    :param next_value: ``V(s_{t+1})``, ``(n_envs, T)`` float32.
    :param done: ``(n_envs, T)`` bool: the episode ends at ``t``.
    :param terminated: ``(n_envs, T)`` bool: no bootstrap from ``next_value`` at ``t``.
    :param gamma: discount factor.
    :param gae_lambda: GAE's lambda.
    :param out: ``(n_envs, T)`` float32, receives the advantages (it holds ``delta`` on the way).
    :param spares: two ``(n_envs, T)`` float32 arrays to overwrite: the weights and the next round's weights.
    """
    work, weight, spare = (a if a.flags.c_contiguous else np.empty(a.shape, np.float32) for a in (out, *spares))
    np.multiply(next_value, gamma, out=work)  # delta_t = r_t + gamma * V(s_{t+1}) * (1 - terminated_t) - V(s_t)
    work[terminated] = 0.0
    work += reward
    work -= value
    weight.fill(gamma * gae_lambda)
    weight[done] = 0.0
    weight[:, -1] = 0.0  # nothing carries past the rollout: the envs' rows can run as one
    steps, shift = work.shape[1], 1
    flat, weight, spare = work.reshape(-1), weight.reshape(-1), spare.reshape(-1)  # views: all C-contiguous
    while shift < steps:
        if 2 * shift < steps:  # the next round's products, before this round's are overwritten
            np.multiply(weight[:-shift], weight[shift:], out=spare[:-shift])
        np.multiply(weight[:-shift], flat[shift:], out=weight[:-shift])
        flat[:-shift] += weight[:-shift]
        weight, spare = spare, weight  # the last `shift` entries are stale: no later round reads them for `flat`
        shift *= 2
    if work is not out:
        out[...] = work


def _scalar_scan(delta: np.ndarray, discount: np.ndarray, out: np.ndarray) -> None:
    """One env's reverse scan on numpy float32 scalars: ``out[t] = delta[t] + discount[t] * out[t + 1]``."""
    last = np.float32(0.0)
    values = []
    for d, c in zip(delta[::-1], discount[::-1], strict=True):
        last = d + c * last
        values.append(last)
    out[::-1] = values


def _row_scan(delta: np.ndarray, discount: np.ndarray) -> np.ndarray:
    """The reverse scan over time-major ``(T, n_envs)`` rows, two ufunc calls a step, no allocation."""
    advantage = np.empty_like(delta)
    last = np.zeros(delta.shape[1], dtype=np.float32)
    carried = np.empty_like(last)
    for d, c, a in zip(delta[::-1], discount[::-1], advantage[::-1], strict=True):
        np.multiply(c, last, out=carried)
        np.add(d, carried, out=a)
        last = a
    return advantage
