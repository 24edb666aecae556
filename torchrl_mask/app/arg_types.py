"""The argument types and the parser class of the ``torchrl-mask`` commands (``train``, ``tune``): each value
checked as it is parsed, every error one line (:class:`~torchrl_mask.app.config.UsageError`); nothing heavy is
imported.

Example:
    >>> positive_int("1_000"), seed("7")
    (1000, 7)
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any, Literal

from torchrl_mask.app.hyperparams import HYPERPARAMS, UsageError, parse_hyperparam

__all__ = [
    "HelpFormatter",
    "Parser",
    "add_fixed_part",
    "fixed_share",
    "hyperparam",
    "n_timesteps",
    "non_negative_int",
    "positive_int",
    "seed",
    "self_share",
]


def positive_int(text: str) -> int:
    try:
        value = int(text.replace("_", ""))
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}") from None
    if value <= 0:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}")
    return value


def n_timesteps(text: str) -> int:
    """``-n``: a positive number of env steps, no more than a file's ``n_timesteps`` may give."""
    value, expected = HYPERPARAMS["n_timesteps"](positive_int(text))
    if expected:
        raise argparse.ArgumentTypeError(f"expected {expected}, got {text!r}")
    return int(value)


def seed(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected an integer from 0 to 2**32 - 1, got {text!r}") from None
    if not 0 <= value < 2**32:
        raise argparse.ArgumentTypeError(f"expected an integer from 0 to 2**32 - 1, got {text!r}")
    return value


def non_negative_int(text: str) -> int:
    try:
        value = int(text.replace("_", ""))
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected an integer >= 0, got {text!r}") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"expected an integer >= 0, got {text!r}")
    return value


def hyperparam(text: str) -> tuple[str, Any]:
    try:
        return parse_hyperparam(text)
    except UsageError as err:  # argparse turns ArgumentTypeError into "argument --hyperparams: ..."
        raise argparse.ArgumentTypeError(str(err).removeprefix(f"--hyperparams {text!r}: ")) from None


def add_fixed_part(parser: argparse.ArgumentParser, conf_help: str, params_help: str) -> None:
    """``-conf``/``--conf-file`` and ``-params``/``--hyperparams``, read the same way by ``train`` and ``tune``.

    :param parser: the command's parser.
    :param conf_help: what the file gives the command.
    :param params_help: what the overrides do in the command.
    """
    parser.add_argument("-conf", "--conf-file", type=Path, metavar="FILE", help=conf_help)
    parser.add_argument(
        "-params",
        "--hyperparams",
        type=hyperparam,
        nargs="+",
        action="extend",  # given twice: both groups, the later value of a name winning
        default=[],
        metavar="NAME=VALUE",
        help=params_help,
    )


class HelpFormatter(argparse.ArgumentDefaultsHelpFormatter):
    """argparse's defaults in the help, except empty ones (an option whose help says what its absence means)."""

    def _get_help_string(self, action: argparse.Action) -> str | None:
        if action.default is None or action.default is False or action.default == []:
            return action.help
        return super()._get_help_string(action)


class Parser(argparse.ArgumentParser):
    """argparse, with its errors raised as one-line :class:`UsageError` instead of usage text and exit."""

    def error(self, message: str) -> Any:  # argparse's hook; typed NoReturn there
        raise UsageError(f"{message}; see `{self.prog} --help`.")


def fixed_share(text: str) -> float | Literal["none"]:
    """``--fixed-share``: the fixed players' share of a league's games (its range is checked with the league), or
    ``none`` for one draw over all the opponents, whatever the game's default.

    :param text: the option's value.
    :return: the share, or ``"none"``.
    :raises argparse.ArgumentTypeError: neither a number nor ``none``.
    """
    if text.strip().lower() == "none":
        return "none"
    try:
        return float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"{text!r} is not a share of games: give one in [0, 1] (0.5: half the league's games to its fixed "
            "players), or none for one draw over all the opponents"
        ) from None


def self_share(text: str) -> float:
    """``--self-share``: the share of a league's games the learner plays against itself, ``[0, 1)``.

    :param text: the option's value.
    :return: the share.
    :raises argparse.ArgumentTypeError: not a number, or outside ``[0, 1)``.
    """
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if not 0 <= value < 1:
        raise argparse.ArgumentTypeError(
            f"{text!r} is not a share of games in [0, 1) (0.5: half the games against itself; 1 would leave no game "
            "to the league: use --pool-size 0 for pure self-play)"
        )
    return value
