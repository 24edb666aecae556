"""MaskableRecurrentPPO learning from TorchRL collectors: an in-process ``Collector`` seeded as the VecEnv path gives
the VecEnv path's parameters bit for bit, the memory task is learned through ``MultiSyncCollector`` workers, and
collectors that cannot give the LSTM's rollout are refused naming the fix."""

from __future__ import annotations

import functools
from typing import Any

import gymnasium as gym
import numpy as np
import pytest
import torch
from collector_envs import (
    SMALL,
    CollectedByTheLearnersLSTM,
    CueRecall,
    invalid_discrete_env,
    invalid_discrete_env_gym,
    recurrent_cue_recall_env,
    worker_children,
)
from stable_baselines3.common.env_util import make_vec_env
from torchrl.collectors import Collector, MultiSyncCollector
from torchrl.envs import SerialEnv

from torchrl_mask import MaskablePolicyModule, MaskablePPO, MaskableRecurrentPPO, masked_gym_env
from torchrl_mask.rollout.recurrent_buffers import STATE_KEYS, MaskableRecurrentRolloutBuffer
from torchrl_mask.torchrl.recurrent_policy import MaskableRecurrentPolicyModule

N_ENVS, N_STEPS, SEED = 2, 16, 3
LSTM = {"lstm_hidden_size": 8, "net_arch": [16]}


def recurrent_model(seed: int = SEED, **kwargs: Any) -> MaskableRecurrentPPO:
    settings = {"n_steps": N_STEPS, "batch_size": 12, "n_epochs": 2, "seed": seed, "policy_kwargs": LSTM, **kwargs}
    return MaskableRecurrentPPO("MlpLstmPolicy", make_vec_env(CueRecall, n_envs=N_ENVS, seed=seed), **settings)


class FirstResetSeeded(gym.Wrapper):
    """Seeds the env's first reset, as ``make_vec_env(seed=s)`` seeds env ``i``'s with ``s + i``."""

    def __init__(self, env: gym.Env, seed: int) -> None:
        super().__init__(env)
        self._seed: int | None = seed

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> Any:
        seed, self._seed = (self._seed if seed is None else seed), None
        return self.env.reset(seed=seed, options=options)


def seeded_cue_recall(seed: int, module: MaskableRecurrentPolicyModule) -> Any:
    return masked_gym_env(FirstResetSeeded(CueRecall(), seed)).append_transform(module.make_tensordict_primer())


def learned_through_a_collector(total: int) -> MaskableRecurrentPPO:
    """The VecEnv path's model, learning from an in-process ``Collector`` over the same envs, each seeded as
    ``make_vec_env`` seeds it, and torch's generator as it is after the model was built (the collector draws from it
    when it tries the policy)."""
    model = recurrent_model()
    module = MaskableRecurrentPolicyModule(model.policy)
    generator = torch.get_rng_state()
    envs = SerialEnv(N_ENVS, [functools.partial(seeded_cue_recall, SEED + i, module) for i in range(N_ENVS)])
    collector = Collector(envs, module, frames_per_batch=N_ENVS * N_STEPS)
    torch.set_rng_state(generator)
    return model.learn(total, collector=collector)


def test_an_in_process_collector_seeded_as_the_vecenv_path_learns_its_parameters_bit_for_bit() -> None:
    total = 2 * N_ENVS * N_STEPS
    ref = recurrent_model().learn(total)
    ours = learned_through_a_collector(total)
    assert ours.num_timesteps == ref.num_timesteps == total and ours._n_updates == ref._n_updates == 4
    ref_params, our_params = ref.policy.state_dict(), ours.policy.state_dict()
    for name, value in ref_params.items():
        assert torch.equal(value, our_params[name]), name
    ref_buffer, our_buffer = ref.rollout_buffer, ours.rollout_buffer
    for name in ("actions", "action_masks", "episode_starts", "values", "log_probs", "advantages", "returns"):
        assert np.array_equal(getattr(ref_buffer, name), getattr(our_buffer, name)), name
    # The states each step started from; at an episode's first step the collector's are zeros (TorchRL's primer
    # resets them) where RecurrentPPO keeps the last episode's, which the LSTM multiplies by 1 - episode_start.
    going_on = our_buffer.episode_starts == 0
    assert 0 < going_on.sum() < going_on.size
    for name in ("hidden_states_pi", "cell_states_pi", "hidden_states_vf", "cell_states_vf"):
        assert np.array_equal(getattr(ref_buffer, name)[going_on], getattr(our_buffer, name)[going_on]), name
        assert not getattr(our_buffer, name)[~going_on].any(), name


