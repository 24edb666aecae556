"""The evaluation ladder of each game: which fixed players a trained model meets, and what each game counts.

A game's ladder is part of its record (``ladder:`` in :mod:`torchrl_mask.games.profile`'s ``profiles.yml``),
which names the players; this module turns the names into the players (:data:`PLAYERS`: random legal play, the
one-ply win/block heuristic, perfect tic-tac-toe, rlcard's Leduc rule agent; ``negamax_<depth>`` for Connect
Four; ``solver``, Connect Four's perfect player) and is read by :mod:`torchrl_mask.games.evaluation` (the final
evaluation and the :class:`~torchrl_mask.games.evaluation.WinRates` callback during training).

Connect Four's ``solver`` (:func:`~torchrl_mask.games.solver.solver_player`) needs the optional ``bitbully``
(AGPL: ``pip install 'torchrl-mask[solver]'``): where it cannot be imported the ladder leaves it out and says why
in ``missing``. A record's ``measures`` grade the player alone (:data:`MEASURES`): Connect Four's ``perfect_play``
is its mistake rate on Pascal Pons' six test sets (:func:`~torchrl_mask.games.perfect_play.mistake_rates`, 6,000
positions, one batched ``predict`` a set for a model).

Metrics: ``win_rate`` is the share of games won, drawn and lost by the sign of the model's return; ``chips`` the
mean and standard deviation of the model's return per game, in the unit PettingZoo's rewards are in (RLCard's
payoffs: the limit games divide chips by the big blind, no-limit pays chips); ``score`` the mean of the
shared return of a cooperative game. A game without a record of its own has a random legal player, win rates.

Example:
    >>> sorted(ladder("tictactoe_v3").opponents), list(ladder("connect_four_v3").measures)
    (['heuristic', 'perfect', 'random'], ['perfect_play'])
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import cache
from typing import Any

from torchrl_mask.games.perfect_play import mistake_rates
from torchrl_mask.games.players import Player, leduc_rule_v2, one_ply_heuristic, random_legal
from torchrl_mask.games.profile import game_profile, profiles
from torchrl_mask.games.search import negamax, perfect_tictactoe
from torchrl_mask.games.solver import INSTALL, solver_available, solver_player

__all__ = ["MEASURES", "PLAYERS", "SELF", "SOLVER", "Ladder", "known_opponents", "ladder", "player"]

SELF = "self"  # the opponent name for the evaluated player in every other seat too (cooperative games)

#: The fixed players a ladder may name; ``negamax_<depth>`` names Connect Four's negamax of any depth too.
PLAYERS: dict[str, Player] = {
    "random": random_legal,
    "heuristic": one_ply_heuristic,
    "perfect": perfect_tictactoe,
    "rule_v2": leduc_rule_v2,
}
_NEGAMAX = re.compile(r"negamax_([1-9]\d?)")
SOLVER = "solver"  # Connect Four's perfect player, where the optional bitbully is installed
_NO_SOLVER = f"the perfect Connect Four player needs the BitBully solver (AGPL, optional): {INSTALL}"
#: What a record's ``measures`` may name: a function ``(player, seed=) -> dict`` of the evaluated player alone.
MEASURES: dict[str, Callable[..., dict[str, Any]]] = {"perfect_play": mistake_rates}


@dataclass(frozen=True)
class Ladder:
    """One game's evaluation: its metric and its opponents, weakest first.

    :param metric: ``"win_rate"``, ``"chips"`` or ``"score"`` (see the module).
    :param opponents: name -> player; a None player is :data:`SELF`, the evaluated player in the other seats.
    :param unit: what the game's rewards count.
    :param note: what the ladder lacks and why (empty when nothing is missing).
    :param missing: opponent name -> why it does not fit this game (asked for by name, the evaluation reports
        this instead of raising).
    :param measures: name -> a function ``(player, seed=) -> dict`` (JSON-able) measuring the evaluated player
        with no opponent, once per evaluation (Connect Four's ``perfect_play``).
    """

    metric: str
    opponents: dict[str, Player | None]
    unit: str = "result (+1 win, 0 draw, -1 loss)"
    note: str = ""
    missing: dict[str, str] = field(default_factory=dict)
    measures: dict[str, Callable[..., dict[str, Any]]] = field(default_factory=dict)


def player(name: str) -> Player | None:
    """The fixed player a ladder names: one of :data:`PLAYERS`, ``negamax_<depth>``, :data:`SOLVER`, or None for
    :data:`SELF`.

    :param name: the player's name.
    :return: the player.
    :raises ValueError: a name no ladder can hold.
    :raises ImportError: :data:`SOLVER` without bitbully installed (the message says how to install it).
    """
    if name == SELF:
        return None
    if name in PLAYERS:
        return PLAYERS[name]
    if name == SOLVER:
        return solver_player()
    match = _NEGAMAX.fullmatch(name)
    if match is None:
        raise ValueError(
            f"{name!r} is not a fixed player; use one of {', '.join(PLAYERS)}, negamax_<depth>, {SOLVER} or self."
        )
    return negamax(int(match.group(1)))


@cache
def ladder(game: str) -> Ladder:
    """The ladder of a game, as its record (:func:`~torchrl_mask.games.profile.game_profile`) names it.

    :param game: the game's name (``"connect_four_v3"``).
    :return: its ladder; a game without a record of its own has a random legal player only. The solver is left
        out, and said missing, where bitbully is not installed.
    """
    profile = game_profile(game)
    absent = {SOLVER: _NO_SOLVER} if SOLVER in profile.opponents and not solver_available() else {}
    opponents = {name: player(name) for name in profile.opponents if name not in absent}
    measures = {name: MEASURES[name] for name in profile.measures}
    return Ladder(profile.metric, opponents, profile.unit, profile.note, {**profile.missing, **absent}, measures)


def known_opponents() -> set[str]:
    """Every opponent name some game's ladder holds."""
    return {name for profile in profiles().values() for name in profile.opponents}
