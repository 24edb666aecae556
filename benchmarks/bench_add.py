"""``add()`` alone, ours (value checks on and off) against sb3-contrib's.

Run ``python benchmarks/bench_add.py [steps] [rounds]``.

A Dict observation of three float vectors, MultiDiscrete([5, 5, 5, 5]) masks, 8 envs; the inputs as sb3-contrib's
``MaskablePPO.collect_rollouts`` passes them (numpy observations, actions, rewards, starts and masks; values and
log-probabilities as CPU tensors). Each round times one rollout of each buffer (made once, ``reset()`` per
rollout) in the same process, alternating; times are the thread's CPU time (less disturbed by other processes on
a shared machine than wall time). Reported: medians, and the median of each round's paired ratio.
"""

from __future__ import annotations

import sys
import time
from typing import Any

import numpy as np
import torch
from gymnasium import spaces
from sb3_contrib.common.maskable import buffers as sb3c

from torchrl_mask import MaskableDictRolloutBuffer


def make_steps(n_steps: int, n_envs: int, seed: int = 0) -> list[tuple[Any, ...]]:
    """One rollout of ``add`` arguments, each action allowed by its mask."""
    rng = np.random.default_rng(seed)
    steps = []
    for _ in range(n_steps):
        obs = {key: rng.uniform(-1, 1, (n_envs, 8)).astype(np.float32) for key in ("position", "velocity", "goal")}
        action = rng.integers(0, 5, (n_envs, 4))
        masks = rng.random((n_envs, 20)) < 0.7
        np.put_along_axis(masks, action + np.arange(4) * 5, True, axis=1)
        value = torch.as_tensor(rng.normal(size=(n_envs, 1)), dtype=torch.float32)
        log_prob = torch.as_tensor(rng.normal(size=n_envs), dtype=torch.float32)
        reward = rng.normal(size=n_envs).astype(np.float32)
        steps.append((obs, action, reward, rng.random(n_envs) < 0.05, value, log_prob, masks))
    return steps


def rollout_seconds(buffer: Any, steps: list[tuple[Any, ...]]) -> float:
    buffer.reset()
    start = time.thread_time()
    for obs, action, reward, episode_start, value, log_prob, masks in steps:
        buffer.add(obs, action, reward, episode_start, value, log_prob, action_masks=masks)
    return time.thread_time() - start


def main(n_steps: int = 2048, rounds: int = 15, n_envs: int = 8) -> None:
    torch.set_num_threads(1)
    obs_space = spaces.Dict({key: spaces.Box(-1, 1, (8,), np.float32) for key in ("position", "velocity", "goal")})
    action_space = spaces.MultiDiscrete([5, 5, 5, 5])
    steps = make_steps(n_steps, n_envs)
    buffers = {
        "sb3-contrib": sb3c.MaskableDictRolloutBuffer(n_steps, obs_space, action_space, "cpu", n_envs=n_envs),
        **{
            f"ours, check_values={flag}": MaskableDictRolloutBuffer(
                n_steps, obs_space, action_space, "cpu", n_envs=n_envs, check_values=flag
            )
            for flag in (True, False)
        },
    }
    times: dict[str, list[float]] = {name: [] for name in buffers}
    for _ in range(rounds):
        for name, buffer in buffers.items():
            times[name].append(rollout_seconds(buffer, steps))
    base = np.array(times["sb3-contrib"])
    print(f"add() over {n_steps} steps x {n_envs} envs, {rounds} rounds (thread CPU time, medians):")
    for name, seconds in times.items():
        per_step = np.median(seconds) / n_steps * 1e6
        ratio = np.median(np.array(seconds) / base)
        rollout_ms = np.median(seconds) * 1e3
        print(f"  {name:26s} {rollout_ms:7.2f} ms/rollout  {per_step:6.2f} us/step  x{ratio:.2f} sb3-contrib")


if __name__ == "__main__":
    main(*(int(arg) for arg in sys.argv[1:3]))
