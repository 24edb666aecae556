"""torchrl_mask.fastpath.evaluation: the inlined ``evaluate_actions`` gives sb3-contrib's numbers bit for bit.

Each case compares the policy's own ``evaluate_actions`` (sb3-contrib's, with ``torch.distributions`` objects)
with the inlined one on the same parameters and minibatch: outputs and every parameter's gradient must be equal
(``torch.equal``), so that ``train()`` learns the same parameters. Adam's step is tested in tests/test_adam.py,
the learned-parameter parity over whole ``learn`` calls in tests/test_ppo.py.
"""

from __future__ import annotations

import copy
from typing import Any

import numpy as np
import pytest
import torch
from gymnasium import spaces
from sb3_contrib.common.maskable.policies import MaskableActorCriticPolicy, MaskableMultiInputActorCriticPolicy
from stable_baselines3.common.utils import obs_as_tensor

from tests.helpers import random_masks, random_obs
from torchrl_mask import MaskablePPO
from torchrl_mask.fastpath.evaluation import evaluate_actions, fast_train
from torchrl_mask.rollout.masks import mask_spec

ACTION_SPACES = {
    "discrete": spaces.Discrete(7),
    "multidiscrete": spaces.MultiDiscrete([3, 5, 2]),
    "multibinary": spaces.MultiBinary(4),
}
VECTOR = spaces.Box(-1.0, 1.0, (5,), np.float32)
DICT = spaces.Dict({"board": spaces.Box(0, 255, (3, 4), np.uint8), "state": VECTOR})
IMAGE = spaces.Box(0, 255, (36, 36, 1), np.uint8)


def make_model(observation_space: spaces.Space, action: str, policy: str, **policy_kwargs: Any) -> MaskablePPO:
    import gymnasium as gym

    class Env(gym.Env):
        def __init__(self) -> None:
            self.observation_space, self.action_space = observation_space, ACTION_SPACES[action]

        def reset(self, *, seed: int | None = None, options: Any = None) -> tuple[Any, dict]:
            return self.observation_space.sample(), {}

        def step(self, action: Any) -> tuple[Any, float, bool, bool, dict]:
            return self.observation_space.sample(), 0.0, False, False, {}

        def action_masks(self) -> np.ndarray:
            return np.ones(mask_spec(self.action_space).size, bool)

    kwargs = {"net_arch": [16], **policy_kwargs}
    return MaskablePPO(policy, Env(), n_steps=8, seed=0, device="cpu", policy_kwargs=kwargs)


def minibatch(model: MaskablePPO, rows: int = 12, seed: int = 0) -> tuple[Any, torch.Tensor, torch.Tensor]:
    """Observations, actions (as sb3-contrib's train() passes them) and masks of ``rows`` random steps."""
    rng = np.random.default_rng(seed)
    action_space = model.action_space
    masks = random_masks(action_space, rows, rng)
    obs = obs_as_tensor(random_obs(model.observation_space, rows, rng), model.device)
    actions = torch.as_tensor(np.stack([_allowed_action(action_space, row, rng) for row in masks]))
    if isinstance(action_space, spaces.Discrete):
        actions = actions.long().flatten()
    return obs, actions, torch.as_tensor(masks)


