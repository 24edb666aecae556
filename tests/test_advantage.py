"""GAE through TorchRL: a case worked out by hand, SB3's boundary mapping, and TorchRL's own modules."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from gymnasium import spaces
from helpers import ACTION_SPACES, OBS_SPACES, fill_pair, make_pair
from sb3_contrib.common.maskable import buffers as sb3c
from tensordict.nn import TensorDictModule
from torch import nn
from torchrl.modules import MaskedCategorical, ProbabilisticActor, ValueOperator
from torchrl.objectives import ClipPPOLoss
from torchrl.objectives.value import GAE
from torchrl.objectives.value import functional as torchrl_functional

import torchrl_mask.rollout.advantage
from torchrl_mask import MaskableRolloutBuffer
from torchrl_mask.rollout.advantage import bootstrap_inputs, check_gae_method, generalized_advantage


@pytest.mark.parametrize("method", ["loop", "vec"])
def test_gae_by_hand_two_envs_with_an_episode_boundary(method):
    # env 0: rewards 1, 2, 3 with V = 0.5 everywhere, episode ends after step 1 (obs 2 starts a new one);
    # env 1: rewards 0, 0, 1, V = 0, the rollout ends mid-episode with V(s_3) = 4.
    gamma, lam = 0.5, 0.5
    values = torch.tensor([[0.5, 0.5, 0.5], [0.0, 0.0, 0.0]]).unsqueeze(-1)
    rewards = torch.tensor([[1.0, 2.0, 3.0], [0.0, 0.0, 1.0]]).unsqueeze(-1)
    starts = torch.tensor([[False, False, True], [False, False, False]]).unsqueeze(-1)
    next_values, done = bootstrap_inputs(values, starts, torch.tensor([0.5, 4.0]), torch.tensor([True, False]))
    adv, ret = generalized_advantage(rewards, values, next_values, done, gamma, lam, method=method)
    # env 0: delta = [1 + .25 - .5, 2 - .5, 3 - .5] = [.75, 1.5, 2.5]; A_1 = 1.5 (episode ends), A_0 = .75 + .25 * 1.5
    # env 1: delta = [0, 0, 1 + .5 * 4] = [0, 0, 3]; A = [3 / 16, 3 / 4, 3]
    expected = torch.tensor([[0.75 + 0.375, 1.5, 2.5], [3 / 16, 0.75, 3.0]]).unsqueeze(-1)
    torch.testing.assert_close(adv, expected)
    torch.testing.assert_close(ret, expected + values)


def random_rollout(n_envs: int, steps: int, pattern: str, seed: int) -> dict[str, torch.Tensor]:
    """GAE inputs with a done pattern: none, ~1% uniform, mixed (env 0 long, others end every ~20 steps), random.

    About a third of the ends are truncations (done but not terminated), as a TorchRL collector records them.
    """
    g = torch.Generator().manual_seed(seed)
    shape = (n_envs, steps, 1)
    if pattern == "none":
        done = torch.zeros(shape, dtype=torch.bool)
    elif pattern == "uniform":
        done = torch.rand(shape, generator=g) < 0.01
    elif pattern == "mixed":
        done = torch.zeros(shape, dtype=torch.bool)
        done[1:, 19::20] = True
    else:
        done = torch.rand(shape, generator=g) < 0.2
    terminated = done & (torch.rand(shape, generator=g) < 0.7)
    return {
        "reward": torch.randn(shape, generator=g),
        "value": torch.randn(shape, generator=g),
        "next_value": torch.randn(shape, generator=g),
        "done": done,
        "terminated": terminated,
    }


def sb3_contrib_gae(reward, value, starts, last_values, dones, gamma, gae_lambda) -> tuple[np.ndarray, np.ndarray]:
    """sb3-contrib's own buffer computes GAE on (T, n_envs) arrays; returns its advantages and returns."""
    steps, n_envs = reward.shape
    buf = sb3c.MaskableRolloutBuffer(
        steps, spaces.Box(-1, 1, (1,)), spaces.Discrete(2), "cpu", gae_lambda=gae_lambda, gamma=gamma, n_envs=n_envs
    )
    buf.rewards[:], buf.values[:], buf.episode_starts[:] = reward, value, starts
    buf.full = True
    buf.compute_returns_and_advantage(last_values=last_values, dones=dones)
    return buf.advantages, buf.returns


def bits(array: np.ndarray | torch.Tensor) -> np.ndarray:
    array = array.numpy() if isinstance(array, torch.Tensor) else array
    return np.ascontiguousarray(array, dtype=np.float32).view(np.int32)


