"""Connect Four and tic-tac-toe on numpy boards (torchrl_mask.games.boards) are PettingZoo's games, entry for entry.

TurnBasedEnv(engine="numpy") and TurnBasedEnv(engine="pettingzoo") are stepped side by side with the same random
legal moves, through partial resets and a league's draws: every entry of every step is the same tensor, dtype and
bits. A short seeded self-play run then trains to the same weights through either.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from tensordict import TensorDictBase
from torchrl.collectors import Collector

pytest.importorskip("pettingzoo")

from helpers import assert_same_tensor

from torchrl_mask import MaskablePPO, SeatEnv, SelfPlayPolicy, TurnBasedEnv
from torchrl_mask.games.boards import BOARD_GAMES, BoardGames, opening_limit
from torchrl_mask.games.players import board_lines, random_legal

GAMES = sorted(BOARD_GAMES)


def _same(ours: TensorDictBase, theirs: TensorDictBase, where: str) -> None:
    assert set(ours.keys(True, True)) == set(theirs.keys(True, True)), where
    for key in theirs.keys(True, True):
        a, b = ours.get(key), theirs.get(key)
        # dtype, shape, then bits: a -0.0 reward would pass torch.equal
        assert_same_tensor(b, a, f"{where}, {key}")
        if a.dtype.is_floating_point:
            assert_same_tensor(b.view(torch.uint8), a.view(torch.uint8), f"{where}, {key} (bits)")


@pytest.mark.parametrize(("opponents", "openings"), [(0, False), (3, False), (3, True)])
@pytest.mark.parametrize("game", GAMES)
def test_every_step_is_pettingzoos_through_partial_resets(game: str, opponents: int, openings: bool) -> None:
    longest = opening_limit(game) if openings else 0  # random openings: the same draws and moves on either engine
    envs = {
        engine: TurnBasedEnv(game, opponents=opponents, n_games=16, engine=engine, openings=longest)
        for engine in ("numpy", "pettingzoo")
    }
    assert envs["numpy"].boards is not None and envs["pettingzoo"].boards is None
    for env in envs.values():
        env.set_seed(7)
    tds = {engine: env.reset() for engine, env in envs.items()}
    _same(tds["numpy"], tds["pettingzoo"], "reset")
    generator, ends = torch.Generator().manual_seed(0), 0
    for move in range(300):
        action = torch.multinomial(tds["numpy"]["action_mask"].float(), 1, generator=generator).squeeze(-1)
        steps = {}
        for engine, env in envs.items():
            tds[engine]["action"] = action.clone()
            steps[engine], tds[engine] = env.step_and_maybe_reset(tds[engine])
        _same(steps["numpy"], steps["pettingzoo"], f"move {move}")
        ends += int(steps["numpy"]["next", "done"].sum())
    assert ends > 100  # many games ended (wins, losses and draws) and were dealt afresh


@pytest.mark.parametrize("game", GAMES)
def test_random_openings_deal_every_length_up_to_the_limit_and_never_a_finished_game(game: str) -> None:
    longest = opening_limit(game)
    env = TurnBasedEnv(game, n_games=400, openings=longest)
    env.set_seed(3)
    td = env.reset()
    pieces = td["observation"].sum(dim=(1, 2, 3))
    assert sorted(set(pieces.tolist())) == list(range(longest + 1))  # each length drawn, none past the limit
    assert torch.equal(td["seat"], pieces % 2)  # the first seat moves after an even number of moves
    height, width, length, _ = BOARD_GAMES[game]
    lines = env.boards.cells[:, board_lines(height, width, length)]  # (games, lines, cells of a line)
    assert not any((lines == piece).all(axis=2).any() for piece in (1, 2))  # no line completed: no game over
    again = TurnBasedEnv(game, n_games=400, openings=longest)
    again.set_seed(3)
    assert torch.equal(again.reset()["observation"], td["observation"])  # seeded
    plain = TurnBasedEnv(game, n_games=400)
    plain.set_seed(3)
    assert plain.reset()["observation"].sum() == 0


def test_random_openings_are_refused_where_a_game_could_end_in_one_or_has_no_bound() -> None:
    too_long = r"openings=7: give 0 to 6 moves; past 6, a random move can end a game of connect_four_v3"
    with pytest.raises(ValueError, match=too_long):
        TurnBasedEnv("connect_four_v3", openings=7)
    no_boards = r"openings=2: random openings are for connect_four_v3 and tictactoe_v3.*leduc_holdem_v4 has none"
    with pytest.raises(ValueError, match=no_boards + "; use openings=0"):
        TurnBasedEnv("leduc_holdem_v4", openings=2)


def test_connect_four_drops_pieces_and_finds_each_kind_of_line() -> None:
    # a column, a row and both diagonals, each completed by the first seat's last move
    wins = {
        "vertical": [0, 1, 0, 1, 0, 1, 0],
        "horizontal": [0, 0, 1, 1, 2, 2, 3],
        "diagonal": [0, 1, 1, 2, 2, 3, 2, 3, 3, 6, 3],
        "anti-diagonal": [6, 5, 5, 4, 4, 3, 4, 3, 3, 0, 3],
    }
    for name, moves in wins.items():
        games = BoardGames("connect_four_v3", 1)
        for index, column in enumerate(moves):
            rewards, ended = games.step(np.array([column]))
            last = index == len(moves) - 1
            assert bool(ended[0]) == last, (name, index)
        assert rewards.tolist() == [[1.0, -1.0]], name
        assert games.mover.tolist() == [1]  # the move passes on after the last one, as PettingZoo's does
    games = BoardGames("connect_four_v3", 1)
    for _ in range(6):
        games.step(np.array([2]))
    view, legal = games.views()
    assert legal.tolist() == [[True, True, False, True, True, True, True]]
    assert view[0, :, 2, 0].tolist() == [0, 1, 0, 1, 0, 1]  # the mover's (first seat's) pieces, from the top row


def test_tic_tac_toe_draw_ends_with_no_reward_and_an_empty_mask() -> None:
    games = BoardGames("tictactoe_v3", 2)
    # X O X / X O O / O X X: nine moves, no line
    for cell in [0, 1, 2, 4, 3, 5, 7, 6, 8]:
        rewards, ended = games.step(np.array([cell, cell]))
    assert ended.tolist() == [True, True] and not rewards.any()
    assert not games.views()[1].any()
    games.reset(np.array([1]))
    assert games.views()[1].tolist()[1] == [True] * 9 and games.mover.tolist() == [1, 0]


@pytest.mark.parametrize("game", GAMES)
def test_a_seeded_self_play_run_trains_the_same_weights_through_either_engine(game: str) -> None:
    weights = {}
    for engine in ("numpy", "pettingzoo"):
        model = MaskablePPO("MlpPolicy", SeatEnv(game), n_steps=16, batch_size=32, n_epochs=2, seed=3)
        players = SelfPlayPolicy(model.policy, pool_size=2, snapshot_every=1, fixed={"random": random_legal})
        games = TurnBasedEnv(game, opponents=3, n_games=4, engine=engine)
        games.set_seed(3)  # before the collector's first reset, as the train job seeds it
        collector = Collector(games, players, frames_per_batch=64)
        model.learn(4 * 64, collector=collector)
        collector.shutdown()
        weights[engine] = model.policy.state_dict()
    assert all(torch.equal(weights["numpy"][key], value) for key, value in weights["pettingzoo"].items())


def test_engines_are_refused_where_they_do_not_apply_naming_the_fix() -> None:
    with pytest.raises(ValueError, match=r"engine='fast': use one of \('auto', 'numpy', 'pettingzoo'\)"):
        TurnBasedEnv("tictactoe_v3", engine="fast")
    with pytest.raises(ValueError, match=r"steps through PettingZoo's own env: use engine='auto' or 'pettingzoo'"):
        TurnBasedEnv("leduc_holdem_v4", engine="numpy")
    assert TurnBasedEnv("leduc_holdem_v4").engine == "pettingzoo"
    assert TurnBasedEnv("connect_four_v3").engine == "numpy"
    with pytest.raises(ValueError, match="has no numpy boards"):
        BoardGames("chess_v6", 1)


def test_an_illegal_move_on_numpy_boards_names_the_mover_and_plays_nothing() -> None:
    env = TurnBasedEnv("connect_four_v3", n_games=2)
    assert env.boards is not None
    td = env.reset()
    for _ in range(6):
        td["action"] = torch.tensor([0, 1])
        td = env.step(td)["next"]
    td["action"] = torch.tensor([0, 1])
    before = env.boards.cells.copy()
    with pytest.raises(ValueError, match=r"Illegal move 0 by player_0 \(legal: \[1, 2, 3, 4, 5, 6\]\) in game 0"):
        env.step(td)
    assert np.array_equal(env.boards.cells, before)


@pytest.mark.parametrize("game", GAMES)
def test_the_games_a_view_shows_are_the_games_that_showed_it(game: str) -> None:
    games, rng = BoardGames(game, 64), np.random.default_rng(0)
    games.reset(np.arange(64))
    for _ in range(5):  # five random moves in each game (none ends before the fifth)
        games.step(np.array([rng.choice(np.flatnonzero(mask)) for mask in games.legal()]))
        again = BoardGames.from_views(game, games.views()[0])
        assert (again.cells == games.cells).all() and (again.mover == games.mover).all()
        twin = again.copy()
        twin.step(np.zeros(64, np.int64) + np.argmax(twin.legal(), axis=1))
        assert (again.cells == games.cells).all()  # a copy plays without touching the original
