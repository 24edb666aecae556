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

from torchrl_mask import MaskableRolloutBuffer
from torchrl_mask.advantage import bootstrap_inputs, generalized_advantage, resolve_gae_method


@pytest.mark.parametrize("method", ["exact", "fast", "loop", "vec"])
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
def test_exact_gae_is_bit_identical_to_sb3_contrib_and_torchrls_loop(n_envs, steps, pattern):
    # Scalar scan (1-2 envs) and row scan (3+ envs), every done pattern, sb3-contrib's own buffer as the reference.
    x = random_rollout(n_envs, steps, pattern, seed=n_envs * 1000 + steps)
    gamma, lam = 0.99, 0.95
    starts = torch.zeros_like(x["done"])
    starts[:, 1:] = x["done"][:, :-1]
    last, final_done = x["next_value"][:, -1, 0], x["done"][:, -1, 0]
    next_values, done = bootstrap_inputs(x["value"], starts, last, final_done)
    adv, ret = generalized_advantage(x["reward"], x["value"], next_values, done, gamma, lam, method="exact")
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
    loop_adv, loop_ret = generalized_advantage(x["reward"], x["value"], next_values, done, gamma, lam, method="loop")
    assert np.array_equal(bits(adv), bits(loop_adv)) and np.array_equal(bits(ret), bits(loop_ret))
    assert generalized_advantage(x["reward"], x["value"], next_values, done, gamma, lam)[0].equal(adv), "auto"


@pytest.mark.parametrize("pattern", ["none", "uniform", "mixed", "random"])
@pytest.mark.parametrize(("n_envs", "steps"), [(1, 1), (1, 130), (3, 7), (8, 257), (64, 128)])
def test_exact_gae_with_truncations_is_bit_identical_to_torchrls_loop(n_envs, steps, pattern):
    x = random_rollout(n_envs, steps, pattern, seed=steps + n_envs)
    args = (x["reward"], x["value"], x["next_value"], x["done"], 0.97, 0.9)
    exact = generalized_advantage(*args, method="exact", terminated=x["terminated"])
    loop = generalized_advantage(*args, method="loop", terminated=x["terminated"])
    for ours, ref in zip(exact, loop, strict=True):
        assert np.array_equal(bits(ours), bits(ref))


@pytest.mark.parametrize("pattern", ["none", "uniform", "mixed", "random"])
@pytest.mark.parametrize(("n_envs", "steps"), [(1, 1), (1, 2), (2, 130), (5, 99), (8, 2048), (64, 128)])
@pytest.mark.parametrize("gae_lambda", [0.95, 1.0])
def test_fast_gae_agrees_with_torchrls_estimator_to_1e_5_relative(n_envs, steps, pattern, gae_lambda):
    x = random_rollout(n_envs, steps, pattern, seed=7 * steps + n_envs)
    args = (x["reward"], x["value"], x["next_value"], x["done"], 0.99, gae_lambda)
    fast_adv, fast_ret = generalized_advantage(*args, method="fast", terminated=x["terminated"])
    loop_adv, loop_ret = generalized_advantage(*args, method="loop", terminated=x["terminated"])
    scale = loop_adv.abs().max().item()
    torch.testing.assert_close(fast_adv, loop_adv, rtol=1e-5, atol=1e-5 * scale)
    torch.testing.assert_close(fast_ret, loop_ret, rtol=1e-5, atol=1e-5 * scale)


def float64_advantage(x: dict[str, torch.Tensor], gamma: float, gae_lambda: float) -> torch.Tensor:
    """The recurrence step by step in Python floats (float64), env by env: the truth the fast route is held to."""
    reward, value, next_value, done, terminated = (x[key][..., 0].tolist() for key in ROLLOUT_KEYS)
    rows = []
    for r, v, nv, d, term in zip(reward, value, next_value, done, terminated, strict=True):
        last, row = 0.0, []
        for t in range(len(r) - 1, -1, -1):
            delta = r[t] + (0.0 if term[t] else gamma * nv[t]) - v[t]
            last = delta + (0.0 if d[t] else gamma * gae_lambda * last)
            row.append(last)
        rows.append(row[::-1])
    return torch.tensor(rows, dtype=torch.float64).unsqueeze(-1)


ROLLOUT_KEYS = ("reward", "value", "next_value", "done", "terminated")


@pytest.mark.parametrize(("n_envs", "steps"), [(1, 1), (8, 2), (64, 7), (64, 128), (8, 2048), (2, 100_000)])
def test_fast_gae_is_within_1e_5_of_float64_at_every_discount_and_done_pattern(n_envs, steps):
    # gamma * lambda in {0, 0.1, 0.5, 0.9405, 1}; ends none, ~1% uniform, mixed long/short, 20% random; a third
    # of the ends truncations. Relative to the largest advantage, as the float32 loop's own error is.
    for pattern in ("none", "uniform", "mixed", "random"):
        x = random_rollout(n_envs, steps, pattern, seed=steps + n_envs)
        for gamma, gae_lambda in ((0.99, 0.0), (0.5, 0.2), (1.0, 0.5), (0.99, 0.95), (1.0, 1.0)):
            adv, ret = generalized_advantage(
                x["reward"], x["value"], x["next_value"], x["done"], gamma, gae_lambda, "fast", x["terminated"]
            )
            expected = float64_advantage(x, gamma, gae_lambda)
            atol, case = 1e-5 * expected.abs().max().item(), f"{pattern}, gamma {gamma}, lambda {gae_lambda}"
            torch.testing.assert_close(adv.double(), expected, rtol=1e-5, atol=atol, msg=case)
            torch.testing.assert_close(ret.double(), expected + x["value"].double(), rtol=1e-5, atol=atol, msg=case)


