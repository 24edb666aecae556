"""The league: the learner meets past snapshots and fixed players, drawn by what it does not beat yet."""

from __future__ import annotations

import pickle
import warnings

import numpy as np
import pytest
import torch
from helpers import seat_model
from torchrl.collectors import Collector, MultiSyncCollector

from torchrl_mask import SelfPlayPolicy, TurnBasedEnv
from torchrl_mask.app.config import SelfPlay, TrainConfig
from torchrl_mask.app.game_collector import SNAPSHOTS, build_collector
from torchrl_mask.games.evaluation import WinRates, evaluate_games, point_values
from torchrl_mask.games.league import League
from torchrl_mask.games.search import negamax, perfect_tictactoe
from torchrl_mask.games.seat_split import seat_transitions


def first_legal(observation: np.ndarray, mask: np.ndarray, rng: np.random.Generator) -> int:
    """A fixed player whose every move can be told in advance."""
    return int(np.flatnonzero(mask)[0])


def test_the_league_draws_most_the_opponents_the_learner_does_not_beat_and_keeps_a_share_for_the_others() -> None:
    league = League(1, {"first": first_legal, "perfect": perfect_tictactoe})
    assert torch.allclose(league.probabilities(), torch.full((3,), 1 / 3))
    for _ in range(200):  # the learner always beats snapshot_0, always draws with first, always loses to perfect
        league.record(np.array([0, 1, 2]), np.array([1.0, 0.0, -1.0]))
    scores = league.summary()
    assert scores["snapshot_0"] > 0.99 and abs(scores["first"] - 0.5) < 1e-6 and scores["perfect"] < 0.01
    probabilities = league.probabilities()
    assert probabilities[2] > probabilities[1] > probabilities[0] > 0.03  # the floor keeps the beaten one in play
    draws = league.choose(torch.rand(100_000, generator=torch.Generator().manual_seed(0)))
    shares = torch.bincount(draws, minlength=3).float() / len(draws)
    assert torch.allclose(shares, probabilities, atol=0.01)
    league.reset(0)
    assert league.summary()["snapshot_0"] == 0.5
    with pytest.raises(ValueError, match="at least one opponent"):
        League(0, {})


def test_fixed_players_play_their_games_the_draw_picks_the_opponent_and_only_the_learner_trains() -> None:
    model = seat_model("tictactoe_v3")
    players = SelfPlayPolicy(model.policy, pool_size=1, fixed={"first": first_legal})
    games = TurnBasedEnv("tictactoe_v3", opponents=2, n_games=8)
    games.set_seed(0)
    batch = next(iter(Collector(games, players, frames_per_batch=256, total_frames=256)))
    assert torch.equal(batch["opponent"], players.league.choose(batch["opponent_draw"]))
    fixed_moves = ~players.learner_moves(batch) & (batch["opponent"] == 1)
    assert int(fixed_moves.sum()) > 20
    first = batch["action_mask"][fixed_moves].int().argmax(-1)
    assert torch.equal(batch["action"][fixed_moves], first)
    assert (batch["action_log_prob"][fixed_moves] == 0).all()
    model.learn(3 * 256, collector=Collector(games, players, frames_per_batch=256))
    scores = players.league.scores
    assert ((scores >= 0) & (scores <= 1)).all() and (scores != 0.5).all(), scores  # both opponents' games counted


def test_a_league_reaches_worker_processes_with_its_scores_and_its_fixed_players() -> None:
    board = np.zeros((6, 7, 2))
    board[5, 3, 1] = board[5, 4, 1] = board[5, 2, 0] = 1
    copy, original = pickle.loads(pickle.dumps(negamax(2))), negamax(2)
    for seed in range(5):  # the copy searches as the original does
        mask = np.ones(7, bool)
        assert copy(board, mask, np.random.default_rng(seed)) == original(board, mask, np.random.default_rng(seed))
    model = seat_model("tictactoe_v3")
    players = SelfPlayPolicy(model.policy, pool_size=1, fixed={"perfect": perfect_tictactoe})
    makers = [lambda: TurnBasedEnv("tictactoe_v3", opponents=2)] * 2
    collector = MultiSyncCollector(makers, players, frames_per_batch=128, total_frames=-1)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", DeprecationWarning)
            players.league.scores.copy_(torch.tensor([1.0, 0.0]))  # the learner beats its snapshot, never perfect
            collector.update_policy_weights_()
            stream = iter(collector)
            next(stream)  # games dealt before the update may still run
            batch = next(stream)
    finally:
        collector.shutdown()
    choices = ~batch["opponent_chosen"]  # each game's first move, where its opponent is drawn
    sent = players.league.choose(batch["opponent_draw"][choices])
    assert torch.equal(batch["opponent"][choices], sent)  # every worker drew by the scores sent to it
    before = League(1, {"perfect": perfect_tictactoe}).choose(batch["opponent_draw"][choices])
    assert (before != sent).any()  # the scores it had before the update would have drawn otherwise
    theirs = ~players.learner_moves(batch)
    assert (batch["opponent"][theirs] == 1).any()  # perfect, a fixed player, moved in a worker


