"""Many games of Connect Four or tic-tac-toe stepped together in numpy arrays, under PettingZoo's own rules.

:class:`TurnBasedEnv <torchrl_mask.games.env.TurnBasedEnv>` plays ``N`` games side by side; through PettingZoo's AEC
env that is ``N`` Python calls a move (``step``, then ``observe``, each through three wrappers), a large part of a
collected move's cost (docs/benchmarks.md, "Self-play speed, where the time goes", measures both ways).
:class:`BoardGames` keeps the ``N`` boards as one int8 array and plays a move in every game at once: the piece
dropped (Connect Four) or placed (tic-tac-toe), the lines through it checked for a win, the full boards for a draw,
and every game's next view and mask written as whole arrays.

It is PettingZoo's game, not a variant: ``connect_four_v3`` and ``tictactoe_v3`` as their modules define them, with
the same views (the mover's pieces in plane 0, the opponent's in plane 1, int8), masks (the mover's legal moves,
also after a game's last move), rewards (+1 to the mover that completes a line, -1 to the other seat, on that move)
and ends (a line or a full board); the mover alternates after every move, a game's last included, as in both
modules. ``tests/test_boards.py`` plays random games through both and compares every move's entries, and a seeded
self-play run trains to the same weights through either (``TurnBasedEnv(engine=...)``).

Example:
    >>> games = BoardGames("connect_four_v3", 2)
    >>> games.reset(np.array([0, 1]))
    >>> rewards, ended = games.step(np.array([3, 3]))
    >>> games.views()[0][:, 5, 3].tolist(), games.views()[1].sum(axis=1).tolist()
    ([[0, 1], [0, 1]], [7, 7])
"""

from __future__ import annotations

import numpy as np

from torchrl_mask.games.players import board_lines

__all__ = ["BOARD_GAMES", "BoardGames", "check_openings", "opening_limit"]

# game -> (height, width, the cells in a winning line, whether a move drops to the lowest empty row of a column)
BOARD_GAMES: dict[str, tuple[int, int, int, bool]] = {
    "connect_four_v3": (6, 7, 4, True),
    "tictactoe_v3": (3, 3, 3, False),
}


def opening_limit(game: str) -> int:
    """The most moves that can open a game of :data:`BOARD_GAMES` without ending it: no seat can complete a line
    before its ``length``-th piece, so ``2 * (length - 1)`` moves (6 in Connect Four, 4 in tic-tac-toe) never do.

    :param game: ``"connect_four_v3"`` or ``"tictactoe_v3"``.
    :raises ValueError: a game without arrays here.
    """
    if game not in BOARD_GAMES:
        raise ValueError(f"{game!r} has no numpy boards; those are for {sorted(BOARD_GAMES)}.")
    return 2 * (BOARD_GAMES[game][2] - 1)


def check_openings(game: str, openings: int, option: str = "openings=") -> int:
    """``openings`` if random openings that long cannot end ``game``: a game of :data:`BOARD_GAMES` (whose openings
    can be bounded), at most :func:`opening_limit` moves.

    :param game: the game's name (``"connect_four_v3"``).
    :param openings: the most random moves that open a game; 0 for none.
    :param option: how the caller's user writes the value before it (``"openings="``, ``"--openings "``), for the
        message.
    :return: ``openings``.
    :raises ValueError: a game without numpy boards, or more moves than :func:`opening_limit`; the message names the
        fix.
    """
    if openings and game not in BOARD_GAMES:
        raise ValueError(
            f"{option}{openings}: random openings are for {' and '.join(sorted(BOARD_GAMES))}, whose openings can be "
            f"kept short of any game's end; {game} has none; use {option}0."
        )
    if openings and not 0 <= openings <= (limit := opening_limit(game)):
        raise ValueError(
            f"{option}{openings}: give 0 to {limit} moves; past {limit}, a random move can end a game of {game}."
        )
    return openings