@pytest.mark.parametrize("pattern", ["none", "uniform", "mixed", "random"])
@pytest.mark.parametrize(("n_envs", "steps"), [(1, 130), (2, 64), (3, 50), (8, 257)])
def test_default_gae_is_bit_identical_to_sb3_contrib_and_torchrls_loop(n_envs, steps, pattern):
    # Every done pattern, sb3-contrib's own buffer as the reference.
    x = random_rollout(n_envs, steps, pattern, seed=n_envs * 1000 + steps)
    gamma, lam = 0.99, 0.95
    starts = torch.zeros_like(x["done"])
    starts[:, 1:] = x["done"][:, :-1]
    last, final_done = x["next_value"][:, -1, 0], x["done"][:, -1, 0]
    next_values, done = bootstrap_inputs(x["value"], starts, last, final_done)
    adv, ret = generalized_advantage(x["reward"], x["value"], next_values, done, gamma, lam)
    ref_adv, ref_ret = sb3_contrib_gae(
        x["reward"][..., 0].T.numpy(),
        x["value"][..., 0].T.numpy(),
        starts[..., 0].T.numpy().astype(np.float32),
        last[:, None],
        final_done.numpy(),
        gamma,
        lam,
    )
    assert np.array_equal(bits(adv[..., 0].T), bits(ref_adv))
    assert np.array_equal(bits(ret[..., 0].T), bits(ref_ret))
    loop_adv, loop_ret = torchrl_functional.generalized_advantage_estimate(
        gamma, lam, x["value"], next_values, x["reward"], done
    )
    assert np.array_equal(bits(adv), bits(loop_adv)) and np.array_equal(bits(ret), bits(loop_ret))


@pytest.mark.parametrize("pattern", ["none", "uniform", "mixed", "random"])
@pytest.mark.parametrize(("n_envs", "steps"), [(1, 1), (1, 130), (3, 7), (8, 257), (64, 128)])
def test_default_gae_with_truncations_is_torchrls_loop_bit_for_bit(n_envs, steps, pattern):
    x = random_rollout(n_envs, steps, pattern, seed=steps + n_envs)
    args = (x["reward"], x["value"], x["next_value"], x["done"], 0.97, 0.9)
    out = (torch.full_like(x["value"], -7.0), torch.full_like(x["value"], -7.0))
    ours = generalized_advantage(*args, terminated=x["terminated"], out=out)
    ref = torchrl_functional.generalized_advantage_estimate(
        0.97, 0.9, x["value"], x["next_value"], x["reward"], x["done"], x["terminated"]
    )
    assert ours is out
    for ours_tensor, ref_tensor in zip(ours, ref, strict=True):
        assert np.array_equal(bits(ours_tensor), bits(ref_tensor))


@pytest.mark.parametrize("gae_method", ["loop", "vec"])
def test_gae_with_a_wrong_number_of_last_values_or_dones_raises_and_writes_nothing(gae_method):
    ref, ours = make_pair(OBS_SPACES["box"], ACTION_SPACES["discrete"], 8, 3, gae_method=gae_method)
    fill_pair(ref, ours, seed=1)
    before = ours.tensordict.clone()
    with pytest.raises(ValueError, match=r"last_values has shape \(2, 1\) \(2 entries\), expected \(3,\)"):
        ours.compute_returns_and_advantage(last_values=torch.zeros(2, 1), dones=np.zeros(3))
    with pytest.raises(ValueError, match=r"dones has shape \(4,\) \(4 entries\), expected \(3,\)"):
        ours.compute_returns_and_advantage(last_values=torch.zeros(3, 1), dones=np.zeros(4))
    assert (ours.tensordict == before).all()


def test_torchrls_function_is_what_the_buffer_calls_by_default_and_it_gives_sb3_contribs_bits(monkeypatch):
    # Wrapped where torchrl_mask.rollout.advantage looks it up: the default buffer must call it (once per rollout).
    calls = []

    def spy(*args, **kwargs):
        calls.append(args[2].shape)
        return torchrl_functional.generalized_advantage_estimate(*args, **kwargs)

    monkeypatch.setattr(torchrl_mask.rollout.advantage, "generalized_advantage_estimate", spy)
    ref, ours = make_pair(OBS_SPACES["box"], ACTION_SPACES["discrete"], 50, 3, 0.99, 0.95)
    assert ours.gae_method == "loop"
    fill_pair(ref, ours, seed=4)
    assert calls == [torch.Size((3, 50, 1))]
    assert np.array_equal(bits(ours.advantages), bits(ref.advantages))
    assert np.array_equal(bits(ours.returns), bits(ref.returns))


@pytest.mark.parametrize(("removed", "replacement"), [("auto", "'loop'"), ("exact", "'loop'"), ("fast", "'vec'")])
def test_a_removed_gae_method_raises_naming_its_replacement(removed, replacement):
    with pytest.raises(ValueError, match=f"gae_method='{removed}' was removed") as err:
        check_gae_method(removed)
    assert replacement in str(err.value) and "Accepted: 'loop', 'vec'." in str(err.value)
    with pytest.raises(ValueError, match="was removed"):
        MaskableRolloutBuffer(4, spaces.Box(-1, 1, (2,)), spaces.Discrete(3), "cpu", gae_method=removed)  # type: ignore[arg-type]


def test_unknown_gae_method_raises():
    x = torch.zeros(1, 2, 1)
    with pytest.raises(ValueError, match="not a GAE method"):
        generalized_advantage(x, x, x, x.bool(), 0.9, 0.9, method="quick")  # type: ignore[arg-type]


