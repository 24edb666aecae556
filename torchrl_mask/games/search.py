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

from torchrl_mask.games.players import Player

__all__ = ["WINDOW_SCORES", "Negamax", "negamax", "perfect_tictactoe"]

_LINES = np.array([[0, 1, 2], [3, 4, 5], [6, 7, 8], [0, 3, 6], [1, 4, 7], [2, 5, 8], [0, 4, 8], [2, 4, 6]])
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


def _windows() -> np.ndarray:
    """The 69 four-cell windows of the 6x7 board, as flat cell indices ``(69, 4)``."""
    windows = []
    for dr, dc in ((0, 1), (1, 0), (1, 1), (1, -1)):
        for row in range(ROWS):
            for col in range(COLUMNS):
                cells = [(row + i * dr, col + i * dc) for i in range(4)]
                if all(0 <= r < ROWS and 0 <= c < COLUMNS for r, c in cells):
                    windows.append([r * COLUMNS + c for r, c in cells])
    return np.array(windows)


_WINDOWS = _windows()
_CELL_WINDOWS = [_WINDOWS[np.isin(_WINDOWS, cell).any(axis=1)] for cell in range(ROWS * COLUMNS)]


def window_score(boards: np.ndarray) -> np.ndarray:
    """The window heuristic of boards for the side whose pieces are ``+1`` (the opponent's are ``-1``).

    :param boards: ``(n, 42)`` int8, row-major cells of the 6x7 board, row 0 the top.
    :return: ``(n,)`` float: open windows of the side scored by :data:`WINDOW_SCORES`, minus the opponent's.
    """
    cells = boards[:, _WINDOWS]  # (n, 69, 4)
    own, theirs = (cells == 1).sum(-1), (cells == -1).sum(-1)
    return (WINDOW_SCORES[own] * (theirs == 0) - WINDOW_SCORES[theirs] * (own == 0)).sum(-1)


def _drop(board: np.ndarray, column: int) -> int:
    """The flat cell a piece dropped in ``column`` lands on (the column is not full)."""
    row = int(np.flatnonzero(board[column::COLUMNS] == 0)[-1])
    return row * COLUMNS + column


def _scores(board: np.ndarray, depth: int) -> np.ndarray:
    """Negamax scores of each column for the ``+1`` side, ``-inf`` for a full column; ``(7,)``."""
    scores = np.full(COLUMNS, -np.inf)
    open_columns = np.flatnonzero(board[:COLUMNS] == 0)
    children = []
    for column in open_columns:
        cell = _drop(board, int(column))
        child = board.copy()
        child[cell] = 1
        if (child[_CELL_WINDOWS[cell]] == 1).all(axis=1).any():
            scores[column] = _WIN + depth  # a win now beats a win later
        elif not (child == 0).any():
            scores[column] = 0.0
        elif depth > 1:
            scores[column] = -float(_scores(-child, depth - 1).max())
        else:
            children.append((column, child))
    if children:  # the horizon: every leaf's window score at once
        columns, boards = zip(*children, strict=True)
        scores[list(columns)] = window_score(np.stack(boards))
    return scores


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


class Negamax:
    """:func:`negamax`'s player: a class rather than a closure, so that it pickles.

    :param depth: plies searched.
    """

    def __init__(self, depth: int) -> None:
        self.depth = depth
        self.__name__ = f"negamax_{depth}"

    def __call__(self, observation: np.ndarray, mask: np.ndarray, rng: np.random.Generator) -> int:
        """The best-scored legal column, ties broken at random.

        :param observation: the mover's view ``(6, 7, 2)``.
        :param mask: bool ``(7,)``, the legal columns.
        :param rng: breaks ties.
        :return: the column.
        :raises ValueError: a view that is not Connect Four's.
        """
        view = np.asarray(observation)
        if view.shape != (ROWS, COLUMNS, 2):
            raise ValueError(
                f"negamax plays Connect Four's (6, 7, 2) view; got {view.shape}. Use random_legal for other games."
            )
        board = (view[..., 0].astype(np.int8) - view[..., 1].astype(np.int8)).reshape(-1)
        scores = _scores(board, self.depth)
        scores[~np.asarray(mask, bool)] = -np.inf
        return int(rng.choice(np.flatnonzero(scores == scores.max())))
