"""The recurrent buffers against sb3-contrib's: the same minibatches of whole sequences, field for field, from a
rollout held in the TensorDict storage, with each step's mask."""

from __future__ import annotations

import copy
from typing import Any

import numpy as np
import pytest
import torch
from gymnasium import spaces
from helpers import random_step
from sb3_contrib.common.recurrent.buffers import RecurrentDictRolloutBuffer, RecurrentRolloutBuffer
from sb3_contrib.common.recurrent.type_aliases import RNNStates
from stable_baselines3.common.callbacks import BaseCallback
from stable_baselines3.common.env_util import make_vec_env
from torchrl.modules import LSTMModule

from torchrl_mask import MaskableRecurrentPPO
from torchrl_mask.rollout.recurrent_buffers import (
    STATE_KEYS,
    MaskableRecurrentDictRolloutBuffer,
    MaskableRecurrentRolloutBuffer,
)

T, N_ENVS, LAYERS, HIDDEN = 10, 3, 2, 4
CASES: dict[str, tuple[spaces.Space, spaces.Space]] = {
    "box-discrete": (spaces.Box(-1, 1, (3,), np.float32), spaces.Discrete(5)),
    "discrete-multidiscrete": (spaces.Discrete(6), spaces.MultiDiscrete([3, 2, 4])),
    "dict-discrete": (
        spaces.Dict({"a": spaces.Box(-1, 1, (3,), np.float32), "b": spaces.Box(0, 255, (2, 2), np.uint8)}),
        spaces.Discrete(5),
    ),
}


def pair(case: str) -> tuple[Any, Any]:
    obs_space, action_space = CASES[case]
    dict_obs = isinstance(obs_space, spaces.Dict)
    ref_cls = RecurrentDictRolloutBuffer if dict_obs else RecurrentRolloutBuffer
    our_cls = MaskableRecurrentDictRolloutBuffer if dict_obs else MaskableRecurrentRolloutBuffer
    args = (T, obs_space, action_space, (T, LAYERS, N_ENVS, HIDDEN), "cpu")
    return ref_cls(*args, gae_lambda=0.9, gamma=0.97, n_envs=N_ENVS), our_cls(*args, 0.9, 0.97, N_ENVS)


def fill(ref: Any, ours: Any, seed: int) -> np.ndarray:
    """The same random rollout (LSTM states, episode starts every few steps) into both; returns the masks
    ``(T, n_envs, mask_dims)``."""
    rng = np.random.default_rng(seed)
    masks = []
    for _ in range(T):
        step = random_step(ref.observation_space, ref.action_space, N_ENVS, rng, p_start=0.25)
        masks.append(step.pop("action_masks"))
        action = step["action"].reshape(N_ENVS, -1)
        states = RNNStates(*[tuple(torch.randn(LAYERS, N_ENVS, HIDDEN) for _ in range(2)) for _ in range(2)])
        fields = (step["obs"], action, step["reward"], step["episode_start"], step["value"], step["log_prob"])
        ref.add(*fields, lstm_states=states)
        ours.add(*fields, lstm_states=states, action_masks=masks[-1])
    last_values, dones = torch.as_tensor(rng.normal(size=(N_ENVS, 1)), dtype=torch.float32), rng.random(N_ENVS) < 0.3
    for buffer in (ref, ours):
        buffer.compute_returns_and_advantage(last_values, dones)
    return np.stack(masks)


def assert_same(ref: Any, ours: Any, name: str) -> None:
    """Bit-equal tensors of the same dtype and shape, also inside dicts and (named) tuples such as ``RNNStates``."""
    if isinstance(ref, dict):
        assert list(ours) == list(ref), name
        for key in ref:
            assert_same(ref[key], ours[key], f"{name}[{key!r}]")
    elif isinstance(ref, tuple):
        assert len(ours) == len(ref), name
        for index, (ref_item, our_item) in enumerate(zip(ref, ours, strict=True)):
            assert_same(ref_item, our_item, f"{name}[{index}]")
    else:
        assert ours.dtype == ref.dtype and ours.shape == ref.shape and torch.equal(ours, ref), name


@pytest.mark.parametrize("batch_size", [7, 16, None])
@pytest.mark.parametrize("case", CASES)
def test_minibatches_are_sb3_contribs_field_for_field_under_one_seed(case: str, batch_size: int | None) -> None:
    ref, ours = pair(case)
    fill(ref, ours, seed=5)
    padded = 0
    for epoch in range(3):
        np.random.seed(epoch)
        ref_batches = list(ref.get(batch_size))
        np.random.seed(epoch)
        our_batches = list(ours.get(batch_size))
        assert len(our_batches) == len(ref_batches)
        for ref_batch, our_batch in zip(ref_batches, our_batches, strict=True):
            for name, value in ref_batch._asdict().items():
                assert_same(value, getattr(our_batch, name), name)
            padded += int((our_batch.mask == 0).sum())
    assert padded > 0  # the cases split sequences and pad them
    # After get(), SB3's names read as sb3-contrib's flattened arrays.
    for name in ("actions", "values", "log_probs", "advantages", "returns", "episode_starts", "hidden_states_vf"):
        assert np.array_equal(getattr(ours, name), getattr(ref, name)), name
        assert getattr(ours, name).dtype == getattr(ref, name).dtype, name


