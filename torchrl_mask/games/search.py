"""Players that search the game tree: a perfect tic-tac-toe player and Connect Four's depth-``k`` negamax.

Both are :data:`~torchrl_mask.games.players.Player` functions ``(observation, mask, rng) -> action`` over the
mover's own view (plane 0 its pieces, plane 1 the opponent's, as PettingZoo lays them out), and both break ties
between equally good moves at random with ``rng``:

- :func:`perfect_tictactoe`: minimax to the end of the game, memoised over the 5,478 positions; it never loses,
  and of two wins it takes the sooner;
- :func:`negamax`: ``negamax(depth)`` makes Connect Four's player of Kaggle ConnectX's kind: negamax over
  ``depth`` plies (one ply is one move), a win scored above any position and sooner wins above later ones, and
  at the horizon the window heuristic: every 4-cell window (69 of them on the 6x7 board) holding only the
  mover's pieces and empty cells scores :data:`WINDOW_SCORES` by its count of the mover's pieces, and the same for
  the opponent's windows, negated. ``negamax(1)`` wins now if it can, else builds windows; ``negamax(2)`` also
  sees the opponent's winning replies.

Example:
    >>> board = np.zeros((6, 7, 2), np.int8)
    >>> board[3:, 0, 0] = 1  # three of the mover's pieces in column 0
    >>> board[3:, 1, 1] = 1
    >>> negamax(2)(board, np.ones(7, bool), np.random.default_rng(0))
    0
"""

from __future__ import annotations

from functools import cache

import numpy as np

from torchrl_mask.games.players import BatchPlayer, Player, board_lines, pick

__all__ = ["WINDOW_SCORES", "Negamax", "negamax", "perfect_tictactoe"]

_LINES = board_lines(3, 3, 3)  # tic-tac-toe's 8 lines, flat cells
_LINE_MASKS = tuple(int(sum(1 << int(cell) for cell in line)) for line in _LINES)
ROWS, COLUMNS = 6, 7
WINDOW_SCORES = np.array([0.0, 0.0, 1.0, 10.0, 0.0])  # by the mover's pieces in an open window (4 is a win)
_WIN = 1e6  # above any heuristic score (69 windows x 10)


def _won(pieces: int) -> bool:
    return any(pieces & line == line for line in _LINE_MASKS)


@cache
def _tictactoe_value(mine: int, theirs: int) -> int:
    """The value of a tic-tac-toe position for the mover under perfect play: positive a win, 0 a draw, negative
    a loss, the larger the sooner the game is won (``1 +`` the cells left empty at its end).

    :param mine: the mover's cells as bits (cell ``3 * row + col``).
    :param theirs: the opponent's cells as bits.
    """
    empty = [cell for cell in range(9) if not (mine | theirs) >> cell & 1]
    if _won(theirs):
        return -1 - len(empty)
    if not empty:
        return 0
    return max(-_tictactoe_value(theirs, mine | 1 << cell) for cell in empty)


def perfect_tictactoe(observation: np.ndarray, mask: np.ndarray, rng: np.random.Generator) -> int:
    """A move of greatest minimax value (a sooner win above a later one), at random among equally good ones.

    :param observation: the mover's view ``(3, 3, 2)``: its pieces, then the opponent's.
    :param mask: bool ``(9,)``, the legal moves (the empty cells).
    :param rng: the random generator, for ties.
    :return: the move, cell ``3 * row + col``.
    """
    board = np.asarray(observation).reshape(9, 2)
    mine, theirs = (int(sum(1 << cell for cell in np.flatnonzero(board[:, plane]))) for plane in (0, 1))
    legal = np.flatnonzero(mask)
    values = np.array([-_tictactoe_value(theirs, mine | 1 << int(cell)) for cell in legal])
    return int(rng.choice(legal[values == values.max()]))


_WINDOWS = board_lines(ROWS, COLUMNS, 4)  # the 69 four-cell windows, flat cell indices (69, 4)


