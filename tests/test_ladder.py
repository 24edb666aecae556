"""The evaluation loop and each game's ladder: any players seat by seat, games over before a seat moves, the
metric per game, JSON-able and reproducible results, and the WinRates callback on top."""

from __future__ import annotations

import json

import numpy as np
import pytest

pytest.importorskip("pettingzoo")

from torchrl_mask import MaskablePPO, SeatEnv
from torchrl_mask.games.evaluation import WinRates, evaluate_games, evaluate_ladder, play_games, summarise
from torchrl_mask.games.ladder import ladder
from torchrl_mask.games.players import BatchPlayer, random_legal
from torchrl_mask.games.profile import profiles

FOLD = 2  # leduc's fold


def folder(observation: np.ndarray, mask: np.ndarray, rng: np.random.Generator) -> int:
    """Leduc's worst player: folds whenever it may."""
    return FOLD if mask[FOLD] else int(np.flatnonzero(mask)[0])


def test_a_poker_game_over_before_the_player_moves_counts_with_its_chips() -> None:
    records = play_games("leduc_holdem_v4", random_legal, folder, 40, seed=0)
    unmoved = [record for record in records if record.moves[record.seat] == 0]
    assert unmoved, "the folder never ended a game before the random player's first move"
    for record in unmoved:  # the folder moved first and gave up its blind: the player won without a move
        assert record.returns[record.seat] > 0
        assert record.returns.sum() == pytest.approx(0.0)
    result = summarise(records, ["player_0", "player_1"], "chips")
    assert sum(seat["games_over_before_moving"] for seat in result["seats"].values()) == len(unmoved)
    assert result["games"] == 40 and result["illegal_moves"] == 0
    assert result["mean"] == pytest.approx(np.mean([record.returns[record.seat] for record in records]))


def test_the_player_takes_each_seat_in_turn() -> None:
    records = play_games("connect_four_v3", random_legal, random_legal, 6, seed=1)
    assert [record.seat for record in records] == [0, 1, 0, 1, 0, 1]
    assert all(record.moves.sum() >= 7 for record in records)  # a Connect Four game needs seven moves at least


