"""Large and uneven action spaces: MaskablePPO learns sb3-contrib's parameters bit for bit through the one masked
distribution (torchrl_mask.distributions), in the VecEnv rollout, the collectors' policy module and train(), on
the VecEnv path and through a TorchRL collector.
"""

from __future__ import annotations

import warnings
from typing import Any

import gymnasium as gym
import numpy as np
import pytest
import sb3_contrib
import torch
from gymnasium import spaces
from stable_baselines3.common.vec_env import DummyVecEnv
from tensordict import TensorDict
from torchrl.collectors import Collector

from torchrl_mask import MaskablePolicyModule, MaskablePPO, masked_gym_env
from torchrl_mask.algorithms.ppo import UnmaskedPredictWarning
from torchrl_mask.algorithms.vecenv_source import fast_rollout
from torchrl_mask.fastpath.stock import stock_predict
from torchrl_mask.rollout.masks import mask_spec

SPACES = {
    "discrete-4096": spaces.Discrete(4096),
    "multidiscrete-even": spaces.MultiDiscrete([34] * 10),
    "multidiscrete-uneven": spaces.MultiDiscrete([2, 7, 50, 3]),
    "multibinary-339": spaces.MultiBinary(339),
}


class ShiftingMaskEnv(gym.Env):
    """Random observations, reward for the first sub-action's parity, 12-step episodes; every third mask entry
    forbidden, shifted each step."""

    def __init__(self, action_space: spaces.Space, seed: int) -> None:
        self.action_space = action_space
        self.observation_space = spaces.Box(-1.0, 1.0, (8,), np.float32)
        self._rng = np.random.default_rng(seed)
        self._width = mask_spec(action_space).size
        self._t = 0

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[np.ndarray, dict]:
        super().reset(seed=seed)
        self._t = 0
        return self._rng.uniform(-1, 1, 8).astype(np.float32), {}

    def step(self, action: Any) -> tuple[np.ndarray, float, bool, bool, dict]:
        assert self.action_masks()[_mask_index(self.action_space, action)].all(), "an illegal action was taken"
        self._t += 1
        obs = self._rng.uniform(-1, 1, 8).astype(np.float32)
        return obs, float(int(np.asarray(action).flat[0]) % 2), self._t >= 12, False, {}

    def action_masks(self) -> np.ndarray:
        return (np.arange(self._width) + self._t) % 3 != 2


def _mask_index(space: spaces.Space, action: Any) -> np.ndarray:
    """The mask entry of each sub-action's choice."""
    groups = mask_spec(space).groups
    return np.cumsum([0, *groups[:-1]]) + np.asarray(action).reshape(len(groups))


def _learn(cls: type, space: spaces.Space) -> dict[str, torch.Tensor]:
    env = DummyVecEnv([lambda i=i: ShiftingMaskEnv(space, seed=i) for i in range(3)])
    model = cls(
        "MlpPolicy", env, n_steps=16, batch_size=24, n_epochs=2, seed=0, device="cpu", policy_kwargs={"net_arch": [16]}
    )
    if cls is MaskablePPO:
        assert fast_rollout(model, model.get_env(), use_masking=True) is not None  # the inlined path is tested
    model.learn(16 * 3 * 10)  # 10 updates
    return model.policy.state_dict()


@pytest.mark.parametrize("name", list(SPACES))
def test_parameters_after_ten_updates_are_sb3_contribs_bit_for_bit(name: str) -> None:
    ref = _learn(sb3_contrib.MaskablePPO, SPACES[name])
    ours = _learn(MaskablePPO, SPACES[name])
    assert ref.keys() == ours.keys()
    for key, value in ref.items():
        assert torch.equal(ours[key], value), key


@pytest.mark.parametrize("name", list(SPACES))
def test_the_collectors_policy_module_gives_sb3_contribs_log_probs_bit_for_bit(name: str) -> None:
    space = SPACES[name]
    model = MaskablePPO("MlpPolicy", ShiftingMaskEnv(space, seed=0), policy_kwargs={"net_arch": [16]}, seed=0)
    rng = np.random.default_rng(0)
    obs = torch.as_tensor(rng.uniform(-1, 1, (40, 8)), dtype=torch.float32)
    width = mask_spec(space).size
    mask = torch.as_tensor((np.arange(width)[None] + rng.integers(0, 3, (40, 1))) % 3 != 2)
    out = MaskablePolicyModule(model.policy)(TensorDict({"observation": obs, "action_mask": mask}, [40]))
    actions = out["action"].reshape(40, -1)
    with torch.no_grad():  # sb3-contrib's own evaluate_actions, its distribution objects
        _, log_prob, _ = model.policy.evaluate_actions(
            obs, actions.squeeze(-1) if actions.shape[1] == 1 else actions, action_masks=mask
        )
    assert torch.equal(out["action_log_prob"], log_prob)
    offsets = torch.as_tensor(np.cumsum([0, *mask_spec(space).groups[:-1]]))
    assert bool(mask.gather(1, actions.long() + offsets).all())


