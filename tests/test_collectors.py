"""TorchRL collectors feeding MaskablePPO: extend() against the VecEnv path, and learning through
``MaskablePPO.learn(..., collector=...)``.

The envs are real ones nobody here wrote: gymnasium's Taxi (mask in ``info``), TorchRL's TicTacToe (mask in
the TensorDict), sb3-contrib's invalid-action envs (``action_masks()``). The collectors are real, with real
worker processes; the reference for advantages and returns is sb3-contrib's own buffer.
"""

from __future__ import annotations

import os
from typing import Any

import gymnasium as gym
import numpy as np
import pytest
import torch
from collector_envs import (
    SMALL,
    TAXI,
    BoardSpaces,
    DictWithMask,
    StrictMask,
    allowed,
    invalid_discrete_env,
    invalid_discrete_env_gym,
    small_model,
    taxi_env,
    tictactoe_env,
    two_invalid_discrete_envs,
    worker_children,
)
from gymnasium import spaces
from sb3_contrib import MaskablePPO as SB3ContribMaskablePPO
from sb3_contrib.common.envs import (
    InvalidActionEnvDiscrete,
    InvalidActionEnvMultiBinary,
    InvalidActionEnvMultiDiscrete,
)
from sb3_contrib.common.maskable import buffers as sb3c
from stable_baselines3.common.callbacks import BaseCallback
from tensordict import TensorDict
from tensordict.nn import TensorDictModule
from torchrl.collectors import Collector, MultiSyncCollector
from torchrl.collectors.distributed import DistributedCollector, DistributedSyncCollector
from torchrl.envs import GymWrapper, InitTracker, TransformedEnv
from torchrl.envs.custom import TicTacToeEnv

