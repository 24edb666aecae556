"""``torchrl-mask train``'s options for a ``pettingzoo:<game>`` run's opponents: past snapshots, the game's fixed
players, and the learner itself (:mod:`torchrl_mask.games.league`). Nothing heavy is imported.
"""

from __future__ import annotations

import argparse

from torchrl_mask.app.arg_types import fixed_share, non_negative_int, self_share

__all__ = ["add_league_options"]


def add_league_options(train: argparse.ArgumentParser) -> None:
    """Self-play's opponents: past snapshots and the game's fixed players."""
    train.add_argument(
        "--pool-size",
        type=non_negative_int,
        default=None,
        metavar="N",
        help="pettingzoo:<game> only: play the learner against N snapshots of its past weights; 0 is pure self-play "
        "(default: the game's league, 4 for tic-tac-toe and Connect Four, else 0)",
    )
    train.add_argument(
        "--league-players",
        nargs="+",
        default=None,
        metavar="NAME",
        help="pettingzoo:<game> only: fixed players of the game's evaluation ladder the learner also meets "
        "(tic-tac-toe: random heuristic perfect; Connect Four: random heuristic negamax_2), drawn with the snapshots "
        "by what it does not beat yet (default: the game's league, perfect heuristic random for tic-tac-toe, "
        "heuristic negamax_2 random for Connect Four; given either option, the other defaults to none)",
    )
    train.add_argument(
        "--fixed-share",
        type=fixed_share,
        default=None,
        metavar="F",
        help="pettingzoo:<game> only: the league's fixed players' share of its games not against itself, in [0, 1], "
        "the snapshots the rest, each group drawn within by what the learner does not beat; none: one draw over all "
        "the opponents (default: the game's, 0.5 for Connect Four, else none)",
    )
    train.add_argument(
        "--self-share",
        type=self_share,
        default=None,
        metavar="F",
        help="pettingzoo:<game> only: the share of the league's games, in [0, 1), that the learner plays against "
        "itself, every seat learning; the rest are drawn as without it (default: the game's, 0.5 for Connect Four, "
        "else 0)",
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
        "images met across rollouts; default: random for tictactoe_v3, all for connect_four_v3)",
    )
