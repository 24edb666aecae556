"""games.text: each classic game's view as a person reads it, and its legal moves by the names a person types."""

from __future__ import annotations

import numpy as np
import pytest

from torchrl_mask.games.env import make_game
from torchrl_mask.games.text import legal_text, move_names, read_move, seat_text, view_text


def _started(name: str) -> object:
    game = make_game(name)
    game.reset(seed=0)
    return game


def test_every_name_of_every_masked_classic_game_reads_back_as_its_move() -> None:
    for name in (
        "tictactoe_v3",
        "connect_four_v3",
        "chess_v6",
        "go_v5",
        "leduc_holdem_v4",
        "texas_holdem_v4",
        "texas_holdem_no_limit_v6",
        "hanabi_v5",
    ):
        game = _started(name)
        agent = game.agent_selection
        names = move_names(game, agent)
        legal = np.flatnonzero(game.observe(agent)["action_mask"])
        assert sorted(names) == legal.tolist(), name
        assert len(set(names.values())) == len(names), f"{name}: two moves share a name"
        assert all(read_move(game, agent, f"  {text.upper()} ") == move for move, text in names.items()), name
        assert view_text(game, agent), name


def test_tic_tac_toe_numbers_its_empty_cells_with_their_moves() -> None:
    game = _started("tictactoe_v3")
    game.step(4)
    assert view_text(game, "player_2") == "0 1 2\n3 X 5\n6 7 8"  # the first seat plays X, seen from either seat
    assert seat_text(game, "player_2") == "second (player_2), your pieces O"
    assert read_move(game, "player_2", "8") == 8
    with pytest.raises(ValueError, match="'4' is not a legal move; legal: 0, 1, 2, 3, 5, 6, 7, 8"):
        read_move(game, "player_2", "4")


def test_connect_four_takes_columns_1_to_7_and_not_the_index_0() -> None:
    game = _started("connect_four_v3")
    assert read_move(game, "player_0", "1") == 0 and read_move(game, "player_0", "7") == 6
    for text in ("0", "8", "", "x"):
        with pytest.raises(ValueError, match=r"legal: 1, 2, 3, 4, 5, 6, 7$"):
            read_move(game, "player_0", text)


def test_chess_reads_uci_and_draws_the_board_with_files_and_ranks() -> None:
    game = _started("chess_v6")
    move = read_move(game, "player_0", "e2e4")
    game.step(move)
    lines = view_text(game, "player_1").splitlines()
    assert lines[4] == "4 . . . . P . . ." and lines[-1] == "  a b c d e f g h"
    assert "e7e5" in move_names(game, "player_1").values()  # black's moves, named on the real board
    assert seat_text(game, "player_1") == "second (player_1), black"


def test_go_reads_a_point_or_pass_and_shortens_its_legal_list() -> None:
    game = _started("go_v5")
    names = move_names(game, "black_0")
    assert names[361] == "pass" and names[0] == "a19" and names[18] == "t19" and names[360] == "t1"
    game.step(read_move(game, "black_0", "D4"))
    lines = view_text(game, "white_0").splitlines()
    assert lines[15] == " 4 . . . O . . . . . . . . . . . . . . ."  # black's stone, seen from white's seat
    assert legal_text(list(names.values())).endswith("... (362 legal moves, the last pass)")


def test_a_hold_em_seat_sees_its_own_hand_and_the_chips_but_not_the_other_hand() -> None:
    game = _started("texas_holdem_v4")
    agent = game.agent_selection
    other = next(seat for seat in game.possible_agents if seat != agent)
    mine, theirs = (view_text(game, seat).splitlines()[0] for seat in (agent, other))
    assert mine.startswith("Your hand: ") and len(mine.split()) == 4 and mine != theirs
    assert view_text(game, agent).splitlines()[1:] == [
        "Public cards: none yet",
        "Chips in the pot: yours 1, the model's 2",
    ]
    assert set(move_names(game, agent).values()) <= {"call", "raise", "fold", "check"}
