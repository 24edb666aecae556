"""``torchrl-mask``: train MaskablePPO on a masked env, or benchmark it against sb3-contrib.

``torchrl-mask train`` trains :class:`~torchrl_mask.MaskablePPO` (``--algo ppo_lstm_mask``:
:class:`~torchrl_mask.MaskableRecurrentPPO`, LSTM policies) on a gymnasium env that reports action masks
(by default ``Taxi-v4``, which ships with gymnasium and puts its mask in ``info["action_mask"]``) with
rl-zoo3's habits: hyperparameters from an rl-zoo3 YAML file (``--conf-file``) and ``--hyperparams
name=value`` overrides, periodic evaluation with the best model saved (``--eval-freq``), checkpoints
(``--save-freq``), continuing a saved model (``-i``), TensorBoard (``--tensorboard-log``) and SB3's logger
(``--verbose``). It saves ``model.zip`` and ``learning_curve.csv`` as soon as training ends, then evaluates the
trained policy with masks, without masks and against random legal actions (one that raises is reported as such)
and writes ``learning_curve.png`` and ``evaluation.json``; the output folder must be new or empty unless
``--overwrite`` is given, and is locked while the run writes (:mod:`torchrl_mask.app.run_folder`). Ctrl-C or SIGTERM
while training saves the model, prints one line saying where, and exits 130 or 143 (:mod:`torchrl_mask.app.run`).
The job itself is :mod:`torchrl_mask.app.training`, its configuration :mod:`torchrl_mask.app.config`. This module
holds the command line and nothing heavy: ``--help`` and a bad option answer before torch is imported.

``torchrl-mask train --env pettingzoo:<game>`` (every masked PettingZoo classic game) trains by self-play instead
and reports the model against its game's ladder of fixed players (:mod:`torchrl_mask.app.selfplay_training`;
``--pool-size N --league-players NAME...`` plays the learner against past snapshots and fixed players, drawn by
what it does not beat yet; ``--algo ppo_lstm_mask`` gives each seat its own LSTM state).

``torchrl-mask play --env pettingzoo:<game> -i model.zip`` lets a person play a trained model in the terminal
(:mod:`torchrl_mask.app.play`; ``--seat first|second|random``).

``torchrl-mask tune`` searches the hyperparameters with Optuna, every trial judged by the masked evaluation
(:mod:`torchrl_mask.app.tune`; its arguments are :mod:`torchrl_mask.app.tune_args`).

``torchrl-mask bench`` hands every argument after it to :func:`torchrl_mask.bench.buffers.main` (``bench learn``: the
end-to-end benchmark, :mod:`torchrl_mask.bench.learn`; ``bench selfplay``: self-play's speed against the game's own,
:mod:`torchrl_mask.bench.selfplay`).

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
import importlib
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from torchrl_mask.app.arg_types import HelpFormatter as _HelpFormatter
from torchrl_mask.app.arg_types import Parser as _Parser
from torchrl_mask.app.arg_types import hyperparam as _hyperparam
from torchrl_mask.app.arg_types import n_timesteps as _n_timesteps
from torchrl_mask.app.arg_types import non_negative_int as _non_negative_int
from torchrl_mask.app.arg_types import positive_int as _positive_int
from torchrl_mask.app.arg_types import seed as _seed
from torchrl_mask.app.config import (
    ALGOS,
    DEFAULT_HYPERPARAMS,
    GAME_HYPERPARAMS,
    GAME_PREFIX,
    GAME_THREADS,
    TrainConfig,
    UsageError,
    check_config,
    check_hyperparams,
    game_fixed_share,
    game_hyperparams,
    game_images,
    game_league,
    game_self_share,
    game_threads,
    load_conf_file,
)
from torchrl_mask.app.game_args import add_league_options
from torchrl_mask.app.hyperparams import without_policy_kwargs
from torchrl_mask.app.run import run_train
from torchrl_mask.app.tune_args import add_tune_parser, tune_config

__all__ = ["COLLECTOR_TEXT", "build_parser", "config_from_args", "main"]

COLLECTOR_TEXT = {
    "sync": "TorchRL Collector over a SerialEnv",
    "multisync": "TorchRL MultiSyncCollector, one worker process each",
}
GAME_EVAL_GAMES = 1000  # games per opponent in a pettingzoo:<game> run's final evaluation
EXIT_USAGE = 2


def _add_what_to_train(train: argparse.ArgumentParser) -> None:
    """What to train: the env, its hyperparameters (rl-zoo3's file and overrides), how long, from what."""
    defaults = TrainConfig()
    built_in = ", ".join(f"{key}={value}" for key, value in DEFAULT_HYPERPARAMS.items())
    train.add_argument(
        "--env",
        default=defaults.env_id,
        help="gymnasium id of an env with masks (action_masks(), info['action_mask'] or a Dict observation "
        "with 'action_mask'); module:Id imports module first; pettingzoo:<game> trains by self-play ("
        + ", ".join(sorted(set(GAME_HYPERPARAMS) - {"default"}))
        + ": PettingZoo's classic games with masked observations)",
    )
    add_league_options(train)
    train.add_argument(
        "--algo",
        choices=sorted(ALGOS),
        default=defaults.algo,
        help="ppo_mask: MaskablePPO; ppo_lstm_mask: MaskableRecurrentPPO (LSTM policies, for tasks that need memory)",
    )
    train.add_argument(
        "-conf",
        "--conf-file",
        type=Path,
        metavar="FILE",
        help="rl-zoo3 YAML file: env ids at the top level (or 'default'), each with n_timesteps, n_envs, policy, "
        f"policy_kwargs and MaskablePPO's arguments (without it: {built_in})",
    )
    train.add_argument(
        "-params",
        "--hyperparams",
        type=_hyperparam,
        nargs="+",
        action="extend",  # given twice: both groups, the later value of a name winning
        default=[],
        metavar="NAME=VALUE",
        help="override hyperparameters, values as Python literals: learning_rate=3e-4 clip_range=lin_0.2 "
        "policy_kwargs='dict(net_arch=[64, 64], activation_fn=nn.ReLU)'",
    )
    train.add_argument(
        "-n",
        "--n-timesteps",
        "--steps",
        type=_n_timesteps,
        metavar="N",
        help="env steps to train for, over all envs (default: the file's n_timesteps, or "
        f"{DEFAULT_HYPERPARAMS['n_timesteps']} without a file)",
    )
    train.add_argument(
        "-i",
        "--trained-agent",
        type=Path,
        metavar="PATH",
        help="a saved model (.zip) to continue training (its policy is kept)",
    )


def _add_what_to_write(train: argparse.ArgumentParser) -> None:
    """Where the run writes, and what: periodic evaluations, checkpoints, TensorBoard, SB3's logger."""
    defaults = TrainConfig()
    train.add_argument(
        "--out",
        type=Path,
        metavar="DIR",
        help="folder for the model, learning curve, evaluation, checkpoints and best model "
        "(default: runs/<env>-<date>-<time>); it must be empty or new, unless --overwrite",
    )
    train.add_argument(
        "--overwrite",
        action="store_true",
        help="train into an --out that holds an earlier run, removing that run's files first",
    )
    train.add_argument(
        "--eval-freq",
        type=_non_negative_int,
        default=defaults.eval_freq,
        metavar="N",
        help="evaluate every N env steps with MaskableEvalCallback and save the best model; 0 never",
    )
    train.add_argument(
        "--eval-episodes",
        type=_positive_int,
        default=None,
        help=f"episodes per evaluation (periodic and final); default {defaults.eval_episodes}, or "
        f"{GAME_EVAL_GAMES} games per opponent for pettingzoo:<game>",
    )
    train.add_argument(
        "--save-freq",
        type=_non_negative_int,
        default=defaults.save_freq,
        metavar="N",
        help="save a checkpoint every N env steps; 0 never",
    )
    train.add_argument("-tb", "--tensorboard-log", type=Path, metavar="DIR", help="folder for TensorBoard event files")
    train.add_argument(
        "--verbose",
        type=int,
        choices=(0, 1, 2),
        default=defaults.verbose,
        help="SB3's logger: 0 nothing, 1 the training table, 2 also debug messages",
    )


def _add_how_to_run(train: argparse.ArgumentParser) -> None:
    """How the run steps its envs and where it computes."""
    defaults = TrainConfig()
    train.add_argument("--seed", type=_seed, default=defaults.seed, help="seed of envs, policy, evaluation")
    train.add_argument("--device", default=defaults.device, help="cpu, cuda, cuda:N, mps or auto")
    train.add_argument(
        "--threads",
        type=_positive_int,
        default=None,
        help=f"torch CPU threads (default: the game's, {GAME_THREADS['connect_four_v3']} for Connect Four, at most the "
        f"cores this process may use; else {defaults.threads}, the fastest for small nets; give 1 where other work "
        "shares the cores: two threads then slow a run down)",
    )
    train.add_argument(
        "--collector",
        choices=sorted(COLLECTOR_TEXT),
        default=None,
        help="collect rollouts with TorchRL instead of SB3's VecEnv: sync (envs in this process) or multisync "
        "(one worker process per env)",
    )
    train.add_argument("--no-progress", action="store_true", help="hide the progress bar")


def _add_play(commands: Any) -> None:
    """``play``: the game, the model, the person's seat, the seed."""
    play = commands.add_parser(
        "play",
        help="play a trained self-play model in the terminal",
        description="Play a model trained by `torchrl-mask train --env pettingzoo:<game>`, in the terminal.",
        formatter_class=_HelpFormatter,
    )
    play.add_argument("--env", required=True, help="pettingzoo:<game>, the game the model was trained on")
    play.add_argument("-i", "--trained-agent", type=Path, required=True, metavar="PATH", help="the model.zip")
    play.add_argument("--seat", choices=("first", "second", "random"), default="random", help="your seat")
    play.add_argument("--seed", type=_seed, default=0, help="seed of the game (cards dealt) and of a random seat")


def build_parser() -> argparse.ArgumentParser:
    """The ``torchrl-mask`` argument parser.

    :return: a parser whose errors raise :class:`~torchrl_mask.app.config.UsageError`.
    """
    parser = _Parser(prog="torchrl-mask", description="Action-masked PPO with TorchRL-backed rollouts.")
    commands = parser.add_subparsers(
        dest="command", required=True, metavar="{train,tune,play,bench}", parser_class=_Parser
    )
    train_parser = commands.add_parser(
        "train",
        help="train MaskablePPO on a masked env, evaluate it, save the model and a learning-curve PNG",
        description="Train MaskablePPO on a gymnasium env that reports action masks, evaluate it with and "
        "without masks, and save the model, a learning-curve PNG and the evaluation.",
        formatter_class=_HelpFormatter,
    )
    for add_arguments in (_add_what_to_train, _add_what_to_write, _add_how_to_run):
        add_arguments(train_parser)
    _add_play(commands)
    add_tune_parser(commands)
    commands.add_parser(
        "bench",
        add_help=False,  # every argument after `bench`, --help included, belongs to the benchmark
        help="benchmark torchrl_mask against sb3-contrib: the buffers, `bench learn` for whole learn() calls, "
        "`bench selfplay` for self-play against the game's own speed, or `bench memory` for self-play with an LSTM "
        "against without (arguments go to the benchmark; try bench --help)",
    )
    return parser


def _hyperparams_from_args(args: argparse.Namespace) -> dict[str, Any]:
    """The file's entry for the env (or the built-in defaults), then ``--hyperparams`` over it, rl-zoo3's order."""
    game = args.env.startswith(GAME_PREFIX)
    built_in = game_hyperparams(args.env, args.algo) if game else dict(DEFAULT_HYPERPARAMS)
    hyperparams = built_in if args.conf_file is None else load_conf_file(args.conf_file, args.env)
    overrides = check_hyperparams(dict(args.hyperparams), "--hyperparams")
    if args.conf_file is None and "batch_size" not in overrides and not game:  # built-in: a quarter of the rollout
        n_steps = overrides.get("n_steps", hyperparams["n_steps"])
        overrides["batch_size"] = max(2, n_steps * overrides.get("n_envs", hyperparams["n_envs"]) // 4)
    return {**hyperparams, **overrides}


def config_from_args(args: argparse.Namespace) -> TrainConfig:
    """The run ``train``'s parsed arguments ask for (a game's defaults and league filled in).

    :param args: ``build_parser().parse_args(["train", ...])``.
    :return: the run's configuration, not yet checked against the files it names.
    :raises UsageError: a ``--conf-file`` that cannot be read or has no ``n_timesteps`` for the env, or refused
        ``--hyperparams``.
    """
    hyperparams = _hyperparams_from_args(args)
    if args.trained_agent is not None:  # the saved policy is kept, as rl-zoo3 keeps it
        hyperparams = without_policy_kwargs(hyperparams, [key for key, _ in args.hyperparams], args.trained_agent)
    n_timesteps = args.n_timesteps or hyperparams.pop("n_timesteps", None)
    hyperparams.pop("n_timesteps", None)
    if n_timesteps is None:
        raise UsageError(
            f"--conf-file {args.conf_file} gives no n_timesteps for {args.env}; add it, or pass --n-timesteps."
        )
    pool_size, league_players = game_league(args.env, args.pool_size, args.league_players)
    return TrainConfig(
        env_id=args.env,
        n_timesteps=n_timesteps,
        n_envs=hyperparams.pop("n_envs", 1),
        hyperparams=hyperparams,
        seed=args.seed,
        device=args.device,
        out=args.out,
        eval_episodes=args.eval_episodes or (GAME_EVAL_GAMES if args.env.startswith(GAME_PREFIX) else 20),
        eval_freq=args.eval_freq,
        save_freq=args.save_freq,
        trained_agent=args.trained_agent,
        tensorboard_log=args.tensorboard_log,
        verbose=args.verbose,
        progress_bar=not args.no_progress,
        threads=game_threads(args.env, args.threads, args.collector),
        collector=args.collector,
        conf_file=args.conf_file,
        overwrite=args.overwrite,
        pool_size=pool_size,
        league_players=league_players,
        fixed_share=game_fixed_share(args.env, args.fixed_share, bool(pool_size or league_players)),
        self_share=game_self_share(args.env, args.self_share, bool(pool_size or league_players)),
        symmetries=args.symmetries,
        images=game_images(args.env, args.images, args.symmetries is not False and args.algo == "ppo_mask"),
        algo=args.algo,
    )


def _run_train(args: argparse.Namespace) -> int:
    config = config_from_args(args)
    check_config(config)  # before torch is imported: a path is the commonest mistake, answered at once
    return run_train(config, COLLECTOR_TEXT)


def _run_play(args: argparse.Namespace) -> int:
    from torchrl_mask.app import play  # it checks the env and the file before it imports torch

    return play.play(play.PlayConfig(args.env, args.trained_agent, args.seat, args.seed))


def _run_tune(args: argparse.Namespace) -> int:
    config = tune_config(args)  # every check that needs no torch, before anything is imported or written
    from torchrl_mask.app.tune import run_tune  # Optuna, torch: only now that there is something to tune

    return run_tune(config)


def _run_bench(argv: list[str]) -> int:
    try:
        benchmark = importlib.import_module("torchrl_mask.bench.buffers")
    except ModuleNotFoundError as err:
        if err.name != "torchrl_mask.bench.buffers":
            raise
        print(
            "torchrl-mask bench: this install has no benchmark (module torchrl_mask.bench.buffers is missing); "
            "update torchrl_mask, or run the scripts in benchmarks/ from a clone of the repository.",
            file=sys.stderr,
        )
        return 1
    return int(benchmark.main(argv))


def main(argv: Sequence[str] | None = None) -> int:
    """Run ``torchrl-mask`` with ``argv`` (default: the process's arguments) and return the exit status.

    :param argv: the arguments after the program name.
    :return: 0 on success; 2 for input the user can fix (one line on stderr says what and how); 130 after
        Ctrl-C and 143 after SIGTERM (the model saved, one line on stderr says where); the benchmark's own
        status for ``bench``.
    """
    argv = list(sys.argv[1:] if argv is None else argv)
    parser = build_parser()
    try:
        args, extra = parser.parse_known_args(argv)
        if args.command == "bench":
            return _run_bench(argv[argv.index("bench") + 1 :])
        if extra:
            raise UsageError(f"unrecognized arguments: {' '.join(extra)}; see `torchrl-mask {args.command} --help`.")
        if args.command == "tune":
            return _run_tune(args)
        return _run_play(args) if args.command == "play" else _run_train(args)
    except UsageError as err:
        print(f"torchrl-mask: error: {err}", file=sys.stderr)
        return EXIT_USAGE


if __name__ == "__main__":
    sys.exit(main())
