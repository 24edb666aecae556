"""Pons' Connect Four test sets and the mistake rates on them: the shipped labels agree with the sets' published
scores, the views are PettingZoo's own, a perfect player makes no mistake and a fixed bad one exactly the label
data's count, and Connect Four's evaluation reports them."""

from __future__ import annotations

import json

import numpy as np
import pytest

pytest.importorskip("pettingzoo")

from pettingzoo.classic import connect_four_v3

from torchrl_mask import MaskablePPO, SeatEnv
from torchrl_mask.games.evaluation import evaluate_ladder, model_player
from torchrl_mask.games.perfect_play import mistake_rates
from torchrl_mask.games.players import Player, random_legal
from torchrl_mask.games.pons_sets import DATA, FULL_COLUMN, SET_NAMES, load_sets


def test_the_shipped_labels_agree_with_every_positions_published_score() -> None:
    sets = load_sets()
    assert list(sets) == list(SET_NAMES)
    for test in sets.values():
        assert len(test.scores) == 1000
        legal = test.move_scores != FULL_COLUMN
        assert (legal == test.masks).all()  # the labels' legal columns are the views' masks
        assert (np.where(legal, test.move_scores, -127).max(axis=1) == test.scores).all()
        assert (test.move_classes.max(axis=1) == np.sign(test.scores)).all()


def test_the_sets_hold_positions_of_the_stage_and_difficulty_they_are_named_by() -> None:
    # moves played: beginning <= 14 < middle <= 28 < end; moves left under perfect play, the last one included,
    # the same way: easy <= 14 < medium <= 28 < hard
    for name, test in load_sets().items():
        played = np.array([len(moves) for moves in test.sequences])
        score, mover_first = test.scores.astype(int), played % 2 == 0
        stones = 22 - np.abs(score)  # Pons' scale: the winner wins with its (22 - |score|)-th stone
        winner_first = np.where(score > 0, mover_first, ~mover_first)
        last = np.where(score == 0, 42, 2 * stones - winner_first)  # the first seat's k-th stone is move 2k - 1
        left = last - played
        stage, difficulty = name.split("_")
        low, high = {"beginning": (1, 14), "middle": (15, 28), "end": (29, 42)}[stage]
        assert low <= played.min() and played.max() <= high, name
        low, high = {"easy": (1, 14), "medium": (15, 28), "hard": (29, 42)}[difficulty]
        assert low <= left.min() and left.max() <= high, (name, left.min(), left.max())


def test_each_view_is_what_pettingzoos_connect_four_shows_the_mover() -> None:
    env = connect_four_v3.env()
    for test in load_sets().values():
        for row in range(0, 1000, 97):  # 11 positions of each set
            env.reset(seed=0)
            for column in test.sequences[row]:
                env.step(int(column) - 1)
            seen = env.observe(env.agent_selection)
            assert np.array_equal(seen["observation"], test.views[row]) and seen["observation"].dtype == np.int8
            assert np.array_equal(seen["action_mask"].astype(bool), test.masks[row])


def _label_player(best: bool) -> Player:
    """A player reading the labels: the best column of the position (by its view), or the lowest legal column."""
    table = {}
    for test in load_sets().values():
        scores = np.where(test.masks, test.move_scores.astype(int), -1000)
        for view, row in zip(test.views, scores, strict=True):
            table[view.tobytes()] = int(np.argmax(row))

    def player(observation: np.ndarray, mask: np.ndarray, rng: np.random.Generator) -> int:
        return table[np.asarray(observation).tobytes()] if best else int(np.flatnonzero(mask)[0])

    return player


def test_a_player_of_the_labelled_best_moves_makes_no_mistake_on_any_set() -> None:
    rates = mistake_rates(_label_player(best=True))
    assert all(rates[name] == 0.0 for name in SET_NAMES) and rates["mean"] == 0.0
    assert rates["positions"] == 6000 and rates["illegal_moves"] == 0


def test_the_lowest_legal_column_errs_exactly_as_often_as_the_label_data_says() -> None:
    rates = mistake_rates(_label_player(best=False))
    with np.load(DATA) as data:
        names, sets, scores = data["set_names"].tolist(), data["set"], data["move_scores"].astype(int)
    for index, name in enumerate(names):
        mine = scores[sets == index]
        lowest = np.argmax(mine != FULL_COLUMN, axis=1)  # the first column not full
        chosen = np.sign(mine[np.arange(len(mine)), lowest])
        best = np.sign(np.where(mine != FULL_COLUMN, mine, -127).max(axis=1))
        assert rates[name] == np.mean(chosen < best), name
    assert 0.1 < rates["mean"] < 0.9  # a bad player: the rates measure something


def test_an_illegal_move_counts_as_a_mistake_and_an_unknown_set_is_refused() -> None:
    def full_column(observation: np.ndarray, mask: np.ndarray, rng: np.random.Generator) -> int:
        return int(np.flatnonzero(~mask)[0]) if (~mask).any() else 7  # a full column, or off the board

    rates = mistake_rates(full_column, sets=["end_easy"])
    assert rates["end_easy"] == 1.0 and rates["illegal_moves"] == 1000
    with pytest.raises(ValueError, match="not Pons' test sets"):
        mistake_rates(full_column, sets=["end_hard"])


def test_a_limit_plays_each_sets_first_positions_only() -> None:
    seen = []

    def counting(observation: np.ndarray, mask: np.ndarray, rng: np.random.Generator) -> int:
        seen.append(observation.tobytes())
        return int(np.flatnonzero(mask)[0])

    rates = mistake_rates(counting, sets=["middle_easy", "beginning_hard"], limit=7)
    sets = load_sets()
    assert rates["positions"] == 14 and len(seen) == 14
    assert seen == [view.tobytes() for name in ("middle_easy", "beginning_hard") for view in sets[name].views[:7]]


def test_connect_fours_evaluation_reports_the_mistake_rates_of_the_model() -> None:
    model = MaskablePPO("MlpPolicy", SeatEnv("connect_four_v3"), n_steps=64, batch_size=32, seed=0)
    result = evaluate_ladder(model, "connect_four_v3", 2, seed=4)
    assert json.loads(json.dumps(result)) == result
    assert result["perfect_play"] == mistake_rates(model_player(model), seed=4)
    assert set(result["perfect_play"]) == {*SET_NAMES, "mean", "positions", "illegal_moves"}
    assert "perfect_play" not in evaluate_ladder(random_legal, "tictactoe_v3", 2, seed=0)  # Connect Four's only