def truncated_batch(model: MaskableRecurrentPPO) -> Any:
    """Seven steps of CueRecall cut by a time limit of 2 steps: truncations inside the batch, ``(1, 7)``."""
    module = MaskableRecurrentPolicyModule(model.policy)
    env = masked_gym_env(gym.wrappers.TimeLimit(CueRecall(), 2)).append_transform(module.make_tensordict_primer())
    collector = Collector(env, module, frames_per_batch=7, total_frames=7)
    try:
        batch = next(iter(collector)).unsqueeze(0)
    finally:
        collector.shutdown()
    return module.add_next_state_value(batch)


def test_a_truncated_episode_bootstraps_from_the_critic_state_after_its_last_step() -> None:
    model = recurrent_model()
    batch = truncated_batch(model)
    truncated = batch["next", "truncated"][0, :, 0]
    assert truncated.sum() == 3 and not batch["next", "terminated"].any()
    # The value is recomputed here from a strided view of the batch where the module passes contiguous copies:
    # CPU GEMM kernels picked by memory layout may differ in the last bit, so the check is to one float32 ulp
    # (measured 1.5e-8), while the wrong states, the critic's before the step or zeros, are 0.019 or more away.
    for t in [*np.flatnonzero(truncated.numpy()), 6]:  # each truncation and the batch's last step
        obs, got = batch["next", "observation"][:, t], batch["next", "state_value"][0, t]
        after = tuple(batch[("next", *key)][:, t].transpose(0, 1) for key in STATE_KEYS[2:])
        before = tuple(batch[key][:, t].transpose(0, 1) for key in STATE_KEYS[2:])
        expected = model.policy.predict_values(obs, after, torch.zeros(1))[0]
        assert torch.allclose(got, expected, rtol=0, atol=1e-6), t
        for wrong in (before, tuple(torch.zeros_like(state) for state in before)):
            if not all(torch.equal(a, b) for a, b in zip(wrong, after, strict=True)):
                assert (got - model.policy.predict_values(obs, wrong, torch.zeros(1))[0]).abs().item() > 1e-3, t
    inside = ~truncated[:-1]
    assert torch.equal(batch["next", "state_value"][0, :-1][inside], batch["state_value"][0, 1:][inside])


def test_extend_keeps_the_batchs_states_and_refuses_a_batch_without_them_writing_nothing() -> None:
    model = recurrent_model()
    batch = truncated_batch(model)
    hidden_state_shape = (7, 1, 1, LSTM["lstm_hidden_size"])
    buffer = MaskableRecurrentRolloutBuffer(7, model.observation_space, model.action_space, hidden_state_shape, "cpu")
    before = buffer.tensordict.clone()
    with pytest.raises(ValueError, match=r"no \('recurrent_state', 'critic', 'cell'\) entry.*make_tensordict_primer"):
        buffer.extend(batch.exclude(STATE_KEYS[3]))
    with pytest.raises(ValueError, match=r"has shape \(1, 7, 1, 4\), expected"):
        buffer.extend(batch.set(STATE_KEYS[0], batch[STATE_KEYS[0]][..., :4]))
    assert (buffer.tensordict == before).all() and buffer.pos == 0
    buffer.extend(truncated_batch(model))
    assert buffer.full and buffer.tensordict[STATE_KEYS[0]].abs().sum() > 0