def test_fast_gae_reads_and_writes_strided_tensors():
    # (T, n_envs, 1) storages seen as (n_envs, T, 1): no input or output is contiguous; results must land in `out`.
    x = random_rollout(3, 50, "random", seed=3)
    strided = {key: x[key].transpose(0, 1).contiguous().transpose(0, 1) for key in ROLLOUT_KEYS}
    out = tuple(torch.full_like(strided["value"].transpose(0, 1), -7.0).transpose(0, 1) for _ in range(2))
    assert not any(t.is_contiguous() for t in (*strided.values(), *out))
    args = (0.99, 0.95, "fast", strided["terminated"], out)
    generalized_advantage(strided["reward"], strided["value"], strided["next_value"], strided["done"], *args)
    expected = float64_advantage(x, 0.99, 0.95)
    torch.testing.assert_close(out[0].double(), expected, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(out[1].double(), expected + x["value"].double(), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("gae_method", ["fast", "exact"])
def test_gae_with_a_wrong_number_of_last_values_or_dones_raises_and_writes_nothing(gae_method):
    ref, ours = make_pair(OBS_SPACES["box"], ACTION_SPACES["discrete"], 8, 3, gae_method=gae_method)
    fill_pair(ref, ours, seed=1)
    before = ours.tensordict.clone()
    with pytest.raises(ValueError, match=r"last_values has shape \(2, 1\) \(2 entries\), expected \(3,\)"):
        ours.compute_returns_and_advantage(last_values=torch.zeros(2, 1), dones=np.zeros(3))
    with pytest.raises(ValueError, match=r"dones has shape \(4,\) \(4 entries\), expected \(3,\)"):
        ours.compute_returns_and_advantage(last_values=torch.zeros(3, 1), dones=np.zeros(4))
    assert (ours.tensordict == before).all()


def test_auto_is_exact_on_the_cpu_and_fast_on_an_accelerator():
    assert resolve_gae_method("auto", torch.device("cpu")) == "exact"
    assert resolve_gae_method("auto", torch.device("cuda")) == "fast"
    assert resolve_gae_method("vec", torch.device("cpu")) == "vec"


def test_unknown_gae_method_raises():
    x = torch.zeros(1, 2, 1)
    with pytest.raises(ValueError, match="not a GAE method"):
        generalized_advantage(x, x, x, x.bool(), 0.9, 0.9, method="quick")  # type: ignore[arg-type]


def test_a_buffer_with_an_unknown_gae_method_fails_at_construction():
    with pytest.raises(ValueError, match="gae_method='quick' is not a GAE method"):
        MaskableRolloutBuffer(4, spaces.Box(-1, 1, (2,)), spaces.Discrete(3), "cpu", gae_method="quick")  # type: ignore[arg-type]


@pytest.mark.parametrize("gae_method", ["auto", "fast"])
def test_torchrl_gae_module_on_the_storage_gives_the_buffers_advantages(gae_method):
    # TorchRL's module reads ("next", "state_value"), ("next", "done") and ("next", "terminated") as written.
    ref, ours = make_pair(OBS_SPACES["box"], ACTION_SPACES["discrete"], buffer_size=20, n_envs=3, gae_method=gae_method)
    fill_pair(ref, ours, seed=11)
    rollout = ours.tensordict.clone().exclude("advantage", "value_target")
    GAE(gamma=ours.gamma, lmbda=ours.gae_lambda, value_network=None)(rollout)
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
    for method in ("exact", "fast", "loop"):
        buf = type(ours)(64, ours.observation_space, ours.action_space, "cpu", 0.95, 0.99, 3, gae_method=method)
        buf.extend(batch, observation_keys=[("observation", key) for key in buf.observation_space.spaces])
        results[method] = (buf.tensordict["advantage"], buf.tensordict["value_target"])
    expected = generalized_advantage(
        batch["next", "reward"], batch["state_value"], x["next_value"], x["done"], 0.99, 0.95,
        method="loop", terminated=x["terminated"],
    )  # fmt: skip
    for ours_tensor, ref_tensor in zip(results["exact"] + results["loop"], expected + expected, strict=True):
        assert np.array_equal(bits(ours_tensor), bits(ref_tensor))
    scale = expected[0].abs().max().item()
    for ours_tensor, ref_tensor in zip(results["fast"], expected, strict=True):
        torch.testing.assert_close(ours_tensor, ref_tensor, rtol=1e-5, atol=1e-5 * scale)