def test_a_buffer_with_an_unknown_gae_method_fails_at_construction():
    with pytest.raises(ValueError, match="gae_method='quick' is not a GAE method"):
        MaskableRolloutBuffer(4, spaces.Box(-1, 1, (2,)), spaces.Discrete(3), "cpu", gae_method="quick")  # type: ignore[arg-type]


@pytest.mark.parametrize(("gae_method", "vectorized"), [("loop", False), ("vec", True), ("loop", None)])
def test_torchrl_gae_module_on_the_storage_gives_the_buffers_advantages(gae_method, vectorized):
    # TorchRL's module reads ("next", "state_value"), ("next", "done") and ("next", "terminated") as written; run
    # with the function the buffer used, it gives the same bits (its default, vectorized=None, to float32 rounding).
    ref, ours = make_pair(OBS_SPACES["box"], ACTION_SPACES["discrete"], buffer_size=20, n_envs=3, gae_method=gae_method)
    fill_pair(ref, ours, seed=11)
    rollout = ours.tensordict.clone().exclude("advantage", "value_target")
    GAE(gamma=ours.gamma, lmbda=ours.gae_lambda, value_network=None, vectorized=vectorized)(rollout)
    if vectorized is not None:
        assert np.array_equal(bits(rollout["advantage"]), bits(ours.tensordict["advantage"]))
        assert np.array_equal(bits(rollout["value_target"]), bits(ours.tensordict["value_target"]))
    torch.testing.assert_close(rollout["advantage"], ours.tensordict["advantage"], rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(rollout["value_target"], ours.tensordict["value_target"], rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(rollout["advantage"][..., 0].T.numpy(), ref.advantages, rtol=1e-5, atol=1e-5)


def test_a_storage_minibatch_feeds_torchrls_clip_ppo_loss_under_its_default_keys():
    torch.manual_seed(0)
    _, ours = make_pair(OBS_SPACES["box"], ACTION_SPACES["discrete"], buffer_size=8, n_envs=2)
    fill_pair(_, ours, seed=2)
    n_actions = ours.action_space.n
    actor = ProbabilisticActor(
        TensorDictModule(nn.Linear(3, n_actions), in_keys=["observation"], out_keys=["logits"]),
        in_keys={"logits": "logits", "mask": "action_mask"},
        distribution_class=MaskedCategorical,
        return_log_prob=True,
    )
    critic = ValueOperator(nn.Linear(3, 1), in_keys=["observation"])
    minibatch = ours.tensordict.reshape(-1)[torch.randperm(16)[:6]]
    # Store actions the masked actor takes and its own log-probs: the ratio is 1, the objective -mean(A).
    with torch.no_grad():
        dist = actor.get_dist(minibatch)
        minibatch["action"] = dist.sample()
        minibatch["action_log_prob"] = dist.log_prob(minibatch["action"])
    loss = ClipPPOLoss(actor, critic, normalize_advantage=False)
    out = loss(minibatch)
    torch.testing.assert_close(out["loss_objective"], -minibatch["advantage"].mean())
    assert torch.isfinite(out["loss_critic"])


@pytest.mark.parametrize("pattern", ["none", "uniform", "mixed", "random"])
def test_extend_a_collector_batch_with_truncations_by_every_route(pattern):
    # The collector path: ("next", "done") and ("next", "terminated") apart, GAE computed inside extend().
    ref, ours = make_pair(OBS_SPACES["dict"], ACTION_SPACES["multidiscrete"], buffer_size=64, n_envs=3)
    fill_pair(ref, ours, seed=5)
    batch = ours.tensordict.clone()
    x = random_rollout(3, 64, pattern, seed=len(pattern))
    batch["next", "done"], batch["next", "terminated"] = x["done"], x["terminated"]
    batch["next", "state_value"] = x["next_value"]
    batch["is_init"] = torch.zeros_like(x["done"])
    batch["is_init"][:, 1:] = x["done"][:, :-1]
    results = {}
    for method in ("loop", "vec"):
        buf = type(ours)(64, ours.observation_space, ours.action_space, "cpu", 0.95, 0.99, 3, gae_method=method)
        buf.extend(batch, observation_keys=[("observation", key) for key in buf.observation_space.spaces])
        results[method] = (buf.tensordict["advantage"], buf.tensordict["value_target"])
    expected = generalized_advantage(
        batch["next", "reward"],
        batch["state_value"],
        x["next_value"],
        x["done"],
        0.99,
        0.95,
        method="loop",
        terminated=x["terminated"],
    )
    for ours_tensor, ref_tensor in zip(results["loop"], expected, strict=True):
        assert np.array_equal(bits(ours_tensor), bits(ref_tensor))
    scale = expected[0].abs().max().item()
    for ours_tensor, ref_tensor in zip(results["vec"], expected, strict=True):
        torch.testing.assert_close(ours_tensor, ref_tensor, rtol=1e-5, atol=1e-5 * scale)