def test_win_rates_measures_every_snapshot_as_it_is_taken_and_names_its_slot() -> None:
    model = seat_model("tictactoe_v3")
    players = SelfPlayPolicy(model.policy, pool_size=2, snapshot_every=1)
    games = TurnBasedEnv("tictactoe_v3", opponents=2, n_games=4)
    games.set_seed(0)
    rates = WinRates("tictactoe_v3", every=0, games=6, seed=1, players=players)
    model.learn(4 * 64, callback=rates, collector=Collector(games, players, frames_per_batch=64))
    slots = [point["snapshot"] for point in rates.points]
    assert players.snapshots > 2 and slots == [n % 2 for n in range(players.snapshots)]  # one a snapshot, no other
    # the weights the last snapshot holds, measured again: the same figures as its point
    final = seat_model("tictactoe_v3")
    final.policy.load_state_dict(players.pool[players.latest_slot].policy.state_dict())
    results = {
        name: evaluate_games(final, "tictactoe_v3", name, 6, seed=rates.point_seed(len(rates.points) - 1))
        for name in ("random", "heuristic", "perfect")
    }
    again = {
        f"vs_{name}_{key}": value for name, result in results.items() for key, value in point_values(result).items()
    }
    measured = {key: value for key, value in rates.points[-1].items() if key.startswith("vs_")}
    assert again == measured
    snapshot, learner = final.policy.state_dict(), model.policy.state_dict()
    assert any(
        not torch.equal(snapshot[key], learner[key]) for key in learner
    )  # the learner trained on past its last snapshot, so the point is the snapshot's, not the final model's


def test_a_game_keeps_the_opponent_its_first_move_drew_when_the_league_changes_its_mind() -> None:
    players = SelfPlayPolicy(seat_model("tictactoe_v3").policy, pool_size=1, fixed={"perfect": perfect_tictactoe})
    games = TurnBasedEnv("tictactoe_v3", opponents=2, n_games=32)
    games.set_seed(0)
    stream = iter(Collector(games, players, frames_per_batch=32, total_frames=-1))
    first = next(stream)  # every game's first move: even scores, so a draw above 0.5 is perfect
    assert not first["opponent_chosen"].any() and torch.equal(first["opponent"], (first["opponent_draw"] > 0.5).long())
    players.league.scores.copy_(torch.tensor([1.0, 0.0]))  # now perfect for any draw above 0.045
    second = next(stream)  # every game's second move (no tic-tac-toe game ends in one)
    assert second["opponent_chosen"].all() and torch.equal(second["opponent_draw"], first["opponent_draw"])
    assert torch.equal(second["opponent"], first["opponent"])  # each game kept its opponent
    assert (players.league.choose(second["opponent_draw"]) != second["opponent"]).any()  # a fresh draw would not