from torchrl_mask import (
    ActionMaskInInfo,
    CollectorFailed,
    MaskablePolicyModule,
    MaskablePPO,
    MaskableRolloutBuffer,
    learn_from_collector,
    masked_gym_env,
)
from torchrl_mask.algorithms.collector_source import plays_own_weights
from torchrl_mask.torchrl.workers import shutdown


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
    ref = sb3c.MaskableRolloutBuffer(
        steps, obs_space, spaces.Discrete(4), "cpu", gae_lambda=lam, gamma=gamma, n_envs=n_envs
    )
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
    ours = MaskableRolloutBuffer(450, model.observation_space, model.action_space, "cpu", gae_lambda=0.95, gamma=0.99)
    ours.extend(batch)
    ref = sb3c.MaskableRolloutBuffer(
        450, model.observation_space, model.action_space, "cpu", gae_lambda=0.95, gamma=0.99
    )
    truncated = batch["next", "truncated"][0, :, 0]
    reward = batch["next", "reward"][0, :, 0] + 0.99 * batch["next", "state_value"][0, :, 0] * truncated
    for t in range(450):
        ref.add(
            batch["observation"][:, t].numpy(),
            batch["action"][:, t].numpy(),
            reward[t : t + 1].numpy(),
            batch["is_init"][:, t, 0].numpy(),
            batch["state_value"][:, t],
            batch["action_log_prob"][:, t],
            action_masks=batch["action_mask"][:, t].numpy(),
        )
    ref.compute_returns_and_advantage(batch["next", "state_value"][:, -1], batch["next", "done"][:, -1, 0].numpy())
    np.testing.assert_allclose(ours.advantages, ref.advantages, rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(ours.returns, ref.returns, rtol=1e-4, atol=1e-4)
    # Without InitTracker (masked_gym_env(init_tracker=False)) the starts come from ("next", "done"): the same.
    bare = MaskableRolloutBuffer(450, model.observation_space, model.action_space, "cpu", gae_lambda=0.95, gamma=0.99)
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
    model = MaskablePPO(
        "MlpPolicy",
        gym.make(TAXI),
        n_steps=128,
        batch_size=64,
        n_epochs=2,
        learning_rate=3e-3,
        policy_kwargs=SMALL,
        seed=0,
    )
    collector = Collector(taxi_env, MaskablePolicyModule(model.policy), frames_per_batch=128)
    sent: list[int] = []
    update = collector.update_policy_weights_
    collector.update_policy_weights_ = lambda *args, **kwargs: sent.append(1) or update(*args, **kwargs)
    check = PolicyWasTrained()
    model.learn(512, callback=check, collector=collector)
    assert model.num_timesteps == 512
    check.check(rollouts=4)  # it played the weights just trained ...
    assert plays_own_weights(collector, model) and sent == []  # ... its own: TorchRL's self-copy was left out
    workers = MultiSyncCollector([taxi_env], MaskablePolicyModule(model.policy), frames_per_batch=128)
    try:
        assert not plays_own_weights(workers, model)  # a worker's copy is sent the weights
    finally:
        shutdown(workers)
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
    collector = Collector(
        lambda: masked_gym_env(StrictMask(make_env(), "method")),
        MaskablePolicyModule(model.policy),
        frames_per_batch=64,
    )
    check = PolicyWasTrained()
    model.learn(256, callback=check, collector=collector)
    check.check(rollouts=4)
    buf = model.rollout_buffer.tensordict
    assert bool(allowed(buf["action"], buf["action_mask"], model.action_space).all())
    assert not buf["action_mask"].all()


@pytest.mark.slow
def test_learns_with_the_mask_inside_a_dict_observation() -> None:
    def make() -> Any:
        return masked_gym_env(DictWithMask(StrictMask(InvalidActionEnvDiscrete(dim=6, n_invalid_actions=4), "method")))

    spaces_env = ActionMaskInInfo(DictWithMask(InvalidActionEnvDiscrete(dim=6, n_invalid_actions=4)))
    model = MaskablePPO(
        "MultiInputPolicy", spaces_env, n_steps=64, batch_size=64, n_epochs=2, policy_kwargs=SMALL, seed=0
    )
    collector = Collector(make, MaskablePolicyModule(model.policy), frames_per_batch=64)
    check = PolicyWasTrained()
    model.learn(256, callback=check, collector=collector)
    check.check(rollouts=4)
    buf = model.rollout_buffer.tensordict
    assert sorted(buf["observation"].keys()) == ["clock", "position"]
    assert bool(allowed(buf["action"], buf["action_mask"], model.action_space).all())
    assert not buf["action_mask"].all()


@pytest.mark.slow
def test_learns_torchrls_tictactoe_without_playing_an_occupied_square() -> None:
    model = MaskablePPO("MlpPolicy", BoardSpaces(), n_steps=64, batch_size=64, n_epochs=2, policy_kwargs=SMALL, seed=0)
    module = MaskablePolicyModule(model.policy, observation_keys=["board"])
    collector = Collector(tictactoe_env, module, frames_per_batch=64)
    check = PolicyWasTrained()
    model.learn(256, callback=check, collector=collector)
    check.check(rollouts=4)
    buf = model.rollout_buffer.tensordict
    assert bool(buf["next", "terminated"].any())
    assert bool(allowed(buf["action"], buf["action_mask"], model.action_space).all())
    # the board itself agrees: every square played was empty (-1) before the move
    board = buf["observation"].reshape(*buf.shape, 9)
    assert bool((board.gather(-1, buf["action"].unsqueeze(-1).long()) == -1).all())


@pytest.mark.slow
def test_learns_from_multisync_collector_with_two_workers_and_leaves_no_process() -> None:
    model = small_model()
    collector = MultiSyncCollector([invalid_discrete_env] * 2, MaskablePolicyModule(model.policy), frames_per_batch=64)
    check = PolicyWasTrained()
    model.learn(192, callback=check, collector=collector)
    assert model.rollout_buffer.tensordict.batch_size == (2, 32)
    check.check(rollouts=3)
    assert worker_children() == []


@pytest.mark.slow
def test_workers_running_batched_envs_fill_one_row_per_env() -> None:
    """MultiSyncCollector stacks (workers, envs, T); each env becomes one row of the rollout."""
    model = small_model(n_steps=16)
    collector = MultiSyncCollector(
        [two_invalid_discrete_envs] * 2, MaskablePolicyModule(model.policy), frames_per_batch=64
    )
    check = PolicyWasTrained()
    model.learn(128, callback=check, collector=collector)
    buffer = model.rollout_buffer
    assert buffer.tensordict.batch_size == (4, 16)
    check.check(rollouts=2)
    masks, actions = buffer.tensordict["action_mask"], buffer.tensordict["action"]
    assert allowed(actions, masks, model.action_space).all()
    assert worker_children() == []


@pytest.mark.slow
def test_learns_from_a_distributed_collector_on_loopback() -> None:
    """TorchRL's torch.distributed collector (gloo), its workers launched locally; see docs for several hosts."""
    model = small_model()
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
    model.learn(192, callback=check, collector=collector)
    assert model.rollout_buffer.tensordict.batch_size == (2, 32)
    check.check(rollouts=3)
    assert worker_children() == []


# ------------------------------------------------------------------------------------------- refusals


def test_learn_refuses_a_collector_without_masking_or_extend_and_leaves_it_untouched() -> None:
    class SB3ContribBuffer(sb3c.MaskableRolloutBuffer):  # a user's subclass: it has no extend()
        pass

    plain = MaskablePPO("MlpPolicy", invalid_discrete_env_gym(), n_steps=16, batch_size=16, policy_kwargs=SMALL)
    theirs = MaskablePPO(
        "MlpPolicy",
        invalid_discrete_env_gym(),
        n_steps=16,
        batch_size=16,
        policy_kwargs=SMALL,
        rollout_buffer_class=SB3ContribBuffer,
    )
    collector = Collector(invalid_discrete_env, MaskablePolicyModule(plain.policy), frames_per_batch=16)
    try:
        with pytest.raises(ValueError, match="use_masking=False is not available with a collector"):
            plain.learn(32, use_masking=False, collector=collector)
        with pytest.raises(TypeError, match=r"needs torchrl_mask.s rollout buffer.*SB3ContribBuffer"):
            theirs.learn(32, collector=collector)
        with pytest.raises(TypeError, match=r"needs torchrl_mask\.MaskablePPO"):
            learn_from_collector(SB3ContribMaskablePPO("MlpPolicy", invalid_discrete_env_gym()), collector, 32)
        other = MaskablePPO("MlpPolicy", invalid_discrete_env_gym(), n_steps=16, batch_size=16, policy_kwargs=SMALL)
        with pytest.raises(ValueError, match="over another policy than this model's"):  # plain's policy, not other's
            other.learn(32, collector=collector)
        assert plain.num_timesteps == theirs.num_timesteps == other.num_timesteps == 0
        # nothing ran and nothing was shut down: the collector still collects, and learning from it works
        plain.learn(32, collector=collector)
        assert plain.num_timesteps == 32
    finally:
        collector.shutdown()


@pytest.mark.slow
def test_learn_refuses_a_distributed_sync_collector_naming_the_on_policy_one() -> None:
    model = MaskablePPO("MlpPolicy", invalid_discrete_env_gym(), n_steps=32, batch_size=64, policy_kwargs=SMALL)
    collector = DistributedSyncCollector(
        [invalid_discrete_env],
        MaskablePolicyModule(model.policy),
        frames_per_batch=32,
        total_frames=1 << 20,
        launcher="mp",
        backend="gloo",
        tcp_port=str(29300 + os.getpid() % 300),
    )
    try:
        with pytest.raises(TypeError, match=r"DistributedCollector\(\.\.\., sync=True\)"):
            model.learn(64, collector=collector)
        assert model.num_timesteps == 0
    finally:
        shutdown(collector)  # TorchRL's own shutdown leaves this collector's workers running
    assert worker_children() == []


@pytest.mark.slow
def test_a_second_learn_on_the_same_collector_continues_its_batches_with_the_weights_just_trained() -> None:
    """learn(..., shutdown=False) then learn(..., reset_num_timesteps=False): the second learn continues the
    collector's batch stream (TorchRL ends the workers when the iterator driving them is dropped)."""
    model = small_model()
    collector = MultiSyncCollector([invalid_discrete_env] * 2, MaskablePolicyModule(model.policy), frames_per_batch=64)
    check = PolicyWasTrained()
    try:
        model.learn(128, callback=check, collector=collector, shutdown=False)
        model.learn(128, callback=check, collector=collector, reset_num_timesteps=False)
    finally:
        shutdown(collector)
    assert model.num_timesteps == 256
    check.check(rollouts=4)  # the third rollout, the first of the second learn, too
    assert worker_children() == []


def test_learn_refuses_an_env_without_masks_naming_masked_gym_env() -> None:
    """Without masks the policy has nothing to draw under: refused as the collector first calls it, and, for a
    mask under another key, at the first batch, before a step is counted or stored."""
    model = MaskablePPO("MlpPolicy", invalid_discrete_env_gym(), n_steps=16, batch_size=16, policy_kwargs=SMALL)
    unmasked = lambda: GymWrapper(InvalidActionEnvDiscrete(dim=8, n_invalid_actions=5))  # noqa: E731
    with pytest.raises(ValueError, match=r"the env gives no masks\. Make it with torchrl_mask\.masked_gym_env"):
        Collector(unmasked, MaskablePolicyModule(model.policy), frames_per_batch=16)
    board = MaskablePPO("MlpPolicy", BoardSpaces(), n_steps=16, batch_size=16, policy_kwargs=SMALL)
    module = MaskablePolicyModule(board.policy, observation_keys=["board"], mask_key="mask")  # TicTacToe's own key
    collector = Collector(
        lambda: TransformedEnv(TicTacToeEnv(single_player=True), InitTracker()), module, frames_per_batch=16
    )
    before = board.rollout_buffer.tensordict.clone()
    with pytest.raises(ValueError, match=r"batch has no 'action_mask' entry.*RenameTransform"):
        board.learn(32, collector=collector)
    assert board.num_timesteps == 0
    assert (board.rollout_buffer.tensordict == before).all()


def test_learn_refuses_a_plain_tensordict_module_naming_maskable_policy_module() -> None:
    model = MaskablePPO("MlpPolicy", invalid_discrete_env_gym(), n_steps=16, batch_size=16, policy_kwargs=SMALL)
    first = TensorDictModule(lambda obs: torch.zeros_like(obs), in_keys=["observation"], out_keys=["action"])
    collector = Collector(invalid_discrete_env, first, frames_per_batch=16)
    try:
        with pytest.raises(
            TypeError,
            match=r"runs a TensorDictModule, not a MaskablePolicyModule.*"
            r"MaskablePolicyModule\(model\.policy\)",
        ):
            model.learn(32, collector=collector)
        assert model.num_timesteps == 0
    finally:
        collector.shutdown()


def test_a_second_learn_on_a_collector_the_first_shut_down_is_refused_naming_shutdown_false() -> None:
    model = MaskablePPO("MlpPolicy", invalid_discrete_env_gym(), n_steps=16, batch_size=16, policy_kwargs=SMALL)
    collector = Collector(invalid_discrete_env, MaskablePolicyModule(model.policy), frames_per_batch=16)
    model.learn(16, collector=collector)
    with pytest.raises(RuntimeError, match=r"Collector has been shut down.*pass shutdown=False to the learn\(\)"):
        model.learn(16, collector=collector, reset_num_timesteps=False)
    assert model.num_timesteps == 16


def test_a_collector_that_runs_out_of_frames_ends_in_collector_failed_naming_total_frames() -> None:
    model = MaskablePPO("MlpPolicy", invalid_discrete_env_gym(), n_steps=16, batch_size=16, policy_kwargs=SMALL)
    collector = Collector(
        invalid_discrete_env, MaskablePolicyModule(model.policy), frames_per_batch=16, total_frames=32
    )
    with pytest.raises(CollectorFailed, match=r"stopped after 32 steps.*create it with total_frames=-1"):
        model.learn(64, collector=collector)
    assert model.num_timesteps == 32
