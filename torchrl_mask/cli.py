"""``torchrl-mask``: train MaskablePPO on a masked env, or benchmark it against sb3-contrib.

``torchrl-mask train`` trains :class:`~torchrl_mask.MaskablePPO` on a gymnasium env that reports action masks
(by default ``Taxi-v4``, which ships with gymnasium and puts its mask in ``info["action_mask"]``), with SB3's
progress bar; then it evaluates the trained policy with masks, without masks and against random legal
actions, and writes to the output folder
``model.zip``, ``learning_curve.png``, ``learning_curve.csv`` and ``evaluation.json``; the job itself is
:mod:`torchrl_mask.training`. This module holds the command line, its one config dataclass and nothing heavy:
``--help`` and a bad option answer before torch is imported.

``torchrl-mask bench`` hands every argument after it to :func:`torchrl_mask.benchmark.main`.

Input a user can fix (an unknown env id, an env without masks, a bad option value) ends with one line on
stderr that says what is wrong and how to fix it, and exit status 2.

Example:
    >>> from torchrl_mask.cli import main
    >>> main(["train", "--steps", "2048", "--n-envs", "2", "--out", "runs/smoke"])  # doctest: +SKIP
    0
"""

from __future__ import annotations

import argparse
import importlib
import re
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

if TYPE_CHECKING:
    from torchrl_mask.training import TrainResult

__all__ = ["COLLECTOR_TEXT", "TrainConfig", "UsageError", "build_parser", "main"]

COLLECTOR_TEXT = {
    "sync": "TorchRL Collector over a SerialEnv",
    "multisync": "TorchRL MultiSyncCollector, one worker process each",
}
EXIT_USAGE = 2


class UsageError(ValueError):
    """Input the user can fix: the message says what is wrong and how to fix it, on one line."""


@dataclass(frozen=True)
class TrainConfig:
    """Everything ``torchrl-mask train`` needs; the defaults are what ``make train`` runs.

    The PPO defaults are tuned for ``Taxi-v4``: 100k steps take about a minute on 2 CPU cores and reach a
    mean return near the env's solved threshold of 8 (random legal actions score about -175).

    :param env_id: a registered gymnasium id of an env that reports action masks.
    :param steps: total env steps to train for (across all envs).
    :param seed: seeds the envs, the policy and the evaluation env.
    :param n_envs: envs stepped side by side (``DummyVecEnv``).
    :param device: torch device of the policy and the rollout (``cpu``, ``cuda``, ``cuda:1``, ``mps``, ``auto``).
    :param out: output folder; None means ``runs/<env_id>-<date>-<time>``.
    :param eval_episodes: episodes per evaluation (each of: masked, unmasked, random legal actions).
    :param n_steps: steps per env per rollout (the buffer holds ``n_steps * n_envs`` transitions).
    :param batch_size: minibatch size; None means a quarter of the rollout.
    :param learning_rate: Adam step size.
    :param ent_coef: entropy bonus weight.
    :param gamma: discount factor.
    :param net_arch: hidden layer sizes of the policy and value networks.
    :param progress_bar: show SB3's progress bar while training.
    :param threads: torch CPU threads (``torch.set_num_threads``); one is fastest for small networks, and far
        faster than several when other processes share the cores.
    :param collector: None steps the envs with SB3's ``DummyVecEnv`` in ``learn``; ``"sync"`` collects with
        TorchRL's ``Collector`` over a ``SerialEnv`` in this process, ``"multisync"`` with TorchRL's
        ``MultiSyncCollector``, one worker process per env, both through
        :func:`~torchrl_mask.collectors.learn_from_collector`.
    """

    env_id: str = "Taxi-v4"
    steps: int = 100_000
    seed: int = 0
    n_envs: int = 8
    device: str = "cpu"
    out: Path | None = None
    eval_episodes: int = 20
    n_steps: int = 256
    batch_size: int | None = None
    learning_rate: float = 1e-3
    ent_coef: float = 0.01
    gamma: float = 0.99
    net_arch: tuple[int, ...] = (64, 64)
    progress_bar: bool = True
    threads: int = 1
    collector: Literal["sync", "multisync"] | None = None

    def output_dir(self) -> Path:
        """The output folder: :attr:`out`, or ``runs/<env_id>-<date>-<time>`` (env id made file-safe)."""
        if self.out is not None:
            return self.out
        safe_id = re.sub(r"[^A-Za-z0-9._-]+", "_", self.env_id)
        return Path("runs") / f"{safe_id}-{time.strftime('%Y%m%d-%H%M%S')}"


def _positive_int(text: str) -> int:
    try:
        value = int(text.replace("_", ""))
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}") from None
    if value <= 0:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}")
    return value


