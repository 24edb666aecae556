"""A board game's symmetries, checked against the games themselves, and self-play training on each move's images."""

from __future__ import annotations

import pickle

import numpy as np
import pytest
import torch
from helpers import seat_model
from torchrl.collectors import Collector

from torchrl_mask import MaskablePPO, SeatEnv, SelfPlayPolicy, TurnBasedEnv
from torchrl_mask.games.env import make_game
from torchrl_mask.games.symmetry import (
    board_symmetries,
    game_symmetries,
    image_moves,
    random_images,
)

CASES = [(game, symmetry) for game in ("connect_four_v3", "tictactoe_v3") for symmetry in game_symmetries(game)]


@pytest.mark.parametrize(("game", "symmetry"), CASES, ids=[f"{game}-{symmetry.name}" for game, symmetry in CASES])
def test_every_listed_symmetry_is_one_of_the_games_own(game: str, symmetry) -> None:
    """Games played move for move with the imaged moves show the imaged views and masks, and end alike."""
    rng = np.random.default_rng(0)
    for seed in range(10):
        played, imaged = make_game(game), make_game(game)
        played.reset(seed=seed)
        imaged.reset(seed=seed)
        for agent, other in zip(played.agent_iter(), imaged.agent_iter(), strict=True):
            assert agent == other
            view, reward, terminated, truncated, _ = played.last()
            image, image_reward, image_terminated, image_truncated, _ = imaged.last()
            assert (reward, terminated, truncated) == (image_reward, image_terminated, image_truncated)
            board, mask = torch.as_tensor(view["observation"]), torch.as_tensor(view["action_mask"]).bool()
            assert torch.equal(torch.as_tensor(image["observation"]), symmetry.planes(board))
            assert torch.equal(torch.as_tensor(image["action_mask"]).bool(), symmetry.mask(mask))
            if terminated or truncated:
                played.step(None)
                imaged.step(None)
                continue
            action = int(rng.choice(np.flatnonzero(view["action_mask"])))
            played.step(action)
            imaged.step(int(symmetry.actions(torch.tensor(action))))


def test_a_boards_symmetries_are_distinct_permutations_that_carry_a_move_with_its_mask() -> None:
    square = board_symmetries(3, 3, "cells")
    assert len(square) == 7 and len(board_symmetries(3, 4, "cells")) == 3
    assert [symmetry.name for symmetry in board_symmetries(6, 7, "columns")] == ["mirror"]
    sources = {tuple(symmetry.source.tolist()) for symmetry in square} | {tuple(range(9))}
    assert len(sources) == 8  # the square's eight, the identity included
    for symmetry in square:
        assert sorted(symmetry.source.tolist()) == list(range(9))
        moves = torch.arange(9)
        one_hot = torch.nn.functional.one_hot(moves, 9).bool()
        assert torch.equal(symmetry.mask(one_hot), torch.nn.functional.one_hot(symmetry.actions(moves), 9).bool())
    assert game_symmetries("leduc_holdem_v4") == ()
    with pytest.raises(ValueError, match="'cells' or 'columns'"):
        board_symmetries(3, 3, "rows")


def _players(symmetries) -> tuple[MaskablePPO, SelfPlayPolicy, Collector]:
    model = seat_model("connect_four_v3")
    players = SelfPlayPolicy(model.policy, symmetries=symmetries)
    games = TurnBasedEnv("connect_four_v3", n_games=4)
    games.set_seed(0)
    return model, players, Collector(games, players, frames_per_batch=256)


def test_an_image_of_a_batch_keeps_the_played_moves_probabilities_and_values() -> None:
    _, _, collector = _players(())
    batch = next(iter(collector))
    (mirror,) = game_symmetries("connect_four_v3")
    image = image_moves(batch, mirror)
    assert torch.equal(image["observation"], batch["observation"].flip(-2))
    assert torch.equal(image["next", "observation"], batch["next", "observation"].flip(-2))
    assert torch.equal(image["action"], 6 - batch["action"])
    assert image["action_mask"].gather(-1, image["action"].unsqueeze(-1)).all()  # every imaged move is legal
    for key in ("action_log_prob", "state_value", "seat", ("next", "seat_reward"), ("next", "done")):
        assert torch.equal(image[key], batch[key])
    assert torch.equal(image_moves(image, mirror)["observation"], batch["observation"])
    moves = image_moves(batch[0], mirror)  # a TensorDict without "next" observations, as the seats' moves are
    assert torch.equal(moves["observation"], image["observation"][0]) and "next" in moves
    collector.shutdown()


