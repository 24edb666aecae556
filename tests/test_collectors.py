"""TorchRL collectors feeding MaskablePPO: masked envs, the policy module, extend(), learning, failures.

The envs are real ones nobody here wrote: gymnasium's Taxi (mask in ``info``), TorchRL's TicTacToe (mask in
the TensorDict), sb3-contrib's invalid-action envs (``action_masks()``). The collectors are real, with real
worker processes; the reference for advantages and returns is sb3-contrib's own buffer.
"""

from __future__ import annotations

import os
import signal
import time
from typing import Any

import gymnasium as gym
import numpy as np
import psutil
import pytest
import torch
from gymnasium import spaces
from sb3_contrib.common.envs import (
    InvalidActionEnvDiscrete,
    InvalidActionEnvMultiBinary,
    InvalidActionEnvMultiDiscrete,
)
from sb3_contrib.common.maskable import buffers as sb3c
from stable_baselines3.common.callbacks import BaseCallback
from tensordict import TensorDict
from tensordict.nn import InteractionType, set_interaction_type
from torchrl.collectors import Collector, MultiSyncCollector
from torchrl.collectors.distributed import DistributedCollector
from torchrl.envs import Compose, GymWrapper, InitTracker, RenameTransform, SerialEnv, TransformedEnv
from torchrl.envs.custom import TicTacToeEnv
from torchrl.envs.utils import check_env_specs

from torchrl_mask import (
    ActionMaskInInfo,
    ActionMaskInObservation,
    CollectorFailed,
    MaskablePolicyModule,
    MaskablePPO,
    MaskableRolloutBuffer,
    learn_from_collector,
    masked_gym_env,
)
from torchrl_mask import policy as policy_module
from torchrl_mask.masks import mask_spec

TAXI = "Taxi-v4"  # gymnasium 1.4 retired Taxi-v3; v4 keeps info["action_mask"]
SMALL = {"net_arch": [16]}


# ------------------------------------------------------------------------------------------- helpers


def allowed(action: torch.Tensor, mask: torch.Tensor, action_space: spaces.Space) -> torch.Tensor:
    """Whether each action is allowed by its mask row: ``(*B,)`` bool, for any maskable action space."""
    groups = mask_spec(action_space).groups
    offsets = torch.tensor(np.cumsum((0, *groups[:-1])))
    index = action.reshape(*mask.shape[:-1], len(groups)).long() + offsets
    return mask.gather(-1, index).all(-1)


class StrictMask(gym.Wrapper):
    """Raises in ``step`` if the action is one the env's own mask forbids: the env checks, not the test."""

    def __init__(self, env: gym.Env, source: str) -> None:
        super().__init__(env)
        self.source = source
        self.mask: np.ndarray | None = None

    def _read(self, info: dict[str, Any]) -> None:
        mask = self.env.get_wrapper_attr("action_masks")() if self.source == "method" else info["action_mask"]
        self.mask = np.asarray(mask, dtype=bool).ravel()

    def reset(self, **kwargs: Any) -> Any:
        obs, info = self.env.reset(**kwargs)
        self._read(info)
        return obs, info

    def step(self, action: Any) -> Any:
        assert self.mask is not None
        ok = allowed(torch.as_tensor(np.asarray(action)), torch.from_numpy(self.mask), self.action_space)
        if not bool(ok):
            raise AssertionError(f"invalid action {action} taken under mask {self.mask.astype(int)}")
        obs, reward, terminated, truncated, info = self.env.step(action)
        self._read(info)
        return obs, reward, terminated, truncated, info


class MaskInObservation(gym.ObservationWrapper):
    """PettingZoo's convention: ``{"observation": obs, "action_mask": mask}``."""

    def __init__(self, env: gym.Env) -> None:
        super().__init__(env)
        size = mask_spec(env.action_space).size
        self.observation_space = spaces.Dict(
            {"observation": env.observation_space, "action_mask": spaces.MultiBinary(size)}
        )

    def observation(self, observation: Any) -> dict[str, Any]:
        mask = np.asarray(self.env.get_wrapper_attr("action_masks")(), dtype=np.int8)
        return {"observation": observation, "action_mask": mask}


class PolicyWasTrained(BaseCallback):
    """At each rollout's end: the stored log-probs are the current policy's (the collecting weights are the
    ones just trained), and the policy changed since the last rollout (there was something to sync)."""

    def __init__(self) -> None:
        super().__init__()
        self.max_error: list[float] = []
        self.params: list[torch.Tensor] = []

    def _on_step(self) -> bool:
        return True

    def _on_rollout_end(self) -> None:
        buf = self.model.rollout_buffer
        samples = next(buf.get(batch_size=None))
        actions = samples.actions
        if isinstance(self.model.action_space, spaces.Discrete):  # as PPO.train() passes them
            actions = actions.long().flatten()
        with torch.no_grad():
            _, log_prob, _ = self.model.policy.evaluate_actions(
                samples.observations, actions, action_masks=samples.action_masks.bool()
            )
        self.max_error.append(float((log_prob - samples.old_log_prob).abs().max()))
        self.params.append(torch.nn.utils.parameters_to_vector(self.model.policy.parameters()).detach().clone())

    def check(self, rollouts: int) -> None:
        assert len(self.max_error) >= rollouts
        assert max(self.max_error) < 1e-4, f"collected with stale weights: log-prob errors {self.max_error}"
        assert all(not torch.equal(a, b) for a, b in zip(self.params, self.params[1:], strict=False))


