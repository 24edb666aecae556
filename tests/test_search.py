"""The players that search: perfect tic-tac-toe and Connect Four's negamax, on positions worked out by hand."""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("pettingzoo")

from torchrl_mask.games.env import make_game
from torchrl_mask.games.evaluation import play_games, summarise
from torchrl_mask.games.players import one_ply_heuristic, random_legal
from torchrl_mask.games.search import negamax, perfect_tictactoe, window_score

TICTACTOE_SEATS = ["player_1", "player_2"]
CONNECT_FOUR_SEATS = ["player_0", "player_1"]


def _tictactoe(mine: list[int], theirs: list[int]) -> tuple[np.ndarray, np.ndarray]:
    board = np.zeros((9, 2), np.int8)
    board[mine, 0], board[theirs, 1] = 1, 1
    return board.reshape(3, 3, 2), ~board.any(-1)


def _connect_four(mine: list[tuple[int, int]], theirs: list[tuple[int, int]]) -> tuple[np.ndarray, np.ndarray]:
    board = np.zeros((6, 7, 2), np.int8)
    for plane, cells in ((0, mine), (1, theirs)):
        for row, col in cells:
            board[row, col, plane] = 1
    return board, ~board[0].any(-1)


def test_perfect_tictactoe_takes_its_win_before_blocking() -> None:
    # X . X / O O . / . . .  with X to move: 1 wins now; 5 would only block O.
    board, mask = _tictactoe([0, 2], [3, 4])
    assert {perfect_tictactoe(board, mask, np.random.default_rng(seed)) for seed in range(10)} == {1}


def test_perfect_tictactoe_answers_a_corner_opening_with_the_centre() -> None:
    # Against a corner, every reply but the centre loses (a known result of tic-tac-toe).
    board, mask = _tictactoe([], [0])
    assert {perfect_tictactoe(board, mask, np.random.default_rng(seed)) for seed in range(10)} == {4}


def test_perfect_tictactoe_breaks_ties_at_random_among_equal_moves() -> None:
    board, mask = _tictactoe([], [])  # every first move draws under perfect play
    moves = {perfect_tictactoe(board, mask, np.random.default_rng(seed)) for seed in range(30)}
    assert len(moves) > 3


def test_perfect_tictactoe_never_loses_to_random_and_draws_itself_in_both_seats() -> None:
    against_random = summarise(
        play_games("tictactoe_v3", perfect_tictactoe, random_legal, 100, 0), TICTACTOE_SEATS, "win_rate"
    )
    assert against_random["loss"] == 0.0 and against_random["win"] > 0.7
    assert all(seat["loss"] == 0.0 for seat in against_random["seats"].values())
    itself = summarise(
        play_games("tictactoe_v3", perfect_tictactoe, perfect_tictactoe, 20, 0), TICTACTOE_SEATS, "win_rate"
    )
    assert itself["draw"] == 1.0


def test_window_score_counts_open_windows_by_hand() -> None:
    boards = np.zeros((3, 42), np.int8)
    boards[0, [35, 36]] = 1  # bottom row, columns 0-1: one open window holds both (columns 0-3) -> 1
    boards[1, [35, 36, 37]] = 1  # columns 0-2: windows 0-3 (three, 10) and 1-4 (two, 1) -> 11
    boards[2, [35, 36, 37]] = -1  # the opponent's three, with ours in column 3: every window holding
    boards[2, 38] = 1  # pieces of both is closed, and the rest hold one piece -> 0
    assert window_score(boards[:2]).tolist() == [1.0, 11.0]
    assert window_score(boards[2:]).tolist() == [0.0]


