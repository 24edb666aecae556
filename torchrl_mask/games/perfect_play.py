"""Connect Four strength graded by perfect play: the share of test positions in which a player's move loses value.

Method (the field's, as AlphaZero.jl's ``pons_benchmark.jl`` measures it): the player moves once in each of the
6,000 positions of Pascal Pons' six test sets (:mod:`~torchrl_mask.games.pons_sets`), seeing PettingZoo
``connect_four_v3``'s observation for the player to move and its legal columns. Its move is a **mistake** when
the move's value class (win, draw or loss for the mover under perfect play from then on) is below the best move's:
a won position played into a draw or a loss, a drawn one into a loss. A slower win than the fastest is no mistake;
an illegal move is one. The rate of a set is its mistakes over its 1,000 positions; ``"mean"`` is the mean of the
six rates.

Reference figures on the same sets (per set in :data:`~torchrl_mask.games.pons_sets.SET_NAMES`' order), from
AlphaZero.jl's Connect Four tutorial: :data:`REFERENCES`.

Example:
    >>> from torchrl_mask.games.players import random_legal
    >>> rates = mistake_rates(random_legal, sets=["end_easy"], seed=0)
    >>> sorted(rates), 0.0 < rates["end_easy"] < 1.0
    (['end_easy', 'illegal_moves', 'mean', 'positions'], True)
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import numpy as np

from torchrl_mask.games.players import Player, moves
from torchrl_mask.games.pons_sets import SET_NAMES, PonsSet, load_sets

__all__ = ["REFERENCES", "chosen_classes", "mistake_rates", "mistakes"]

#: Mistake rates (in %) per set, in SET_NAMES' order, read from AlphaZero.jl's tutorial plot (approximate).
REFERENCES: dict[str, tuple[float, ...]] = {
    "minmax depth 5 (AlphaZero.jl)": (1.7, 0.7, 1.4, 7.3, 9.2, 23.5),
    "AlphaZero.jl with MCTS": (0.0, 0.0, 0.0, 2.0, 2.8, 7.0),
}


def chosen_classes(positions: PonsSet, actions: np.ndarray) -> np.ndarray:
    """The value class of each move played: +1 win, 0 draw, -1 loss for the mover; -2 an illegal move.

    :param positions: a test set.
    :param actions: int ``(n,)``, a column per position.
    :return: int8 ``(n,)``.
    """
    actions = np.asarray(actions, dtype=np.int64)
    classes = positions.move_classes
    legal = (actions >= 0) & (actions < classes.shape[1])
    return np.where(legal, classes[np.arange(len(actions)), np.clip(actions, 0, classes.shape[1] - 1)], -2)


def mistakes(positions: PonsSet, actions: np.ndarray) -> np.ndarray:
    """Which moves lose value: the move's class below the best move's (an illegal move's -2 included).

    :param positions: a test set.
    :param actions: int ``(n,)``, a column per position.
    :return: bool ``(n,)``.
    """
    return chosen_classes(positions, actions) < positions.move_classes.max(axis=1)


def mistake_rates(
    player: Player, sets: Iterable[str] | None = None, seed: int = 0, limit: int | None = None
) -> dict[str, Any]:
    """A player's mistake rate on each of Pons' sets (see the module for the method).

    A :class:`~torchrl_mask.games.players.BatchPlayer` (a trained model's
    :func:`~torchrl_mask.games.evaluation.model_player`) moves in a whole set at once; any other player is asked
    position by position (:func:`~torchrl_mask.games.players.moves`).

    :param player: any Connect Four player ``(observation (6, 7, 2), mask (7,), rng) -> column``.
    :param sets: the sets to play (names of :data:`~torchrl_mask.games.pons_sets.SET_NAMES`); None: all six.
    :param seed: seeds the player's random choices (one generator for all sets, in order).
    :param limit: play only each set's first ``limit`` positions (a slow player's sample); None: all 1,000.
    :return: ``{<set>: rate, ..., "mean": mean of the rates, "positions": positions played, "illegal_moves": n}``.
    :raises ValueError: a set name that is not one of Pons' six.
    """
    names = list(SET_NAMES if sets is None else sets)
    unknown = sorted(set(names) - set(SET_NAMES))
    if unknown:
        raise ValueError(f"sets={unknown} are not Pons' test sets; choose from {list(SET_NAMES)}.")
    all_sets, rng = load_sets(), np.random.default_rng(seed)
    out: dict[str, Any] = {}
    positions = illegal = 0
    for name in names:
        test = all_sets[name].head(limit)
        actions = moves(player, test.views, test.masks, rng)
        chosen = chosen_classes(test, actions)
        out[name] = float(np.mean(chosen < test.move_classes.max(axis=1)))
        positions, illegal = positions + len(chosen), illegal + int(np.sum(chosen == -2))
    out["mean"] = float(np.mean([out[name] for name in names]))
    return {**out, "positions": positions, "illegal_moves": illegal}