@pytest.mark.parametrize("name", list(SPACES))
def test_parameters_after_ten_updates_through_a_torchrl_collector_are_sb3_contribs_bit_for_bit(name: str) -> None:
    # One env, the same one on both sides: sb3-contrib steps it in a DummyVecEnv, ours through TorchRL's Collector
    # running MaskablePolicyModule (the one masked distribution drawing from torch's global generator as
    # sb3-contrib does); extend() then computes GAE on the batch. Both generators are seeded right before learn,
    # after the collector's construction (which runs the policy once on a fake step).
    space = SPACES[name]
    kwargs: dict[str, Any] = {
        "n_steps": 16,
        "batch_size": 16,
        "n_epochs": 2,
        "seed": 0,
        "device": "cpu",
        "policy_kwargs": {"net_arch": [16]},
    }
    ref = sb3_contrib.MaskablePPO("MlpPolicy", DummyVecEnv([lambda: ShiftingMaskEnv(space, seed=0)]), **kwargs)
    torch.manual_seed(1)
    np.random.seed(1)
    ref.learn(16 * 10)
    ours = MaskablePPO("MlpPolicy", ShiftingMaskEnv(space, seed=99), **kwargs)
    collector = Collector(
        lambda: masked_gym_env(ShiftingMaskEnv(space, seed=0)),
        MaskablePolicyModule(ours.policy),
        frames_per_batch=16,
        total_frames=-1,
    )
    torch.manual_seed(1)
    np.random.seed(1)
    ours.learn(16 * 10, collector=collector)
    assert ours.num_timesteps == ref.num_timesteps == 160
    for key, value in ref.policy.state_dict().items():
        assert torch.equal(ours.policy.state_dict()[key], value), key


PREDICT_SPACES = {**SPACES, "discrete-6": spaces.Discrete(6), "multibinary-5": spaces.MultiBinary(5)}


@pytest.mark.parametrize("name", list(PREDICT_SPACES))
@pytest.mark.parametrize("deterministic", [False, True], ids=["drawn", "mode"])
def test_predict_draws_through_the_one_distribution_sb3_contribs_actions(name: str, deterministic: bool) -> None:
    # predict() on a stock policy runs MaskedCategoricals (stock_predict says it replaced _predict), and gives
    # sb3-contrib's actions for one observation and for a batch, masked and unmasked, consuming the same draws.
    space = PREDICT_SPACES[name]
    ours = MaskablePPO("MlpPolicy", ShiftingMaskEnv(space, seed=0), seed=3, device="cpu")
    ref = sb3_contrib.MaskablePPO("MlpPolicy", ShiftingMaskEnv(space, seed=0), seed=3, device="cpu")
    with stock_predict(ours.policy) as inline:
        assert inline
    assert "_predict" not in vars(ours.policy)  # restored: a copy of the policy holds nothing bound to this one
    env = ShiftingMaskEnv(space, seed=1)
    rng = np.random.default_rng(0)
    batch = rng.uniform(-1, 1, (5, 8)).astype(np.float32)
    masks = np.stack([(np.arange(mask_spec(space).size) + t) % 3 != 2 for t in range(5)])
    cases = [(env.reset()[0], env.action_masks()), (batch, masks), (batch, None)]
    for seed, (obs, mask) in enumerate(cases):
        torch.manual_seed(seed)
        expected, _ = ref.predict(obs, deterministic=deterministic, action_masks=mask)
        after = torch.rand(2)
        torch.manual_seed(seed)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", UnmaskedPredictWarning)  # the unmasked case: asked for here
            actions, _ = ours.predict(obs, deterministic=deterministic, action_masks=mask)
        assert actions.shape == expected.shape and actions.dtype == expected.dtype
        assert np.array_equal(actions, expected), (seed, actions, expected)
        assert torch.equal(torch.rand(2), after)


def test_predict_keeps_sb3_contribs_path_for_a_policy_whose_get_distribution_is_replaced() -> None:
    model = MaskablePPO("MlpPolicy", ShiftingMaskEnv(spaces.Discrete(6), seed=0), seed=0, device="cpu")
    calls = []
    original = model.policy.get_distribution

    def counted(*args: Any, **kwargs: Any) -> Any:
        calls.append(1)
        return original(*args, **kwargs)

    model.policy.get_distribution = counted  # type: ignore[method-assign]
    with stock_predict(model.policy) as inline:
        assert not inline
    env = ShiftingMaskEnv(spaces.Discrete(6), seed=0)
    action, _ = model.predict(env.reset()[0], action_masks=env.action_masks())
    assert calls == [1] and env.action_masks()[int(action)]
