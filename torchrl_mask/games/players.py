"""Fixed players of turn-based games: functions ``(observation, mask, rng) -> action``.

- :func:`random_legal`: a uniformly random legal move;
- :func:`one_ply_heuristic`: win now if possible, else block the opponent's immediate win, else random legal
  (``tictactoe_v3`` and ``connect_four_v3``, told apart by their board's shape);
- :func:`leduc_rule_v2`: rlcard's rule-based Leduc hold'em agent, ``LeducHoldemRuleAgentV2``, as shipped;
- :func:`board_text`: a board as text.

A player is a function of the mover's own view (``observation[..., 0]`` its pieces, ``observation[..., 1]`` the
opponent's, as the classic games lay them out), its bool mask and a ``numpy.random.Generator``; one evaluation loop
(:class:`~torchrl_mask.games.seat_env.SeatEnv`) pits any of them against a trained model.

Example:
    >>> board = np.zeros((3, 3, 2), np.int8)
    >>> board[0, :2, 1] = 1  # the opponent threatens the top row
    >>> one_ply_heuristic(board, ~board.any(-1).reshape(-1), np.random.default_rng(0))
    2
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

__all__ = ["PLAYERS", "Player", "board_text", "leduc_rule_v2", "one_ply_heuristic", "random_legal"]

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


_LEDUC_ACTIONS = ("call", "raise", "fold", "check")  # rlcard's order, PettingZoo's action indices
_LEDUC_RANKS = "JQK"


def leduc_rule_v2(observation: np.ndarray, mask: np.ndarray, rng: np.random.Generator) -> int:
    """rlcard's ``LeducHoldemRuleAgentV2`` (``rlcard.models.leducholdem_rule_models``), unchanged, on a seat's view.

    The agent reads rlcard's raw state: the hand and the public card as strings (suit, then rank) and the legal
    actions by name. The view (``leduc_holdem_v4``'s 36 numbers: the hand's rank one-hot, then the public card's)
    gives the ranks; the suit is given as spades, which the agent only compares by position. As shipped, before the
    public card the agent tests ``hand[0]``, the suit, for a king or a queen, so it folds every hand there (it
    checks and raises only after the public card, on a pair); it is the rule agent rlcard ships, kept as is.

    :param observation: the seat's view, ``(36,)``.
    :param mask: bool ``(4,)``, the legal moves (call, raise, fold, check).
    :param rng: unused (the agent is deterministic).
    :return: the move.
    :raises ImportError: rlcard is not installed (``pip install "pettingzoo[classic]"`` brings it).
    """
    from rlcard.models.leducholdem_rule_models import LeducHoldemRuleAgentV2

    view = np.asarray(observation).reshape(-1)
    hand = "S" + _LEDUC_RANKS[int(np.argmax(view[0:3]))]
    public = "S" + _LEDUC_RANKS[int(np.argmax(view[3:6]))] if view[3:6].any() else None
    legal = [name for name, allowed in zip(_LEDUC_ACTIONS, mask, strict=True) if allowed]
    state = {"raw_obs": {"hand": hand, "public_card": public}, "raw_legal_actions": legal}
    return _LEDUC_ACTIONS.index(LeducHoldemRuleAgentV2.step(state))


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
