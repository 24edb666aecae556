"""End-to-end ``learn`` time of sb3-contrib's MaskablePPO against torchrl_mask's, on a Dict-observation masked env.

Both run in this process on identical env stacks and hyper-parameters, alternating which goes first each round
(ABBA), so that drift in machine load hits both alike. Reported: the median seconds per ``learn`` call of each,
split into rollout collection (``collect_rollouts``) and the rest (mostly ``train``), and the ratio
torchrl_mask / sb3-contrib (below 1 means torchrl_mask is faster). The two runs of a round use one seed, so they
learn the same parameters; the benchmark checks that too, so it never times two different computations.

Run: ``python benchmarks/bench_ppo.py`` (about two minutes); ``--help`` for the knobs.
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable
from typing import Any

import gymnasium as gym
import numpy as np
import torch
from gymnasium import spaces
from gymnasium.wrappers import TimeLimit
from sb3_contrib import MaskablePPO as SB3ContribMaskablePPO
from sb3_contrib.common.envs import InvalidActionEnvDiscrete
from stable_baselines3.common.callbacks import BaseCallback
from stable_baselines3.common.vec_env import DummyVecEnv

from torchrl_mask import MaskablePPO

ALGORITHMS: dict[str, type[SB3ContribMaskablePPO]] = {
    "sb3-contrib": SB3ContribMaskablePPO,
    "torchrl_mask": MaskablePPO,
}


class BoardObservation(gym.ObservationWrapper):
    """Turns ``InvalidActionEnvDiscrete``'s Discrete state into a board-game-like Dict observation.

    ``{"state": one-hot float32 (dim,), "board": uint8 (rows, cols)}``; ``action_masks()`` still reaches the
    wrapped env through ``get_wrapper_attr``.
    """

    def __init__(self, env: gym.Env, board: tuple[int, int] = (6, 7)) -> None:
        super().__init__(env)
        self.dim = int(env.observation_space.n)  # type: ignore[attr-defined]
        self.board = board
        self.observation_space = spaces.Dict(
            {
                "state": spaces.Box(0.0, 1.0, (self.dim,), np.float32),
                "board": spaces.Box(0, 255, board, np.uint8),
            }
        )

    def observation(self, observation: Any) -> dict[str, np.ndarray]:
        state = np.zeros(self.dim, np.float32)
        state[int(observation)] = 1.0
        board = np.full(self.board, int(observation) % 3, np.uint8)
        return {"state": state, "board": board}


def make_vec_env(n_envs: int, dim: int, n_invalid: int, episode_steps: int) -> DummyVecEnv:
    """``n_envs`` masked Dict-observation envs, truncated by ``TimeLimit`` after ``episode_steps`` steps.

    :param n_envs: number of envs in the DummyVecEnv.
    :param dim: actions (and states) of the underlying ``InvalidActionEnvDiscrete``.
    :param n_invalid: actions masked out at each step.
    :param episode_steps: ``TimeLimit`` length; truncations exercise the value bootstrap.
    :return: the vectorized env.
    """

    def factory(index: int) -> Callable[[], gym.Env]:
        def make() -> gym.Env:
            env = InvalidActionEnvDiscrete(dim=dim, ep_length=10 * episode_steps, n_invalid_actions=n_invalid)
            env.action_space.seed(1000 + index)  # the env samples its states from its own action space
            return TimeLimit(BoardObservation(env), max_episode_steps=episode_steps)

        return make

    return DummyVecEnv([factory(i) for i in range(n_envs)])


class _PhaseTimer(BaseCallback):
    """Adds up the wall time spent inside ``collect_rollouts`` (rollout start to rollout end)."""

    def __init__(self) -> None:
        super().__init__()
        self.rollout_s = 0.0
        self._start = 0.0

    def _on_rollout_start(self) -> None:
        self._start = time.perf_counter()

    def _on_rollout_end(self) -> None:
        self.rollout_s += time.perf_counter() - self._start

    def _on_step(self) -> bool:
        return True


def time_learn(name: str, args: argparse.Namespace) -> tuple[float, float, float, dict[str, torch.Tensor]]:
    """Build one model and time one ``learn`` call.

    :param name: a key of :data:`ALGORITHMS`.
    :param args: the parsed command line.
    :return: wall seconds in ``learn``, wall seconds of it in ``collect_rollouts``, CPU seconds of this process
        in ``learn`` (less sensitive than wall time to other load on a shared machine), the learned parameters.
    """
    env = make_vec_env(args.n_envs, args.dim, args.n_invalid, args.episode_steps)
    model = ALGORITHMS[name](
        "MultiInputPolicy",
        env,
        n_steps=args.n_steps,
        batch_size=args.batch_size,
        n_epochs=args.n_epochs,
        seed=args.seed,
        policy_kwargs={"net_arch": [64, 64]},
        device="cpu",
    )
    timer = _PhaseTimer()
    start, cpu_start = time.perf_counter(), time.process_time()
    model.learn(args.timesteps, callback=timer)
    total, cpu = time.perf_counter() - start, time.process_time() - cpu_start
    return total, timer.rollout_s, cpu, {k: v.detach().clone() for k, v in model.policy.state_dict().items()}


def _parse(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--rounds", type=int, default=7, help="timed rounds per library (after one warm-up)")
    parser.add_argument("--timesteps", type=int, default=4096, help="total_timesteps of each learn call")
    parser.add_argument("--n-envs", type=int, default=4)
    parser.add_argument("--n-steps", type=int, default=256)
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--n-epochs", type=int, default=4)
    parser.add_argument("--dim", type=int, default=40, help="actions of the masked env")
    parser.add_argument("--n-invalid", type=int, default=25, help="actions masked out at each step")
    parser.add_argument("--episode-steps", type=int, default=50, help="TimeLimit truncation length")
    parser.add_argument("--threads", type=int, default=1, help="torch.set_num_threads for both")
    parser.add_argument("--seed", type=int, default=0)
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    """Run the benchmark and print medians and the ratio.

    :param argv: command-line arguments (``sys.argv[1:]`` when None).
    :return: 0 on success; 1 if the two libraries learned different parameters (the timings would compare
        different work).
    """
    args = _parse(argv)
    torch.set_num_threads(args.threads)
    print(
        f"MaskablePPO learn({args.timesteps}) on a Dict-observation masked env: n_envs={args.n_envs}, "
        f"n_steps={args.n_steps}, batch_size={args.batch_size}, n_epochs={args.n_epochs}, dim={args.dim}, "
        f"n_invalid={args.n_invalid}, TimeLimit={args.episode_steps}, torch threads={args.threads}, "
        f"rounds={args.rounds}"
    )
    names = list(ALGORITHMS)
    for name in names:  # warm-up: imports, allocator, first-call overheads
        time_learn(name, args)
    totals: dict[str, list[float]] = {name: [] for name in names}
    rollouts: dict[str, list[float]] = {name: [] for name in names}
    cpus: dict[str, list[float]] = {name: [] for name in names}
    for round_ in range(args.rounds):
        order = names if round_ % 2 == 0 else names[::-1]
        params = {}
        for name in order:
            total, rollout, cpu, params[name] = time_learn(name, args)
            totals[name].append(total)
            rollouts[name].append(rollout)
            cpus[name].append(cpu)
        for key, ref in params["sb3-contrib"].items():
            if not torch.allclose(params["torchrl_mask"][key], ref, rtol=1e-5, atol=1e-5):
                print(f"FAIL: the two libraries learned different {key!r}; the timings compare different work.")
                return 1

    print(f"{'':14s} {'learn s':>9s} {'rollout s':>10s} {'rest s':>8s} {'cpu s':>8s}   (medians of {args.rounds})")
    median: dict[str, tuple[float, float]] = {}
    for name in names:
        total, rollout = statistics.median(totals[name]), statistics.median(rollouts[name])
        median[name] = (total, rollout)
        print(f"{name:14s} {total:9.3f} {rollout:10.3f} {total - rollout:8.3f} {statistics.median(cpus[name]):8.3f}")
    (ref_total, ref_rollout), (our_total, our_rollout) = median["sb3-contrib"], median["torchrl_mask"]
    print(
        f"ratio of medians, torchrl_mask / sb3-contrib: learn {our_total / ref_total:.3f}, rollout "
        f"{our_rollout / ref_rollout:.3f}, rest {(our_total - our_rollout) / (ref_total - ref_rollout):.3f}"
    )
    # The two runs of a round share the machine's load of the moment: their ratio cancels most of it.
    paired = [ours / ref for ours, ref in zip(totals["torchrl_mask"], totals["sb3-contrib"], strict=True)]
    paired_cpu = [ours / ref for ours, ref in zip(cpus["torchrl_mask"], cpus["sb3-contrib"], strict=True)]
    print(
        f"median of per-round learn ratios: wall {statistics.median(paired):.3f} "
        f"(min {min(paired):.3f}, max {max(paired):.3f}), cpu {statistics.median(paired_cpu):.3f} "
        f"(min {min(paired_cpu):.3f}, max {max(paired_cpu):.3f}); below 1: torchrl_mask is faster"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
