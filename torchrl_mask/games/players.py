"""Fixed players of turn-based games: functions ``(observation, mask, rng) -> action``.

- :data:`random_legal`: a uniformly random legal move;
- :data:`one_ply_heuristic`: win now if possible, else block the opponent's immediate win, else random legal
  (``tictactoe_v3`` and ``connect_four_v3``, told apart by their board's shape);
- :func:`leduc_rule_v2`: rlcard's rule-based Leduc hold'em agent, ``LeducHoldemRuleAgentV2``, as shipped;
- :func:`board_text`: a board as text.

A player is a function of the mover's own view (``observation[..., 0]`` its pieces, ``observation[..., 1]`` the
opponent's, as the classic games lay them out), its bool mask and a ``numpy.random.Generator``; one evaluation loop
(:func:`~torchrl_mask.games.evaluation.play_games`) pits any of them against a trained model.

A :class:`BatchPlayer` also moves in many games at once (``batch``, over stacked views and masks), in numpy
rather than a Python loop per game: the self-play collector asks one for the moves of all the games it plays at
a step, and the evaluation loop for all the games it plays side by side. One game's move is its batch of one, so
the two give the same moves from the same generator. :func:`moves` asks any player for several games' moves.

Example:
    >>> board = np.zeros((3, 3, 2), np.int8)
    >>> board[0, :2, 1] = 1  # the opponent threatens the top row
    >>> one_ply_heuristic(board, ~board.any(-1).reshape(-1), np.random.default_rng(0))
    2
    >>> moves(one_ply_heuristic, board[None], ~board.any(-1).reshape(1, -1), np.random.default_rng(0))
    array([2])
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

__all__ = [
    "PLAYERS",
    "BatchPlayer",
    "OnePlyHeuristic",
    "Player",
    "RandomLegal",
    "board_lines",
    "board_text",
    "leduc_rule_v2",
    "moves",
    "one_ply_heuristic",
    "pick",
    "random_legal",
]

Player = Callable[[np.ndarray, np.ndarray, np.random.Generator], int]


def board_lines(height: int, width: int, length: int) -> np.ndarray:
    """Every run of ``length`` cells in a row, column or diagonal of a board, as flat cell indices.

    :param height: the board's rows.
    :param width: its columns.
    :param length: the cells in a run (4 for Connect Four's windows).
    :return: int ``(n_lines, length)``, cells numbered ``row * width + col``.
    """
    lines = []
    for dr, dc in ((0, 1), (1, 0), (1, 1), (1, -1)):
        for row in range(height):
            for col in range(width):
                cells = [(row + i * dr, col + i * dc) for i in range(length)]
                if all(0 <= r < height and 0 <= c < width for r, c in cells):
                    lines.append([r * width + c for r, c in cells])
    return np.array(lines)


# board shape -> (the lines whose filling wins, whether a move drops to the lowest empty row of its column)
_RULES = {(3, 3): (board_lines(3, 3, 3), False), (6, 7): (board_lines(6, 7, 4), True)}


def pick(candidates: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """One of each row's candidate moves, uniformly at random (one uniform draw per move and row, the largest
    among the candidates taken).

    :param candidates: bool ``(n, n_actions)``, at least one in every row.
    :param rng: the random generator.
    :return: int64 ``(n,)``.
    """
    keys = rng.random(candidates.shape)
    return np.where(candidates, keys, -1.0).argmax(-1)


class BatchPlayer:
    """A player that moves in many games at once: :meth:`batch` over stacked views, and one game's move (the
    call) as the batch of one. Subclasses write :meth:`batch`; they pickle (a worker process can play them).
    """

    __name__ = "batch_player"

    def __call__(self, observation: np.ndarray, mask: np.ndarray, rng: np.random.Generator) -> int:
        """One game's move: the batch of one.

        :param observation: the mover's view.
        :param mask: bool ``(n_actions,)``, the legal moves.
        :param rng: the random generator.
        :return: the move.
        """
        return int(self.batch(np.asarray(observation)[None], np.asarray(mask, bool)[None], rng)[0])

    def batch(self, views: np.ndarray, masks: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        """Moves in ``n`` games.

        :param views: the movers' views, ``(n, *view)``.
        :param masks: bool ``(n, n_actions)``, each game's legal moves.
        :param rng: the random generator.
        :return: int64 ``(n,)``.
        """
        raise NotImplementedError


def moves(player: Player, views: np.ndarray, masks: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """``player``'s moves in ``n`` games: one :meth:`BatchPlayer.batch` call, or a call per game for other players.

    :param player: any player.
    :param views: the movers' views, ``(n, *view)``.
    :param masks: bool ``(n, n_actions)``.
    :param rng: the random generator.
    :return: int64 ``(n,)``.
    """
    batch = getattr(player, "batch", None)
    if callable(batch):
        return np.asarray(batch(views, masks, rng), dtype=np.int64).reshape(len(views))
    return np.array([player(view, mask, rng) for view, mask in zip(views, masks, strict=True)], dtype=np.int64)


class RandomLegal(BatchPlayer):
    """A uniformly random legal move (:func:`pick` over the mask); the view is not read."""

    __name__ = "random_legal"

    def batch(self, views: np.ndarray, masks: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        """:param views: ``(n, *view)``, unused.
        :param masks: bool ``(n, n_actions)``, the legal moves.
        :param rng: the random generator.
        :return: int64 ``(n,)``.
        """
        return pick(np.asarray(masks, bool), rng)


#: A uniformly random legal move: ``random_legal(observation, mask, rng) -> action``.
random_legal = RandomLegal()


class OnePlyHeuristic(BatchPlayer):
    """Win now if a move wins, else block the opponent's immediate win, else a random legal move: of several
    winning (or blocking) moves the lowest-numbered. Tic-tac-toe's ``(3, 3)`` and Connect Four's ``(6, 7)`` boards.
    """

    __name__ = "one_ply_heuristic"

    def batch(self, views: np.ndarray, masks: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        """:param views: the movers' views ``(n, rows, cols, 2)``: their pieces, then the opponents'.
        :param masks: bool ``(n, n_actions)``, the legal moves.
        :param rng: the random generator (the random fallback draws for every game).
        :return: int64 ``(n,)``.
        :raises ValueError: a board that is neither tic-tac-toe's ``(3, 3)`` nor Connect Four's ``(6, 7)``.
        """
        boards, masks = np.asarray(views), np.asarray(masks, bool)
        rules = _RULES.get(boards.shape[1:3]) if boards.ndim == 4 else None
        if rules is None:
            raise ValueError(
                f"one_ply_heuristic knows tic-tac-toe (3, 3) and Connect Four (6, 7) boards; got {boards.shape[1:3]}. "
                "Use random_legal, or a player of your own, for other games."
            )
        lines, drops = rules
        n, height, width = boards.shape[:3]
        planes = boards.reshape(n, height * width, 2) != 0
        if drops:  # a column's piece lands on its lowest empty row
            row = (~planes.any(-1)).reshape(n, height, width).sum(1) - 1
            cells = np.maximum(row, 0) * width + np.arange(width)
        else:
            cells = np.broadcast_to(np.arange(height * width), masks.shape)
        found = []
        for plane in (0, 1):  # a winning move first, then a blocking one
            after = np.repeat(planes[:, None, :, plane], masks.shape[1], axis=1)  # (n, n_actions, cells)
            np.put_along_axis(after, cells[..., None], True, axis=2)
            found.append(after[:, :, lines].all(-1).any(-1) & masks)
        wins, blocks = found
        fallback = pick(masks, rng)
        return np.where(wins.any(-1), wins.argmax(-1), np.where(blocks.any(-1), blocks.argmax(-1), fallback))


#: Win now if possible, else block, else random legal: ``one_ply_heuristic(observation, mask, rng) -> action``.
one_ply_heuristic = OnePlyHeuristic()


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
