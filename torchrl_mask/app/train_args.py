"""``torchrl-mask train``'s options: what to train, what to write, how to run, and a game's league; and the run
they ask for (:func:`config_from_args`, through :func:`torchrl_mask.app.config.train_config`). Nothing heavy is
imported: ``--help`` and a bad option answer before torch is.

Example:
    >>> parser = argparse.ArgumentParser()
    >>> add_train_arguments(parser)
    >>> config_from_args(parser.parse_args(["--env", "pettingzoo:connect_four_v3", "--seed", "2"])).threads >= 1
    True
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from pathlib import Path

from torchrl_mask.app.arg_types import (
    HelpFormatter,
    Parser,
    add_fixed_part,
    fixed_share,
    n_timesteps,
    non_negative_int,
    positive_int,
    seed,
    self_share,
)
from torchrl_mask.app.config import ALGOS, GAME_EVAL_GAMES, TrainConfig, train_config
from torchrl_mask.app.hyperparams import DEFAULT_HYPERPARAMS
from torchrl_mask.games.profile import game_profile, profiles

__all__ = ["COLLECTORS", "add_train_arguments", "config_from_args", "parse_train_config"]

#: ``--collector``'s choices.
COLLECTORS = ("multisync", "sync")


def _games() -> str:
    return ", ".join(sorted(name for name in profiles() if name != "default"))


def _openings_defaults() -> str:
    """The random openings each game's record gives, as ``--openings``'s help says its default."""
    given = [f"{profile.openings} for {name}" for name, profile in sorted(profiles().items()) if profile.openings]
    return ", ".join([*given, "0 for the others"])


def _add_what_to_train(train: argparse.ArgumentParser) -> None:
    """What to train: the env, its hyperparameters (rl-zoo3's file and overrides), how long, from what."""
    defaults = TrainConfig()
    built_in = ", ".join(f"{key}={value}" for key, value in DEFAULT_HYPERPARAMS.items())
    train.add_argument(
        "--env",
        default=defaults.env_id,
        help="gymnasium id of an env with masks (action_masks(), info['action_mask'] or a Dict observation "
        f"with 'action_mask'); module:Id imports module first; pettingzoo:<game> trains by self-play ({_games()}: "
        "PettingZoo's classic games with masked observations; their defaults: torchrl_mask/games/profiles.yml)",
    )
    train.add_argument(
        "--algo",
        choices=sorted(ALGOS),
        default=defaults.algo,
        help="ppo_mask: MaskablePPO; ppo_lstm_mask: MaskableRecurrentPPO (LSTM policies, for tasks that need memory)",
    )
    add_fixed_part(
        train,
        "rl-zoo3 YAML file: env ids at the top level (or 'default'), each with n_timesteps, n_envs, policy, "
        f"policy_kwargs and MaskablePPO's arguments (without it: {built_in}; a game's from its record)",
        "override hyperparameters, values as Python literals: learning_rate=3e-4 clip_range=lin_0.2 "
        "policy_kwargs='dict(net_arch=[64, 64], activation_fn=nn.ReLU)'",
    )
    train.add_argument(
        "-n",
        "--n-timesteps",
        "--steps",
        type=n_timesteps,
        metavar="N",
        help="env steps to train for, over all envs (default: the file's n_timesteps, or "
        f"{DEFAULT_HYPERPARAMS['n_timesteps']} without a file)",
    )
    train.add_argument(
        "-i",
        "--trained-agent",
        type=Path,
        metavar="PATH",
        help="a saved model (.zip) to continue training (its policy is kept); load only models you trust: a "
        ".zip holds pickled Python objects, which run code when loaded",
    )


def _add_league(train: argparse.ArgumentParser) -> None:
    """Self-play's opponents and images: past snapshots, the game's fixed players, the learner itself."""
    tictactoe, connect_four = game_profile("tictactoe_v3"), game_profile("connect_four_v3")
    train.add_argument(
        "--pool-size",
        type=non_negative_int,
        default=None,
        metavar="N",
        help="pettingzoo:<game> only: play the learner against N snapshots of its past weights; 0 is pure self-play "
        f"(default: the game's league, {tictactoe.pool_size} for tic-tac-toe and Connect Four, else 0)",
    )
    train.add_argument(
        "--league-players",
        nargs="+",
        default=None,
        metavar="NAME",
        help="pettingzoo:<game> only: fixed players of the game's evaluation ladder the learner also meets "
        f"(tic-tac-toe: {' '.join(sorted(tictactoe.opponents))}; Connect Four: "
        f"{' '.join(sorted(connect_four.opponents))}), drawn with the snapshots by what it does not beat yet "
        f"(default: the game's league, {' '.join(tictactoe.league_players)} for tic-tac-toe, "
        f"{' '.join(connect_four.league_players)} for Connect Four; given either option, the other defaults to none)",
    )
    train.add_argument(
        "--fixed-share",
        type=fixed_share,
        default=None,
        metavar="F",
        help="pettingzoo:<game> only: the league's fixed players' share of its games not against itself, in [0, 1], "
        "the snapshots the rest, each group drawn within by what the learner does not beat; none: one draw over all "
        f"the opponents (default: the game's, {connect_four.fixed_share} for Connect Four, else none)",
    )
    train.add_argument(
        "--self-share",
        type=self_share,
        default=None,
        metavar="F",
        help="pettingzoo:<game> only: the share of the league's games, in [0, 1), that the learner plays against "
        f"itself, every seat learning; the rest are drawn as without it (default: the game's, "
        f"{connect_four.self_share} for Connect Four, else 0)",
    )
    train.add_argument(
        "--symmetries",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="pettingzoo:<game> only: train on each move's mirror images too (Connect Four's mirror, tic-tac-toe's "
        "rotations and reflections; default: on where the game has them, off with ppo_lstm_mask)",
    )
    train.add_argument(
        "--images",
        choices=("all", "random"),
        default=None,
        help="pettingzoo:<game> with symmetries only: train on each move and all its images (all), or on each move "
        "as one of them drawn at random, the move itself among them (random: a rollout of the moves played, the "
        f"images met across rollouts; default: {tictactoe.images} for tictactoe_v3, {connect_four.images} for "
        "connect_four_v3)",
    )


def _add_openings(train: argparse.ArgumentParser) -> None:
    """Where a board game's training games start."""
    train.add_argument(
        "--openings",
        type=non_negative_int,
        default=None,
        metavar="N",
        help="pettingzoo:<game> with numpy boards only (connect_four_v3 up to 6, tictactoe_v3 up to 4): open each "
        "training game with 0 to N random legal moves, drawn uniformly, so that the learner meets varied positions "
        f"(default: the game's: {_openings_defaults()})",
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
        type=non_negative_int,
        default=defaults.eval_freq,
        metavar="N",
        help="evaluate every N env steps with MaskableEvalCallback and save the best model; 0 never",
    )
    train.add_argument(
        "--eval-episodes",
        type=positive_int,
        default=None,
        help=f"episodes per evaluation (periodic and final); default {defaults.eval_episodes}, or "
        f"{GAME_EVAL_GAMES} games per opponent for pettingzoo:<game>",
    )
    train.add_argument(
        "--save-freq",
        type=non_negative_int,
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
    connect_four = game_profile("connect_four_v3")
    train.add_argument("--seed", type=seed, default=defaults.seed, help="seed of envs, policy, evaluation")
    train.add_argument("--device", default=defaults.device, help="cpu, cuda, cuda:N, mps or auto")
    train.add_argument(
        "--threads",
        type=positive_int,
        default=None,
        help=f"torch CPU threads, at most the cores this process may use (default: the game's, {connect_four.threads} "
        f"for Connect Four; else {defaults.threads}, the fastest for small nets; give 1 where other work shares the "
        "cores: two threads then slow a run down)",
    )
    train.add_argument(
        "--collector",
        choices=COLLECTORS,
        default=None,
        help="collect rollouts with TorchRL instead of SB3's VecEnv: sync (envs in this process) or multisync "
        "(one worker process per env)",
    )
    train.add_argument("--no-progress", action="store_true", help="hide the progress bar")


def add_train_arguments(train: argparse.ArgumentParser) -> None:
    """Add ``train``'s options to a parser.

    :param train: the ``train`` parser.
    """
    _add_what_to_train(train)
    _add_league(train)
    _add_openings(train)
    _add_what_to_write(train)
    _add_how_to_run(train)


def config_from_args(args: argparse.Namespace) -> TrainConfig:
    """The run ``train``'s parsed options ask for (:func:`~torchrl_mask.app.config.train_config`).

    :param args: the ``train`` parser's result.
    :return: the run's configuration, not yet checked against the files it names.
    :raises UsageError: what :func:`~torchrl_mask.app.config.train_config` refuses.
    """
    options = {key: value for key, value in vars(args).items() if key not in ("command", "env", "no_progress")}
    return train_config(args.env, progress_bar=not args.no_progress, **options)


def parse_train_config(argv: Sequence[str]) -> TrainConfig:
    """The run ``torchrl-mask train <argv>`` asks for, from ``train``'s options alone (what a benchmark measures).

    :param argv: ``train``'s options (``["--env", "pettingzoo:connect_four_v3", "--self-share", "0.5"]``).
    :return: the configuration.
    :raises UsageError: an option ``train`` refuses, in its words.
    """
    parser = Parser(prog="torchrl-mask train", formatter_class=HelpFormatter)
    add_train_arguments(parser)
    return config_from_args(parser.parse_args(list(argv)))