class Counting(BatchPlayer):
    """The first legal move, counting the calls and the games each call moves in."""

    def __init__(self) -> None:
        self.calls: list[int] = []

    def batch(self, views: np.ndarray, masks: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        self.calls.append(len(views))
        return masks.argmax(-1)


def last_legal(observation: np.ndarray, mask: np.ndarray, rng: np.random.Generator) -> int:
    return int(np.flatnonzero(mask)[-1])


@pytest.mark.parametrize("game", ["connect_four_v3", "leduc_holdem_v4"])
def test_games_side_by_side_give_the_records_of_games_one_after_the_other(game) -> None:
    # Players that never draw: the records (seats, returns, moves) depend only on the deals, which come first
    # from the seed, so 1, 5 or 64 games at a time must give the same records in the same order.
    runs = {width: play_games(game, Counting(), last_legal, 12, seed=4, side_by_side=width) for width in (1, 5, 64)}
    for width in (5, 64):
        for one, other in zip(runs[1], runs[width], strict=True):
            assert one.seat == other.seat
            assert np.array_equal(one.returns, other.returns) and np.array_equal(one.moves, other.moves)
    counting = Counting()
    records = play_games(game, counting, last_legal, 12, seed=4)
    moved = sum(int(record.moves[record.seat]) for record in records)
    assert sum(counting.calls) == moved and max(counting.calls) > 1  # one call for every game waiting on it
    assert len(counting.calls) < moved


def test_an_illegal_move_is_counted_and_loses_the_game() -> None:
    def blunder(observation: np.ndarray, mask: np.ndarray, rng: np.random.Generator) -> int:
        return int(np.flatnonzero(~mask)[0]) if (~mask).any() else random_legal(observation, mask, rng)

    result = summarise(
        play_games("tictactoe_v3", blunder, random_legal, 4, seed=0), ["player_1", "player_2"], "win_rate"
    )
    assert result["illegal_moves"] == 4 and result["loss"] == 1.0


def _model(game: str) -> MaskablePPO:
    return MaskablePPO("MlpPolicy", SeatEnv(game), n_steps=32, batch_size=32, seed=0)


# game -> games per opponent (random chess and go games are long)
LADDER_GAMES = {game: 1 if game in ("chess_v6", "go_v5") else 6 for game in profiles() if game != "default"}


@pytest.mark.parametrize("game", list(LADDER_GAMES))
def test_each_games_ladder_gives_a_json_dict_of_its_metric_per_opponent(game: str) -> None:
    board = ladder(game)
    result = evaluate_ladder(_model(game), game, LADDER_GAMES[game], seed=0)
    assert json.loads(json.dumps(result)) == result
    assert result["metric"] == board.metric and result["illegal_moves"] == 0
    for opponent in board.opponents:
        entry = result[f"vs_{opponent}"]
        assert entry["games"] == LADDER_GAMES[game] and entry["illegal_moves"] == 0
        assert sum(seat["games"] for seat in entry["seats"].values()) == entry["games"]
        if board.metric == "win_rate":
            assert entry["win"] + entry["draw"] + entry["loss"] == pytest.approx(1.0)
        else:
            assert {"mean", "std"} <= set(entry)
    assert ("note" in result) == (set(board.opponents) <= {"random", "self"})


def test_an_opponent_that_does_not_fit_the_game_is_reported_not_raised() -> None:
    result = evaluate_games(_model("go_v5"), "go_v5", "heuristic", 10, seed=0)
    assert result["games"] == 0 and result["ladder"] == ["random"]
    assert "no opponent beyond random" in result["skipped"]
    with pytest.raises(ValueError, match="in no game's ladder"):
        evaluate_games(random_legal, "go_v5", "grandmaster", 10, seed=0)


def test_the_poker_ladder_reports_chips_and_hanabi_the_shared_score() -> None:
    chips = evaluate_games(random_legal, "texas_holdem_no_limit_v6", "random", 20, seed=0)
    assert chips["metric"] == "chips" and chips["unit"] == "chips (big blind 2)" and chips["std"] > 0
    score = evaluate_games(random_legal, "hanabi_v5", "self", 4, seed=0)
    assert score["metric"] == "score" and score["mean"] >= 0


def test_the_same_seed_gives_the_same_numbers() -> None:
    model = _model("connect_four_v3")
    first = evaluate_ladder(model, "connect_four_v3", 8, seed=3)
    assert evaluate_ladder(model, "connect_four_v3", 8, seed=3) == first
    chips = [evaluate_games(random_legal, "leduc_holdem_v4", "random", 20, seed=s)["mean"] for s in (5, 5, 6)]
    assert chips[0] == chips[1] != chips[2]


@pytest.mark.slow
@pytest.mark.parametrize(
    ("game", "keys"),
    [("tictactoe_v3", {"vs_perfect_win", "vs_heuristic_loss"}), ("leduc_holdem_v4", {"vs_random_chips"})],
)
def test_win_rates_measures_the_games_ladder_during_training(game: str, keys: set[str]) -> None:
    rates = WinRates(game, every=1, games=4, seed=0)
    _model(game).learn(64, callback=rates)
    assert len(rates.points) == 2 and keys <= set(rates.points[0])
    again = WinRates(game, every=1, games=4, seed=0)
    _model(game).learn(64, callback=again)
    untimed = [
        [{key: value for key, value in point.items() if key != "seconds"} for point in run.points]
        for run in (rates, again)
    ]
    assert untimed[0] == untimed[1]  # the same seed, the same measurements; only the wall time differs
    assert all("seconds" in point for point in rates.points)  # the time axis of the curve


def test_win_rates_draws_each_points_games_afresh() -> None:
    model = _model("connect_four_v3")
    rates = WinRates("connect_four_v3", every=1, games=20, seed=7)
    rates.init_callback(model)
    for moves in (0, 1):  # the same weights measured twice
        model.num_timesteps = moves
        rates.on_step()
        rates.on_rollout_end()
    seeds = [rates.point_seed(index) for index in range(2)]
    assert len({7, *seeds}) == 3  # neither point replays the other's games, nor a final evaluation's (seed 7)
    for point, seed in zip(rates.points, seeds, strict=True):
        assert point["vs_random_win"] == evaluate_games(model, "connect_four_v3", "random", 20, seed)["win"]
    first_point, second_point = (
        [point[f"vs_{name}_win"] for name in ("random", "heuristic", "negamax_2")] for point in rates.points
    )
    assert first_point != second_point  # two draws of 20 games: one model, other figures