def taxi_env() -> Any:
    torch.set_num_threads(1)
    return masked_gym_env(StrictMask(gym.make(TAXI), "info"))


def invalid_discrete_env() -> Any:
    torch.set_num_threads(1)
    return masked_gym_env(StrictMask(InvalidActionEnvDiscrete(dim=8, n_invalid_actions=5), "method"))


def two_invalid_discrete_envs() -> Any:
    """A worker's batched env: two masked envs in one TorchRL SerialEnv, one policy call for both."""
    torch.set_num_threads(1)
    return SerialEnv(2, invalid_discrete_env)


def exploding_env() -> Any:
    torch.set_num_threads(1)
    return masked_gym_env(Explodes(gym.make(TAXI)))


class Explodes(gym.Wrapper):
    def __init__(self, env: gym.Env) -> None:
        super().__init__(env)
        self.steps = 0

    def step(self, action: Any) -> Any:
        self.steps += 1
        if self.steps == 40:
            raise ValueError("the env broke on its 40th step")
        return self.env.step(action)


def tictactoe_env() -> TransformedEnv:
    """TorchRL's own masked env: its "mask" renamed to "action_mask", player 0's reward as "reward"."""
    rename = RenameTransform(["mask", ("player0", "reward")], ["action_mask", "reward"], create_copy=True)
    return TransformedEnv(TicTacToeEnv(single_player=True), Compose(rename, InitTracker()))


class BoardSpaces(gym.Env):
    """TicTacToe's spaces for the SB3 model, which needs an env to read them from (it is never stepped)."""

    observation_space = spaces.Box(-1, 1, (3, 3), np.int32)
    action_space = spaces.Discrete(9)

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> Any:
        return np.zeros((3, 3), np.int32), {}


def worker_children() -> list[psutil.Process]:
    """Child processes, less multiprocessing's resource tracker (it lives as long as this process)."""
    children = psutil.Process().children(recursive=True)
    return [c for c in children if c.is_running() and "resource_tracker" not in " ".join(c.cmdline())]


# ---------------------------------------------------------------------------------------- masked envs


def test_action_mask_in_info_reads_each_convention_as_flat_bool() -> None:
    method = ActionMaskInInfo(InvalidActionEnvMultiDiscrete(dims=[3, 4], n_invalid_actions=3))
    _, info = method.reset(seed=0)
    assert method.source == "method"
    assert info["action_mask"].dtype == bool
    np.testing.assert_array_equal(info["action_mask"], method.env.action_masks())

    taxi = ActionMaskInInfo(gym.make(TAXI))
    obs, info = taxi.reset(seed=0)
    assert taxi.source == "info"
    np.testing.assert_array_equal(info["action_mask"], taxi.unwrapped.action_mask(obs).astype(bool))
    obs, _, _, _, info = taxi.step(int(np.flatnonzero(info["action_mask"])[0]))
    np.testing.assert_array_equal(info["action_mask"], taxi.unwrapped.action_mask(obs).astype(bool))

    dict_env = ActionMaskInInfo(MaskInObservation(InvalidActionEnvDiscrete(dim=5, n_invalid_actions=2)))
    obs, info = dict_env.reset(seed=0)
    assert dict_env.source == "observation"
    assert list(obs) == ["observation"] and list(dict_env.observation_space.spaces) == ["observation"]
    np.testing.assert_array_equal(info["action_mask"], dict_env.env.env.action_masks())


def test_action_mask_in_info_without_a_mask_names_the_sources() -> None:
    env = ActionMaskInInfo(gym.make("CliffWalking-v1"))
    with pytest.raises(ValueError, match=r"no 'action_mask' entry.*source='method'"):
        env.reset(seed=0)


