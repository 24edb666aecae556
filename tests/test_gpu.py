"""The rollout, GAE, minibatches, learn(), a collector and predict() on a CUDA device, each against the same work on
the CPU or sb3-contrib on the same GPU.

Every test here is marked ``gpu``: the default run deselects them (tests/conftest.py), ``pytest -m gpu`` runs them
and fails where no CUDA device is visible. ``scripts/gpu_check.sh`` runs them on a GPU machine.

Tolerances: the CPU and CUDA kernels of one float32 computation may round differently, so a CUDA result is compared
to the CPU's with ``rtol=atol=1e-5`` (GAE over 16 steps, a few float32 roundings per step). Two libraries on the
same GPU run the same kernels in the same order, so their learned parameters are compared at ``atol=1e-5`` too.
"""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np
import pytest
import torch
from collector_envs import SMALL, StrictMask, allowed, invalid_discrete_env
from gymnasium import spaces
from helpers import ACTION_SPACES, OBS_SPACES, random_step
from sb3_contrib import MaskablePPO as SB3ContribMaskablePPO
from sb3_contrib import RecurrentPPO
from sb3_contrib.common.envs import InvalidActionEnvDiscrete, InvalidActionEnvMultiDiscrete
from sb3_contrib.common.maskable import buffers as sb3c
from stable_baselines3.common.env_util import make_vec_env
from test_collectors import PolicyWasTrained, random_trajectories
from test_distributions import SPACES, _dims, _inputs, _reference
from torchrl.collectors import Collector

from torchrl_mask import (
    MaskableDictRolloutBuffer,
    MaskablePolicyModule,
    MaskablePPO,
    MaskableRecurrentPPO,
    MaskableRolloutBuffer,
)
from torchrl_mask.distributions import MaskedCategoricals

pytestmark = pytest.mark.gpu
DEVICE = "cuda"
CLOSE = {"rtol": 1e-5, "atol": 1e-5}


def leaves(buffer: Any) -> list[torch.Tensor]:
    return list(buffer.tensordict.values(include_nested=True, leaves_only=True))


def on_device(tensor: torch.Tensor) -> bool:
    return tensor.device.type == torch.device(DEVICE).type


def fill(buffers: list[Any], seed: int, cuda_inputs: list[bool]) -> None:
    """One random rollout added to each buffer, from host numpy/CPU tensors or (``cuda_inputs``) device tensors."""
    first = buffers[0]
    rng = np.random.default_rng(seed)
    for _ in range(first.buffer_size):
        step = random_step(first.observation_space, first.action_space, first.n_envs, rng)
        for buffer, cuda in zip(buffers, cuda_inputs, strict=True):
            args = {k: _to_device(v) if cuda else v for k, v in step.items()}
            masks = args.pop("action_masks")
            buffer.add(*args.values(), action_masks=masks)
    last_values = torch.as_tensor(rng.normal(size=(first.n_envs, 1)), dtype=torch.float32)
    dones = rng.random(first.n_envs) < 0.3
    for buffer, cuda in zip(buffers, cuda_inputs, strict=True):
        buffer.compute_returns_and_advantage(_to_device(last_values) if cuda else last_values, dones)


def _to_device(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _to_device(v) for k, v in value.items()}
    return torch.as_tensor(value).to(DEVICE)


