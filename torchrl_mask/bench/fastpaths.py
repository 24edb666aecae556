"""What each fast path buys end to end: ``learn()`` with every path on, against ``learn()`` with one path off.

The fast paths (:mod:`torchrl_mask.fastpath`, and the VecEnv rollout source of
:mod:`torchrl_mask.algorithms.vecenv_source`) each give the same parameters bit for bit as the library code they
stand in for, so switching one off changes the time and nothing else; the benchmark checks that every variant of a
round learned the same parameters. Switching a path off here means taking the library's own code where the path
would have run (the path's own fallback), for the duration of one ``learn`` call, in this process only:

- ``vecenv-rollout``: sb3-contrib's ``collect_rollouts`` instead of :class:`~torchrl_mask.algorithms.vecenv_source.
  VecEnvRollout` (which reads the masks without ``env_method`` and samples with the one masked distribution);
- ``plain-layers``: the rollout's forward through ``nn.Module.__call__`` of each layer instead of the layers'
  ``forward`` (:func:`~torchrl_mask.fastpath.stock.plain_layers`);
- ``evaluate-actions``: sb3-contrib's ``evaluate_actions`` (a distribution object per sub-action) in ``train()``
  instead of :func:`~torchrl_mask.fastpath.evaluation.evaluate_actions`;
- ``flat-adam``: torch's own Adam step instead of :func:`~torchrl_mask.fastpath.adam.fast_adam`'s.

Each cell is a workload of :mod:`torchrl_mask.bench.learn` at a shape; variants run in rotating order within a
round, so that the machine's load of the moment hits all alike. Reported per path and cell: the median over rounds
of ``time(path off) / time(all on)``, i.e. how many times slower ``learn()`` is without it (1.05x: the path buys
5%). Times are this process's CPU seconds in ``learn`` (the workloads' envs run in-process, torch on one thread),
which other load on a shared machine disturbs far less than wall time. Run it as
``torchrl-mask bench learn --fast-paths`` (``--help`` for the knobs).
"""

from __future__ import annotations

import argparse
import contextlib
import statistics
import time
from collections.abc import Callable, Iterator
from typing import Any
from unittest import mock

import torch
from stable_baselines3.common.logger import Logger

from torchrl_mask import MaskablePPO
from torchrl_mask.bench.learn import WORKLOADS, make_vec_env

__all__ = ["CELLS", "PATHS", "main", "switched_off"]


def _no_fast_rollout(*args: Any, **kwargs: Any) -> None:
    return None


def _no_plain_layers(policy: Any) -> None:
    return None


def _torch_adam(optimizer: Any) -> contextlib.AbstractContextManager[bool]:
    return contextlib.nullcontext(False)


# path: (where its switch is, what stands in for it when off)
PATHS: dict[str, tuple[str, Callable[..., Any]]] = {
    "vecenv-rollout": ("torchrl_mask.algorithms.ppo.fast_rollout", _no_fast_rollout),
    "plain-layers": ("torchrl_mask.fastpath.stock.plain_layers", _no_plain_layers),
    "evaluate-actions": ("torchrl_mask.fastpath.evaluation._inlinable", _no_plain_layers),
    "flat-adam": ("torchrl_mask.fastpath.evaluation.fast_adam", _torch_adam),
}
# cell name: (workload of bench.learn, n_steps, batch_size, n_epochs, timesteps)
CELLS: dict[str, tuple[str, int, int, int, int]] = {
    "dict-dummy 256x8, batch 64": ("dict-dummy", 256, 64, 4, 4096),
    "dict-dummy 256x8, batch 256": ("dict-dummy", 256, 256, 4, 4096),
    "multidiscrete 256x8, batch 64": ("multidiscrete", 256, 64, 4, 4096),
    "dict-dummy SB3 defaults (2048x8, batch 64, 10 epochs)": ("dict-dummy", 2048, 64, 10, 16384),
}


@contextlib.contextmanager
def switched_off(path: str | None) -> Iterator[None]:
    """Within the block, the fast path ``path`` falls back to the library's own code (None: all paths on).

    :param path: a key of :data:`PATHS`, or None.
    """
    if path is None:
        yield
        return
    target, stand_in = PATHS[path]
    with mock.patch(target, stand_in):
        yield


