"""Pascal Pons' six Connect Four test sets, every legal move labelled with its exact value: test data, never training.

The field grades a Connect Four player by how often its move throws away game-theoretic value on these 6,000
positions (:mod:`~torchrl_mask.games.perfect_play`). Each set holds 1,000 positions of one game stage (moves
played: beginning up to 14, middle 15-28, end over 28) and one difficulty (moves left to the game's end under
perfect play, its last included: easy up to 14, medium 15-28, hard over 28); the field reports them in the order
of :data:`SET_NAMES`.

The data, ``data/pons_connect_four.npz`` beside this module, holds each position's moves (columns 1-7, as in
the sets' files), the set's published score, and every column's exact score for the player to move on Pons' scale
(positive: the mover wins, ``22 -`` the stones it will have played when it does; negative: it loses; 0: a draw;
:data:`FULL_COLUMN` for a full column), computed once by ``scripts/label_pons_sets.py`` with a solver; each
position's best move scores the set's published score. Sources and licences: ``data/README.md``.

These positions measure play; they must never be trained on (a model that has seen them would be graded on its
memory): nothing in the package's training reads this module.

Example:
    >>> sets = load_sets()
    >>> list(sets) == list(SET_NAMES), len(sets["end_easy"].scores)
    (True, 1000)
    >>> end = sets["end_easy"]
    >>> int(end.move_scores[0].max()) == int(end.scores[0])
    True
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache
from pathlib import Path

import numpy as np

from torchrl_mask.games.boards import BoardGames

__all__ = ["DATA", "FULL_COLUMN", "SET_NAMES", "PonsSet", "load_sets", "position_views"]

DATA = Path(__file__).with_name("data") / "pons_connect_four.npz"
SET_NAMES = ("beginning_easy", "middle_easy", "end_easy", "beginning_medium", "middle_medium", "beginning_hard")
FULL_COLUMN = -128  # a full column's entry in ``move_scores``: no move there


@dataclass(frozen=True)
class PonsSet:
    """One test set: its positions as the mover sees them, and every move's exact value.

    :param name: one of :data:`SET_NAMES`.
    :param sequences: str ``(n,)``, each position's moves from the empty board, columns 1-7.
    :param scores: int8 ``(n,)``, the set's published score of each position (the best move's).
    :param move_scores: int8 ``(n, 7)``, each column's exact score for the mover, :data:`FULL_COLUMN` where full.
    :param views: int8 ``(n, 6, 7, 2)``, PettingZoo ``connect_four_v3``'s observation for the mover.
    :param masks: bool ``(n, 7)``, the legal columns.
    """

    name: str
    sequences: np.ndarray
    scores: np.ndarray
    move_scores: np.ndarray
    views: np.ndarray
    masks: np.ndarray

    def head(self, count: int | None) -> PonsSet:
        """The set's first ``count`` positions (all of them for None).

        :param count: positions kept.
        :return: a set of those positions.
        """
        rows = slice(count)
        arrays = (self.sequences, self.scores, self.move_scores, self.views, self.masks)
        return PonsSet(self.name, *(array[rows] for array in arrays))

    @property
    def move_classes(self) -> np.ndarray:
        """int8 ``(n, 7)``: each legal column's value class for the mover, +1 win, 0 draw, -1 loss; -2 full."""
        return np.where(self.masks, np.sign(self.move_scores), -2).astype(np.int8)


def position_views(sequences: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The mover's view and legal columns of each position, its moves played by PettingZoo's rules.

    The moves go through :class:`~torchrl_mask.games.boards.BoardGames` (the numpy Connect Four that
    :class:`~torchrl_mask.games.env.TurnBasedEnv` trains on, move for move PettingZoo's ``connect_four_v3``):
    positions of one length are played together, a column of each at a time.

    :param sequences: str ``(n,)``, moves as columns 1-7.
    :return: int8 ``(n, 6, 7, 2)`` (plane 0 the mover's pieces, plane 1 the opponent's, row 0 the top) and bool
        ``(n, 7)``.
    """
    views, masks = np.zeros((len(sequences), 6, 7, 2), np.int8), np.zeros((len(sequences), 7), bool)
    lengths = np.array([len(moves) for moves in sequences])
    for length in np.unique(lengths):
        rows = np.flatnonzero(lengths == length)
        columns = np.array([[int(c) - 1 for c in sequences[row]] for row in rows]).reshape(len(rows), length)
        games = BoardGames("connect_four_v3", len(rows))
        games.reset(np.arange(len(rows)))
        for ply in range(length):
            games.step(columns[:, ply])
        views[rows], masks[rows] = games.views()
    return views, masks


@cache
def load_sets(path: Path = DATA) -> dict[str, PonsSet]:
    """The six sets, labelled, their views built once (cached).

    :param path: the labels (``scripts/label_pons_sets.py``'s output; the package's own by default).
    :return: set name -> :class:`PonsSet`, in :data:`SET_NAMES`' order.
    """
    with np.load(path) as data:
        arrays = {key: data[key] for key in ("set_names", "set", "sequence", "score", "move_scores")}
    views, masks = position_views(arrays["sequence"])
    sets = {}
    for index, name in enumerate(arrays["set_names"].tolist()):
        rows = arrays["set"] == index
        sets[name] = PonsSet(
            name, arrays["sequence"][rows], arrays["score"][rows], arrays["move_scores"][rows], views[rows], masks[rows]
        )
    return {name: sets[name] for name in SET_NAMES}
