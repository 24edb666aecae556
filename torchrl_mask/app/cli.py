"""``torchrl-mask train``, ``tune`` and ``play``: the command line, and nothing heavy (``--help`` and a bad option
answer before torch is imported).

- ``train`` (:mod:`torchrl_mask.app.train_args`) trains :class:`~torchrl_mask.MaskablePPO` (``--algo
  ppo_lstm_mask``: :class:`~torchrl_mask.MaskableRecurrentPPO`) on a gymnasium env that reports action masks (by
  default ``Taxi-v4``), or by self-play on a ``pettingzoo:<game>``, with rl-zoo3's habits (``--conf-file``,
  ``--hyperparams``, ``--eval-freq``, ``--save-freq``, ``-i``, ``--tensorboard-log``). The run is
  :func:`torchrl_mask.app.run.run_train`: checked once, then one pipeline for every kind of env
  (:mod:`torchrl_mask.app.pipeline`). Ctrl-C or SIGTERM while training saves the model, prints one line saying
  where, and exits 130 or 143.
- ``play`` (:mod:`torchrl_mask.app.play`) lets a person play a trained self-play model in the terminal.
- ``tune`` (:mod:`torchrl_mask.app.tune_args`, :mod:`torchrl_mask.app.tune`) searches the hyperparameters with
  Optuna, every trial judged by the masked evaluation.
- ``bench`` is listed here; :mod:`torchrl_mask.__main__` hands it to :mod:`torchrl_mask.bench`, which the app never
  imports.

Input a user can fix (an unknown env id, an env without masks, a bad option or hyperparameter, a missing or
invalid YAML file) ends with one line on stderr that says what is wrong and how to fix it, exit status 2, and
nothing written.

Example:
    >>> from torchrl_mask.app.cli import main
    >>> main(["train", "-n", "2048", "--hyperparams", "n_envs=2", "--out", "runs/smoke"])  # doctest: +SKIP
    0
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from torchrl_mask.app.arg_types import HelpFormatter, Parser, non_negative_int, seed
from torchrl_mask.app.hyperparams import UsageError
from torchrl_mask.app.train_args import add_train_arguments, config_from_args
from torchrl_mask.app.tune_args import add_tune_parser, tune_config

__all__ = ["EXIT_USAGE", "build_parser", "main"]

EXIT_USAGE = 2
TRUST = "load only models you trust: a .zip holds pickled Python objects, which run code when loaded"


def _add_play(commands: Any) -> None:
    """``play``: the game, the model, the person's seat, the seed."""
    play = commands.add_parser(
        "play",
        help="play a trained self-play model in the terminal",
        description=f"Play a model trained by `torchrl-mask train --env pettingzoo:<game>`, in the terminal ({TRUST}).",
        formatter_class=HelpFormatter,
    )
    play.add_argument("--env", required=True, help="pettingzoo:<game>, the game the model was trained on")
    play.add_argument("-i", "--trained-agent", type=Path, required=True, metavar="PATH", help="the model.zip")
    play.add_argument("--seat", choices=("first", "second", "random"), default="random", help="your seat")
    play.add_argument("--seed", type=seed, default=0, help="seed of the game (cards dealt) and of a random seat")
    play.add_argument(
        "--simulations",
        type=non_negative_int,
        default=0,
        metavar="N",
        help="the model searches N simulations before each move (MCTS with PUCT over its masked policy and its "
        "value; tic-tac-toe and Connect Four): more plays stronger and slower; 0 plays the network alone",
    )


def build_parser() -> argparse.ArgumentParser:
    """The ``torchrl-mask`` argument parser.

    :return: a parser whose errors raise :class:`~torchrl_mask.app.hyperparams.UsageError`.
    """
    parser = Parser(prog="torchrl-mask", description="Action-masked PPO with TorchRL-backed rollouts.")
    commands = parser.add_subparsers(
        dest="command", required=True, metavar="{train,tune,play,bench}", parser_class=Parser
    )
    train = commands.add_parser(
        "train",
        help="train MaskablePPO on a masked env, evaluate it, save the model and a learning-curve PNG",
        description="Train MaskablePPO on a gymnasium env that reports action masks, evaluate it with and "
        "without masks, and save the model, a learning-curve PNG and the evaluation; or train a "
        "pettingzoo:<game> by self-play and evaluate it against the game's ladder.",
        formatter_class=HelpFormatter,
    )
    add_train_arguments(train)
    _add_play(commands)
    add_tune_parser(commands)
    commands.add_parser(
        "bench",
        add_help=False,  # every argument after `bench`, --help included, belongs to the benchmark
        help="benchmark torchrl_mask against sb3-contrib: the buffers, `bench learn` for whole learn() calls, "
        "`bench selfplay` for self-play against the game's own speed, `bench memory` for self-play with an LSTM "
        "against without, or `bench jobshop` for job-shop training against the env's own speed (arguments go to the "
        "benchmark; try bench --help)",
    )
    return parser


def _run_train(args: argparse.Namespace) -> int:
    config = config_from_args(args)  # an option that does not fit is refused before torch is imported
    from torchrl_mask.app.run import run_train  # the pipeline's modules, once the options are resolved

    return run_train(config)


def _run_play(args: argparse.Namespace) -> int:
    from torchrl_mask.app import play  # it checks the env and the file before it imports torch

    return play.play(play.PlayConfig(args.env, args.trained_agent, args.seat, args.seed, args.simulations))


def _run_tune(args: argparse.Namespace) -> int:
    config = tune_config(args)  # every check that needs no torch, before anything is imported or written
    from torchrl_mask.app.tune import run_tune  # Optuna, torch: only now that there is something to tune

    return run_tune(config)


def main(argv: Sequence[str] | None = None) -> int:
    """Run ``torchrl-mask train``, ``tune`` or ``play`` with ``argv`` (default: the process's arguments).

    :param argv: the arguments after the program name.
    :return: 0 on success; 2 for input the user can fix (one line on stderr says what and how); 130 after
        Ctrl-C and 143 after SIGTERM (the model saved, one line on stderr says where).
    """
    argv = list(sys.argv[1:] if argv is None else argv)
    parser = build_parser()
    try:
        args, extra = parser.parse_known_args(argv)
        if args.command == "bench":
            raise UsageError("bench is run by the torchrl-mask command (python -m torchrl_mask bench ...).")
        if extra:
            raise UsageError(f"unrecognized arguments: {' '.join(extra)}; see `torchrl-mask {args.command} --help`.")
        if args.command == "tune":
            return _run_tune(args)
        return _run_play(args) if args.command == "play" else _run_train(args)
    except UsageError as err:
        print(f"torchrl-mask: error: {err}", file=sys.stderr)
        return EXIT_USAGE
