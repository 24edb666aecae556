"""Copies of buffers and models (pickle, deepcopy, cloudpickle, save/load) write into their own storage."""

from __future__ import annotations

import copy
import pickle

import cloudpickle
import numpy as np
import pytest
import torch
from helpers import ACTION_SPACES, OBS_SPACES, make_pair, random_step
from sb3_contrib.common.envs import InvalidActionEnvDiscrete

from torchrl_mask import MaskablePPO

COPIERS = {
    "pickle": lambda obj: pickle.loads(pickle.dumps(obj)),
    "deepcopy": copy.deepcopy,
    "cloudpickle": lambda obj: cloudpickle.loads(cloudpickle.dumps(obj)),
}


def _half_filled(obs="dict", **kwargs):
    ref, ours = make_pair(OBS_SPACES[obs], ACTION_SPACES["multidiscrete"], buffer_size=4, n_envs=2, **kwargs)
    rng = np.random.default_rng(0)
    for _ in range(2):
        step = random_step(ours.observation_space, ours.action_space, 2, rng)
        ref.add(**step)
        ours.add(**step)
    return ref, ours, rng


def _bits(tensor: torch.Tensor) -> torch.Tensor:
    """A float tensor's bytes: compares NaN (uninitialised slots may hold it) as equal to itself."""
    return tensor.contiguous().view(torch.uint8) if tensor.is_floating_point() else tensor


def _assert_same(td_a, td_b, same: bool) -> None:
    for key, value in td_a.items(include_nested=True, leaves_only=True):
        equal = torch.equal(_bits(value), _bits(td_b.get(key)))
        if same:
            assert equal, f"{key} differs"
        elif not equal:
            return
    assert same, "the two rollouts are equal"


@pytest.mark.parametrize("how", list(COPIERS))
def test_a_copied_buffer_writes_into_its_own_storage_and_the_original_into_its_own(how):
    ref, ours, rng = _half_filled()
    ref_copy, our_copy = COPIERS[how](ref), COPIERS[how](ours)
    before = ours.tensordict.clone()
    for _ in range(2):  # the copies fill up; the originals stay as they were
        step = random_step(ours.observation_space, ours.action_space, 2, rng)
        ref_copy.add(**step)
        our_copy.add(**step)
    _assert_same(ours.tensordict, before, same=True)
    for name in ("rewards", "values", "log_probs", "actions", "episode_starts", "action_masks"):
        np.testing.assert_array_equal(getattr(our_copy, name), getattr(ref_copy, name), err_msg=name)
    for key in ref_copy.observations:
        np.testing.assert_array_equal(our_copy.observations[key], ref_copy.observations[key], err_msg=key)
    step = random_step(ours.observation_space, ours.action_space, 2, rng)
    ours.add(**step)  # and the original still writes into its own storage, not the copy's
    np.testing.assert_array_equal(ours.rewards[2], step["reward"])
    np.testing.assert_array_equal(our_copy.rewards, ref_copy.rewards)


def test_a_copied_memmap_buffer_gets_its_own_files(tmp_path):
    _, ours, rng = _half_filled(obs="box", storage="memmap", memmap_dir=tmp_path / "named")
    for how, copier in COPIERS.items():
        twin = copier(ours)
        assert twin.tensordict.is_memmap(), how
        _assert_same(twin.tensordict, ours.tensordict, same=True)
        step = random_step(ours.observation_space, ours.action_space, 2, rng)
        step["reward"] = np.full(2, 123.0, dtype=np.float32)
        twin.add(**step)
        assert not (ours.rewards == 123.0).any(), f"{how}: the copy wrote into the original's files"
        assert (twin.rewards[2] == 123.0).all(), how


def _model():
    env = InvalidActionEnvDiscrete(dim=6, n_invalid_actions=3)
    return MaskablePPO("MlpPolicy", env, n_steps=32, batch_size=16, n_epochs=1, seed=0)


@pytest.mark.parametrize("how", ["pickle", "cloudpickle"])  # sb3-contrib's models do not deepcopy either
def test_a_copied_model_trains_on_the_rollouts_it_collects(how):
    model = _model().learn(32)
    collected = model.rollout_buffer.tensordict.clone()
    twin = COPIERS[how](model)
    twin.learn(64)
    _assert_same(model.rollout_buffer.tensordict, collected, same=True)
    # The copy's rollout is the one it collected last, not the original's: at least its observations changed.
    _assert_same(twin.rollout_buffer.tensordict, collected, same=False)
    obs = twin.rollout_buffer.tensordict["observation"]
    np.testing.assert_array_equal(twin.rollout_buffer.observations, obs.transpose(0, 1).numpy())
    assert not torch.equal(obs, collected["observation"])


def test_a_saved_and_loaded_model_trains_on_the_rollouts_it_collects(tmp_path):
    model = _model().learn(32)
    model.save(tmp_path / "model.zip")
    loaded = MaskablePPO.load(tmp_path / "model.zip", env=model.get_env())
    loaded.learn(32)
    buf = loaded.rollout_buffer
    assert buf.full and bool(buf.tensordict["is_init"][:, 0].all())  # learn() starts with new episodes
    recorded = [buf.tensordict["observation"][0, t] for t in range(buf.buffer_size)]
    np.testing.assert_array_equal(buf.observations[:, 0], torch.stack(recorded).numpy())
