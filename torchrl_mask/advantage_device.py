"""The ``"exact"`` and ``"fast"`` GAE routes with torch operations, for an accelerator (see
:mod:`torchrl_mask.advantage`, which chooses the route; on the host both run on numpy views there).

On an accelerator a step-by-step scan launches kernels at every step: :func:`exact_device` keeps sb3-contrib's
order for bit-identity, :func:`blocked_device` folds time into ``~sqrt(T)`` blocks so that TorchRL's
``generalized_advantage_estimate`` runs inside all blocks at once and only ``~2 sqrt(T)`` steps are sequential.

Example:
    >>> import torch
    >>> reward, value, next_value = torch.ones(1, 3, 1), torch.zeros(1, 3, 1), torch.zeros(1, 3, 1)
    >>> done = torch.tensor([False, False, True]).reshape(1, 3, 1)
    >>> exact_device(reward, value, next_value, done, done, 0.5, 1.0).flatten().tolist()
    [1.75, 1.5, 1.0]
    >>> blocked_device(reward, value, next_value, done, done, 0.5, 1.0).flatten().tolist()
    [1.75, 1.5, 1.0]
"""

from __future__ import annotations

import math

import torch
from torchrl.objectives.value.functional import generalized_advantage_estimate

__all__ = ["blocked_device", "exact_device"]


def _blocking(steps: int) -> tuple[int, int, int]:
    """Blocks of ``~sqrt(T)`` steps: ``(block, n_blocks, padding)``; the two scans then take ``~2 sqrt(T)`` steps."""
    block = max(1, math.isqrt(steps))
    n_blocks = -(-steps // block)
    return block, n_blocks, n_blocks * block - steps


def exact_device(
    reward: torch.Tensor,
    value: torch.Tensor,
    next_value: torch.Tensor,
    done: torch.Tensor,
    terminated: torch.Tensor,
    gamma: float,
    gae_lambda: float,
) -> torch.Tensor:
    """The exact scan with torch operations (an accelerator): the same order, one step at a time."""
    not_done = 1.0 - done.to(torch.float32)
    not_term = not_done if terminated is done else 1.0 - terminated.to(torch.float32)
    delta = reward + gamma * next_value * not_term - value
    discount = gamma * gae_lambda * not_done
    advantage = torch.empty_like(delta)
    last = torch.zeros_like(delta[:, 0])
    for t in range(delta.shape[1] - 1, -1, -1):
        last = torch.add(delta[:, t], discount[:, t] * last, out=advantage[:, t])
    return advantage


def blocked_device(
    reward: torch.Tensor,
    value: torch.Tensor,
    next_value: torch.Tensor,
    done: torch.Tensor,
    terminated: torch.Tensor,
    gamma: float,
    gae_lambda: float,
) -> torch.Tensor:
    """The ``"fast"`` route on an accelerator: TorchRL's estimator over blocks, then a scan across the blocks.

    Folding the time axis into ``K`` blocks of ``B`` steps makes TorchRL's ``generalized_advantage_estimate`` run
    ``B`` steps over ``n_envs * K`` rows, each block's advantage cut at the block's end. A step whose episode runs
    past its block's end then adds ``w_t * A_s``, where ``s`` is the next block's first step and ``w_t`` the product
    of ``gamma * lambda * (1 - done)`` from ``t`` to the block's end; ``A_s`` comes from a scan over the ``K``
    blocks, last first. Work is ``O(n_envs * T)`` whatever the episode ends; sequential steps ``B + K``.
    """
    n_envs, steps = value.shape[:2]
    block, n_blocks, pad = _blocking(steps)

    def blocks(tensor: torch.Tensor, fill: float | bool) -> torch.Tensor:
        tensor = tensor.reshape(n_envs, steps)
        if pad:
            tensor = torch.nn.functional.pad(tensor, (0, pad), value=fill)
        return tensor.reshape(n_envs * n_blocks, block, 1)

    ends, terminal = blocks(done, True), blocks(terminated, True)
    inside = generalized_advantage_estimate(
        gamma, gae_lambda, blocks(value, 0.0), blocks(next_value, 0.0), blocks(reward, 0.0), ends, terminal
    )[0].reshape(n_envs, n_blocks, block)
    discount = (gamma * gae_lambda * (~ends).to(torch.float32)).reshape(n_envs, n_blocks, block)
    weight = discount.flip(-1).cumprod(-1).flip(-1)  # w_t: product of the discounts from t to the block's end
    first = torch.zeros(n_envs, n_blocks + 1, dtype=inside.dtype, device=inside.device)
    for b in range(n_blocks - 1, -1, -1):  # A at each block's first step, the last block first
        torch.addcmul(inside[:, b, 0], weight[:, b, 0], first[:, b + 1], out=first[:, b])
    advantage = torch.addcmul(inside, weight, first[:, 1:, None])
    return advantage.reshape(n_envs, n_blocks * block)[:, :steps].reshape(value.shape)
