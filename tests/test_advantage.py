"""GAE through TorchRL: a case worked out by hand, SB3's boundary mapping, and TorchRL's own modules."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from helpers import ACTION_SPACES, OBS_SPACES, fill_pair, make_pair
from tensordict.nn import TensorDictModule
from torch import nn
from torchrl.modules import MaskedCategorical, ProbabilisticActor, ValueOperator
from torchrl.objectives import ClipPPOLoss
from torchrl.objectives.value import GAE

from torchrl_mask.advantage import bootstrap_inputs, choose_gae_method, generalized_advantage


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


@pytest.mark.parametrize("n_envs", [1, 4, 64])
def test_auto_choice_is_loop_or_vec_and_both_agree(n_envs):
    method = choose_gae_method(n_envs, 512, 0.99, 0.95, torch.device("cpu"))
    assert method in ("loop", "vec")
    g = torch.Generator().manual_seed(n_envs)
    values, rewards = torch.randn(n_envs, 50, 1, generator=g), torch.randn(n_envs, 50, 1, generator=g)
    done = torch.rand(n_envs, 50, 1, generator=g) < 0.05
    next_values = torch.randn(n_envs, 50, 1, generator=g)
    loop = generalized_advantage(rewards, values, next_values, done, 0.99, 0.95, method="loop")
    vec = generalized_advantage(rewards, values, next_values, done, 0.99, 0.95, method="vec")
    torch.testing.assert_close(loop, vec, rtol=1e-5, atol=1e-5)


def test_unknown_gae_method_raises():
    x = torch.zeros(1, 2, 1)
    with pytest.raises(ValueError, match="not a GAE method"):
        generalized_advantage(x, x, x, x.bool(), 0.9, 0.9, method="fast")  # type: ignore[arg-type]


def test_torchrl_gae_module_on_the_storage_gives_the_buffers_advantages():
    ref, ours = make_pair(OBS_SPACES["box"], ACTION_SPACES["discrete"], buffer_size=20, n_envs=3)
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