def test_action_mask_in_observation_adds_each_conventions_mask_as_a_flat_bool_entry() -> None:
    method = ActionMaskInObservation(InvalidActionEnvMultiDiscrete(dims=[3, 4], n_invalid_actions=3))
    obs, _ = method.reset(seed=0)
    assert method.source == "method"
    assert sorted(method.observation_space.spaces) == ["action_mask", "observation"]
    assert obs["action_mask"].dtype == bool and obs["action_mask"].shape == (7,)
    np.testing.assert_array_equal(obs["action_mask"], method.env.action_masks())
    assert method.observation_space.contains(obs)

    taxi = ActionMaskInObservation(gym.make(TAXI))
    obs, _ = taxi.reset(seed=0)
    assert taxi.source == "info"
    np.testing.assert_array_equal(obs["action_mask"], taxi.unwrapped.action_mask(obs["observation"]).astype(bool))
    obs, _, _, _, info = taxi.step(int(np.flatnonzero(obs["action_mask"])[0]))
    np.testing.assert_array_equal(obs["action_mask"], info["action_mask"].astype(bool))

    dict_env = ActionMaskInObservation(DictWithMask(InvalidActionEnvDiscrete(dim=6, n_invalid_actions=4)))
    obs, _ = dict_env.reset(seed=0)
    assert dict_env.source == "observation"
    assert sorted(obs) == ["action_mask", "clock", "position"]
    assert obs["action_mask"].dtype == bool  # the env's own entry is int8
    np.testing.assert_array_equal(obs["action_mask"], dict_env.unwrapped.action_masks())


def test_action_mask_in_observation_refuses_an_action_mask_entry_it_does_not_read() -> None:
    env = DictWithMask(InvalidActionEnvDiscrete(dim=6, n_invalid_actions=4))
    with pytest.raises(ValueError, match=r"already has an 'action_mask' entry.*source='method'.*rename"):
        ActionMaskInObservation(env, source="method")


def test_masked_gym_env_steps_carry_the_envs_own_mask_as_bool() -> None:
    env = masked_gym_env(gym.make(TAXI))
    check_env_specs(env)  # the bool mask entry is in the observation spec, and the steps match the specs
    rollout = env.rollout(30)
    assert rollout["action_mask"].dtype == torch.bool
    assert rollout["action_mask"].shape == (30, 6)
    taxi = env.base_env._env.unwrapped
    for key in ((), ("next",)):
        obs, mask = rollout[(*key, "observation")], rollout[(*key, "action_mask")]
        expected = np.stack([taxi.action_mask(int(o)) for o in obs]).astype(bool)
        np.testing.assert_array_equal(mask.numpy(), expected)


def test_masked_gym_env_without_trackers_is_the_bare_gym_wrapper_and_still_masks() -> None:
    env = masked_gym_env(gym.make(TAXI), episode_stats=False, init_tracker=False)
    assert isinstance(env, GymWrapper)
    rollout = env.rollout(10)
    assert "is_init" not in rollout
    taxi = env._env.unwrapped
    expected = np.stack([taxi.action_mask(int(o)) for o in rollout["observation"]]).astype(bool)
    np.testing.assert_array_equal(rollout["action_mask"].numpy(), expected)


# ------------------------------------------------------------------------------------- policy module


@pytest.mark.parametrize("batch", [(), (4,), (2, 3)])
def test_policy_module_matches_predict_on_any_batch_shape(batch: tuple[int, ...]) -> None:
    env = InvalidActionEnvMultiDiscrete(dims=[3, 4], n_invalid_actions=3)
    model = MaskablePPO("MlpPolicy", env, policy_kwargs=SMALL, seed=0)
    rng = np.random.default_rng(0)
    obs = torch.as_tensor(rng.integers(0, [3, 4], size=(*batch, 2)))
    mask = torch.as_tensor(rng.random((*batch, 7)) < 0.6)
    mask[..., 0] = mask[..., 3] = True
    module = MaskablePolicyModule(model.policy)
    with set_interaction_type(InteractionType.DETERMINISTIC):
        out = module(TensorDict({"observation": obs, "action_mask": mask}, batch))
    assert out["action"].shape == (*batch, 2)
    assert out["action_log_prob"].shape == batch
    assert out["state_value"].shape == (*batch, 1)
    flat_obs, flat_mask = obs.reshape(-1, 2).numpy(), mask.reshape(-1, 7).numpy()
    expected, _ = model.predict(flat_obs, action_masks=flat_mask, deterministic=True)
    np.testing.assert_array_equal(out["action"].reshape(-1, 2).numpy(), expected)
    with torch.no_grad():
        values = model.policy.predict_values(torch.as_tensor(flat_obs))
    torch.testing.assert_close(out["state_value"].reshape(-1, 1), values)
    assert bool(allowed(out["action"], mask, env.action_space).all())