def time_variant(path: str | None, cell: str, args: argparse.Namespace) -> tuple[float, dict[str, torch.Tensor]]:
    """One ``learn`` call of a fresh model on the cell, with ``path`` switched off.

    :param path: a key of :data:`PATHS`, or None for all paths on.
    :param cell: a key of :data:`CELLS`.
    :param args: the parsed command line (``seed`` and the env's knobs of :mod:`torchrl_mask.bench.learn`).
    :return: CPU seconds of this process in ``learn`` (the envs are stepped in this process; CPU time is far less
        sensitive than wall time to other load on a shared machine), and the learned parameters.
    """
    workload, n_steps, batch_size, n_epochs, timesteps = CELLS[cell]
    env = make_vec_env(workload, args)
    try:
        model = MaskablePPO(
            "MultiInputPolicy" if WORKLOADS[workload][2] else "MlpPolicy",
            env,
            n_steps=n_steps,
            batch_size=batch_size,
            n_epochs=n_epochs,
            seed=args.seed,
            policy_kwargs={"net_arch": [64, 64]},
            device="cpu",
        )
        model.set_logger(Logger(None, []))
        with switched_off(path):
            start = time.process_time()
            model.learn(timesteps)
            seconds = time.process_time() - start
    finally:
        env.close()
    return seconds, {k: v.detach().clone() for k, v in model.policy.state_dict().items()}


def run_cell(cell: str, args: argparse.Namespace) -> dict[str, float] | None:
    """Time every variant of one cell in rotating rounds.

    :param cell: a key of :data:`CELLS`.
    :param args: the parsed command line.
    :return: per path, the median of ``time(off) / time(on)`` over rounds; None if two variants learned different
        parameters (a path that is not bit-identical: the timings would compare different work).
    """
    variants: list[str | None] = [None, *args.paths]
    for variant in variants:  # warm-up
        time_variant(variant, cell, args)
    times: dict[str | None, list[float]] = {variant: [] for variant in variants}
    for round_ in range(args.rounds):
        shift = round_ % len(variants)
        params = {}
        for variant in variants[shift:] + variants[:shift]:
            seconds, params[variant] = time_variant(variant, cell, args)
            times[variant].append(seconds)
        for variant in args.paths:
            if any(not torch.equal(params[variant][k], v) for k, v in params[None].items()):
                print(f"FAIL {cell}: with {variant} off, learn() gave other parameters")
                return None
    on = times[None]
    return {path: statistics.median(off / o for off, o in zip(times[path], on, strict=True)) for path in args.paths}


def _parse(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="torchrl-mask bench learn --fast-paths", description=__doc__.splitlines()[0])
    parser.add_argument("--cells", nargs="+", choices=list(CELLS), default=list(CELLS))
    parser.add_argument("--paths", nargs="+", choices=list(PATHS), default=list(PATHS))
    parser.add_argument("--rounds", type=int, default=5, help="timed rounds (after one warm-up)")
    parser.add_argument("--threads", type=int, default=1, help="torch.set_num_threads")
    parser.add_argument("--seed", type=int, default=0)
    # The env's knobs, as bench.learn has them.
    parser.add_argument("--dim", type=int, default=40)
    parser.add_argument("--n-invalid", type=int, default=25)
    parser.add_argument("--episode-steps", type=int, default=50)
    parser.add_argument("--env-masks", choices=("numpy", "python"), default="numpy")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    """Run the benchmark and print one Markdown row per path: its gain at every cell.

    :param argv: command-line arguments (``sys.argv[1:]`` when None).
    :return: 0 on success; 1 if a path changed the learned parameters.
    """
    args = _parse(argv)
    torch.set_num_threads(args.threads)
    gains: dict[str, dict[str, float]] = {}
    for cell in args.cells:
        result = run_cell(cell, args)
        if result is None:
            return 1
        gains[cell] = result
        print(f"{cell}: " + ", ".join(f"{path} {gain:.3f}x" for path, gain in result.items()), flush=True)
    header = f"path (learn() CPU time with it off / all on, median of {args.rounds} rounds)"
    print(f"\n| {header} | " + " | ".join(args.cells) + " |")
    print("|---|" + "---:|" * len(args.cells))
    for path in args.paths:
        print(f"| `{path}` | " + " | ".join(f"{gains[cell][path]:.2f}x" for cell in args.cells) + " |")
    return 0
