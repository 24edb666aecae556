"""The evaluation ladder of each game: which fixed players a trained model meets, and what each game counts.

One table, :data:`LADDERS`, read by :mod:`torchrl_mask.games.evaluation` (the final evaluation and the
:class:`~torchrl_mask.games.evaluation.WinRates` callback during training):

============================  =========  ===========================================  ==============================
game                          metric     opponents                                    unit
============================  =========  ===========================================  ==============================
``tictactoe_v3``              win_rate   random, heuristic (win/block), perfect       result (+1 win, 0, -1 loss)
``connect_four_v3``           win_rate   random, heuristic (win/block), negamax_2,    result; and mistake rates on
                                         solver (perfect, where bitbully is           Pons' test positions
                                         installed)                                   (``perfect_play``)
``leduc_holdem_v4``           chips      random, rule_v2 (rlcard's rule agent)        big blinds
``texas_holdem_v4``           chips      random                                       big blinds
``texas_holdem_no_limit_v6``  chips      random                                       chips (big blind 2)
``chess_v6``                  win_rate   random                                       result
``go_v5``                     win_rate   random                                       result
``hanabi_v5``                 score      random (partner), self (the model as        fireworks score (0 when the
                                         every seat)                                  lives run out)
============================  =========  ===========================================  ==============================

Metrics: ``win_rate`` is the share of games won, drawn and lost by the sign of the model's return; ``chips`` the
mean and standard deviation of the model's return per game, in the unit PettingZoo's rewards are in (RLCard's
payoffs: the limit games divide chips by the big blind, no-limit pays chips); ``score`` the mean of the
shared return of a cooperative game. A game not in the table gets :data:`DEFAULT_LADDER` (a random legal
player, win rates). A ladder's ``measures`` grade the player without an opponent: Connect Four's
``perfect_play`` is its mistake rate on Pascal Pons' six test sets
(:func:`~torchrl_mask.games.perfect_play.mistake_rates`, 6,000 positions, one batched ``predict`` each set for a
model). Connect Four's ``solver`` opponent (:func:`~torchrl_mask.games.solver.solver_player`) needs the optional
``bitbully`` (AGPL: ``pip install 'torchrl-mask[solver]'``); without it the ladder says so in ``missing``.

Example:
    >>> sorted(ladder("pettingzoo:tictactoe_v3").opponents), list(ladder("connect_four_v3").measures)
    (['heuristic', 'perfect', 'random'], ['perfect_play'])
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from torchrl_mask.games.perfect_play import mistake_rates
from torchrl_mask.games.players import Player, leduc_rule_v2, one_ply_heuristic, random_legal
from torchrl_mask.games.search import negamax, perfect_tictactoe
from torchrl_mask.games.solver import INSTALL, SolverPlayer, solver_available

__all__ = ["DEFAULT_LADDER", "LADDERS", "SELF", "Ladder", "ladder"]

SELF = "self"  # the opponent name for the evaluated player in every other seat too (cooperative games)

_NO_HEURISTIC = (
    "no opponent beyond random fits {game}: the one-ply heuristic, negamax and minimax are defined for "
    "tic-tac-toe and Connect Four boards only"
)


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


def _random_only(game: str, metric: str = "win_rate", unit: str = "result (+1 win, 0 draw, -1 loss)") -> Ladder:
    reason = _NO_HEURISTIC.format(game=game)
    return Ladder(metric, {"random": random_legal}, unit, reason, {"heuristic": reason})


def _connect_four() -> Ladder:
    """Connect Four's ladder: the perfect solver last where bitbully is installed, and the mistake rates."""
    opponents: dict[str, Player | None] = {
        "random": random_legal,
        "heuristic": one_ply_heuristic,
        "negamax_2": negamax(2),
    }
    missing = {}
    if solver_available():
        opponents["solver"] = SolverPlayer()
    else:
        missing["solver"] = f"the perfect Connect Four player needs the BitBully solver (AGPL, optional): {INSTALL}"
    return Ladder("win_rate", opponents, missing=missing, measures={"perfect_play": mistake_rates})


LADDERS: dict[str, Ladder] = {
    "tictactoe_v3": Ladder(
        "win_rate", {"random": random_legal, "heuristic": one_ply_heuristic, "perfect": perfect_tictactoe}
    ),
    "connect_four_v3": _connect_four(),
    "leduc_holdem_v4": Ladder(
        "chips",
        {"random": random_legal, "rule_v2": leduc_rule_v2},
        "big blinds",
        missing={"heuristic": _NO_HEURISTIC.format(game="leduc_holdem_v4")},
    ),
    "texas_holdem_v4": _random_only("texas_holdem_v4", "chips", "big blinds"),
    "texas_holdem_no_limit_v6": _random_only("texas_holdem_no_limit_v6", "chips", "chips (big blind 2)"),
    "chess_v6": _random_only("chess_v6"),
    "go_v5": _random_only("go_v5"),
    "hanabi_v5": Ladder(
        "score",
        {"random": random_legal, SELF: None},
        "fireworks score (0 when the lives run out)",
        "cooperative: 'random' is a random legal partner, 'self' the model in every seat",
        {"heuristic": _NO_HEURISTIC.format(game="hanabi_v5")},
    ),
}
DEFAULT_LADDER = Ladder(
    "win_rate", {"random": random_legal}, note="a game without a ladder of its own: a random legal player only"
)


def ladder(game: str) -> Ladder:
    """The ladder of a game.

    :param game: the game's name, optionally prefixed ``"pettingzoo:"``.
    :return: its entry of :data:`LADDERS`, or :data:`DEFAULT_LADDER`.
    """
    return LADDERS.get(game.removeprefix("pettingzoo:"), DEFAULT_LADDER)