def test_the_train_job_takes_about_thirty_snapshots_a_run_and_one_per_ten_rollouts_at_most() -> None:
    model = seat_model("tictactoe_v3")  # 64 moves a rollout per game
    for moves, every in ((10_000, 10), (1_000_000, 2 * 1_000_000 // (2 * 64) // SNAPSHOTS)):
        config = TrainConfig(
            env_id="pettingzoo:tictactoe_v3", n_timesteps=moves, n_envs=2, selfplay=SelfPlay(pool_size=1)
        )
        collector = build_collector(config, model, "tictactoe_v3")
        assert collector.policy.snapshot_every == every
    assert every > 10  # the long run's snapshots are spaced out, so measuring each stays a small share of it


def test_the_learner_computes_only_its_own_moves_and_the_opponents_fill_in_theirs() -> None:
    model = seat_model("tictactoe_v3")
    players = SelfPlayPolicy(model.policy, pool_size=1, fixed={"first": first_legal})
    seen: list[int] = []
    model.policy.features_extractor.register_forward_hook(lambda module, args, out: seen.append(len(out)))
    games = TurnBasedEnv("tictactoe_v3", opponents=2, n_games=8)
    games.set_seed(0)
    collector = Collector(games, players, frames_per_batch=256, total_frames=256)
    seen.clear()  # the collector's own first call, on the reset games, to learn the policy's outputs
    batch = next(iter(collector))
    learner = players.learner_moves(batch)
    assert 0 < int(learner.sum()) < learner.numel()
    assert sum(seen) == int(learner.sum())  # not the snapshot's or the fixed player's moves
    snapshot = ~learner & (batch["opponent"] == 0)
    assert int(snapshot.sum()) > 20 and (batch["action_log_prob"][snapshot] < 0).float().mean() > 0.5  # its own draws


def test_a_fixed_share_splits_the_games_between_the_snapshots_and_the_fixed_players() -> None:
    league = League(2, {"first": first_legal, "perfect": perfect_tictactoe}, fixed_share=0.5)
    league.scores.copy_(torch.tensor([0.5, 0.5, 1.0, 0.0]))  # the snapshots even, first beaten, perfect unbeaten
    probabilities = league.probabilities()
    assert torch.allclose(probabilities[:2].sum(), torch.tensor(0.5)) and torch.allclose(
        probabilities[2:].sum(), torch.tensor(0.5)
    )
    assert torch.allclose(probabilities[:2], torch.tensor([0.25, 0.25]))
    assert torch.allclose(probabilities[2:], torch.tensor([0.05, 1.05]) / 1.1 * 0.5)  # within: (1 - score)^2 + floor
    # both fixed players beaten: in one draw they get 0.1 / 0.7 of the games, split they keep half
    one_draw = League(2, {"first": first_legal, "perfect": perfect_tictactoe})
    for both in (league, one_draw):
        both.scores.copy_(torch.tensor([0.5, 0.5, 1.0, 1.0]))
    assert torch.allclose(one_draw.probabilities()[2:].sum(), torch.tensor(0.1 / 0.7))
    assert torch.allclose(league.probabilities()[2:], torch.tensor([0.25, 0.25]))
    assert League(2, fixed_share=0.5).fixed_share is None  # nothing to split
    with pytest.raises(ValueError, match=r"fixed_share=1.5.*\[0, 1\]"):
        League(2, {"first": first_legal}, fixed_share=1.5)


def test_a_self_share_gives_the_learner_that_share_of_games_against_itself_and_keeps_no_score_there() -> None:
    league = League(1, {"first": first_legal, "perfect": perfect_tictactoe}, self_share=0.4)
    assert league.names == ["snapshot_0", "first", "perfect", "self"] and league.self_index == 3
    assert torch.allclose(league.probabilities(), torch.tensor([0.2, 0.2, 0.2, 0.4]))
    league.scores[:3] = torch.tensor([0.5, 1.0, 0.0])  # the others drawn as without it, in the other 0.6
    weights = torch.tensor([0.3, 0.05, 1.05])
    assert torch.allclose(league.probabilities(), torch.cat([weights / weights.sum() * 0.6, torch.tensor([0.4])]))
    league.record(np.array([3, 3, 0]), np.array([1.0, -1.0, 1.0]))  # two games against itself, one won
    assert league.scores[3] == 0.5 and league.scores[0] > 0.5
    assert list(league.summary()) == ["snapshot_0", "first", "perfect"]  # no score against itself
    draws = league.choose(torch.rand(100_000, generator=torch.Generator().manual_seed(0)))
    assert abs(float((draws == 3).float().mean()) - 0.4) < 0.01
    assert League(1, self_share=0.0).names == ["snapshot_0"]  # no share, no "self"
    for bad in (1.0, -0.1):
        with pytest.raises(ValueError, match=rf"self_share={bad}.*\[0, 1\)"):
            League(1, self_share=bad)


def test_in_a_game_against_itself_the_learner_plays_and_trains_every_seat() -> None:
    model = seat_model("tictactoe_v3")
    players = SelfPlayPolicy(model.policy, pool_size=1, fixed={"first": first_legal}, self_share=0.5)
    seen: list[int] = []
    model.policy.features_extractor.register_forward_hook(lambda module, args, out: seen.append(len(out)))
    games = TurnBasedEnv("tictactoe_v3", opponents=3, n_games=8)
    games.set_seed(0)
    collector = Collector(games, players, frames_per_batch=256, total_frames=-1)
    seen.clear()
    batch = next(iter(collector))
    itself = batch["opponent"] == 2
    learner = players.learner_moves(batch)
    assert int(itself.sum()) > 20 and learner[itself].all()  # both seats of its games against itself
    assert (batch["seat"][itself] == 0).any() and (batch["seat"][itself] == 1).any()
    others = ~itself
    assert torch.equal(learner[others], (batch["seat"] == batch["learner_seat"])[others])  # one seat elsewhere
    assert sum(seen) == int(learner.sum())  # the learner's network computed every move it made, in both seats
    assert (batch["action_log_prob"][itself] < 0).float().mean() > 0.5  # its own draws, not a fixed player's
    carried = {"opponent": batch["opponent"], "seat": batch["seat"]}
    trained = seat_transitions(batch, torch.zeros(8), learner, carried)
    seats_trained = {(int(o), int(s)) for o, s in zip(trained["opponent"], trained["seat"], strict=True)}
    assert {(2, 0), (2, 1)} <= seats_trained  # the reader keeps both seats' moves of those games
    scores_before = players.league.scores.clone()
    model.learn(2 * 256, collector=collector)
    assert players.league.scores[2] == scores_before[2] == 0.5  # its games against itself move no score
    with pytest.raises(ValueError, match="pure self-play"):
        SelfPlayPolicy(model.policy, self_share=0.5)