@pytest.mark.parametrize(
    "env",
    [InvalidActionEnvDiscrete(dim=5, n_invalid_actions=2), InvalidActionEnvMultiBinary(dims=3, n_invalid_actions=2)],
    ids=["discrete", "multibinary"],
)
def test_policy_module_samples_sb3_contribs_masked_distribution(env: gym.Env) -> None:
    model = MaskablePPO("MlpPolicy", env, policy_kwargs=SMALL, seed=0)
    obs, _ = env.reset(seed=0)
    n = 6000
    mask = torch.as_tensor(np.asarray(env.action_masks(), dtype=bool)).expand(n, -1)
    obs_t = torch.as_tensor(np.asarray(obs)).expand(n, *np.shape(obs))
    torch.manual_seed(0)
    out = MaskablePolicyModule(model.policy)(TensorDict({"observation": obs_t, "action_mask": mask}, [n]))
    actions = out["action"].reshape(n, -1)
    with torch.no_grad():
        dist = model.policy.get_distribution(obs_t[:1], action_masks=mask[:1].numpy())
        _, log_prob, _ = model.policy.evaluate_actions(obs_t, actions.squeeze(-1) if actions.shape[1] == 1 else actions,
                                                       action_masks=mask)  # fmt: skip
    torch.testing.assert_close(out["action_log_prob"], log_prob, rtol=1e-5, atol=1e-5)
    assert bool(allowed(out["action"], mask, env.action_space).all())
    parts = dist.distributions if hasattr(dist, "distributions") else [dist.distribution]
    for group, part in enumerate(parts):
        probs = part.probs[0]
        freq = torch.bincount(actions[:, group], minlength=len(probs)).float() / n
        torch.testing.assert_close(freq, probs, atol=0.025, rtol=0.0)


def test_policy_module_fast_call_writes_what_tensordict_modules_forward_writes() -> None:
    env = InvalidActionEnvMultiDiscrete(dims=[3, 4], n_invalid_actions=3)
    module = MaskablePolicyModule(MaskablePPO("MlpPolicy", env, policy_kwargs=SMALL, seed=0).policy)
    rng = np.random.default_rng(1)
    td = TensorDict({"observation": torch.as_tensor(rng.integers(0, [3, 4], size=(5, 2))),
                     "action_mask": torch.as_tensor(rng.random((5, 7)) < 0.6) | torch.eye(1, 7, dtype=torch.bool)},
                    [5])  # fmt: skip
    td["action_mask"][:, 3] = True
    with set_interaction_type(InteractionType.DETERMINISTIC):
        fast = module(td.clone())
        general = module(td.clone(), tensordict_out=td.clone())  # TensorDictModule's own forward
    for key in ("action", "action_log_prob", "state_value"):
        torch.testing.assert_close(fast[key], general[key], rtol=0, atol=0)
    module.select_out_keys("action")
    assert "state_value" not in module(td.clone()) and "action" in module(td.clone())


def test_policy_module_runs_forward_hooks_on_the_policys_layers() -> None:
    model = MaskablePPO("MlpPolicy", gym.make(TAXI), policy_kwargs=SMALL, seed=0)
    module = MaskablePolicyModule(model.policy)
    td = TensorDict({"observation": torch.tensor(3), "action_mask": torch.ones(6, dtype=torch.bool)}, [])
    module(td)  # the layers are found without hooks: they then run without nn.Module.__call__
    seen: list[tuple[int, ...]] = []
    handle = model.policy.mlp_extractor.policy_net[0].register_forward_hook(
        lambda _module, _inputs, output: seen.append(tuple(output.shape))
    )
    try:
        module(td)
    finally:
        handle.remove()
    assert seen == [(1, 16)]
    module(td)
    assert seen == [(1, 16)]


def test_policy_module_runs_global_forward_hooks_and_falls_back_when_torch_moves_its_hooks(monkeypatch) -> None:
    model = MaskablePPO("MlpPolicy", gym.make(TAXI), policy_kwargs=SMALL, seed=0)
    module = MaskablePolicyModule(model.policy)
    td = TensorDict({"observation": torch.tensor(3), "action_mask": torch.ones(6, dtype=torch.bool)}, [])
    linear_calls: list[int] = []
    handle = torch.nn.modules.module.register_module_forward_hook(
        lambda layer, _inputs, _output: linear_calls.append(1) if isinstance(layer, torch.nn.Linear) else None
    )
    try:
        module(td)
    finally:
        handle.remove()
    assert len(linear_calls) == 4  # actor and critic layers, value and action heads
    # Hook registries this module does not find mean "hooked": nn.Module.__call__, never a path that skips a hook.
    monkeypatch.setattr(policy_module, "_GLOBAL_HOOKS", [None, None])
    monkeypatch.setattr(policy_module, "_through", lambda *_: pytest.fail("took the path that skips hooks"))
    assert module(td)["action_mask"][module(td)["action"]]


def test_policy_module_rejects_wrong_number_of_observation_keys() -> None:
    policy = MaskablePPO("MlpPolicy", gym.make(TAXI), policy_kwargs=SMALL).policy
    with pytest.raises(ValueError, match=r"observation_keys has 2 keys.*1 leaves"):
        MaskablePolicyModule(policy, observation_keys=["a", "b"])


# -------------------------------------------------------------------------- extend vs the VecEnv path


