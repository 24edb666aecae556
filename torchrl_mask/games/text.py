"""A seat's view of a game as text, and its moves by name, for a person playing in a terminal.

:func:`view_text` draws what the seat may see: the board for ``tictactoe_v3`` (empty cells numbered with their
move), ``connect_four_v3`` (columns numbered 1-7 below), ``go_v5`` (letters and numbers at the edges) and
``chess_v6`` (python-chess's board, as PettingZoo's ANSI render draws it, with files and ranks); the seat's own
cards, the public cards and the chips for the hold'em games; OpenSpiel's own observation text for ``hanabi_v5``.
:func:`move_names` names each legal move as the person types it (a cell, a column, ``d4``, ``e2e4``, ``raise``),
and :func:`read_move` reads one back: a name, or the move's index in the action space.

Example:
    >>> from torchrl_mask.games.env import make_game
    >>> game = make_game("connect_four_v3")
    >>> game.reset(seed=0)
    >>> game.step(3)
    >>> print(view_text(game, "player_1"))
    . . . . . . .
    . . . . . . .
    . . . . . . .
    . . . . . . .
    . . . . . . .
    . . . X . . .
    1 2 3 4 5 6 7
    >>> read_move(game, "player_1", "5"), move_names(game, "player_1")[0]
    (4, '1')
"""

from __future__ import annotations

from typing import Any

import numpy as np

from torchrl_mask.games.players import board_text

__all__ = ["CARD_GAMES", "legal_text", "move_names", "read_move", "seat_text", "view_text"]

#: Games whose reward is chips (reported as such), not a win or a loss.
CARD_GAMES = ("leduc_holdem_v4", "texas_holdem_v4", "texas_holdem_no_limit_v6")
_GO_COLUMNS = "ABCDEFGHJKLMNOPQRST"  # go skips the letter I


def _name(game: Any) -> str:
    return str(game.metadata.get("name", ""))


def _mask(game: Any, agent: str) -> np.ndarray:
    return np.asarray(game.observe(agent)["action_mask"], dtype=bool)


def _board(game: Any, agent: str) -> np.ndarray:
    """The seat's own planes: ``[..., 0]`` its pieces, ``[..., 1]`` the opponent's (the classic boards' layout)."""
    return np.asarray(game.observe(agent)["observation"])


def _marks(game: Any, agent: str) -> str:
    """``"XO"`` for the first seat (its pieces X), ``"OX"`` for the second."""
    return "XO" if agent == game.possible_agents[0] else "OX"


def seat_text(game: Any, agent: str) -> str:
    """Which seat ``agent`` is, as a person reads it: ``"first (player_1), your pieces X"``.

    :param game: a PettingZoo classic AEC env.
    :param agent: the seat.
    :return: first or second, the seat's name, and its pieces (X for the first seat's on the boards, white or
        black in chess).
    """
    first = agent == game.possible_agents[0]
    text = f"{'first' if first else 'second'} ({agent})"
    if _name(game) in ("tictactoe_v3", "connect_four_v3", "go_v5"):
        return f"{text}, your pieces {_marks(game, agent)[0]}"
    if _name(game) == "chess_v6":
        return f"{text}, {'white' if first else 'black'}"
    return text


def _tictactoe(game: Any, agent: str) -> str:
    lines = board_text(_board(game, agent), _marks(game, agent)).splitlines()
    cells = [
        mark if mark != "." else str(3 * row + col)
        for row, line in enumerate(lines)
        for col, mark in enumerate(line.split())
    ]
    return "\n".join(" ".join(cells[row * 3 : row * 3 + 3]) for row in range(3))


def _go(game: Any, agent: str) -> str:
    board = _board(game, agent)[..., :2]
    size = board.shape[0]
    rows = board_text(board, _marks(game, agent)).splitlines()
    lines = [f"{size - row:>2} {line}" for row, line in enumerate(rows)]
    return "\n".join([*lines, "   " + " ".join(_GO_COLUMNS[:size])])


def _chess(game: Any) -> str:
    rows = str(game.unwrapped.board).splitlines()  # what PettingZoo's render_mode="ansi" prints
    return "\n".join([*(f"{8 - row} {line}" for row, line in enumerate(rows)), "  a b c d e f g h"])


