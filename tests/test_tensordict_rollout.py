"""The rollout object under the buffers: its keys, its step writes, its copies, and the one next-step shift."""

from __future__ import annotations

import pickle

import numpy as np
import pytest
import torch
from gymnasium import spaces
from helpers import ACTION_SPACES, OBS_SPACES, random_step

from torchrl_mask.rollout import storage as st
from torchrl_mask.rollout.advantage import next_step
from torchrl_mask.rollout.observations import DictLeaves, observation_layout
from torchrl_mask.rollout.tensordict_rollout import TensorDictRollout


def _rollout(obs_space: spaces.Space, n_steps: int = 4, n_envs: int = 2) -> TensorDictRollout:
    action_space = ACTION_SPACES["multidiscrete"]
    storage = st.allocate_rollout(n_steps, n_envs, obs_space, action_space, torch.device("cpu")).zero_()
    return TensorDictRollout(storage, obs_space, action_space)


def _write(rollout: TensorDictRollout, pos: int, rng: np.random.Generator) -> dict:
    step = random_step(rollout.observation_space, rollout.action_space, rollout.n_envs, rng)
    fields = (step["action"], step["reward"], step["episode_start"], step["value"], step["log_prob"])
    obs_items = rollout.layout.split(step["obs"])
    rollout.write_step(pos, obs_items, fields, step["action_masks"], check_masks=True, check_values=True)
    return step


@pytest.mark.parametrize(
    ("path", "storage_key", "batch_key"),
    [
        ((), "observation", "observation"),
        (("image",), ("observation", "image"), "image"),
        (("board", "cells"), ("observation", "board", "cells"), ("board", "cells")),
    ],
)
def test_a_leaf_path_has_one_storage_key_and_one_collector_key(path, storage_key, batch_key):
    assert st.observation_key(path) == storage_key
    assert st.batch_observation_key(path) == batch_key


def test_every_observation_leaf_of_a_nested_space_is_stored_under_its_key():
    space = spaces.Dict({"board": spaces.Dict({"cells": spaces.MultiBinary(3)}), "turn": spaces.Discrete(2)})
    rollout = _rollout(space)
    assert rollout.observation_paths == [("board", "cells"), ("turn",)]
    for path, leaf in zip(rollout.observation_paths, rollout.observations, strict=True):
        assert leaf is rollout.tensordict.get(st.observation_key(path))


def test_a_written_step_lands_in_its_position_of_every_env_and_nowhere_else():
    rollout = _rollout(OBS_SPACES["dict"])
    before = rollout.tensordict.clone()
    step = _write(rollout, 2, np.random.default_rng(0))
    td = rollout.tensordict
    np.testing.assert_array_equal(td.get(("observation", "vec"))[:, 2].numpy(), step["obs"]["vec"])
    np.testing.assert_array_equal(td.get("action")[:, 2].numpy(), step["action"])
    np.testing.assert_array_equal(td.get("state_value")[:, 2, 0], step["value"].reshape(-1))
    np.testing.assert_array_equal(td.get("action_mask")[:, 2].numpy(), step["action_masks"])
    for key, leaf in td.items(include_nested=True, leaves_only=True):
        others = [t for t in range(4) if t != 2]
        old = before.get(key)[:, others]
        assert torch.equal(leaf[:, others], old), key


def test_a_pickled_rollout_derives_its_views_from_its_own_storage():
    rollout = _rollout(OBS_SPACES["dict"])
    rng = np.random.default_rng(1)
    _write(rollout, 0, rng)
    copy = pickle.loads(pickle.dumps(rollout))
    assert set(copy.__getstate__()) == {"tensordict", "observation_space", "action_space"}
    original = rollout.tensordict.clone()
    step = _write(copy, 1, rng)
    np.testing.assert_array_equal(copy.tensordict.get("action")[:, 1].numpy(), step["action"])
    for key, leaf in rollout.tensordict.items(include_nested=True, leaves_only=True):
        assert torch.equal(leaf, original.get(key)), key
    for leaf in copy.observations:
        assert all(
            leaf.untyped_storage().data_ptr() != other.untyped_storage().data_ptr() for other in rollout.observations
        )


@pytest.mark.parametrize("kind", ["numpy", "torch"])
def test_next_step_shifts_along_time_and_puts_the_last_entry_after_the_rollout(kind):
    steps = np.arange(12, dtype=np.float32).reshape(2, 6)
    out = np.full_like(steps, -1)
    last = np.array([100, 200], dtype=np.float32)
    if kind == "torch":
        steps, out, last = torch.from_numpy(steps), torch.from_numpy(out), torch.from_numpy(last)
    result = next_step(steps, last, out=out)
    assert result is out
    np.testing.assert_array_equal(np.asarray(out), [[1, 2, 3, 4, 5, 100], [7, 8, 9, 10, 11, 200]])


def test_a_dict_layout_splits_and_packs_nested_observations_in_the_spaces_order():
    space = spaces.Dict({"a": spaces.Discrete(2), "b": spaces.Dict({"c": spaces.Discrete(3)})})
    layout = observation_layout(space)
    assert isinstance(layout, DictLeaves)
    assert layout.split({"b": {"c": 2}, "a": 1}) == [1, 2]
    assert layout.pack([10, 20]) == {"a": 10, "b": {"c": 20}}
    with pytest.raises(ValueError, match=r"missing \['b/c'\], unknown \['b/d'\]"):
        layout.split({"a": 1, "b": {"d": 2}})