def random_trajectories(n_envs: int, steps: int, seed: int) -> TensorDict:
    """A recorded batch with terminations and truncations (the last step included) and TorchRL's keys."""
    rng = np.random.default_rng(seed)
    space = spaces.Discrete(4)
    terminated = rng.random((n_envs, steps, 1)) < 0.1
    truncated = ~terminated & (rng.random((n_envs, steps, 1)) < 0.1)
    terminated[0, -1], truncated[1, -1] = True, True
    truncated[0, -1] = False
    done = terminated | truncated
    is_init = np.concatenate([np.ones((n_envs, 1, 1), bool), done[:, :-1]], axis=1)
    value = rng.normal(size=(n_envs, steps, 1)).astype(np.float32)
    next_value = np.concatenate([value[:, 1:], rng.normal(size=(n_envs, 1, 1))], axis=1).astype(np.float32)
    final_value = rng.normal(size=(n_envs, steps, 1)).astype(np.float32)  # V(final obs) where truncated
    next_value = np.where(truncated, final_value, np.where(terminated, 0.0, next_value)).astype(np.float32)
    mask = rng.random((n_envs, steps, 4)) < 0.7
    mask[..., 0] = True
    action = np.stack([[space.sample() for _ in range(steps)] for _ in range(n_envs)])
    np.put_along_axis(mask, action[..., None], True, axis=-1)  # the action taken is allowed by its mask
    data = {
        "observation": rng.normal(size=(n_envs, steps, 3)).astype(np.float32),
        "action": action,
        "action_mask": mask,
        "is_init": is_init,
        "state_value": value,
        "action_log_prob": rng.normal(size=(n_envs, steps)).astype(np.float32),
        ("next", "reward"): rng.normal(size=(n_envs, steps, 1)).astype(np.float32),
        ("next", "done"): done,
        ("next", "terminated"): terminated,
        ("next", "truncated"): truncated,
        ("next", "state_value"): next_value,
    }
    return TensorDict({k: torch.as_tensor(v) for k, v in data.items()}, [n_envs, steps])


def sb3_contrib_reference(batch: TensorDict, obs_space: spaces.Space, gamma: float, lam: float) -> Any:
    """The VecEnv path on the same steps: sb3-contrib's buffer, fed as MaskablePPO.collect_rollouts feeds it
    (a truncation's bootstrap gamma * V(final obs) folded into the reward; episode_starts; last values)."""
    n_envs, steps = batch.shape
    ref = sb3c.MaskableRolloutBuffer(steps, obs_space, spaces.Discrete(4), "cpu", gae_lambda=lam, gamma=gamma,
                                     n_envs=n_envs)  # fmt: skip
    truncated = batch["next", "truncated"][..., 0]
    reward = batch["next", "reward"][..., 0] + gamma * batch["next", "state_value"][..., 0] * truncated
    for t in range(steps):
        ref.add(
            batch["observation"][:, t].numpy(),
            batch["action"][:, t].numpy(),
            reward[:, t].numpy(),
            batch["is_init"][:, t, 0].numpy(),
            batch["state_value"][:, t],
            batch["action_log_prob"][:, t],
            action_masks=batch["action_mask"][:, t].numpy(),
        )
    done_last = batch["next", "done"][:, -1, 0]
    last_values = torch.where(done_last, 0.0, batch["next", "state_value"][:, -1, 0])
    ref.compute_returns_and_advantage(last_values=last_values, dones=done_last.numpy())
    return ref