@pytest.mark.parametrize("gae_method", ["loop", "vec"])
@pytest.mark.parametrize("obs", ["box", "dict"])
def test_add_from_host_arrays_and_from_device_tensors_gives_the_cpus_rollout_and_gae(obs: str, gae_method: str):
    dict_obs = obs == "dict"
    cls = MaskableDictRolloutBuffer if dict_obs else MaskableRolloutBuffer
    ref_cls = sb3c.MaskableDictRolloutBuffer if dict_obs else sb3c.MaskableRolloutBuffer
    args = (16, OBS_SPACES[obs], ACTION_SPACES["multidiscrete"])
    kwargs = {"gae_lambda": 0.9, "gamma": 0.97, "n_envs": 3}
    cpu = cls(*args, "cpu", gae_method=gae_method, **kwargs)
    from_host = cls(*args, DEVICE, gae_method=gae_method, **kwargs)
    from_device = cls(*args, DEVICE, gae_method=gae_method, **kwargs)
    ref = ref_cls(*args, "cpu", **kwargs)
    fill([cpu, from_host, from_device, ref], seed=4, cuda_inputs=[False, False, True, False])
    for buffer in (from_host, from_device):
        assert all(on_device(t) for t in leaves(buffer))
        rollout = buffer.tensordict.cpu()
        for key in ("action", "action_mask", "is_init", "state_value", "action_log_prob", ("next", "reward")):
            assert torch.equal(rollout[key], cpu.tensordict[key]), key
        observations = rollout.select("observation") == cpu.tensordict.select("observation")
        assert bool(observations.all())
        # TorchRL's GAE on the device against the same function on the CPU, and against sb3-contrib's loop.
        torch.testing.assert_close(rollout["advantage"], cpu.tensordict["advantage"], **CLOSE)
        torch.testing.assert_close(rollout["value_target"], cpu.tensordict["value_target"], **CLOSE)
        np.testing.assert_allclose(buffer.advantages, ref.advantages, **CLOSE)
        np.testing.assert_allclose(buffer.returns, ref.returns, **CLOSE)


@pytest.mark.parametrize("batch_on_device", [False, True])
def test_extend_of_a_host_or_device_batch_gives_the_cpus_advantages(batch_on_device: bool):
    batch = random_trajectories(n_envs=3, steps=40, seed=1)
    obs_space = spaces.Box(-5, 5, (3,), np.float32)
    cpu = MaskableRolloutBuffer(40, obs_space, spaces.Discrete(4), "cpu", gae_lambda=0.9, gamma=0.97, n_envs=3)
    gpu = MaskableRolloutBuffer(40, obs_space, spaces.Discrete(4), DEVICE, gae_lambda=0.9, gamma=0.97, n_envs=3)
    cpu.extend(batch)
    gpu.extend(batch.to(DEVICE) if batch_on_device else batch)
    assert all(on_device(t) for t in leaves(gpu))
    torch.testing.assert_close(gpu.tensordict["advantage"].cpu(), cpu.tensordict["advantage"], **CLOSE)
    torch.testing.assert_close(gpu.tensordict["value_target"].cpu(), cpu.tensordict["value_target"], **CLOSE)
    assert torch.equal(gpu.tensordict["action_mask"].cpu(), cpu.tensordict["action_mask"])


def test_minibatches_stay_on_the_device_and_equal_the_cpus_under_one_seed():
    args = (8, OBS_SPACES["dict"], ACTION_SPACES["discrete"])
    cpu = MaskableDictRolloutBuffer(*args, "cpu", n_envs=2)
    gpu = MaskableDictRolloutBuffer(*args, DEVICE, n_envs=2)
    fill([cpu, gpu], seed=5, cuda_inputs=[False, False])
    np.random.seed(0)
    cpu_batches = list(cpu.get(5))
    np.random.seed(0)
    gpu_batches = list(gpu.get(5))
    assert len(gpu_batches) == len(cpu_batches) == 4
    for cpu_batch, gpu_batch in zip(cpu_batches, gpu_batches, strict=True):
        for field in cpu_batch._fields:
            ref, ours = getattr(cpu_batch, field), getattr(gpu_batch, field)
            pairs = [(ref[k], ours[k]) for k in ref] if isinstance(ref, dict) else [(ref, ours)]
            for ref_value, our_value in pairs:
                assert on_device(our_value), field
                torch.testing.assert_close(our_value.cpu(), ref_value, **CLOSE)


