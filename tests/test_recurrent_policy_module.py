"""MaskableRecurrentPolicyModule: MaskableRecurrentPPO's LSTM policy in a real TorchRL Collector, its states
carried in the TensorDict from step to step and restarted where ``is_init`` says an episode starts."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from collector_envs import CueRecall
from stable_baselines3.common.env_util import make_vec_env
from tensordict.nn import InteractionType
from torchrl.collectors import Collector

from torchrl_mask import MaskablePPO, MaskableRecurrentPPO, masked_gym_env
from torchrl_mask.rollout.recurrent_buffers import STATE_KEYS
from torchrl_mask.torchrl.recurrent_policy import MaskableRecurrentPolicyModule

STEPS = 15  # five episodes of the memory task


def collected(exploration: InteractionType) -> tuple[MaskableRecurrentPPO, object]:
    model = MaskableRecurrentPPO(
        "MlpLstmPolicy",
        make_vec_env(CueRecall, n_envs=1),
        n_steps=16,
        batch_size=16,
        seed=0,
        policy_kwargs={"lstm_hidden_size": 4},
    )
    module = MaskableRecurrentPolicyModule(model.policy)
    env = masked_gym_env(CueRecall())  # with TorchRL's InitTracker: "is_init"
    env.append_transform(module.make_tensordict_primer())
    env.set_seed(0)
    collector = Collector(env, module, frames_per_batch=STEPS, total_frames=STEPS, exploration_type=exploration)
    try:
        return model, next(iter(collector))
    finally:
        collector.shutdown()


def test_a_collector_takes_predicts_actions_with_the_state_carried() -> None:
    model, batch = collected(InteractionType.DETERMINISTIC)
    obs, starts, masks = batch["observation"].numpy(), batch["is_init"][:, 0].numpy(), batch["action_mask"].numpy()
    assert starts.sum() == STEPS // 3  # the episodes restart in the batch
    state, actions, hidden = None, [], []
    for t in range(STEPS):
        action, state = model.predict(obs[[t]], state, starts[[t]], deterministic=True, action_masks=masks[[t]])
        actions.append(int(action[0]))
        hidden.append(state[0][:, 0])
    assert actions == batch["action"].tolist()
    np.testing.assert_allclose(np.stack(hidden), batch["next", "recurrent_state", "actor", "hidden"].numpy(), atol=1e-6)


def test_the_states_go_on_within_an_episode_and_restart_from_zeros_at_is_init() -> None:
    _, batch = collected(InteractionType.RANDOM)
    starts = batch["is_init"][:, 0]
    for key in STATE_KEYS:
        before, after = batch[key], batch[("next", *key)]
        assert torch.equal(before[1:][~starts[1:]], after[:-1][~starts[1:]])
        assert not before[starts].any()
        assert after.abs().sum() > 0


def test_a_feedforward_policy_is_refused_naming_the_module_to_use() -> None:
    model = MaskablePPO("MlpPolicy", make_vec_env(CueRecall, n_envs=1), n_steps=16, batch_size=16)
    with pytest.raises(TypeError, match="use MaskablePolicyModule"):
        MaskableRecurrentPolicyModule(model.policy)  # type: ignore[arg-type]


def test_a_step_with_states_but_no_is_init_is_refused_and_zero_states_start_an_episode() -> None:
    model, batch = collected(InteractionType.DETERMINISTIC)
    module = MaskableRecurrentPolicyModule(model.policy)
    going_on = batch[1].exclude("is_init", "next", "action", "sample_log_prob", "state_value")
    assert any(going_on.get(key).any() for key in STATE_KEYS)  # a step inside an episode: its states are not zeros
    with pytest.raises(ValueError, match=r"no \"is_init\".*InitTracker\(\)"):
        module(going_on.clone())
    first = batch[0].exclude("is_init", "next", "action", "sample_log_prob", "state_value")
    assert not any(first.get(key).any() for key in STATE_KEYS)
    assert module(first.clone())["is_init"].all()  # zero states without "is_init": an episode's first step
