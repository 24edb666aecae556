"""The masked TorchRL envs (torchrl_mask.torchrl.envs): every mask convention of a real gymnasium env read as a
flat bool ``"action_mask"`` entry."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest
import torch
from collector_envs import (
    TAXI,
    DictWithMask,
    MaskInObservation,
)
from sb3_contrib.common.envs import (
    InvalidActionEnvDiscrete,
    InvalidActionEnvMultiDiscrete,
)
from sb3_contrib.common.maskable.utils import is_masking_supported
from torchrl.envs import GymWrapper
from torchrl.envs.utils import check_env_specs

from torchrl_mask import (
    ActionMaskInInfo,
    ActionMaskInObservation,
    MaskablePPO,
    masked_gym_env,
)

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


def test_action_mask_in_info_serves_the_last_mask_through_action_masks_for_maskable_ppo() -> None:
    taxi = ActionMaskInInfo(gym.make(TAXI))
    with pytest.raises(RuntimeError, match=r"before reset\(\); reset the env first"):
        taxi.action_masks()
    _, info = taxi.reset(seed=0)
    np.testing.assert_array_equal(taxi.action_masks(), info["action_mask"])
    for _ in range(5):  # the mask follows each step
        *_, info = taxi.step(int(np.flatnonzero(taxi.action_masks())[-1]))
        np.testing.assert_array_equal(taxi.action_masks(), info["action_mask"])
    model = MaskablePPO("MlpPolicy", taxi, n_steps=16, batch_size=16, seed=0)  # sb3-contrib's check of its masks
    vec_env = model.get_env()
    assert vec_env is not None and is_masking_supported(vec_env)


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


class _BadMaskEnv(gym.Env):
    """A Discrete(4) env whose action_masks() holds what a buggy env returns."""

    def __init__(self, mask: np.ndarray) -> None:
        self.action_space = gym.spaces.Discrete(4)
        self.observation_space = gym.spaces.Box(-1.0, 1.0, (2,), np.float32)
        self._mask = mask

    def reset(self, *, seed=None, options=None):  # type: ignore[no-untyped-def]
        super().reset(seed=seed)
        return np.zeros(2, np.float32), {}

    def step(self, action):  # type: ignore[no-untyped-def]
        return np.zeros(2, np.float32), 0.0, False, False, {}

    def action_masks(self) -> np.ndarray:
        return self._mask


@pytest.mark.parametrize(
    ("mask", "message"),
    [
        (np.array([1.0, np.nan, 0.0, 1.0]), "values other than 0 and 1"),
        (np.array([0, 2, 1, 0]), "values other than 0 and 1"),
    ],
    ids=["nan", "two"],
)
def test_masked_gym_env_refuses_a_mask_the_buffers_refuse(mask: np.ndarray, message: str) -> None:
    # The collector path reads masks with the buffers' own check: NaN or 2 is not "allowed" there either.
    env = masked_gym_env(_BadMaskEnv(mask))
    with pytest.raises(ValueError, match=message):
        env.reset()