def test_memmap_storage_is_refused_on_the_device_and_memory_storage_is_allocated_there():
    with pytest.raises(ValueError, match="storage='memmap' keeps the rollout in files on the host"):
        MaskableRolloutBuffer(4, OBS_SPACES["box"], ACTION_SPACES["discrete"], DEVICE, storage="memmap")
    buffer = MaskableRolloutBuffer(4, OBS_SPACES["box"], ACTION_SPACES["discrete"], DEVICE, n_envs=2)
    assert all(on_device(t) for t in leaves(buffer))
    assert bool(buffer.tensordict["action_mask"].all())  # reset leaves every action allowed, as sb3-contrib's


@pytest.mark.parametrize("name", list(SPACES))
def test_the_masked_distribution_draws_sb3_contribs_actions_from_the_devices_generator(name: str):
    # CUDA's Philox generator gives each call its own offset: one draw for all sub-actions is not the loop's draws
    # (MultiDiscrete learned other parameters than sb3-contrib on an H200 until each sub-action got its own draw).
    space, rows = SPACES[name], 64
    dims = _dims(space)
    logits, mask = (t.to(DEVICE) for t in _inputs(dims, rows, seed=7))
    torch.manual_seed(1)
    ref = _reference(space, logits, mask)
    ref_actions = ref.sample()
    ref_after = torch.rand(3, device=DEVICE)
    torch.manual_seed(1)
    dist = MaskedCategoricals(dims)
    log_pmf = dist.log_pmf(logits, mask)
    actions = dist.sample(log_pmf)
    assert torch.equal(torch.rand(3, device=DEVICE), ref_after)  # the generator moved as far as sb3-contrib's loop
    assert on_device(actions) and torch.equal(actions.view(ref_actions.shape), ref_actions)
    torch.testing.assert_close(dist.log_prob(log_pmf, actions), ref.log_prob(ref_actions), **CLOSE)
    torch.testing.assert_close(dist.entropy(log_pmf, mask), ref.entropy(), **CLOSE)


def _params(model: Any) -> dict[str, torch.Tensor]:
    return {k: v.detach().cpu().clone() for k, v in model.policy.state_dict().items()}


def _assert_params_close(ours: dict[str, torch.Tensor], ref: dict[str, torch.Tensor]) -> None:
    assert list(ours) == list(ref)
    for name, value in ref.items():
        torch.testing.assert_close(ours[name], value, rtol=0, atol=1e-5, msg=name)


@pytest.mark.parametrize(
    "make_env",
    [
        lambda: InvalidActionEnvDiscrete(dim=6, n_invalid_actions=4),
        lambda: InvalidActionEnvMultiDiscrete(dims=[3, 4], n_invalid_actions=4),
    ],
    ids=["discrete", "multidiscrete"],
)
def test_maskable_ppo_learns_on_the_device_as_sb3_contrib_does_there(make_env: Any):
    def strict_env() -> gym.Env:
        return StrictMask(make_env(), "method")  # raises on a forbidden action

    kwargs = {"n_steps": 32, "batch_size": 32, "n_epochs": 2, "seed": 0, "policy_kwargs": SMALL, "device": DEVICE}
    ours = MaskablePPO("MlpPolicy", make_vec_env(strict_env, n_envs=2, seed=0), **kwargs)
    start = _params(ours)
    ours.learn(256)
    ref = SB3ContribMaskablePPO("MlpPolicy", make_vec_env(strict_env, n_envs=2, seed=0), **kwargs).learn(256)
    assert all(on_device(p) for p in ours.policy.parameters())
    assert all(on_device(t) for t in leaves(ours.rollout_buffer))
    learned = _params(ours)
    assert any(not torch.equal(learned[k], start[k]) for k in start)
    assert all(bool(v.isfinite().all()) for v in learned.values())
    _assert_params_close(learned, _params(ref))