def test_extend_gives_sb3_contribs_advantages_and_returns_with_terminations_and_truncations() -> None:
    batch = random_trajectories(n_envs=3, steps=40, seed=1)
    assert batch["next", "terminated"].any() and batch["next", "truncated"].any()
    obs_space = spaces.Box(-5, 5, (3,), np.float32)
    ours = MaskableRolloutBuffer(40, obs_space, spaces.Discrete(4), "cpu", gae_lambda=0.9, gamma=0.97, n_envs=3)
    ours.extend(batch)
    ref = sb3_contrib_reference(batch, obs_space, gamma=0.97, lam=0.9)
    np.testing.assert_allclose(ours.advantages, ref.advantages, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(ours.returns, ref.returns, rtol=1e-5, atol=1e-5)
    np.testing.assert_array_equal(ours.episode_starts, ref.episode_starts)
    np.testing.assert_array_equal(ours.actions, ref.actions)
    np.testing.assert_array_equal(ours.action_masks, ref.action_masks)


def test_extend_of_a_real_taxi_batch_matches_the_vecenv_path() -> None:
    """A recorded Taxi rollout (its 200-step time limit truncates), bootstrapped by the policy module."""
    model = MaskablePPO("MlpPolicy", gym.make(TAXI), policy_kwargs=SMALL, seed=0)
    module = MaskablePolicyModule(model.policy)
    torch.manual_seed(0)
    collector = Collector(lambda: masked_gym_env(gym.make(TAXI)), module, frames_per_batch=450)
    collector.set_seed(0)
    try:
        batch = next(iter(collector)).unsqueeze(0)
    finally:
        collector.shutdown()
    assert bool(batch["next", "truncated"].any()), "no time-limit truncation in 450 Taxi steps"
    module.add_next_state_value(batch)
    with torch.no_grad():
        final_obs = batch["next", "observation"][batch["next", "truncated"][..., 0]]
        torch.testing.assert_close(
            batch["next", "state_value"][batch["next", "truncated"]], model.policy.predict_values(final_obs)[:, 0]
        )
    ours = MaskableRolloutBuffer(450, model.observation_space, model.action_space, "cpu", gae_lambda=0.95,
                                 gamma=0.99)  # fmt: skip
    ours.extend(batch)
    ref = sb3c.MaskableRolloutBuffer(450, model.observation_space, model.action_space, "cpu", gae_lambda=0.95,
                                     gamma=0.99)  # fmt: skip
    truncated = batch["next", "truncated"][0, :, 0]
    reward = batch["next", "reward"][0, :, 0] + 0.99 * batch["next", "state_value"][0, :, 0] * truncated
    for t in range(450):
        ref.add(batch["observation"][:, t].numpy(), batch["action"][:, t].numpy(), reward[t : t + 1].numpy(),
                batch["is_init"][:, t, 0].numpy(), batch["state_value"][:, t], batch["action_log_prob"][:, t],
                action_masks=batch["action_mask"][:, t].numpy())  # fmt: skip
    ref.compute_returns_and_advantage(batch["next", "state_value"][:, -1], batch["next", "done"][:, -1, 0].numpy())
    np.testing.assert_allclose(ours.advantages, ref.advantages, rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(ours.returns, ref.returns, rtol=1e-4, atol=1e-4)
    # Without InitTracker (masked_gym_env(init_tracker=False)) the starts come from ("next", "done"): the same.
    bare = MaskableRolloutBuffer(450, model.observation_space, model.action_space, "cpu", gae_lambda=0.95,
                                 gamma=0.99)  # fmt: skip
    bare.extend(batch.exclude("is_init"), episode_starts=torch.ones(1, dtype=torch.bool))
    assert torch.equal(bare.tensordict["is_init"], batch["is_init"])
    np.testing.assert_array_equal(bare.advantages, ours.advantages)


def test_extend_takes_a_flat_env_major_batch() -> None:
    batch = random_trajectories(n_envs=2, steps=10, seed=2)
    obs_space = spaces.Box(-5, 5, (3,), np.float32)
    stacked = MaskableRolloutBuffer(10, obs_space, spaces.Discrete(4), "cpu", n_envs=2)
    flat = MaskableRolloutBuffer(10, obs_space, spaces.Discrete(4), "cpu", n_envs=2)
    stacked.extend(batch)
    flat.extend(batch.reshape(-1))
    assert (stacked.tensordict == flat.tensordict).all()


def test_extend_rejects_bad_batches_and_writes_nothing() -> None:
    batch = random_trajectories(n_envs=2, steps=10, seed=3)
    obs_space = spaces.Box(-5, 5, (3,), np.float32)
    buf = MaskableRolloutBuffer(10, obs_space, spaces.Discrete(4), "cpu", n_envs=2)
    with pytest.raises(ValueError, match=r"batch size \(2, 9\).*n_envs=2 envs times buffer_size=10"):
        buf.extend(batch[:, :9])
    with pytest.raises(ValueError, match=r"no \('next', 'state_value'\) entry"):
        buf.extend(batch.exclude(("next", "state_value")))
    ids = torch.arange(20).reshape(2, 10)  # a new trajectory id at every step, with no episode ending
    with pytest.raises(ValueError, match="not each one env's consecutive steps"):
        buf.extend(batch.set(("collector", "traj_ids"), ids))
    bad_mask = batch.exclude(("collector", "traj_ids")).clone()
    bad_mask["action_mask"][1, 4] = False
    with pytest.raises(ValueError, match="action_masks for env 1, step 4 allow no action"):
        buf.extend(bad_mask)
    assert buf.pos == 0 and not buf.full
    buf.extend(batch.exclude(("collector", "traj_ids")))
    with pytest.raises(RuntimeError, match="Call reset"):
        buf.extend(batch)


# ------------------------------------------------------------------------------------------ learning


@pytest.mark.slow
def test_learns_taxi_through_a_collector_with_the_weights_just_trained() -> None:
    model = MaskablePPO("MlpPolicy", gym.make(TAXI), n_steps=128, batch_size=64, n_epochs=2, learning_rate=3e-3,
                        policy_kwargs=SMALL, seed=0)  # fmt: skip
    collector = Collector(taxi_env, MaskablePolicyModule(model.policy), frames_per_batch=128)
    check = PolicyWasTrained()
    learn_from_collector(model, collector, total_timesteps=512, callback=check)
    assert model.num_timesteps == 512
    check.check(rollouts=4)
    buf = model.rollout_buffer.tensordict
    assert bool(allowed(buf["action"], buf["action_mask"], model.action_space).all())
    assert not buf["action_mask"].all()  # the masks are Taxi's, not a trivial all-allowed


@pytest.mark.slow
@pytest.mark.parametrize(
    "make_env",
    [
        lambda: InvalidActionEnvDiscrete(dim=6, n_invalid_actions=4),
        lambda: InvalidActionEnvMultiDiscrete(dims=[3, 4], n_invalid_actions=4),
        lambda: InvalidActionEnvMultiBinary(dims=4, n_invalid_actions=3),
    ],
    ids=["discrete", "multidiscrete", "multibinary"],
)
def test_learns_sb3_contribs_invalid_action_envs_without_an_invalid_action(make_env: Any) -> None:
    model = MaskablePPO("MlpPolicy", make_env(), n_steps=64, batch_size=64, n_epochs=2, policy_kwargs=SMALL, seed=0)
    collector = Collector(lambda: masked_gym_env(StrictMask(make_env(), "method")),
                          MaskablePolicyModule(model.policy), frames_per_batch=64)  # fmt: skip
    check = PolicyWasTrained()
    learn_from_collector(model, collector, total_timesteps=256, callback=check)
    check.check(rollouts=4)
    buf = model.rollout_buffer.tensordict
    assert bool(allowed(buf["action"], buf["action_mask"], model.action_space).all())
    assert not buf["action_mask"].all()


class DictWithMask(gym.ObservationWrapper):
    """A two-entry Dict observation with the mask inside it: ``{"position", "clock", "action_mask"}``."""

    def __init__(self, env: gym.Env) -> None:
        super().__init__(env)
        size = mask_spec(env.action_space).size
        self.observation_space = spaces.Dict(
            {
                "position": env.observation_space,
                "clock": spaces.Box(0.0, 1.0, (1,), np.float32),
                "action_mask": spaces.MultiBinary(size),
            }
        )

    def observation(self, observation: Any) -> dict[str, Any]:
        mask = np.asarray(self.env.get_wrapper_attr("action_masks")(), dtype=np.int8)
        clock = np.array([self.env.unwrapped.current_step / 100], np.float32)
        return {"position": observation, "clock": clock, "action_mask": mask}


@pytest.mark.slow
def test_learns_with_the_mask_inside_a_dict_observation() -> None:
    def make() -> Any:
        return masked_gym_env(DictWithMask(StrictMask(InvalidActionEnvDiscrete(dim=6, n_invalid_actions=4), "method")))

    spaces_env = ActionMaskInInfo(DictWithMask(InvalidActionEnvDiscrete(dim=6, n_invalid_actions=4)))
    model = MaskablePPO("MultiInputPolicy", spaces_env, n_steps=64, batch_size=64, n_epochs=2, policy_kwargs=SMALL,
                        seed=0)  # fmt: skip
    collector = Collector(make, MaskablePolicyModule(model.policy), frames_per_batch=64)
    check = PolicyWasTrained()
    learn_from_collector(model, collector, total_timesteps=256, callback=check)
    check.check(rollouts=4)
    buf = model.rollout_buffer.tensordict
    assert sorted(buf["observation"].keys()) == ["clock", "position"]
    assert bool(allowed(buf["action"], buf["action_mask"], model.action_space).all())
    assert not buf["action_mask"].all()


@pytest.mark.slow
def test_learns_torchrls_tictactoe_without_playing_an_occupied_square() -> None:
    model = MaskablePPO("MlpPolicy", BoardSpaces(), n_steps=64, batch_size=64, n_epochs=2, policy_kwargs=SMALL,
                        seed=0)  # fmt: skip
    module = MaskablePolicyModule(model.policy, observation_keys=["board"])
    collector = Collector(tictactoe_env, module, frames_per_batch=64)
    check = PolicyWasTrained()
    learn_from_collector(model, collector, total_timesteps=256, callback=check)
    check.check(rollouts=4)
    buf = model.rollout_buffer.tensordict
    assert bool(buf["next", "terminated"].any())
    assert bool(allowed(buf["action"], buf["action_mask"], model.action_space).all())
    # the board itself agrees: every square played was empty (-1) before the move
    board = buf["observation"].reshape(*buf.shape, 9)
    assert bool((board.gather(-1, buf["action"].unsqueeze(-1).long()) == -1).all())


@pytest.mark.slow
def test_learns_from_multisync_collector_with_two_workers_and_leaves_no_process() -> None:
    model = MaskablePPO("MlpPolicy", invalid_discrete_env_gym(), n_steps=32, batch_size=64, n_epochs=2,
                        learning_rate=3e-3, policy_kwargs=SMALL, seed=0)  # fmt: skip
    collector = MultiSyncCollector([invalid_discrete_env] * 2, MaskablePolicyModule(model.policy), frames_per_batch=64)
    check = PolicyWasTrained()
    learn_from_collector(model, collector, total_timesteps=192, callback=check)
    assert model.rollout_buffer.tensordict.batch_size == (2, 32)
    check.check(rollouts=3)
    assert worker_children() == []


def test_workers_running_batched_envs_fill_one_row_per_env() -> None:
    """MultiSyncCollector stacks (workers, envs, T); each env becomes one row of the rollout."""
    model = MaskablePPO("MlpPolicy", invalid_discrete_env_gym(), n_steps=16, batch_size=64, n_epochs=2,
                        learning_rate=3e-3, policy_kwargs=SMALL, seed=0)  # fmt: skip
    collector = MultiSyncCollector(
        [two_invalid_discrete_envs] * 2, MaskablePolicyModule(model.policy), frames_per_batch=64
    )
    check = PolicyWasTrained()
    learn_from_collector(model, collector, total_timesteps=128, callback=check)
    buffer = model.rollout_buffer
    assert buffer.tensordict.batch_size == (4, 16)
    check.check(rollouts=2)
    masks, actions = buffer.tensordict["action_mask"], buffer.tensordict["action"]
    assert allowed(actions, masks, model.action_space).all()
    assert worker_children() == []


@pytest.mark.slow
def test_learns_from_a_distributed_collector_on_loopback() -> None:
    """TorchRL's torch.distributed collector (gloo), its workers launched locally; see docs for several hosts."""
    model = MaskablePPO("MlpPolicy", invalid_discrete_env_gym(), n_steps=32, batch_size=64, n_epochs=2,
                        learning_rate=3e-3, policy_kwargs=SMALL, seed=0)  # fmt: skip
    collector = DistributedCollector(
        [invalid_discrete_env] * 2,
        MaskablePolicyModule(model.policy),
        frames_per_batch=64,
        total_frames=1 << 20,
        sync=True,
        launcher="mp",
        backend="gloo",
        tcp_port=str(29600 + os.getpid() % 300),
    )
    check = PolicyWasTrained()
    learn_from_collector(model, collector, total_timesteps=192, callback=check)
    assert model.rollout_buffer.tensordict.batch_size == (2, 32)
    check.check(rollouts=3)
    assert worker_children() == []


def invalid_discrete_env_gym() -> gym.Env:
    return InvalidActionEnvDiscrete(dim=8, n_invalid_actions=5)


# ------------------------------------------------------------------------------------------- failure


class KillWorker(BaseCallback):
    """Kills collector worker 0 as the second rollout starts, i.e. while the collector gathers it."""

    def __init__(self, collector: MultiSyncCollector) -> None:
        super().__init__()
        self.collector = collector
        self.killed_at: float | None = None

    def _on_step(self) -> bool:
        return True

    def _on_rollout_start(self) -> None:
        if self.model.num_timesteps > 0 and self.killed_at is None:
            os.kill(self.collector.procs[0].pid, signal.SIGKILL)
            self.killed_at = time.monotonic()


@pytest.mark.slow
@pytest.mark.timeout(180)
def test_killed_worker_raises_a_clear_error_promptly_and_leaves_no_process() -> None:
    model = MaskablePPO("MlpPolicy", gym.make(TAXI), n_steps=32, batch_size=64, policy_kwargs=SMALL)
    collector = MultiSyncCollector([taxi_env] * 2, MaskablePolicyModule(model.policy), frames_per_batch=64)
    worker_pids = [proc.pid for proc in collector.procs]
    kill = KillWorker(collector)
    # Our watcher ("worker 0 (pid N) was killed by signal 9") or TorchRL's own check ("worker 0 (exit code -9)").
    with pytest.raises(CollectorFailed, match=r"worker 0 \(.*(killed by signal 9|exit code -9)"):
        learn_from_collector(model, collector, total_timesteps=10_000, callback=kill)
    assert kill.killed_at is not None
    assert time.monotonic() - kill.killed_at < 60  # a bound on a hang, not a speed claim
    assert worker_children() == []
    assert not any(psutil.pid_exists(pid) and psutil.Process(pid).status() != "zombie" for pid in worker_pids)


@pytest.mark.slow
@pytest.mark.timeout(180)
def test_env_that_raises_in_a_worker_gives_a_clear_error_and_leaves_no_process() -> None:
    model = MaskablePPO("MlpPolicy", gym.make(TAXI), n_steps=32, batch_size=64, policy_kwargs=SMALL)
    collector = MultiSyncCollector([taxi_env, exploding_env], MaskablePolicyModule(model.policy), frames_per_batch=64)
    # Whichever sees it first, our watcher or TorchRL itself, the error names the worker, its exit code and
    # the exception its env raised.
    with pytest.raises(CollectorFailed, match=r"worker 1 \(.*exited with code 1: it raised ValueError: the env broke"):
        learn_from_collector(model, collector, total_timesteps=10_000)
    assert worker_children() == []


def test_env_that_raises_in_process_is_reported_with_its_own_error() -> None:
    model = MaskablePPO("MlpPolicy", gym.make(TAXI), n_steps=32, batch_size=32, policy_kwargs=SMALL)
    collector = Collector(exploding_env, MaskablePolicyModule(model.policy), frames_per_batch=32)
    with pytest.raises(CollectorFailed, match=r"collecting a batch.*the env broke on its 40th step") as info:
        learn_from_collector(model, collector, total_timesteps=1_000)
    assert isinstance(info.value.__cause__, ValueError)