class BoardGames:
    """``n`` games of one board game of :data:`BOARD_GAMES`, each move played in all of them by array operations.

    Cells are numbered ``row * width + col`` from the top left, as both games' observations lay them out; a cell
    holds 0 (empty), 1 (the first seat's piece) or 2 (the second's). An action is a column (Connect Four) or a cell
    (tic-tac-toe), as in PettingZoo.

    :param game: ``"connect_four_v3"`` or ``"tictactoe_v3"``.
    :param n: the games.
    :raises ValueError: a game without arrays here (:class:`~torchrl_mask.games.env.TurnBasedEnv` plays it through
        PettingZoo's own env).
    """

    def __init__(self, game: str, n: int) -> None:
        if game not in BOARD_GAMES:
            raise ValueError(f"{game!r} has no numpy boards; those are for {sorted(BOARD_GAMES)}.")
        self.height, self.width, length, self.drops = BOARD_GAMES[game]
        size = self.height * self.width
        self.n = n
        # one more cell, always empty, that pads each cell's list of lines to the same length
        self.cells = np.zeros((n, size + 1), dtype=np.int8)
        self.mover = np.zeros(n, dtype=np.int64)  # the seat to move, 0 or 1
        lines = board_lines(self.height, self.width, length)
        through = [np.flatnonzero((lines == cell).any(axis=1)) for cell in range(size)]
        widest = max(len(found) for found in through)
        padded = np.vstack([lines, np.full((1, length), size)])  # line -1: the empty padding cell
        # (size, widest, length): the cells of each line through each cell
        self._through = np.stack(
            [padded[np.pad(found, (0, widest - len(found)), constant_values=-1)] for found in through]
        )
        self._rows = np.arange(n)

    @classmethod
    def from_views(cls, game: str, views: np.ndarray) -> BoardGames:
        """The games whose movers see ``views``: the position each view shows, its mover to move.

        A view tells its mover's seat: the first seat moves when both seats have played as many pieces, the second
        when the opponent has one more (both games alternate from the first seat).

        :param game: ``"connect_four_v3"`` or ``"tictactoe_v3"``.
        :param views: int8 ``(n, height, width, 2)``, the movers' views (plane 0 the mover's pieces).
        :return: ``n`` games in those positions.
        """
        views = np.asarray(views)
        games = cls(game, len(views))
        mine, theirs = views[..., 0] != 0, views[..., 1] != 0
        games.mover[:] = mine.sum((1, 2)) != theirs.sum((1, 2))
        own = (games.mover + 1).astype(np.int8)[:, None, None]
        games.cells[:, :-1] = np.where(mine, own, np.where(theirs, 3 - own, 0)).reshape(len(views), -1)
        return games

    def copy(self) -> BoardGames:
        """The same games in the same positions, their arrays copied (a search explores one without the other)."""
        twin = object.__new__(BoardGames)
        twin.__dict__.update(self.__dict__)
        twin.cells, twin.mover = self.cells.copy(), self.mover.copy()
        return twin

    @property
    def board(self) -> np.ndarray:
        """The boards' cells, int8 ``(n, height, width)``: 0 empty, 1 and 2 the seats' pieces (a view)."""
        return self.cells[:, :-1].reshape(self.n, self.height, self.width)

    def reset(self, rows: np.ndarray) -> None:
        """Empty the boards of ``rows``, the first seat to move.

        :param rows: int ``(k,)``, the games to deal afresh.
        """
        self.cells[rows] = 0
        self.mover[rows] = 0

    def play(self, row: int, action: int) -> None:
        """Play ``action`` in game ``row`` alone, then pass its move to the other seat; no line is checked (an
        opening's move: :func:`opening_limit`).

        :param row: the game.
        :param action: a legal column (Connect Four) or empty cell (tic-tac-toe) of that game.
        """
        cell = action
        if self.drops:  # the lowest empty cell of the column
            cell = (int(np.count_nonzero(self.board[row, :, action] == 0)) - 1) * self.width + action
        self.cells[row, cell] = self.mover[row] + 1
        self.mover[row] = 1 - self.mover[row]

    def legal(self) -> np.ndarray:
        """The legal moves of every game, bool ``(n, n_actions)``: the columns whose top cell is empty (Connect
        Four), the empty cells (tic-tac-toe)."""
        return self.cells[:, : self.width] == 0 if self.drops else self.cells[:, :-1] == 0

    def views(self) -> tuple[np.ndarray, np.ndarray]:
        """Every game's view for its mover and the mover's legal moves.

        :return: int8 ``(n, height, width, 2)`` (plane 0 the mover's pieces, plane 1 the opponent's) and bool
            ``(n, n_actions)``.
        """
        board = self.board
        mine = (self.mover + 1).astype(np.int8)[:, None, None]
        view = np.stack([board == mine, (board != 0) & (board != mine)], axis=-1).astype(np.int8)
        return view, self.legal()

    def step(self, actions: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Play ``actions`` (legal ones: not checked here) in every game, then pass the move to the other seat.

        :param actions: int ``(n,)``, a column or cell per game.
        :return: every seat's reward from the move, float32 ``(n, 2)`` (+1 the mover and -1 the other for a
            completed line, else 0), and whether it ended the game, bool ``(n,)``.
        """
        rows, piece = self._rows, (self.mover + 1).astype(np.int8)
        if self.drops:  # the lowest empty cell of the column: below every filled one
            column = self.board[rows, :, actions]
            cell = (np.count_nonzero(column == 0, axis=1) - 1) * self.width + actions
        else:
            cell = actions
        self.cells[rows, cell] = piece
        lines = self.cells[rows[:, None, None], self._through[cell]]  # (n, widest, length)
        won = (lines == piece[:, None, None]).all(axis=2).any(axis=1)
        full = (self.cells[:, :-1] != 0).all(axis=1)
        rewards = np.zeros((self.n, 2), dtype=np.float32)
        winners = rows[won]
        rewards[winners, self.mover[won]], rewards[winners, 1 - self.mover[won]] = 1.0, -1.0
        self.mover = 1 - self.mover
        return rewards, won | full