def test_maskable_recurrent_ppo_learns_on_the_device_masked_and_unmasked_as_recurrent_ppo():
    kwargs = {
        "n_steps": 16,
        "batch_size": 16,
        "n_epochs": 2,
        "seed": 3,
        "device": DEVICE,
        "policy_kwargs": {"lstm_hidden_size": 8, "net_arch": [16]},
    }

    def env() -> gym.Env:
        return InvalidActionEnvDiscrete(dim=5, ep_length=7, n_invalid_actions=3)

    masked = MaskableRecurrentPPO("MlpLstmPolicy", make_vec_env(lambda: StrictMask(env(), "method"), 2, 3), **kwargs)
    masked.learn(64)  # StrictMask raises on a forbidden action
    stored = masked.rollout_buffer.tensordict
    assert all(on_device(p) for p in masked.policy.parameters()) and on_device(stored["action"])
    assert bool(allowed(stored["action"].cpu(), stored["action_mask"].cpu(), masked.action_space).all())
    assert not bool(stored["action_mask"].all())
    ours = MaskableRecurrentPPO("MlpLstmPolicy", make_vec_env(env, 2, 3), **kwargs).learn(64, use_masking=False)
    ref = RecurrentPPO("MlpLstmPolicy", make_vec_env(env, 2, 3), **kwargs).learn(64)
    _assert_params_close(_params(ours), _params(ref))


@pytest.mark.parametrize("where", ["device", "policy_and_storage"])
def test_a_collector_on_the_device_feeds_learn_without_an_invalid_action(where: str):
    env = InvalidActionEnvDiscrete(dim=8, n_invalid_actions=5)
    model = MaskablePPO(
        "MlpPolicy", env, n_steps=64, batch_size=64, n_epochs=2, policy_kwargs=SMALL, seed=0, device=DEVICE
    )
    devices = {"device": DEVICE} if where == "device" else {"policy_device": DEVICE, "storing_device": DEVICE}
    collector = Collector(invalid_discrete_env, MaskablePolicyModule(model.policy), frames_per_batch=64, **devices)
    check = PolicyWasTrained()
    model.learn(256, callback=check, collector=collector)  # the env (StrictMask) raises on a forbidden action
    check.check(rollouts=4)
    buf = model.rollout_buffer.tensordict
    assert on_device(buf["action"]) and on_device(buf["advantage"])
    assert bool(allowed(buf["action"].cpu(), buf["action_mask"].cpu(), model.action_space).all())
    assert not bool(buf["action_mask"].all())


@pytest.mark.parametrize("mask_kind", ["numpy", "cpu_tensor", "device_tensor"])
def test_predict_on_the_device_keeps_to_the_masks_and_matches_the_cpu_model(mask_kind: str):
    env = InvalidActionEnvDiscrete(dim=8, n_invalid_actions=5)
    cpu = MaskablePPO("MlpPolicy", env, n_steps=16, batch_size=16, seed=0, policy_kwargs={"net_arch": [8]})
    gpu = MaskablePPO(
        "MlpPolicy", env, n_steps=16, batch_size=16, seed=0, policy_kwargs={"net_arch": [8]}, device=DEVICE
    )
    gpu.policy.load_state_dict(cpu.policy.state_dict())
    rng = np.random.default_rng(0)
    obs = rng.integers(0, 8, size=64)
    masks = rng.random((64, 8)) < 0.4
    masks[np.arange(64), rng.integers(0, 8, size=64)] = True  # every row allows an action
    given = {"numpy": masks, "cpu_tensor": torch.as_tensor(masks), "device_tensor": torch.as_tensor(masks).to(DEVICE)}
    for deterministic in (True, False):
        actions, _ = gpu.predict(obs, action_masks=given[mask_kind], deterministic=deterministic)
        assert isinstance(actions, np.ndarray) and actions.shape == (64,)
        assert bool(masks[np.arange(64), actions].all()), "an action its mask forbids"
    cpu_actions, _ = cpu.predict(obs, action_masks=masks, deterministic=True)
    gpu_actions, _ = gpu.predict(obs, action_masks=given[mask_kind], deterministic=True)
    np.testing.assert_array_equal(gpu_actions, cpu_actions)
