"""One loop plays any players of a turn-based game against each other, seat by seat, many games side by side.

:func:`play_games` plays over PettingZoo's AEC API (``agents``, ``last``, ``step``), each player moving in all the
games that wait on it at once; a player is a function ``(observation, mask, rng) -> action``
(:mod:`~torchrl_mask.games.players`, :mod:`~torchrl_mask.games.search`, a trained model's
:func:`~torchrl_mask.games.evaluation.model_player`). The evaluated player takes each seat in turn, game by game; a
game may end before it ever moves (a poker opponent folds first), and counts. Its records are what
:mod:`~torchrl_mask.games.evaluation` summarises.

Example:
    >>> from torchrl_mask.games.players import random_legal
    >>> records = play_games("tictactoe_v3", random_legal, random_legal, games=4, seed=0)
    >>> [record.seat for record in records], records[0].illegal.tolist()
    ([0, 1, 0, 1], [0, 0])
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from torchrl_mask.games.env import SEED_RANGE, make_game
from torchrl_mask.games.players import Player, moves

__all__ = ["GameRecord", "play_games", "seated"]


@dataclass
class GameRecord:
    """One game of :func:`play_games`.

    :param seat: the evaluated player's seat index (``possible_agents`` order).
    :param returns: every seat's return (the sum of its rewards over the game), ``(n_seats,)``.
    :param moves: every seat's moves, ``(n_seats,)``.
    :param illegal: every seat's illegal moves, ``(n_seats,)`` (PettingZoo ends the game at the first).
    """

    seat: int
    returns: np.ndarray
    moves: np.ndarray
    illegal: np.ndarray


def seated(player: Player) -> Player:
    """``player`` taking a seat in a new game: a fresh copy of a stateful one (a recurrent model's
    :class:`~torchrl_mask.games.evaluation.RecurrentPlayer`), else itself.

    :param player: a player.
    :return: the player for one seat of one game.
    """
    fresh = getattr(player, "fresh", None)
    return fresh() if callable(fresh) else player


@dataclass
class _Table:
    """A game in play: its env, its number, the seats' players and counts so far."""

    env: Any
    number: int
    seat: int
    seating: list[Player]
    returns: np.ndarray
    moves: np.ndarray
    illegal: np.ndarray

    def turn(self, seats: list[str]) -> tuple[int, np.ndarray, np.ndarray] | None:
        """Play to the next seat to move, adding up rewards: its index, view and mask, or None once the game is over."""
        env = self.env
        while env.agents:  # AEC's agent_iter, one agent at a time
            observation, reward, terminated, truncated, _ = env.last()
            index = seats.index(env.agent_selection)
            self.returns[index] += float(reward)
            if not (terminated or truncated):
                return index, np.asarray(observation["observation"]), np.asarray(observation["action_mask"], bool)
            env.step(None)
        return None


def play_games(
    game: str | Any, player: Player, opponent: Player | None, games: int, seed: int, side_by_side: int = 64
) -> list[GameRecord]:
    """Play ``player`` against ``opponent`` in every other seat, ``games`` times, the player's seat in turn.

    Game ``i`` seats the player at ``i % n_seats`` (each seat the same share of the games), the opponent in the
    others. Up to ``side_by_side`` games are played at once, each in its own AEC env, each up to its next move, and
    a player then moves in all the games that wait on it in one call (:func:`~torchrl_mask.games.players.moves`:
    one ``predict`` for a model, one search for a :class:`~torchrl_mask.games.players.BatchPlayer`). The deals come
    first from one generator seeded by ``seed``, then the players' random choices: one seed, the same records.

    :param game: a ``pettingzoo.classic`` game's name, or an AEC env (:func:`~torchrl_mask.games.env.make_game`;
        its games are played one at a time).
    :param player: the evaluated player.
    :param opponent: the other seats' player; None: ``player`` itself (a cooperative game's partners).
    :param games: games to play.
    :param seed: seeds the games and the players.
    :param side_by_side: games in play at once (1: one after the other).
    :return: one record per game, in the games' order.
    """
    first, rng = make_game(game), np.random.default_rng(seed)
    deals = rng.integers(SEED_RANGE, size=games)
    seats = list(first.possible_agents)
    width = min(games, max(side_by_side, 1) if isinstance(game, str) else 1)
    envs = [first, *(make_game(game) for _ in range(width - 1))]

    def deal(env: Any, number: int) -> _Table:
        seat, n = number % len(seats), len(seats)
        seating = [seated(player if s == seat or opponent is None else opponent) for s in range(n)]
        env.reset(seed=int(deals[number]))
        return _Table(env, number, seat, seating, np.zeros(n), np.zeros(n, int), np.zeros(n, int))

    tables, dealt, records = [deal(env, number) for number, env in enumerate(envs)], width, {}
    while tables:
        waiting: dict[int, list[tuple[_Table, int, np.ndarray, np.ndarray]]] = {}  # by player, in the envs' order
        in_play = []
        for table in tables:
            turn = table.turn(seats)
            while turn is None:  # over: its record, and the env deals the next game
                records[table.number] = GameRecord(table.seat, table.returns, table.moves, table.illegal)
                if dealt == games:
                    break
                table, dealt = deal(table.env, dealt), dealt + 1
                turn = table.turn(seats)
            if turn is not None:
                waiting.setdefault(id(table.seating[turn[0]]), []).append((table, *turn))
                in_play.append(table)
        tables = in_play
        for group in waiting.values():
            mover = group[0][0].seating[group[0][1]]
            actions = moves(mover, np.stack([view for *_, view, _ in group]), np.stack([m for *_, m in group]), rng)
            for (table, index, _, mask), action in zip(group, actions.tolist(), strict=True):
                table.illegal[index] += int(not 0 <= action < len(mask) or not mask[action])
                table.moves[index] += 1
                table.env.step(action)  # an illegal move is played: the classic games end the game, a loss for it
    return [records[number] for number in range(games)]
