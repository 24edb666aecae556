"""The SB3 policy as a TorchRL policy (torchrl_mask.torchrl.policy.MaskablePolicyModule): the same actions, values
and log-probabilities as sb3-contrib's ``predict`` and masked distribution, hooks honoured."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest
import torch
from collector_envs import (
    SMALL,
    TAXI,
    allowed,
)
from sb3_contrib.common.envs import (
    InvalidActionEnvDiscrete,
    InvalidActionEnvMultiBinary,
    InvalidActionEnvMultiDiscrete,
)
from tensordict import TensorDict
from tensordict.nn import InteractionType, set_interaction_type

from torchrl_mask import MaskablePolicyModule, MaskablePPO
from torchrl_mask.fastpath import stock

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
        _, log_prob, _ = model.policy.evaluate_actions(
            obs_t, actions.squeeze(-1) if actions.shape[1] == 1 else actions, action_masks=mask
        )
    assert torch.equal(out["action_log_prob"], log_prob)  # sb3-contrib's masked distribution, bit for bit
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
    td = TensorDict(
        {
            "observation": torch.as_tensor(rng.integers(0, [3, 4], size=(5, 2))),
            "action_mask": torch.as_tensor(rng.random((5, 7)) < 0.6) | torch.eye(1, 7, dtype=torch.bool),
        },
        [5],
    )
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
    monkeypatch.setattr(stock, "_GLOBAL_HOOKS", [None, None])
    monkeypatch.setattr(stock, "_through", lambda *_: pytest.fail("took the path that skips hooks"))
    assert module(td)["action_mask"][module(td)["action"]]


def test_policy_module_rejects_wrong_number_of_observation_keys() -> None:
    policy = MaskablePPO("MlpPolicy", gym.make(TAXI), policy_kwargs=SMALL).policy
    with pytest.raises(ValueError, match=r"observation_keys has 2 keys.*1 leaves"):
        MaskablePolicyModule(policy, observation_keys=["a", "b"])


def test_policy_module_refuses_a_mask_holding_nan_or_two_instead_of_reading_it_as_allowed() -> None:
    module = MaskablePolicyModule(
        MaskablePPO(
            "MlpPolicy", InvalidActionEnvDiscrete(dim=4, n_invalid_actions=1), policy_kwargs=SMALL, seed=0
        ).policy
    )
    obs = torch.zeros(2, 4)
    for bad in (torch.tensor([[1.0, float("nan"), 0.0, 1.0]] * 2), torch.tensor([[0, 2, 1, 0]] * 2)):
        with pytest.raises(ValueError, match="values other than 0 and 1"):
            module(TensorDict({"observation": obs, "action_mask": bad}, [2]))