def _allowed_action(action_space: spaces.Space, mask: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    dims = (
        [int(action_space.n)]
        if isinstance(action_space, spaces.Discrete)
        else (
            list(action_space.nvec) if isinstance(action_space, spaces.MultiDiscrete) else [2] * int(action_space.n)  # type: ignore[arg-type]
        )
    )
    out, start = [], 0
    for n in dims:
        out.append(rng.choice(np.flatnonzero(mask[start : start + n])))
        start += n
    return np.asarray(out, np.float32)


def outputs_and_gradients(
    model: MaskablePPO, evaluate: Any, batch: tuple[Any, torch.Tensor, torch.Tensor]
) -> tuple[list[torch.Tensor], dict[str, torch.Tensor]]:
    policy = model.policy
    policy.set_training_mode(True)
    policy.optimizer.zero_grad()
    values, log_prob, entropy = evaluate(*batch[:2], action_masks=batch[2])
    # A loss that mixes all three as train() does, so that every gradient path is exercised.
    (values.pow(2).mean() - log_prob.mean() * 0.7 - 0.01 * entropy.mean()).backward()
    grads = {name: p.grad.clone() for name, p in policy.named_parameters() if p.grad is not None}
    return [values.detach(), log_prob.detach(), entropy.detach()], grads


CASES = [
    (VECTOR, "discrete", "MlpPolicy", {}),
    (VECTOR, "multidiscrete", "MlpPolicy", {}),
    (VECTOR, "multibinary", "MlpPolicy", {}),
    (DICT, "discrete", "MultiInputPolicy", {}),
    (DICT, "multidiscrete", "MultiInputPolicy", {"share_features_extractor": False}),
    (IMAGE, "discrete", "CnnPolicy", {"features_extractor_kwargs": {"features_dim": 16}}),
    (
        IMAGE,
        "multibinary",
        "CnnPolicy",
        {"features_extractor_kwargs": {"features_dim": 16}, "net_arch": {"pi": [8, 8], "vf": [16]}},
    ),
]


@pytest.mark.parametrize(("observation_space", "action", "policy", "kwargs"), CASES)
def test_inlined_evaluate_actions_equals_sb3_contribs_outputs_and_gradients(
    observation_space: spaces.Space, action: str, policy: str, kwargs: dict[str, Any]
) -> None:
    model = make_model(observation_space, action, policy, **kwargs)
    batch = minibatch(model)
    ref_out, ref_grads = outputs_and_gradients(model, model.policy.evaluate_actions, batch)
    with fast_train(model.policy) as inlined:
        assert inlined
        out, grads = outputs_and_gradients(model, model.policy.evaluate_actions, batch)

    assert len(ref_grads) == len(list(model.policy.parameters())), "every parameter takes part in the loss"
    for name, ref, ours in zip(("values", "log_prob", "entropy"), ref_out, out, strict=True):
        assert ref.shape == ours.shape and torch.equal(ref, ours), name
    assert ref_grads.keys() == grads.keys()
    for name, ref in ref_grads.items():
        assert torch.equal(ref, grads[name]), f"gradient of {name} differs"


def test_evaluate_actions_without_masks_is_sb3_contribs_unmasked_distribution() -> None:
    model = make_model(VECTOR, "multidiscrete", "MlpPolicy")
    obs, actions, _ = minibatch(model)
    ref = model.policy.evaluate_actions(obs, actions, action_masks=None)
    ours = evaluate_actions(model.policy, obs, actions, action_masks=None)
    for r, o in zip(ref, ours, strict=True):
        assert torch.equal(r, o)


def test_nan_logits_raise_a_value_error() -> None:
    # sb3-contrib's distribution raises too, but only while torch.distributions validates its arguments, which
    # importing torchrl.modules switches off for the whole process; the inlined check does not depend on it.
    model = make_model(VECTOR, "discrete", "MlpPolicy")
    with torch.no_grad():
        model.policy.action_net.bias[2] = float("nan")
    obs, actions, masks = minibatch(model)
    with fast_train(model.policy), pytest.raises(ValueError, match="NaN"):
        model.policy.evaluate_actions(obs, actions, action_masks=masks)


def test_the_swaps_are_undone_after_the_block() -> None:
    model = make_model(DICT, "discrete", "MultiInputPolicy")
    policy = model.policy
    with fast_train(policy):
        assert "evaluate_actions" in vars(policy)
        assert "step" in vars(policy.optimizer)
    assert "evaluate_actions" not in vars(policy)
    assert "step" not in vars(policy.optimizer)
    assert [g["foreach"] for g in policy.optimizer.param_groups] == [None]
    # Also on an error inside train(): nothing stays patched.
    with pytest.raises(RuntimeError), fast_train(policy):
        raise RuntimeError("inside train")
    assert "evaluate_actions" not in vars(policy)
    assert "step" not in vars(policy.optimizer)
    assert policy.optimizer.param_groups[0]["foreach"] is None
    # A copy made while patched evaluates with its own parameters, not the original's.
    with fast_train(policy):
        twin = copy.deepcopy(model)
    assert twin.policy.evaluate_actions.args[0] is twin.policy  # type: ignore[attr-defined]


class _CustomPolicy(MaskableActorCriticPolicy):
    pass


@pytest.mark.parametrize("case", ["subclass", "backward hook", "forward hook", "instance override"])
def test_anything_but_a_stock_unhooked_policy_runs_sb3_contribs_evaluate_actions(case: str) -> None:
    policy_class: Any = _CustomPolicy if case == "subclass" else "MultiInputPolicy"
    model = make_model(DICT if case != "subclass" else VECTOR, "discrete", policy_class)
    policy = model.policy
    if case == "backward hook":
        policy.mlp_extractor.policy_net[0].register_full_backward_hook(lambda *args: None)
    elif case == "forward hook":
        policy.value_net.register_forward_hook(lambda *args: None)
    elif case == "instance override":
        policy.evaluate_actions = policy.evaluate_actions  # type: ignore[method-assign]
    before = vars(policy).get("evaluate_actions")
    with fast_train(policy) as inlined:
        assert not inlined
        assert vars(policy).get("evaluate_actions") is before


def test_learn_with_a_multi_input_policy_runs_the_inlined_evaluation(monkeypatch: pytest.MonkeyPatch) -> None:
    import torchrl_mask.fastpath.evaluation as evaluation

    calls = []
    real = evaluation.evaluate_actions
    monkeypatch.setattr(evaluation, "evaluate_actions", lambda *a, **k: calls.append(1) or real(*a, **k))
    model = make_model(DICT, "multidiscrete", "MultiInputPolicy")
    assert isinstance(model.policy, MaskableMultiInputActorCriticPolicy)
    model.learn(16)
    assert len(calls) == 2 * model.n_epochs  # two updates, one 8-row minibatch per epoch
