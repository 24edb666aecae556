"""A perfect Connect Four player, where a solver is installed: ``bitbully``, an optional extra, never a dependency.

:func:`solver_player` scores every legal column of the mover's position exactly (BitBully's
``score_all_moves``: its 12-ply opening book, then a full search) on Pascal Pons' scale (positive a win, larger
the sooner; 0 a draw; negative a loss, larger the later) and plays a best one, ties broken at random with the
player's ``rng``. It never turns a won position into a draw or a loss, nor a drawn one into a loss; of two wins
it takes the sooner.

BitBully is licensed under the AGPL, so the package never imports it unless this player is asked for (``pip
install 'torchrl-mask[solver]'`` brings it); :mod:`~torchrl_mask.games.ladder` lists the player as Connect
Four's ``"solver"`` opponent only where it can be imported (:func:`solver_available`). Positions solved once are
remembered (up to :data:`CACHE_SIZE` of them): a deterministic model met in many games leads the solver through
the same positions again.

Example:
    >>> board = np.zeros((6, 7, 2), np.int8)
    >>> board[3:, 0, 0] = 1  # three of the mover's pieces in column 0
    >>> board[3:, 1, 1] = 1
    >>> solver_player()(board, np.ones(7, bool), np.random.default_rng(0))
    0
"""

from __future__ import annotations

import importlib.util
from functools import lru_cache
from typing import Any

import numpy as np

from torchrl_mask.games.players import BatchPlayer, pick

__all__ = ["CACHE_SIZE", "INSTALL", "SolverPlayer", "solved_scores", "solver_available", "solver_player"]

INSTALL = "pip install 'torchrl-mask[solver]'"
CACHE_SIZE = 2**18  # positions remembered (a few tens of MB)
_NO_MOVE = -(2**31)  # a full column's score: below every move's


def solver_available() -> bool:
    """Whether ``bitbully`` can be imported (found, not imported: the check loads no AGPL code).

    :return: True where :func:`solver_player` works.
    """
    return importlib.util.find_spec("bitbully") is not None


@lru_cache(maxsize=1)
def _agent() -> Any:
    """BitBully's solver with its default opening book, loaded once per process."""
    try:
        import bitbully
    except ImportError as err:
        raise ImportError(f"the perfect Connect Four player needs the BitBully solver: {INSTALL}") from err
    return bitbully.BitBully()


@lru_cache(maxsize=CACHE_SIZE)
def _scores(columns: bytes) -> tuple[int, ...]:
    """Every column's exact score of the position whose columns (bottom first, 1 the first seat's pieces, 2 the
    second's) are the ``(7, 6)`` int8 bytes ``columns``; :data:`_NO_MOVE` for a full column."""
    import bitbully

    board = bitbully.Board(np.frombuffer(columns, np.int8).reshape(7, 6).tolist())
    scores = _agent().score_all_moves(board)
    return tuple(int(scores.get(column, _NO_MOVE)) for column in range(7))


def solved_scores(view: np.ndarray) -> np.ndarray:
    """Every column's exact score for the mover of a Connect Four view (Pons' scale), the lowest int32 where full.

    :param view: int8 ``(6, 7, 2)``, the mover's view (plane 0 its pieces, row 0 the top).
    :return: int64 ``(7,)``.
    :raises ImportError: bitbully is not installed (the message says how to install it).
    """
    view = np.asarray(view)
    mine, theirs = view[..., 0] != 0, view[..., 1] != 0
    first = mine.sum() == theirs.sum()  # the mover is the first seat when both have played as many pieces
    own, other = (1, 2) if first else (2, 1)
    board = np.where(mine, own, np.where(theirs, other, 0)).astype(np.int8)
    return np.array(_scores(board[::-1].T.tobytes()), dtype=np.int64)


class SolverPlayer(BatchPlayer):
    """:func:`solver_player`'s player: a best-scored legal column, ties broken at random. It pickles (the solver
    is loaded in each process that uses it)."""

    __name__ = "solver"

    def batch(self, views: np.ndarray, masks: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        """:param views: the movers' views ``(n, 6, 7, 2)``.
        :param masks: bool ``(n, 7)``, the legal columns.
        :param rng: breaks ties between equally scored columns.
        :return: int64 ``(n,)``.
        :raises ValueError: views that are not Connect Four's.
        :raises ImportError: bitbully is not installed.
        """
        views = np.asarray(views)
        if views.shape[1:] != (6, 7, 2):
            raise ValueError(f"the solver plays Connect Four's (6, 7, 2) view; got {views.shape[1:]}.")
        scores = np.stack([solved_scores(view) for view in views]).astype(np.float64)
        scores[~np.asarray(masks, bool)] = -np.inf
        return pick(scores == scores.max(-1, keepdims=True), rng)


def solver_player() -> SolverPlayer:
    """Connect Four's perfect player (see the module).

    :return: a player ``(observation (6, 7, 2), mask (7,), rng) -> column``.
    :raises ImportError: bitbully is not installed; the message names ``pip install 'torchrl-mask[solver]'``.
    """
    _agent()
    return SolverPlayer()
