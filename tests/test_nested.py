"""Nested Dict observations end to end: MaskablePPO from a gymnasium env or a VecEnv, predict, save/load, and a
TorchRL collector; parity with sb3-contrib on the same env flattened one level."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
import pytest
import sb3_contrib
import torch
from gymnasium import spaces
from stable_baselines3.common.env_util import make_vec_env
from torchrl.collectors import Collector

from torchrl_mask import (
    MaskableDictRolloutBuffer,
    MaskablePolicyModule,
    MaskablePPO,
    learn_from_collector,
    masked_gym_env,
)
from torchrl_mask.torchrl.nested import FlattenNestedDict, flatten_nested_env, flatten_observation, flatten_space

CELLS = 5
SETTINGS: dict[str, Any] = {
    "n_steps": 16,
    "batch_size": 8,
    "n_epochs": 2,
    "seed": 3,
    "policy_kwargs": {"net_arch": [16]},
    "device": "cpu",
}


class BoardEnv(gym.Env):
    """A game with a nested Dict observation: a board of cells (taken or free) and a player.

    A move takes a free cell: the mask is ``cells == 0``, so a stored mask row must be the complement of the
    stored board of the same step. Reward 1 for the first two cells; episodes are cut after 8 moves.
    """

    def __init__(self) -> None:
        self.observation_space = spaces.Dict(
            {
                "board": spaces.Dict({"cells": spaces.MultiBinary(CELLS), "turn": spaces.Discrete(2)}),
                "player": spaces.Dict({"pos": spaces.Box(-1, 1, (2,), np.float32), "lives": spaces.Discrete(3)}),
            }
        )
        self.action_space = spaces.Discrete(CELLS)
        self._cells = np.zeros(CELLS, np.int8)
        self._t = 0

    def _obs(self) -> dict[str, Any]:
        self._cells = (self.np_random.random(CELLS) < 0.5).astype(np.int8)
        self._cells[self.np_random.integers(CELLS)] = 0  # one free cell at least
        return {
            "board": {"cells": self._cells.copy(), "turn": int(self._t % 2)},
            "player": {"pos": self.np_random.uniform(-1, 1, 2).astype(np.float32), "lives": int(self._t % 3)},
        }

    def reset(self, *, seed: int | None = None, options: dict | None = None) -> tuple[dict[str, Any], dict]:
        super().reset(seed=seed)
        self._t = 0
        return self._obs(), {}

    def step(self, action: Any) -> tuple[dict[str, Any], float, bool, bool, dict]:
        assert self._cells[int(action)] == 0, "a masked move was played"
        self._t += 1
        reward = float(int(action) < 2)
        return self._obs(), reward, False, self._t >= 8, {}

    def action_masks(self) -> np.ndarray:
        return self._cells == 0


def parameters(model: Any) -> dict[str, torch.Tensor]:
    return {key: value.detach().clone() for key, value in model.policy.state_dict().items()}


def assert_masks_are_the_stored_boards_free_cells(model: MaskablePPO) -> None:
    """The nested leaf and the mask of each stored step belong together (and the moves were allowed)."""
    rollout = model.rollout_buffer.tensordict
    cells = rollout["observation", "board", "cells"]
    assert cells.dtype == torch.int8 and rollout["observation", "board", "turn"].shape[-1] == 1
    assert torch.equal(rollout["action_mask"], cells == 0)
    assert bool(rollout["action_mask"].gather(-1, rollout["action"].unsqueeze(-1)).all())


@pytest.mark.parametrize("n_envs", [1, 2], ids=["gym-env", "vec-env"])
def test_learns_the_same_parameters_as_sb3_contrib_on_the_env_flattened_one_level(n_envs: int) -> None:
    # sb3-contrib trains on the env flattened one level; ours takes the nested env itself (a gymnasium env), or
    # a VecEnv built with the wrapper as SB3 users build one. Each model is made and trained in turn: the seed
    # sets the global RNGs at construction.
    iterations = 3 * SETTINGS["n_steps"] * n_envs
    ref_env = make_vec_env(BoardEnv, n_envs, wrapper_class=FlattenNestedDict)
    ref = sb3_contrib.MaskablePPO("MultiInputPolicy", ref_env, **SETTINGS).learn(iterations)
    ours_env = BoardEnv() if n_envs == 1 else make_vec_env(BoardEnv, n_envs, wrapper_class=FlattenNestedDict)
    ours = MaskablePPO("MultiInputPolicy", ours_env, **SETTINGS)
    initial = parameters(ours)
    assert list(ours.observation_space.spaces) == ["board/cells", "board/turn", "player/lives", "player/pos"]
    ours.learn(iterations)

    assert list(parameters(ours)) == list(parameters(ref))
    for key, value in parameters(ref).items():
        assert torch.equal(parameters(ours)[key], value), f"policy parameter {key!r} differs from sb3-contrib's"
    assert not torch.equal(parameters(ours)["action_net.weight"], initial["action_net.weight"])
    # The last rollout, stored under nested keys, is sb3-contrib's (whose get() left it flattened env-major).
    for flat, nested in [("board/cells", ("board", "cells")), ("player/pos", ("player", "pos"))]:
        stored = ours.rollout_buffer.tensordict.get(("observation", *nested))
        expected = torch.as_tensor(ref.rollout_buffer.observations[flat])
        assert torch.equal(stored.reshape(expected.shape), expected)
    assert_masks_are_the_stored_boards_free_cells(ours)


def test_predict_takes_the_nested_observation_as_the_env_returns_it() -> None:
    model = MaskablePPO("MultiInputPolicy", BoardEnv(), **SETTINGS)
    env = BoardEnv()
    obs, _ = env.reset(seed=5)
    action, _ = model.predict(obs, deterministic=True, action_masks=env.action_masks())
    flat_action, _ = model.predict(flatten_observation(obs), deterministic=True, action_masks=env.action_masks())
    assert action == flat_action and env.action_masks()[int(action)]
    # A batch of nested observations, as a VecEnv of nested envs would give them before flattening.
    batch = {
        "board": {k: np.stack([v] * 3) for k, v in obs["board"].items()},
        "player": {k: np.stack([v] * 3) for k, v in obs["player"].items()},
    }
    actions, _ = model.predict(batch, deterministic=True, action_masks=np.stack([env.action_masks()] * 3))
    assert actions.tolist() == [int(action)] * 3


def test_a_saved_model_loads_with_the_nested_env_and_keeps_training(tmp_path: Path) -> None:
    model = MaskablePPO("MultiInputPolicy", BoardEnv(), **SETTINGS).learn(16)
    model.save(tmp_path / "model.zip")
    loaded = MaskablePPO.load(tmp_path / "model.zip", env=BoardEnv(), device="cpu")
    for key, value in parameters(model).items():
        assert torch.equal(parameters(loaded)[key], value), key
    loaded.learn(16)
    assert_masks_are_the_stored_boards_free_cells(loaded)


def test_learns_through_a_collector_with_nested_observation_keys() -> None:
    model = MaskablePPO("MultiInputPolicy", BoardEnv(), **SETTINGS)
    initial = parameters(model)
    policy = MaskablePolicyModule(model.policy)
    assert policy.in_keys == [
        ("board", "cells"),
        ("board", "turn"),
        ("player", "lives"),
        ("player", "pos"),
        "action_mask",
    ]
    collector = Collector(lambda: masked_gym_env(BoardEnv()), policy, frames_per_batch=16, total_frames=-1)
    collector.set_seed(0)
    collector.reset()  # set_seed reseeds the env but keeps the step it had: without this, a stale first mask
    learn_from_collector(model, collector, total_timesteps=48)
    assert model.num_timesteps == 48
    assert not torch.equal(parameters(model)["action_net.weight"], initial["action_net.weight"])
    assert_masks_are_the_stored_boards_free_cells(model)


def test_flat_dict_keys_that_clash_once_nested_are_refused_before_anything_is_stored() -> None:
    space = spaces.Dict({"a": spaces.Discrete(2), "a/b": spaces.Discrete(3)})
    with pytest.raises(ValueError, match=r"\['a'\].*rename"):
        MaskableDictRolloutBuffer(4, space, spaces.Discrete(2))


def test_flattening_refuses_a_key_with_a_slash_and_a_non_dict_space() -> None:
    space = spaces.Dict({"x": spaces.Dict({"a/b": spaces.Discrete(2)})})
    with pytest.raises(ValueError, match=r"'a/b'.*rename"):
        flatten_space(space)
    with pytest.raises(TypeError, match="flattens Dict observation spaces"):
        FlattenNestedDict(gym.make("CartPole-v1"))


def test_only_nested_gym_envs_are_wrapped_and_the_mask_stays_reachable() -> None:
    cartpole = gym.make("CartPole-v1")
    assert flatten_nested_env(cartpole) is cartpole
    wrapped = flatten_nested_env(BoardEnv())
    assert isinstance(wrapped, FlattenNestedDict)
    obs, _ = wrapped.reset(seed=1)
    assert obs.keys() == wrapped.observation_space.spaces.keys() and wrapped.observation_space.contains(obs)
    assert np.array_equal(wrapped.get_wrapper_attr("action_masks")(), obs["board/cells"] == 0)


def test_a_flattened_space_is_stored_as_its_nested_space_is() -> None:
    # The '/' key mapping: a buffer of the flattened space (MaskablePPO's) fills the same rollout TensorDict as a
    # buffer of the nested space given the nested observations, and its minibatches keep SB3's flat keys.
    nested_space = BoardEnv().observation_space
    flat, nested = (
        MaskableDictRolloutBuffer(3, space, spaces.Discrete(CELLS), "cpu", n_envs=2)
        for space in (flatten_space(nested_space), nested_space)
    )
    rng = np.random.default_rng(0)
    for _ in range(3):
        nested_space.seed(int(rng.integers(1 << 31)))
        samples = [nested_space.sample() for _ in range(2)]
        obs = {key: {sub: np.stack([s[key][sub] for s in samples]) for sub in samples[0][key]} for key in samples[0]}
        step = (np.zeros(2, np.int64), np.ones(2), np.zeros(2), torch.zeros(2), torch.zeros(2))
        flat.add(flatten_observation(obs), *step, action_masks=np.ones((2, CELLS), bool))
        nested.add(obs, *step, action_masks=np.ones((2, CELLS), bool))
    assert set(flat.tensordict.keys(True, True)) == set(nested.tensordict.keys(True, True))
    assert (flat.tensordict == nested.tensordict).all()
    flat.compute_returns_and_advantage(torch.zeros(2), np.zeros(2))
    assert sorted(next(flat.get(6)).observations) == ["board/cells", "board/turn", "player/lives", "player/pos"]