def _cards(game: Any, agent: str) -> str:
    raw = game.unwrapped
    state = raw.env.game.get_state(raw._name_to_int(agent))
    hand = state["hand"] if isinstance(state["hand"], str) else " ".join(state["hand"])
    public = state.get("public_cards", [state.get("public_card")])
    public_text = " ".join(str(card) for card in public if card) or "none yet"
    chips = state["all_chips"]
    mine = int(state["my_chips"])
    others = ", ".join(str(int(c)) for i, c in enumerate(chips) if i != raw._name_to_int(agent))
    return f"Your hand: {hand}\nPublic cards: {public_text}\nChips in the pot: yours {mine}, the model's {others}"


def _hanabi(game: Any, agent: str) -> str:
    hanabi = game.unwrapped.hanabi_env
    return str(hanabi.game_state.observation_string(hanabi.agent_name_id_mapping[agent]))


def view_text(game: Any, agent: str) -> str:
    """What ``agent`` sees of ``game`` now, as text.

    :param game: a PettingZoo classic AEC env (its wrappers included).
    :param agent: the seat, one of ``game.possible_agents``.
    :return: several lines; a game not named in the module draws its board planes if it has them, else nothing.
    """
    name = _name(game)
    if name == "tictactoe_v3":
        return _tictactoe(game, agent)
    if name == "connect_four_v3":
        board = _board(game, agent)
        return board_text(board, _marks(game, agent)) + "\n" + " ".join(str(c + 1) for c in range(board.shape[1]))
    if name == "go_v5":
        return _go(game, agent)
    if name == "chess_v6":
        return _chess(game)
    if name in CARD_GAMES:
        return _cards(game, agent)
    if name == "hanabi_v5":
        return _hanabi(game, agent)
    board = _board(game, agent)
    return board_text(board[..., :2], _marks(game, agent)) if board.ndim == 3 and board.shape[-1] >= 2 else ""


def _card_action_names(game: Any) -> list[str]:
    actions = game.unwrapped.env.actions  # rlcard's names (limit games) or its Action enum (no-limit)
    return [str(getattr(action, "name", action)).lower() for action in actions]


def _one_name(game: Any, agent: str, action: int) -> str:
    name = _name(game)
    if name == "connect_four_v3":
        return str(action + 1)
    if name == "go_v5":
        size = game.unwrapped._N
        row, col = divmod(action, size)
        return "pass" if action == size * size else f"{_GO_COLUMNS[col].lower()}{size - row}"
    if name == "chess_v6":
        from pettingzoo.classic.chess import chess_utils

        player = game.possible_agents.index(agent)
        return str(chess_utils.action_to_move(game.unwrapped.board, action, player))
    if name in CARD_GAMES:
        return _card_action_names(game)[action]
    if name == "hanabi_v5":
        hanabi = game.unwrapped.hanabi_env
        text = hanabi.game_state.action_to_string(hanabi.agent_name_id_mapping[agent], action)
        return str(text).strip("()").lower()
    return str(action)


def move_names(game: Any, agent: str) -> dict[int, str]:
    """Each legal move of ``agent`` now and the name a person types for it.

    :param game: a PettingZoo classic AEC env.
    :param agent: the seat to move.
    :return: move index -> name (``"4"`` for a cell or a column 1-7, ``"d4"``/``"pass"`` for go, UCI ``"e2e4"``
        for chess, ``"raise"`` for the hold'em games, OpenSpiel's text for hanabi).
    """
    return {int(action): _one_name(game, agent, int(action)) for action in np.flatnonzero(_mask(game, agent))}


def legal_text(names: list[str], shown: int = 40) -> str:
    """The legal moves' names as one line: all of them, or the first ``shown`` and how many there are (go has 362).

    :param names: the names, as :func:`move_names` gives them.
    :param shown: the most names written out.
    :return: ``"0, 1, 2"``, or ``"a19, b19, ... (362 legal moves)"``.
    """
    if len(names) <= shown:
        return ", ".join(names)
    return ", ".join(names[:shown]) + f", ... ({len(names)} legal moves, the last {names[-1]})"


def read_move(game: Any, agent: str, text: str) -> int:
    """The legal move ``text`` names: a name of :func:`move_names`, or the move's index in the action space.

    :param game: a PettingZoo classic AEC env.
    :param agent: the seat to move.
    :param text: what the person typed (case and surrounding spaces ignored).
    :return: the move's index.
    :raises ValueError: not a legal move now; the message lists the legal ones.
    """
    names = move_names(game, agent)
    typed = text.strip().lower()
    by_name = {name.lower(): action for action, name in names.items()}
    if typed in by_name:
        return by_name[typed]
    if _name(game) != "connect_four_v3" and typed.isdecimal() and int(typed) in names:  # the index itself
        return int(typed)
    raise ValueError(f"{text.strip()!r} is not a legal move; legal: {legal_text(list(names.values()))}")
