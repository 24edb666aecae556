"""One mask check for every ``predict``: MaskablePPO and MaskableRecurrentPPO read the masks where ``learn()`` reads
them, refuse the same bad masks with the same errors, and warn when a masked model predicts without masks."""

from __future__ import annotations

import warnings
from typing import Any

import gymnasium as gym
import numpy as np
import pytest
import torch
from gymnasium import spaces
from helpers import MaskInObservation
from sb3_contrib.common.envs import InvalidActionEnvDiscrete, InvalidActionEnvMultiDiscrete
from stable_baselines3.common.env_util import make_vec_env

from torchrl_mask import MaskablePPO, MaskableRecurrentPPO
from torchrl_mask.algorithms.predict_masks import UnmaskedPredictWarning

MODELS = {
    "MaskablePPO": (MaskablePPO, "MlpPolicy", "MultiInputPolicy", {"net_arch": [8]}),
    "MaskableRecurrentPPO": (MaskableRecurrentPPO, "MlpLstmPolicy", "MultiInputLstmPolicy", {"lstm_hidden_size": 4}),
}


def model_on(name: str, env: Any, dict_obs: bool = False) -> Any:
    cls, mlp, multi, kwargs = MODELS[name]
    return cls(multi if dict_obs else mlp, env, n_steps=16, batch_size=16, seed=0, policy_kwargs=kwargs)


class MaskInInfo(gym.Env):
    """Reports its mask, which changes every step, in ``info["action_mask"]`` only (no ``action_masks()``)."""

    observation_space = spaces.Box(-1.0, 1.0, (2,), np.float32)
    action_space = spaces.MultiDiscrete([2, 3])

    def _info(self) -> dict[str, np.ndarray]:
        mask = np.ones(5, bool)
        mask[2 + self.np_random.integers(3)] = False
        return {"action_mask": mask}

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[Any, dict]:
        super().reset(seed=seed)
        return np.zeros(2, np.float32), self._info()

    def step(self, action: Any) -> tuple[Any, float, bool, bool, dict]:
        return np.zeros(2, np.float32), 0.0, False, False, self._info()


BAD_MASKS = {
    "all_false": (np.zeros(4, bool), "observation 0 allow no action: all 4 entries are False"),
    "nan": (np.array([1.0, np.nan, 1.0, 0.0]), "hold values other than 0 and 1"),
    "two": (np.array([0, 2, 0, 0]), "hold values other than 0 and 1"),
    "wrong_size": (np.ones(5, bool), r"shape \(5,\), but Discrete\(4\) with n_envs=1 needs \(1, 4\)"),
    "two_rows_for_one_observation": (np.ones((2, 4), bool), r"shape \(2, 4\), but Discrete\(4\) with n_envs=1"),
    "text": (np.array(["1", "0", "1", "1"]), "masks must be bool, or integers or floats that are 0 or 1"),
}


@pytest.mark.parametrize("name", MODELS)
@pytest.mark.parametrize("case", BAD_MASKS)
def test_every_model_refuses_the_same_bad_mask_with_the_same_error(name: str, case: str) -> None:
    env = InvalidActionEnvDiscrete(dim=4, n_invalid_actions=1)
    model = model_on(name, env)
    mask, message = BAD_MASKS[case]
    with pytest.raises(ValueError, match=message):
        model.predict(env.reset(seed=0)[0], action_masks=mask)


@pytest.mark.parametrize("name", MODELS)
def test_a_mask_needs_one_row_per_observation(name: str) -> None:
    env = InvalidActionEnvDiscrete(dim=4, n_invalid_actions=1)
    model = model_on(name, env)
    obs = np.stack([env.reset(seed=0)[0]] * 2)
    with pytest.raises(ValueError, match=r"shape \(4,\), but Discrete\(4\) with n_envs=2 needs \(2, 4\)"):
        model.predict(obs, action_masks=np.ones(4, bool))
    masks = np.array([[0, 0, 1, 0], [0, 1, 0, 0]])  # 0/1 integers and tensors are masks too
    assert model.predict(obs, action_masks=masks)[0].tolist() == [2, 1]
    assert model.predict(obs, action_masks=torch.as_tensor(masks, dtype=torch.bool))[0].tolist() == [2, 1]


@pytest.mark.parametrize("name", MODELS)
def test_every_model_reads_a_dict_observations_mask_entry_without_action_masks(name: str) -> None:
    env = MaskInObservation(InvalidActionEnvDiscrete(dim=8, n_invalid_actions=5))
    model = model_on(name, env, dict_obs=True)
    obs, _ = env.reset(seed=0)
    with warnings.catch_warnings():
        warnings.simplefilter("error", UnmaskedPredictWarning)  # the mask was there: no warning either
        for _ in range(60):
            action, _ = model.predict(obs)
            assert obs["action_mask"][int(action)] == 1
            obs = env.step(int(action))[0]


@pytest.mark.parametrize("name", MODELS)
@pytest.mark.parametrize("source", ["action_masks", "info"])
def test_every_model_warns_when_it_predicts_without_the_masks_its_env_has(name: str, source: str) -> None:
    make = MaskInInfo if source == "info" else lambda: InvalidActionEnvMultiDiscrete([2, 3], n_invalid_actions=1)
    env = make_vec_env(make, n_envs=2, seed=0)
    model = model_on(name, env)
    obs = env.reset()  # the reset infos hold the info masks, as after learn()
    with pytest.warns(UnmaskedPredictWarning, match="Pass action_masks=get_action_masks"):
        model.predict(obs)
    with warnings.catch_warnings():
        warnings.simplefilter("error", UnmaskedPredictWarning)
        model.predict(obs, action_masks=np.ones((2, 5), bool))


def test_a_policy_whose_logits_diverged_refuses_to_predict_rather_than_play_a_forbidden_move() -> None:
    # Logits around +-1e9 put every legal move below the masked value -1e8: sb3-contrib's distribution then plays
    # a masked move (0 or 7 where only 5 is legal); ours names the cause instead.
    from torchrl_mask import SeatEnv
    from torchrl_mask.distributions import DivergedLogits

    env = SeatEnv("tictactoe_v3")
    model = MaskablePPO("MlpPolicy", env, seed=0)
    observation, _ = env.reset(seed=0)
    mask = np.zeros(9, dtype=bool)
    mask[5] = True
    assert model.predict(observation, action_masks=mask, deterministic=True)[0] == 5
    with torch.no_grad():
        model.policy.action_net.weight.zero_()
        model.policy.action_net.bias.copy_(torch.tensor([1e9, 0, 0, 0, 0, -1e9, 0, 1e9, 0]))
    with pytest.raises(DivergedLogits, match="the policy's logits diverged"):
        model.predict(observation, action_masks=mask, deterministic=True)
