"""One seat of a turn-based game as a gymnasium env, the other seats played by a fixed player.

:class:`SeatEnv` has ``action_masks()`` (sb3-contrib's convention); its episode return is the seat's result (+1
win, 0 draw, -1 loss in the classic games). It is the env a self-play ``MaskablePPO`` is built on (for its spaces)
and a way to train or test one seat against a fixed player. (The evaluation plays whole games through its own
loop, :mod:`torchrl_mask.games.evaluation`, which also counts games that end before a seat moves.)

A game can end before the seat ever moves (in poker the opponent may fold first): :meth:`reset` then deals the
next game, seeded by the env's own generator, until the seat has a move, and counts the games it passed over in
:attr:`games_over_before_moving` (their returns are not the episode's).

Example:
    >>> env = SeatEnv("tictactoe_v3", opponent="heuristic", seat=0)
    >>> observation, _ = env.reset(seed=0)
    >>> observation.shape, env.action_masks().sum()
    ((3, 3, 2), np.int64(9))
"""

from __future__ import annotations

from typing import Any, SupportsFloat

import gymnasium as gym
import numpy as np

from torchrl_mask.games.env import SEED_RANGE, game_seed, game_spaces, make_game
from torchrl_mask.games.players import PLAYERS, Player

__all__ = ["SeatEnv"]

MAX_DEALS = 1000  # games in a row that may end before the seat moves, before reset gives up


class SeatEnv(gym.Env):
    """One seat of a PettingZoo AEC game as a gymnasium env; the other seats are played by ``opponent``.

    The observation is the seat's own view (the game's ``"observation"`` entry), ``action_masks()`` its legal
    moves, the reward its own (summed over the opponents' replies), the episode one game. An illegal move is
    counted in :attr:`illegal_moves` and played: PettingZoo's classic games end the game with a loss for it.

    :param game: an AEC env, or a ``pettingzoo.classic`` game's name
        (:func:`~torchrl_mask.games.env.make_game`).
    :param opponent: ``"random"`` (:func:`random_legal`), ``"heuristic"`` (:func:`one_ply_heuristic`) or a
        :data:`Player`.
    :param seat: the seat's index in ``possible_agents``; None alternates the seats, game by game.
    :raises ValueError: an unknown opponent name, or a game :class:`~torchrl_mask.TurnBasedEnv` refuses.
    """

    metadata: dict[str, Any] = {"render_modes": []}  # noqa: RUF012  (gymnasium's own annotation)

    def __init__(self, game: str | Any, opponent: str | Player = "random", seat: int | None = None) -> None:
        self.game = make_game(game)
        self.observation_space, self.action_space = game_spaces(self.game)
        if isinstance(opponent, str):
            if opponent not in PLAYERS:
                raise ValueError(f"opponent={opponent!r} is not a player; use one of {sorted(PLAYERS)} or a function.")
            opponent = PLAYERS[opponent]
        self.opponent: Player = opponent
        self.seat = seat
        self.illegal_moves = 0
        self.games_over_before_moving = 0
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
        :raises RuntimeError: :data:`MAX_DEALS` games in a row ended before the seat could move.
        """
        super().reset(seed=seed)
        self.game.reset(seed=game_seed(seed))
        seats = self.game.possible_agents
        self._me = seats[self._games % len(seats) if self.seat is None else self.seat]
        self._games += 1
        self._others_play()
        for _ in range(MAX_DEALS):
            if not self._over():
                return self._observation(), {}
            self.games_over_before_moving += 1  # the game ended before this seat moved: deal the next one
            self.game.reset(seed=int(self.np_random.integers(SEED_RANGE)))
            self._others_play()
        raise RuntimeError(
            f"{MAX_DEALS} games in a row ended before {self._me} moved: the seat never gets a move against this "
            "opponent; evaluate it with torchrl_mask.games.evaluation.play_games, which counts such games."
        )

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