@pytest.mark.parametrize("case", ["box-discrete", "discrete-multidiscrete"])
def test_each_step_of_a_minibatch_carries_its_own_mask_and_padding_allows_all(case: str) -> None:
    ref, ours = pair(case)
    masks = fill(ref, ours, seed=2)
    flat_masks = torch.as_tensor(masks.swapaxes(0, 1).reshape(T * N_ENVS, -1), dtype=torch.float32)
    flat_log_probs = torch.as_tensor(ours.log_probs[:, 0])  # unique random floats: they name each step's row
    np.random.seed(0)
    for batch in ours.get(8):
        valid = batch.mask > 0.5
        assert torch.all(batch.action_masks[~valid] == 1.0)
        for row in torch.nonzero(valid).flatten().tolist():
            (step,) = torch.nonzero(flat_log_probs == batch.old_log_prob[row]).flatten().tolist()
            assert torch.equal(batch.action_masks[row], flat_masks[step])
    assert ours.last_action_masks is batch.action_masks


def test_the_rollout_is_one_tensordict_with_the_lstm_states_under_nested_keys() -> None:
    ref, ours = pair("dict-discrete")
    fill(ref, ours, seed=1)
    storage = ours.tensordict
    assert tuple(storage.batch_size) == (N_ENVS, T)
    for key in STATE_KEYS:
        assert storage.get(key).shape == (N_ENVS, T, LAYERS, HIDDEN)
    assert storage.get("is_init").dtype == torch.bool and storage.get("action_mask").dtype == torch.bool
    assert ("observation", "b") in storage.keys(include_nested=True)
    # sb3-contrib keeps (T, n_layers, n_envs, hidden); the storage is env-major (n_envs, T, n_layers, hidden).
    hidden = storage.get(("recurrent_state", "actor", "hidden"))
    assert torch.equal(hidden.permute(1, 2, 0, 3), torch.as_tensor(ref.hidden_states_pi))


def test_add_with_lstm_states_of_the_wrong_shape_raises_and_writes_nothing() -> None:
    _, ours = pair("box-discrete")
    rng = np.random.default_rng(0)
    step = random_step(ours.observation_space, ours.action_space, N_ENVS, rng)
    masks = step.pop("action_masks")
    wrong = (torch.zeros(LAYERS, N_ENVS + 1, HIDDEN), torch.zeros(LAYERS, N_ENVS + 1, HIDDEN))
    with pytest.raises(ValueError, match=r"lstm_states.pi\[0\] has shape"):
        ours.add(*step.values(), lstm_states=RNNStates(wrong, wrong), action_masks=masks)
    assert ours.pos == 0 and not ours.tensordict.get("observation").any()


def test_a_mask_row_that_allows_nothing_is_refused_before_anything_is_written() -> None:
    _, ours = pair("box-discrete")
    step = random_step(ours.observation_space, ours.action_space, N_ENVS, np.random.default_rng(0))
    masks = step.pop("action_masks")
    masks[1] = False
    states = RNNStates(*[tuple(torch.ones(LAYERS, N_ENVS, HIDDEN) for _ in range(2)) for _ in range(2)])
    with pytest.raises(ValueError, match="no action"):
        ours.add(*step.values(), lstm_states=states, action_masks=masks)
    assert ours.pos == 0 and not ours.tensordict.get(STATE_KEYS[0]).any()


def test_torchrls_lstm_module_reads_the_stored_states_and_is_init_as_they_are() -> None:
    """TorchRL's ``LSTMModule`` with the actor LSTM's weights, fed one stored step (its observation, the state the
    step started from and ``is_init``), gives the state the next stored step started from."""

    class LstmWeights(BaseCallback):
        """The actor LSTM's weights the last rollout was collected with (train changes them after)."""

        def _on_rollout_end(self) -> None:
            self.weights = copy.deepcopy(self.model.policy.lstm_actor.state_dict())

        def _on_step(self) -> bool:
            return True

    env = make_vec_env("CartPole-v1", n_envs=2, seed=0)
    model = MaskableRecurrentPPO(
        "MlpLstmPolicy",
        env,
        n_steps=32,
        batch_size=32,
        n_epochs=1,
        seed=0,
        policy_kwargs={"lstm_hidden_size": 8, "n_lstm_layers": 2},
    )
    weights = LstmWeights()
    model.learn(64, callback=weights, use_masking=False)
    rollout = model.rollout_buffer.tensordict
    assert rollout.get("is_init")[:, 1:].any()  # episodes of CartPole end within the rollout
    hidden, cell = ("recurrent_state", "actor", "hidden"), ("recurrent_state", "actor", "cell")
    module = LSTMModule(
        input_size=4,
        hidden_size=8,
        num_layers=2,
        in_keys=["observation", hidden, cell],
        out_keys=["features", ("next", *hidden), ("next", *cell)],
    )
    module.lstm.load_state_dict(weights.weights)
    for t in range(rollout.batch_size[1] - 1):
        step = module(rollout[:, t].clone())
        for key in (hidden, cell):
            torch.testing.assert_close(step.get(("next", *key)), rollout[:, t + 1].get(key), rtol=0, atol=1e-6)


def test_each_buffer_refuses_the_other_kind_of_observation_space_naming_the_one_to_use() -> None:
    box, dict_space = spaces.Box(-1, 1, (3,)), spaces.Dict({"a": spaces.Box(-1, 1, (3,))})
    shape = (T, LAYERS, N_ENVS, HIDDEN)
    with pytest.raises(TypeError, match=r"MaskableRecurrentRolloutBuffer got a Dict.*use MaskableRecurrentDictRollout"):
        MaskableRecurrentRolloutBuffer(T, dict_space, spaces.Discrete(3), shape, "cpu", n_envs=N_ENVS)
    with pytest.raises(TypeError, match=r"MaskableRecurrentDictRolloutBuffer needs a Dict.*use MaskableRecurrentRoll"):
        MaskableRecurrentDictRolloutBuffer(T, box, spaces.Discrete(3), shape, "cpu", n_envs=N_ENVS)
