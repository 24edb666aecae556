"""Every masked PettingZoo classic game in TurnBasedEnv, through TorchRL's own collectors, under any seed.

The policy is SelfPlayPolicy over an untrained MaskablePPO built on SeatEnv(game) (random masked moves). Each game
that a collector finishes is replayed move by move on PettingZoo's own env, dealt with the same seed: its legal
moves, its length and its rewards must be PettingZoo's.
"""

from __future__ import annotations

import warnings
from functools import partial
from typing import Any

import numpy as np
import pytest
import torch
from tensordict import TensorDictBase
from torchrl.collectors import Collector
from torchrl.envs import SerialEnv

pytest.importorskip("pettingzoo")

from torchrl_mask import MaskablePPO, SeatEnv, SelfPlayPolicy, TurnBasedEnv
from torchrl_mask.games.env import SEED_RANGE, deal_seeds, game_seed, make_game

# game -> moves per batch: enough for whole games (random chess and go run to hundreds of moves)
GAMES = {
    "tictactoe_v3": 64,
    "connect_four_v3": 96,
    "leduc_holdem_v4": 64,
    "texas_holdem_v4": 64,
    "texas_holdem_no_limit_v6": 64,
    "hanabi_v5": 96,
    "chess_v6": 700,
    "go_v5": 1000,
}
COOPERATIVE = {"hanabi_v5"}
LONG = {"chess_v6", "go_v5"}


def _policy(game: str) -> SelfPlayPolicy:
    model = MaskablePPO("MlpPolicy", SeatEnv(game), n_steps=32, batch_size=32, seed=0)
    return SelfPlayPolicy(model.policy)


def _collect(env: Any, policy: SelfPlayPolicy, frames: int) -> TensorDictBase:
    collector = Collector(env, policy, frames_per_batch=frames, total_frames=frames)
    try:
        return next(iter(collector))
    finally:
        collector.shutdown()


def _games(batch: TensorDictBase) -> list[tuple[list[int], list[float]]]:
    """The finished games of one env's moves ``(T,)``: each game's actions and its seats' returns."""
    actions, done = batch["action"].tolist(), batch["next", "done"][:, 0].tolist()
    rewards = batch["next", "seat_reward"].numpy()
    games, start = [], 0
    for t, ended in enumerate(done):
        if ended:
            games.append((actions[start : t + 1], rewards[start : t + 1].sum(0).tolist()))
            start = t + 1
    return games


def _assert_legal(batch: TensorDictBase) -> None:
    chosen = batch["action_mask"].gather(-1, batch["action"].unsqueeze(-1))
    assert bool(chosen.all()), "a move outside the step's mask"


def _replay(game: str, seed: int, games: list[tuple[list[int], list[float]]]) -> None:
    """Play the recorded games on PettingZoo's env dealt as the env seeded ``seed`` deals them: same legal moves,
    length and returns."""
    env = make_game(game)
    seats = list(env.possible_agents)
    for (actions, returns), index, deal in zip(games, range(len(games)), deal_seeds(seed), strict=False):
        env.reset(seed=deal)
        totals, moves = dict.fromkeys(seats, 0.0), 0
        for agent in env.agent_iter():
            observation, reward, terminated, truncated, _ = env.last()
            totals[agent] += float(reward)
            if terminated or truncated:
                env.step(None)
                continue
            assert moves < len(actions), f"game {index}: PettingZoo's game goes on past the {len(actions)} moves"
            assert observation["action_mask"][actions[moves]]
            env.step(actions[moves])
            moves += 1
        assert moves == len(actions), f"game {index}: PettingZoo's game ends after {moves} moves"
        assert [totals[seat] for seat in seats] == pytest.approx(returns)


@pytest.mark.parametrize("game", list(GAMES))
def test_each_game_played_by_a_collector_is_pettingzoos_game_move_for_move(game: str) -> None:
    env = TurnBasedEnv(game)
    seed = 2**40  # past hanabi's 2**31 - 1: mapped into range, the same way every time
    env.set_seed(seed)
    batch = _collect(env, _policy(game), GAMES[game])
    _assert_legal(batch)
    games = _games(batch)
    assert games, f"no whole game of {game} in {GAMES[game]} moves"
    for _, returns in games:
        if game in COOPERATIVE:
            assert len(set(returns)) == 1  # one shared score
        else:
            assert sum(returns) == pytest.approx(0.0)  # zero-sum: chips or +1/-1/0
    _replay(game, seed, games if game not in LONG else games[:1])


@pytest.mark.parametrize("seed", [2**32 - 1, 2**40])
@pytest.mark.parametrize("game", ["hanabi_v5", "leduc_holdem_v4", "chess_v6"])
def test_serial_envs_take_the_seeds_torchrl_hands_out(game: str, seed: int) -> None:
    env = SerialEnv(2, partial(TurnBasedEnv, game))
    env.set_seed(seed)  # the sub-envs get seeds up to 2**64
    batch = _collect(env, _policy(game), 2 * 16)
    _assert_legal(batch)
    assert batch["next", "done"].any() or game == "chess_v6"
    first = batch[:, 0]
    env.set_seed(seed)
    again = _collect(env, _policy(game), 2 * 16)
    assert torch.equal(again["observation"][:, 0], first["observation"])  # the same seed deals the same games


def test_game_seed_keeps_small_seeds_and_hashes_large_ones_into_range() -> None:
    assert [game_seed(s) for s in (None, 0, 7, SEED_RANGE - 1)] == [None, 0, 7, SEED_RANGE - 1]
    mapped = [game_seed(s) for s in (SEED_RANGE, 2**32 - 1, 2**40, 2**64 - 1, -1)]
    assert all(0 <= s < SEED_RANGE for s in mapped)  # type: ignore[operator]
    assert len(set(mapped)) == len(mapped)
    assert mapped == [game_seed(s) for s in (SEED_RANGE, 2**32 - 1, 2**40, 2**64 - 1, -1)]


def test_chess_flipped_view_for_black_arrives_as_the_boards_copy() -> None:
    env = TurnBasedEnv("chess_v6")
    td = env.reset()
    td["action"] = torch.tensor(int(np.flatnonzero(td["action_mask"].numpy())[0]))
    view = env.step(td)["next"]
    assert view["seat"].item() == 1
    assert np.array_equal(view["observation"].numpy(), env.game.observe("player_1")["observation"])


def test_seat_env_deals_on_when_the_opponent_ends_the_game_before_the_seat_moves() -> None:
    def folder(observation: np.ndarray, mask: np.ndarray, rng: np.random.Generator) -> int:
        return 2 if mask[2] else int(np.flatnonzero(mask)[0])  # leduc's fold, whenever it may

    env = SeatEnv("leduc_holdem_v4", opponent=folder, seat=1)
    for index in range(20):
        env.reset(seed=index)
        assert env.action_masks().any()  # the seat always has a move to make
    assert env.games_over_before_moving > 0


def test_games_without_masks_or_turns_are_refused_naming_what_works() -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        from pettingzoo.classic import rps_v2

    with pytest.raises(ValueError, match=r"without an action mask.*tictactoe_v3"):
        TurnBasedEnv("rps_v2")
    with pytest.raises(ValueError, match=r"not a PettingZoo AEC env.*turn-based game"):
        TurnBasedEnv(rps_v2.parallel_env())