def test_negamax_wins_now_and_blocks_the_opponents_win() -> None:
    rng = np.random.default_rng(0)
    wins, mask = _connect_four([(5, 0), (4, 0), (3, 0)], [(5, 1), (4, 1), (5, 6)])
    assert negamax(1)(wins, mask, rng) == 0 and negamax(2)(wins, mask, rng) == 0
    # The opponent has three in the bottom row (columns 1-3); column 4 is the only block.
    blocks, mask = _connect_four([(5, 0), (4, 1)], [(5, 1), (5, 2), (5, 3)])
    assert {negamax(2)(blocks, mask, np.random.default_rng(seed)) for seed in range(5)} == {4}


def test_negamax_3_makes_a_double_threat() -> None:
    # Ours at the bottom, columns 2 and 3, both ends open: playing 1 or 4 makes two winning threats at once.
    board, mask = _connect_four([(5, 2), (5, 3)], [(4, 2), (4, 3)])
    assert negamax(3)(board, mask, np.random.default_rng(0)) in (1, 4)


def test_negamax_2_beats_the_one_ply_heuristic_from_both_seats() -> None:
    result = summarise(
        play_games("connect_four_v3", negamax(2), one_ply_heuristic, 40, seed=0), CONNECT_FOUR_SEATS, "win_rate"
    )
    assert result["illegal_moves"] == 0
    assert all(seat["win"] >= 0.8 for seat in result["seats"].values()), result


def test_negamax_refuses_depth_zero_and_other_boards() -> None:
    with pytest.raises(ValueError, match="depth >= 1"):
        negamax(0)
    with pytest.raises(ValueError, match="random_legal"):
        negamax(2)(np.zeros((3, 3, 2)), np.ones(9, bool), np.random.default_rng(0))


def _positions(game: str, count: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Views and masks of ``count`` positions reached by random play (every one a position to move in)."""
    rng, views, masks = np.random.default_rng(seed), [], []
    env = make_game(game)
    while len(views) < count:
        env.reset(seed=int(rng.integers(2**31)))
        stop = int(rng.integers(0, 30))
        for ply, _ in enumerate(env.agent_iter()):
            observation, _, terminated, truncated, _ = env.last()
            if terminated or truncated:
                break
            if ply == stop:
                views.append(observation["observation"])
                masks.append(observation["action_mask"].astype(bool))
                break
            env.step(int(rng.choice(np.flatnonzero(observation["action_mask"]))))
    return np.stack(views), np.stack(masks)


@pytest.mark.parametrize("player", [negamax(1), negamax(2), one_ply_heuristic, random_legal], ids=lambda p: p.__name__)
def test_a_batch_of_games_gets_each_games_own_move(player) -> None:
    # Connect Four positions of random play, taken in one batch and one by one: the search's scores do not depend
    # on the other boards of the batch, only the ties' random draws do (one uniform per move and board), so
    # with the same generator the batch and the board-by-board calls make the same moves.
    views, masks = _positions("connect_four_v3", 60, seed=3)
    batch = player.batch(views, masks, np.random.default_rng(7))
    rng = np.random.default_rng(7)
    single = [player(view, mask, rng) for view, mask in zip(views, masks, strict=True)]
    assert batch.tolist() == single
    assert masks[np.arange(len(batch)), batch].all()


def test_the_one_ply_heuristic_takes_a_win_before_a_block_in_a_batch() -> None:
    wins, mask = _connect_four([(5, 0), (4, 0), (3, 0)], [(5, 1), (5, 2), (5, 3)])  # it wins in 0, else blocks 4
    blocks, _ = _connect_four([(5, 0), (4, 1)], [(5, 1), (5, 2), (5, 3)])  # only the block in column 4
    neither, _ = _connect_four([], [])
    moves = one_ply_heuristic.batch(np.stack([wins, blocks, neither]), np.stack([mask] * 3), np.random.default_rng(0))
    assert moves[:2].tolist() == [0, 4] and 0 <= moves[2] < 7
    board, legal = _tictactoe([0, 1], [3, 4])  # tic-tac-toe: 2 wins, 5 would block
    assert one_ply_heuristic.batch(board[None], legal[None], np.random.default_rng(0)).tolist() == [2]