@pytest.mark.slow
def test_the_memory_task_is_learned_through_multisync_collector_workers_that_get_the_weights() -> None:
    """CueRecall with one step between the cue and the answer (a coin flip without memory): two workers of four envs
    each collect with the weights just trained and carry the states (every stored log-prob is the learner's)."""
    from test_recurrent import success_rate

    model = MaskableRecurrentPPO(
        "MlpLstmPolicy",
        make_vec_env(CueRecall, n_envs=8, env_kwargs={"delay": 1}),
        n_steps=16,
        batch_size=64,
        n_epochs=4,
        learning_rate=3e-3,
        seed=0,
        policy_kwargs={"lstm_hidden_size": 16, "net_arch": [16]},
    )
    module = MaskableRecurrentPolicyModule(model.policy)
    make_env = functools.partial(recurrent_cue_recall_env, module.make_tensordict_primer(), 4, delay=1)
    collector = MultiSyncCollector([make_env] * 2, module, frames_per_batch=8 * 16)
    check = CollectedByTheLearnersLSTM()
    model.learn(2048, callback=check, collector=collector)
    assert model.rollout_buffer.tensordict.batch_size == (8, 16)
    check.check(rollouts=16)
    assert success_rate(model, seed=100, delay=1) >= 0.9
    assert worker_children() == []


# ------------------------------------------------------------------------------------------- refusals


def test_maskable_policy_module_of_an_lstm_policy_is_refused_naming_the_recurrent_module() -> None:
    with pytest.raises(TypeError, match=r"use torchrl_mask\.torchrl\.recurrent_policy\.MaskableRecurrentPolicyModule"):
        MaskablePolicyModule(recurrent_model().policy)  # type: ignore[arg-type]


def test_learn_refuses_collectors_that_cannot_give_the_lstms_rollout_and_leaves_them_untouched() -> None:
    model = recurrent_model()
    module = MaskableRecurrentPolicyModule(model.policy)
    collector = Collector(functools.partial(seeded_cue_recall, 0, module), module, frames_per_batch=N_STEPS)
    feedforward = MaskablePPO("MlpPolicy", invalid_discrete_env_gym(), n_steps=16, policy_kwargs=SMALL)
    plain = Collector(invalid_discrete_env, MaskablePolicyModule(feedforward.policy), frames_per_batch=N_STEPS)
    try:
        with pytest.raises(ValueError, match="use_masking=False is not available with a collector"):
            model.learn(N_STEPS, use_masking=False, collector=collector)
        with pytest.raises(ValueError, match="over another policy than this model's"):
            recurrent_model().learn(N_STEPS, collector=collector)
        with pytest.raises(TypeError, match=r"not a MaskableRecurrentPolicyModule.*make_tensordict_primer"):
            model.learn(N_STEPS, collector=plain)
        assert model.num_timesteps == 0 and model.use_masking
        model.learn(N_STEPS, collector=collector)  # nothing ran and nothing was shut down: it still collects
        assert model.num_timesteps == N_STEPS
    finally:
        collector.shutdown()
        plain.shutdown()


def test_an_env_without_the_primer_is_refused_before_a_step_is_counted() -> None:
    model = recurrent_model()
    collector = Collector(
        lambda: masked_gym_env(CueRecall()),
        MaskableRecurrentPolicyModule(model.policy),
        frames_per_batch=N_STEPS,
        auto_register_policy_transforms=False,
    )
    with pytest.raises(ValueError, match=r"append_transform\(module\.make_tensordict_primer\(\)\)"):
        model.learn(N_STEPS, collector=collector)
    assert model.num_timesteps == 0


def test_an_env_without_init_tracker_is_refused_naming_it() -> None:
    model = recurrent_model()
    module = MaskableRecurrentPolicyModule(model.policy)
    make_env = lambda: masked_gym_env(CueRecall(), init_tracker=False).append_transform(  # noqa: E731
        module.make_tensordict_primer()
    )
    with pytest.raises(ValueError, match="has no TorchRL InitTracker"):
        model.learn(
            N_STEPS,
            collector=Collector(make_env, module, frames_per_batch=N_STEPS, auto_register_policy_transforms=False),
        )
    assert model.num_timesteps == 0
