"""Masked collection plus training: TorchRL's MultiSyncCollector against sb3-contrib's SubprocVecEnv.

Both sides train MaskablePPO with the same policy (two hidden layers of 64), the same rollout size
(``2 * n_steps`` steps per update) and the same updates, on an env whose step costs about a millisecond of CPU
and which keeps its mask behind ``action_masks()`` (sb3-contrib's convention):

- sb3-contrib: ``MaskablePPO.learn`` over ``SubprocVecEnv`` with 2 processes (``--sb3-processes``), one env
  each: each step is a ``step`` round trip plus an ``env_method("action_masks")`` round trip, with the policy
  in the learner's process;
- torchrl_mask: ``learn_from_collector`` over ``MultiSyncCollector`` with 2 worker processes, each running its
  env (``--envs-per-worker`` envs in a ``SerialEnv``) and a copy of the policy, delivering whole rollouts with
  the mask in each step's TensorDict.

The like-for-like comparison is the default: 2 processes and 2 envs on each side. ``--envs-per-worker 4``
shows what a worker gains from running its policy once for several envs (SubprocVecEnv has one env per
process; ``--sb3-processes 8`` gives sb3-contrib the same 8 envs, in 8 processes).

Steps per second count env steps over the whole ``learn`` (collection and training); process start-up is
excluded on both sides. Runs alternate between the two; the medians and the median of each repeat's ratio
(both runs of a repeat see the same machine) are printed.

Run: ``python benchmarks/bench_collect.py [--repeats 11] [--total-timesteps 4096] [--n-steps 512]``.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from typing import Any

import gymnasium as gym
import numpy as np
import torch
from gymnasium import spaces
from sb3_contrib import MaskablePPO as SB3ContribMaskablePPO
from stable_baselines3.common.logger import Logger
from stable_baselines3.common.vec_env import SubprocVecEnv
from torchrl.collectors import MultiSyncCollector
from torchrl.envs import SerialEnv

from torchrl_mask import MaskablePolicyModule, MaskablePPO, learn_from_collector, masked_gym_env

N_ACTIONS = 8
OBS_DIM = 16
POLICY_KWARGS = {"net_arch": [64, 64]}


class BusyMaskedEnv(gym.Env):
    """An env whose step burns ``step_cost`` seconds of CPU, with a random mask behind ``action_masks()``."""

    observation_space = spaces.Box(-1.0, 1.0, (OBS_DIM,), np.float32)
    action_space = spaces.Discrete(N_ACTIONS)

    def __init__(self, step_cost: float = 1e-3, episode_length: int = 200) -> None:
        self.step_cost = step_cost
        self.episode_length = episode_length
        self.rng = np.random.default_rng(0)
        self.t = 0
        self.mask = np.ones(N_ACTIONS, dtype=bool)

    def _observe(self) -> np.ndarray:
        self.mask = self.rng.random(N_ACTIONS) < 0.6
        self.mask[self.rng.integers(N_ACTIONS)] = True
        return self.rng.uniform(-1, 1, OBS_DIM).astype(np.float32)

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> Any:
        super().reset(seed=seed)
        if seed is not None:
            self.rng = np.random.default_rng(seed)
        self.t = 0
        return self._observe(), {}

    def step(self, action: Any) -> Any:
        if not self.mask[int(action)]:
            raise AssertionError(f"invalid action {action}")
        end = time.perf_counter() + self.step_cost
        while time.perf_counter() < end:  # the simulation's work
            pass
        self.t += 1
        reward = float(int(action) % 2)
        return self._observe(), reward, False, self.t >= self.episode_length, {}

    def action_masks(self) -> np.ndarray:
        return self.mask


def make_gym_env(step_cost: float) -> BusyMaskedEnv:
    return BusyMaskedEnv(step_cost)


def make_torchrl_env(step_cost: float) -> Any:
    torch.set_num_threads(1)
    # SubprocVecEnv has no Monitor either, and learn_from_collector needs no "is_init": the bare GymWrapper.
    return masked_gym_env(BusyMaskedEnv(step_cost), episode_stats=False, init_tracker=False)


class _BatchedEnvFn:
    """A worker's env: ``n`` masked envs stepped one after the other in one TorchRL ``SerialEnv``, so the
    worker's policy copy runs once for all ``n``."""

    def __init__(self, n: int, step_cost: float) -> None:
        self.n, self.step_cost = n, step_cost

    def __call__(self) -> Any:
        torch.set_num_threads(1)
        return SerialEnv(self.n, _EnvFn(make_torchrl_env, self.step_cost))


class _EnvFn:
    """A picklable env factory (SubprocVecEnv and the collector's workers both call it)."""

    def __init__(self, make: Any, step_cost: float) -> None:
        self.make, self.step_cost = make, step_cost

    def __call__(self) -> Any:
        return self.make(self.step_cost)