def _seed(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected an integer from 0 to 2**32 - 1, got {text!r}") from None
    if not 0 <= value < 2**32:
        raise argparse.ArgumentTypeError(f"expected an integer from 0 to 2**32 - 1, got {text!r}")
    return value


class _Parser(argparse.ArgumentParser):
    """argparse, with its errors raised as one-line :class:`UsageError` instead of usage text and exit."""

    def error(self, message: str) -> Any:  # argparse's hook; typed NoReturn there
        raise UsageError(f"{message}; see `{self.prog} --help`.")


def build_parser() -> argparse.ArgumentParser:
    """The ``torchrl-mask`` argument parser.

    :return: a parser whose errors raise :class:`UsageError`.
    """
    defaults = TrainConfig()
    parser = _Parser(prog="torchrl-mask", description="Action-masked PPO with TorchRL-backed rollouts.")
    commands = parser.add_subparsers(dest="command", required=True, metavar="{train,bench}", parser_class=_Parser)
    train_parser = commands.add_parser(
        "train",
        help="train MaskablePPO on a masked env, evaluate it, save the model and a learning-curve PNG",
        description="Train MaskablePPO on a gymnasium env that reports action masks, evaluate it with and "
        "without masks, and save the model, a learning-curve PNG and the evaluation.",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    train_parser.add_argument(
        "--env",
        default=defaults.env_id,
        help="gymnasium id of an env with masks (action_masks(), info['action_mask'] or a Dict observation "
        "with 'action_mask')",
    )
    train_parser.add_argument("--steps", type=_positive_int, default=defaults.steps, help="total env steps")
    train_parser.add_argument("--seed", type=_seed, default=defaults.seed, help="seed of envs, policy, evaluation")
    train_parser.add_argument("--n-envs", type=_positive_int, default=defaults.n_envs, help="envs stepped together")
    train_parser.add_argument("--device", default=defaults.device, help="cpu, cuda, cuda:N, mps or auto")
    train_parser.add_argument(
        "--out", type=Path, default=None, help="output folder (default: runs/<env>-<date>-<time>)"
    )
    train_parser.add_argument(
        "--eval-episodes", type=_positive_int, default=defaults.eval_episodes, help="episodes per evaluation"
    )
    train_parser.add_argument(
        "--n-steps", type=_positive_int, default=defaults.n_steps, help="steps per env per rollout"
    )
    train_parser.add_argument(
        "--threads",
        type=_positive_int,
        default=defaults.threads,
        help="torch CPU threads (1 is fastest for small nets)",
    )
    train_parser.add_argument(
        "--collector",
        choices=sorted(COLLECTOR_TEXT),
        default=None,
        help="collect rollouts with TorchRL instead of SB3's VecEnv: sync (envs in this process) or multisync "
        "(one worker process per env)",
    )
    train_parser.add_argument("--no-progress", action="store_true", help="hide the progress bar")
    commands.add_parser(
        "bench",
        add_help=False,  # every argument after `bench`, --help included, belongs to the benchmark
        help="benchmark torchrl_mask against sb3-contrib (arguments go to the benchmark; try bench --help)",
    )
    return parser


def _config_from_args(args: argparse.Namespace) -> TrainConfig:
    return TrainConfig(
        env_id=args.env,
        steps=args.steps,
        seed=args.seed,
        n_envs=args.n_envs,
        device=args.device,
        out=args.out,
        eval_episodes=args.eval_episodes,
        n_steps=args.n_steps,
        progress_bar=not args.no_progress,
        threads=args.threads,
        collector=args.collector,
    )


def _report(config: TrainConfig, result: TrainResult) -> None:
    rows = {
        "trained policy, with masks": result.evaluation["masked"],
        "trained policy, without masks": result.evaluation["unmasked"],
        "random legal actions": result.evaluation["random"],
    }
    print(f"\nEvaluation on {config.env_id}, {config.eval_episodes} episodes each (mean ± std episode return):")
    for label, stats in rows.items():
        print(f"  {label:<31}{stats['mean']:>10.2f} ± {stats['std']:.2f}")
    print(f"\nSaved to {result.out}/: model.zip, learning_curve.png, learning_curve.csv, evaluation.json")


def _run_train(args: argparse.Namespace) -> int:
    config = _config_from_args(args)
    from torchrl_mask import training  # the heavy imports, only now that there is something to train

    source = training.describe_masks(config)
    rollouts = "SB3's DummyVecEnv" if config.collector is None else COLLECTOR_TEXT[config.collector]
    print(
        f"Training MaskablePPO on {config.env_id} (masks from {source}) for {config.steps:,} steps: "
        f"{config.n_envs} envs ({rollouts}), seed {config.seed}, device {config.device}."
    )
    result = training.train(config)
    _report(config, result)
    return 0


def _run_bench(argv: list[str]) -> int:
    try:
        benchmark = importlib.import_module("torchrl_mask.benchmark")
    except ModuleNotFoundError as err:
        if err.name != "torchrl_mask.benchmark":
            raise
        print(
            "torchrl-mask bench: this install has no benchmark (module torchrl_mask.benchmark is missing); "
            "update torchrl_mask, or run the scripts in benchmarks/ from a clone of the repository.",
            file=sys.stderr,
        )
        return 1
    return int(benchmark.main(argv))


def main(argv: Sequence[str] | None = None) -> int:
    """Run ``torchrl-mask`` with ``argv`` (default: the process's arguments) and return the exit status.

    :param argv: the arguments after the program name.
    :return: 0 on success; 2 for input the user can fix (one line on stderr says what and how); the
        benchmark's own status for ``bench``.
    """
    argv = list(sys.argv[1:] if argv is None else argv)
    parser = build_parser()
    try:
        args, extra = parser.parse_known_args(argv)
        if args.command == "bench":
            return _run_bench(argv[argv.index("bench") + 1 :])
        if extra:
            raise UsageError(f"unrecognized arguments: {' '.join(extra)}; see `torchrl-mask {args.command} --help`.")
        return _run_train(args)
    except UsageError as err:
        print(f"torchrl-mask: error: {err}", file=sys.stderr)
        return EXIT_USAGE


if __name__ == "__main__":
    sys.exit(main())