def window_score(boards: np.ndarray) -> np.ndarray:
    """The window heuristic of boards for the side whose pieces are ``+1`` (the opponent's are ``-1``).

    :param boards: ``(n, 42)`` int8, row-major cells of the 6x7 board, row 0 the top.
    :return: ``(n,)`` float: open windows of the side scored by :data:`WINDOW_SCORES`, minus the opponent's.
    """
    cells = boards[:, _WINDOWS]  # (n, 69, 4)
    own, theirs = (cells == 1).sum(-1), (cells == -1).sum(-1)
    return (WINDOW_SCORES[own] * (theirs == 0) - WINDOW_SCORES[theirs] * (own == 0)).sum(-1)


def _scores(boards: np.ndarray, depth: int) -> np.ndarray:
    """Negamax scores of each column for the ``+1`` side of each board, ``-inf`` for a full column.

    Every board's seven children are made at once; the ones neither won nor full go one ply deeper together
    (as the opponent's boards, negated), or, at the horizon, are scored by :func:`window_score`.

    :param boards: ``(n, 42)`` int8, ``+1`` the side to move, ``-1`` the other, no four in a row yet.
    :param depth: plies to search, at least 1.
    :return: float ``(n, 7)``.
    """
    n = len(boards)
    row = (boards.reshape(n, ROWS, COLUMNS) == 0).sum(1) - 1  # where a piece dropped in each column lands
    legal = row >= 0
    children = np.repeat(boards[:, None, :], COLUMNS, axis=1)  # (n, 7, 42)
    cells = np.maximum(row, 0) * COLUMNS + np.arange(COLUMNS)
    np.put_along_axis(children, cells[..., None], 1, axis=2)  # a full column's child is dropped below
    children = children.reshape(n * COLUMNS, ROWS * COLUMNS)
    won = (children[:, _WINDOWS] == 1).all(-1).any(-1) & legal.reshape(-1)
    full = ~(children == 0).any(-1)
    scores = np.where(won, _WIN + depth, 0.0)  # a win now beats a win later; a full board draws
    going = legal.reshape(-1) & ~won & ~full
    if depth > 1:
        scores[going] = -_scores(-children[going], depth - 1).max(-1)
    else:  # the horizon: every leaf's window score at once
        scores[going] = window_score(children[going])
    scores[~legal.reshape(-1)] = -np.inf
    return scores.reshape(n, COLUMNS)


def negamax(depth: int) -> Player:
    """Connect Four's depth-``depth`` negamax player (see the module for the search and the heuristic).

    :param depth: plies searched, at least 1.
    :return: a player ``(observation (6, 7, 2), mask (7,), rng) -> column``; ties between equally scored
        columns are broken at random with ``rng``. It pickles (a worker process can play it).
    :raises ValueError: ``depth < 1``.
    """
    if depth < 1:
        raise ValueError(f"negamax(depth={depth}): search at least one ply (depth >= 1).")
    return Negamax(depth)


class Negamax(BatchPlayer):
    """:func:`negamax`'s player: a class rather than a closure, so that it pickles; it moves in many games at once
    (:meth:`batch`), one search over all their boards.

    :param depth: plies searched.
    """

    def __init__(self, depth: int) -> None:
        self.depth = depth
        self.__name__ = f"negamax_{depth}"

    def batch(self, views: np.ndarray, masks: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        """The best-scored legal column of each game, ties broken at random (:func:`~torchrl_mask.games.players.pick`).

        :param views: the movers' views ``(n, 6, 7, 2)``.
        :param masks: bool ``(n, 7)``, the legal columns.
        :param rng: breaks ties.
        :return: int64 ``(n,)``.
        :raises ValueError: views that are not Connect Four's.
        """
        views = np.asarray(views)
        if views.shape[1:] != (ROWS, COLUMNS, 2):
            raise ValueError(
                f"negamax plays Connect Four's (6, 7, 2) view; got {views.shape[1:]}. Use random_legal for other games."
            )
        boards = (views[..., 0].astype(np.int8) - views[..., 1].astype(np.int8)).reshape(len(views), -1)
        scores = _scores(boards, self.depth)
        scores[~np.asarray(masks, bool)] = -np.inf
        return pick(scores == scores.max(-1, keepdims=True), rng)