def test_self_play_trains_on_each_moves_images_and_counts_the_moves_played() -> None:
    plain, _, collector = _players(())
    plain.learn(1, collector=collector)  # one batch each, the same games: the same weights played both
    model, _, collector = _players(game_symmetries("connect_four_v3"))
    model.learn(1, collector=collector)
    assert model.num_timesteps == plain.num_timesteps > 200  # only the moves played count
    played, trained = plain.rollout_buffer.tensordict.reshape(-1), model.rollout_buffer.tensordict.reshape(-1)
    half = (trained.numel() + 1) // 2  # each move, then each image (the last may be cut: no 1-row minibatch)
    assert played.numel() in (half, half - 1) and trained.numel() in (2 * half, 2 * half - 1)
    moves, images = trained[: trained.numel() - half], trained[half:]
    for key in ("observation", "action", "advantage", "value_target", "action_log_prob", "state_value"):
        assert torch.equal(trained[: played.numel()][key], played[key]), key
    assert torch.equal(images["observation"], moves["observation"].flip(-2))
    assert torch.equal(images["action"], 6 - moves["action"])
    for key in ("advantage", "value_target", "action_log_prob", "state_value"):  # an image learns what its move does
        assert torch.equal(images[key], moves[key]), key


def test_random_images_put_each_move_in_one_of_its_images_drawn_alike() -> None:
    model = MaskablePPO("MlpPolicy", SeatEnv("tictactoe_v3"), policy_kwargs={"net_arch": [16]}, seed=0)
    games = TurnBasedEnv("tictactoe_v3", n_games=16)
    games.set_seed(0)
    collector = Collector(games, SelfPlayPolicy(model.policy), frames_per_batch=256)
    moves = next(iter(collector)).reshape(-1)
    collector.shutdown()
    square = game_symmetries("tictactoe_v3")
    before = moves.clone()
    torch.manual_seed(3)
    imaged = random_images(moves, square)
    assert (moves == before).all()  # the moves played are left as they were
    torch.manual_seed(3)
    assert (random_images(moves, square) == imaged).all()  # one seed, one draw
    keys = ("observation", ("next", "observation"), "action_mask", "action")
    drawn = set()
    for move, image in zip(moves, imaged, strict=True):
        images = [move] + [image_moves(move.unsqueeze(0), symmetry)[0] for symmetry in square]
        fits = [
            index
            for index, expected in enumerate(images, start=-1)
            if all(torch.equal(image[key], expected[key]) for key in keys)
        ]
        assert fits  # view, next view, mask and action: all imaged by one symmetry, or none
        drawn |= set(fits) if len(fits) == 1 else set()  # (an early board may look alike in several)
    assert drawn == set(range(-1, 7))  # all eight met in 256 moves, the move itself among them
    for key in ("action_log_prob", "state_value", "seat", ("next", "seat_reward"), ("next", "done")):
        assert torch.equal(imaged[key], moves[key]), key


def test_self_play_with_random_images_trains_each_move_once_in_its_place() -> None:
    plain, _, collector = _players(())
    plain.learn(1, collector=collector)
    model = seat_model("connect_four_v3")
    players = SelfPlayPolicy(model.policy, symmetries=game_symmetries("connect_four_v3"), images="random")
    games = TurnBasedEnv("connect_four_v3", n_games=4)
    games.set_seed(0)
    model.learn(1, collector=Collector(games, players, frames_per_batch=256))
    assert model.num_timesteps == plain.num_timesteps > 200
    played, trained = plain.rollout_buffer.tensordict.reshape(-1), model.rollout_buffer.tensordict.reshape(-1)
    assert trained.numel() == played.numel()  # the rollout keeps the moves played, each once
    same = (trained["observation"] == played["observation"]).flatten(1).all(1)
    mirrored = (trained["observation"] == played["observation"].flip(-2)).flatten(1).all(1)
    assert (same | mirrored).all()  # each move as played or in its mirror (a symmetric board: either)
    assert (same & ~mirrored).any() and (mirrored & ~same).any()
    actions = trained["action"]
    assert torch.equal(actions[same & ~mirrored], played["action"][same & ~mirrored])
    assert torch.equal(actions[mirrored & ~same], 6 - played["action"][mirrored & ~same])
    assert ((actions == played["action"]) | (actions == 6 - played["action"])).all()
    for key in ("advantage", "value_target", "action_log_prob", "state_value"):  # each learns what its move does
        assert torch.equal(trained[key], played[key]), key
    with pytest.raises(ValueError, match="'random' only with a game's symmetries"):
        SelfPlayPolicy(model.policy, images="random")
    with pytest.raises(ValueError, match="use 'all' or 'random'"):
        SelfPlayPolicy(model.policy, symmetries=game_symmetries("connect_four_v3"), images="some")  # type: ignore[arg-type]


def test_a_self_play_policy_with_symmetries_pickles_into_worker_processes() -> None:
    _, players, collector = _players(game_symmetries("connect_four_v3"))
    collector.shutdown()
    copy = pickle.loads(pickle.dumps(players))  # what a MultiSyncCollector sends each worker
    board = torch.arange(6 * 7 * 2).reshape(6, 7, 2)
    assert [symmetry.name for symmetry in copy.symmetries] == ["mirror"]
    assert torch.equal(copy.symmetries[0].planes(board), players.symmetries[0].planes(board))
    square = pickle.loads(pickle.dumps(game_symmetries("tictactoe_v3")))
    cells = torch.arange(18).reshape(3, 3, 2)
    for mine, theirs in zip(game_symmetries("tictactoe_v3"), square, strict=True):
        assert torch.equal(mine.planes(cells), theirs.planes(cells)) and torch.equal(mine.source, theirs.source)
