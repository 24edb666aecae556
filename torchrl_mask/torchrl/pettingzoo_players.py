"""Fixed players of turn-based games, and one seat of a game as a gymnasium env to evaluate a policy on.

- :func:`random_legal`: a uniformly random legal move;
- :func:`one_ply_heuristic`: win now if possible, else block the opponent's immediate win, else random legal
  (``tictactoe_v3`` and ``connect_four_v3``, told apart by their board's shape);
- :class:`SeatEnv`: one seat of a PettingZoo AEC game as a gymnasium env with ``action_masks()``, the other seats
  played by a fixed player; its episode return is the seat's result (+1 win, 0 draw, -1 loss in the classic
  games). It is the env a self-play ``MaskablePPO`` is built on (for its spaces) and evaluated on with
  sb3-contrib's ``evaluate_policy``; :func:`board_text` prints its board.

A player is a function ``(observation, mask, rng) -> action`` of the mover's own view (``observation[..., 0]`` its
pieces, ``observation[..., 1]`` the opponent's, as the classic games lay them out), its bool mask and a
``numpy.random.Generator``.

Example:
    >>> env = SeatEnv("tictactoe_v3", opponent="heuristic", seat=0)
    >>> observation, _ = env.reset(seed=0)
    >>> observation.shape, env.action_masks().sum()
    ((3, 3, 2), np.int64(9))
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, SupportsFloat

import gymnasium as gym
import numpy as np

from torchrl_mask.torchrl.pettingzoo import _game_spaces, make_game

__all__ = ["PLAYERS", "Player", "SeatEnv", "board_text", "one_ply_heuristic", "random_legal"]

Player = Callable[[np.ndarray, np.ndarray, np.random.Generator], int]
# board shape -> (pieces in a row that win, whether a move drops to the lowest empty row of its column)
_RULES = {(3, 3): (3, False), (6, 7): (4, True)}
_DIRECTIONS = ((0, 1), (1, 0), (1, 1), (1, -1))


def random_legal(observation: np.ndarray, mask: np.ndarray, rng: np.random.Generator) -> int:
    """A uniformly random legal move.

    :param observation: the mover's view (unused).
    :param mask: bool ``(n_actions,)``, the legal moves.
    :param rng: the random generator.
    :return: the move.
    """
    return int(rng.choice(np.flatnonzero(mask)))


def _cell(board: np.ndarray, action: int, drops: bool) -> tuple[int, int]:
    """Where ``action`` puts a piece: the lowest empty row of column ``action``, or cell ``action`` row-major."""
    if drops:
        empty = np.flatnonzero(board.sum(axis=-1)[:, action] == 0)
        return int(empty[-1]), action
    rows, cols = divmod(action, board.shape[1])
    return rows, cols


def _completes(plane: np.ndarray, row: int, col: int, needed: int) -> bool:
    """Whether a piece at ``(row, col)`` gives ``needed`` in a row on ``plane`` (the player's pieces)."""
    height, width = plane.shape
    for dr, dc in _DIRECTIONS:
        count = 1
        for sign in (1, -1):
            r, c = row + sign * dr, col + sign * dc
            while 0 <= r < height and 0 <= c < width and plane[r, c]:
                count, r, c = count + 1, r + sign * dr, c + sign * dc
        if count >= needed:
            return True
    return False


def one_ply_heuristic(observation: np.ndarray, mask: np.ndarray, rng: np.random.Generator) -> int:
    """Win now if a move wins, else block the opponent's immediate win, else a random legal move.

    :param observation: the mover's view ``(rows, cols, 2)``: its pieces, then the opponent's.
    :param mask: bool ``(n_actions,)``, the legal moves.
    :param rng: the random generator (for the random fallback).
    :return: the move.
    :raises ValueError: a board that is neither tic-tac-toe's ``(3, 3)`` nor Connect Four's ``(6, 7)``.
    """
    board = np.asarray(observation)
    rules = _RULES.get(board.shape[:2])
    if rules is None:
        raise ValueError(
            f"one_ply_heuristic knows tic-tac-toe (3, 3) and Connect Four (6, 7) boards; got {board.shape[:2]}. "
            "Use random_legal, or a player of your own, for other games."
        )
    needed, drops = rules
    legal = np.flatnonzero(mask)
    for plane in (0, 1):  # a winning move first, then a blocking one
        for action in legal:
            if _completes(board[..., plane], *_cell(board, int(action), drops), needed):
                return int(action)
    return int(rng.choice(legal))


PLAYERS: dict[str, Player] = {"random": random_legal, "heuristic": one_ply_heuristic}


def board_text(observation: np.ndarray, marks: str = "XO") -> str:
    """A board as text: ``marks[0]`` for the view's own pieces, ``marks[1]`` for the opponent's, ``.`` empty.

    :param observation: a view ``(rows, cols, 2)``.
    :param marks: the two players' marks.
    :return: one line per row.
    """
    board = np.asarray(observation)
    cells = np.where(board[..., 0] > 0, marks[0], np.where(board[..., 1] > 0, marks[1], "."))
    return "\n".join(" ".join(row) for row in cells)


class SeatEnv(gym.Env):
    """One seat of a PettingZoo AEC game as a gymnasium env; the other seats are played by ``opponent``.

    The observation is the seat's own view (the game's ``"observation"`` entry), ``action_masks()`` its legal
    moves, the reward its own (summed over the opponents' replies), the episode one game. An illegal move is
    counted in :attr:`illegal_moves` and played: PettingZoo's classic games end the game with a loss for it.

    :param game: an AEC env, or a ``pettingzoo.classic`` game's name
        (:func:`~torchrl_mask.torchrl.pettingzoo.make_game`).
    :param opponent: ``"random"`` (:func:`random_legal`), ``"heuristic"`` (:func:`one_ply_heuristic`) or a
        :data:`Player`.
    :param seat: the seat's index in ``possible_agents``; None alternates the seats, game by game.
    :raises ValueError: an unknown opponent name, or a game :class:`~torchrl_mask.TurnBasedEnv` refuses.
    """

    metadata: dict[str, Any] = {"render_modes": []}  # noqa: RUF012  (gymnasium's own annotation)

    def __init__(self, game: str | Any, opponent: str | Player = "random", seat: int | None = None) -> None:
        self.game = make_game(game)
        self.observation_space, self.action_space = _game_spaces(self.game)
        if isinstance(opponent, str):
            if opponent not in PLAYERS:
                raise ValueError(f"opponent={opponent!r} is not a player; use one of {sorted(PLAYERS)} or a function.")
            opponent = PLAYERS[opponent]
        self.opponent: Player = opponent
        self.seat = seat
        self.illegal_moves = 0
        self._games = 0
        self._me = self.game.possible_agents[0]

    def _over(self) -> bool:
        return all(self.game.terminations.values()) or all(self.game.truncations.values())

    def _others_play(self) -> float:
        """The other seats' moves until this seat is to move or the game is over; this seat's reward from them."""
        reward = 0.0
        while not self._over() and self.game.agent_selection != self._me:
            view = self.game.observe(self.game.agent_selection)
            self.game.step(self.opponent(view["observation"], np.asarray(view["action_mask"], bool), self.np_random))
            reward += float(self.game.rewards[self._me])
        return reward

    def _observation(self) -> np.ndarray:
        return np.asarray(self.game.observe(self._me)["observation"])

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[np.ndarray, dict]:
        """Start a game; the opponent moves first where it has the first seat.

        :param seed: seeds the game and the opponent's generator.
        :param options: unused.
        :return: the seat's first observation and an empty info.
        """
        super().reset(seed=seed)
        self.game.reset(seed=seed)
        seats = self.game.possible_agents
        self._me = seats[self._games % len(seats) if self.seat is None else self.seat]
        self._games += 1
        self._others_play()
        return self._observation(), {}

    def step(self, action: Any) -> tuple[np.ndarray, SupportsFloat, bool, bool, dict[str, Any]]:
        """Play the seat's move, then the opponents' replies.

        :param action: the move.
        :return: observation, reward, terminated, truncated, ``{"illegal_move": bool}``.
        """
        move = int(np.asarray(action).reshape(()))
        illegal = not self.action_masks()[move]
        self.illegal_moves += int(illegal)
        self.game.step(move)
        reward = float(self.game.rewards[self._me]) + self._others_play()
        terminated = all(self.game.terminations.values())
        truncated = not terminated and self._over()
        return self._observation(), reward, terminated, truncated, {"illegal_move": illegal}

    def action_masks(self) -> np.ndarray:
        """The seat's legal moves now, bool ``(n_actions,)`` (sb3-contrib's convention)."""
        return np.asarray(self.game.observe(self._me)["action_mask"], dtype=bool)