def ppo_kwargs(args: argparse.Namespace) -> dict[str, Any]:
    return {
        "n_steps": args.n_steps,
        "batch_size": args.batch_size,
        "n_epochs": args.n_epochs,
        "policy_kwargs": POLICY_KWARGS,
        "seed": 0,
        "device": "cpu",
    }


def run_sb3_contrib(args: argparse.Namespace) -> float:
    torch.set_num_threads(1)  # a collector's shutdown restores the process's threads; the learner gets one here
    processes = args.sb3_processes
    env = SubprocVecEnv([_EnvFn(make_gym_env, args.step_cost)] * processes)
    try:
        kwargs = ppo_kwargs(args)
        kwargs["n_steps"] = 2 * args.n_steps // processes  # the same rollout size: 2 * n_steps steps
        model = SB3ContribMaskablePPO("MlpPolicy", env, **kwargs)
        model.set_logger(Logger(None, []))  # no /tmp/SB3-<date> folder per learn (the same for both)
        start = time.perf_counter()
        model.learn(args.total_timesteps)
        elapsed = time.perf_counter() - start
    finally:
        env.close()
    return model.num_timesteps / elapsed


def run_torchrl_mask(args: argparse.Namespace) -> float:
    torch.set_num_threads(1)
    model = MaskablePPO("MlpPolicy", BusyMaskedEnv(args.step_cost), **ppo_kwargs(args))
    model.set_logger(Logger(None, []))
    per_worker = args.envs_per_worker
    make_env: Any = (
        _EnvFn(make_torchrl_env, args.step_cost) if per_worker == 1 else _BatchedEnvFn(per_worker, args.step_cost)
    )
    collector = MultiSyncCollector(
        [make_env] * 2,
        MaskablePolicyModule(model.policy),
        frames_per_batch=2 * args.n_steps,  # the same rollout size as sb3-contrib's: 2 * n_steps steps
        # The envs have no InitTracker on purpose: learn_from_collector needs no "is_init". Said explicitly, as
        # TorchRL 0.14 warns and 0.15 would add InitTracker to every env (its check assumes policies need it).
        auto_register_policy_transforms=False,
    )
    try:
        start = time.perf_counter()
        learn_from_collector(model, collector, args.total_timesteps, shutdown=False)
        elapsed = time.perf_counter() - start
    finally:
        collector.shutdown()
    return model.num_timesteps / elapsed


def main(argv: list[str] | None = None) -> int:
    """Run the benchmark; print each run, the medians and the ratio (torchrl_mask / sb3-contrib).

    :param argv: command-line arguments (``sys.argv[1:]`` when None).
    :return: the exit status, 0.
    """
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--repeats", type=int, default=11)
    parser.add_argument("--total-timesteps", type=int, default=4096)
    parser.add_argument("--n-steps", type=int, default=512, help="steps per env per rollout")
    parser.add_argument("--batch-size", type=int, default=256)
    parser.add_argument("--n-epochs", type=int, default=4)
    parser.add_argument("--step-cost", type=float, default=1e-3, help="seconds of CPU per env step")
    parser.add_argument(
        "--sb3-processes",
        type=int,
        default=2,
        help="SubprocVecEnv processes (one env each) for sb3-contrib; the rollout keeps 2 * n_steps steps",
    )
    parser.add_argument(
        "--envs-per-worker",
        type=int,
        default=1,
        help="envs in each collector worker (a SerialEnv when above 1); the rollout keeps 2 * n_steps steps",
    )
    args = parser.parse_args(argv)
    torch.set_num_threads(1)

    ours: list[float] = []
    theirs: list[float] = []
    for repeat in range(args.repeats):
        theirs.append(run_sb3_contrib(args))
        ours.append(run_torchrl_mask(args))
        print(
            f"run {repeat}: sb3-contrib SubprocVecEnv {theirs[-1]:8.1f} steps/s   "
            f"torchrl_mask MultiSyncCollector {ours[-1]:8.1f} steps/s   ratio {ours[-1] / theirs[-1]:.2f}x",
            flush=True,
        )
    ours_median, theirs_median = statistics.median(ours), statistics.median(theirs)
    # The speed-up is the median of each run's ratio: the two runs of a repeat see the same machine.
    ratio = statistics.median(o / t for o, t in zip(ours, theirs, strict=True))
    print(
        f"median steps/s over {args.repeats} runs of {args.total_timesteps} steps (step cost "
        f"{args.step_cost * 1e3:.2f} ms, rollout of {2 * args.n_steps} steps, n_epochs={args.n_epochs}):\n"
        f"  sb3-contrib MaskablePPO + SubprocVecEnv({args.sb3_processes} processes, 1 env each) "
        f"{theirs_median:8.1f}\n"
        f"  torchrl_mask learn_from_collector + MultiSync(2 workers, {args.envs_per_worker} env(s) each) "
        f"{ours_median:8.1f}\n"
        f"  ratio (torchrl_mask / sb3-contrib, median of the runs' ratios)  {ratio:8.2f}x"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
