"""MaskablePPO's rollout sources: the fast VecEnv path against sb3-contrib's own ``collect_rollouts``.

The fast path must fill the buffer with sb3-contrib's rollout bit for bit (observations, actions, masks,
log-probabilities, values) under one seed, whichever way the env gives its masks, and leave everything it does
not handle (custom policies, forward hooks) to sb3-contrib's path.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import gymnasium as gym
import numpy as np
import pytest
import sb3_contrib
import torch
from gymnasium import spaces
from gymnasium.wrappers import TimeLimit
from sb3_contrib.common.envs import InvalidActionEnvDiscrete, InvalidActionEnvMultiDiscrete
from sb3_contrib.common.maskable.policies import MaskableActorCriticPolicy
from sb3_contrib.common.wrappers import ActionMasker
from stable_baselines3.common.callbacks import BaseCallback
from stable_baselines3.common.monitor import Monitor
from stable_baselines3.common.vec_env import DummyVecEnv, SubprocVecEnv, VecEnv

from torchrl_mask import MaskableDictRolloutBuffer, MaskablePPO, MaskableRolloutBuffer
from torchrl_mask.algorithms.vecenv_source import fast_rollout
from torchrl_mask.rollout import storage as st

SB3ContribMaskablePPO = sb3_contrib.MaskablePPO
SETTINGS: dict[str, Any] = {
    "n_steps": 16,
    "batch_size": 16,
    "n_epochs": 2,
    "seed": 3,
    "policy_kwargs": {"net_arch": [16]},
    "device": "cpu",
}
ROLLOUT_KEYS = [st.OBSERVATION, st.ACTION, st.ACTION_MASK, st.LOG_PROB, st.VALUE, st.NEXT_REWARD, st.IS_INIT]


class MaskConvention(gym.Wrapper):
    """Gives the inner env's mask one way only: ``"method"`` (``action_masks()``), ``"info"``
    (``info["action_mask"]``) or ``"observation"`` (a Dict observation ``{"state", "action_mask"}``).

    ``last_mask`` keeps the mask of the last observation, for an ``ActionMasker`` that gives sb3-contrib the
    same masks through the method it reads.
    """

    def __init__(self, env: gym.Env, convention: str) -> None:
        super().__init__(env)
        self.convention = convention
        self.last_mask = np.ones(0, bool)
        if convention == "observation":
            self.observation_space = spaces.Dict(
                {"state": env.observation_space, "action_mask": spaces.MultiBinary(int(env.action_space.n))}
            )

    def get_wrapper_attr(self, name: str) -> Any:
        if name == "action_masks" and self.convention != "method":
            raise AttributeError("action_masks is hidden: the mask comes another way")
        return super().get_wrapper_attr(name)

    def _expose(self, obs: Any, info: dict[str, Any]) -> tuple[Any, dict[str, Any]]:
        self.last_mask = np.asarray(self.env.unwrapped.action_masks(), bool)  # type: ignore[attr-defined]
        if self.convention == "info":
            info = {**info, "action_mask": self.last_mask}
        elif self.convention == "observation":
            obs = {"state": obs, "action_mask": self.last_mask.astype(np.int8)}
        return obs, info

    def reset(self, **kwargs: Any) -> tuple[Any, dict[str, Any]]:
        return self._expose(*self.env.reset(**kwargs))

    def step(self, action: Any) -> tuple[Any, Any, bool, bool, dict[str, Any]]:
        obs, reward, terminated, truncated, info = self.env.step(action)
        obs, info = self._expose(obs, info)
        return obs, reward, terminated, truncated, info


def env_factory(convention: str, index: int, for_sb3_contrib: bool, multi: bool = False) -> Callable[[], gym.Env]:
    """One masked env, truncated after 5 steps (value bootstrap inside every rollout) and in ``Monitor``."""

    def build() -> gym.Env:
        np.random.seed(index)  # the test envs draw invalid actions from numpy's global generator (workers)
        inner: gym.Env = (
            InvalidActionEnvMultiDiscrete(dims=[3, 4], ep_length=1000, n_invalid_actions=3)
            if multi
            else InvalidActionEnvDiscrete(dim=6, ep_length=1000, n_invalid_actions=3)
        )
        inner.action_space.seed(50 + index)
        env: gym.Env = MaskConvention(inner, convention)
        if for_sb3_contrib and convention != "method":
            env = ActionMasker(env, lambda e: e.get_wrapper_attr("last_mask"))
        return Monitor(TimeLimit(env, max_episode_steps=5))

    return build


def make_venv(convention: str, for_sb3_contrib: bool, vec: type[VecEnv] = DummyVecEnv, **kwargs: Any) -> VecEnv:
    return vec([env_factory(convention, i, for_sb3_contrib, **kwargs) for i in range(2)])


def policy_for(convention: str) -> str:
    return "MultiInputPolicy" if convention == "observation" else "MlpPolicy"


def buffer_for(convention: str) -> type:
    return MaskableDictRolloutBuffer if convention == "observation" else MaskableRolloutBuffer


def learn(algorithm: type, env: VecEnv, policy: Any, convention: str, iterations: int = 2, **kwargs: Any) -> Any:
    """Both libraries with torchrl_mask's buffer (so that the rollouts compare key by key) and the loop GAE."""
    model = algorithm(
        policy,
        env,
        rollout_buffer_class=buffer_for(convention),
        rollout_buffer_kwargs={"gae_method": "loop"},
        **{**SETTINGS, **kwargs},
    )
    return model.learn(iterations * model.n_steps * env.num_envs)


def assert_same_rollout(ref: Any, ours: Any) -> None:
    ref_td, our_td = ref.rollout_buffer.tensordict, ours.rollout_buffer.tensordict
    compared = 0
    for key, theirs in ref_td.select(*ROLLOUT_KEYS).items(include_nested=True, leaves_only=True):
        mine = our_td.get(key)
        assert theirs.dtype == mine.dtype and torch.equal(theirs, mine), f"rollout entry {key!r} differs"
        compared += 1
    assert compared >= len(ROLLOUT_KEYS)


def assert_same_parameters(ref: Any, ours: Any) -> None:
    ref_params, our_params = ref.policy.state_dict(), ours.policy.state_dict()
    assert list(our_params) == list(ref_params)
    for key, value in ref_params.items():
        assert torch.equal(our_params[key], value), f"policy parameter {key!r} differs"


def forbid_sb3_contrib_path(monkeypatch: pytest.MonkeyPatch) -> None:
    def refuse(*args: Any, **kwargs: Any) -> bool:
        raise AssertionError("took sb3-contrib's collect_rollouts")

    monkeypatch.setattr(SB3ContribMaskablePPO, "collect_rollouts", refuse)


# ------------------------------------------------------------------------------------------------- parity


@pytest.mark.parametrize("convention", ["method", "info", "observation"])
def test_fast_path_fills_the_rollout_of_sb3_contribs_path_for_each_mask_convention(
    convention: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    ref = learn(SB3ContribMaskablePPO, make_venv(convention, True), policy_for(convention), convention)
    env = make_venv(convention, False)
    forbid_sb3_contrib_path(monkeypatch)
    ours = learn(MaskablePPO, env, policy_for(convention), convention)
    assert ours._vec_env_masks.source == convention
    assert_same_rollout(ref, ours)
    assert_same_parameters(ref, ours)
    assert ours.num_timesteps == ref.num_timesteps
    assert [ep["r"] for ep in ours.ep_info_buffer] == [ep["r"] for ep in ref.ep_info_buffer]
    assert len(ours.ep_info_buffer) > 0
    assert np.array_equal(ours._last_episode_starts, ref._last_episode_starts)


def test_fast_path_on_multidiscrete_actions_learns_sb3_contribs_parameters(monkeypatch: pytest.MonkeyPatch) -> None:
    ref = learn(SB3ContribMaskablePPO, make_venv("method", True, multi=True), "MlpPolicy", "method")
    forbid_sb3_contrib_path(monkeypatch)
    ours = learn(MaskablePPO, make_venv("method", False, multi=True), "MlpPolicy", "method")
    assert_same_rollout(ref, ours)
    assert_same_parameters(ref, ours)


@pytest.mark.slow  # starts processes: kept out of make test-fast
@pytest.mark.parametrize("convention", ["method", "info"])
def test_subproc_vec_env_fast_path_learns_sb3_contribs_parameters(
    convention: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    ref_env, env = make_venv(convention, True, SubprocVecEnv), make_venv(convention, False, SubprocVecEnv)
    try:
        ref = learn(SB3ContribMaskablePPO, ref_env, "MlpPolicy", convention)
        forbid_sb3_contrib_path(monkeypatch)
        ours = learn(MaskablePPO, env, "MlpPolicy", convention)
        assert ours._vec_env_masks.source == convention
        assert_same_rollout(ref, ours)
        assert_same_parameters(ref, ours)
        # Every pipelined mask request was answered: the workers still answer in order.
        assert np.array_equal(*(np.stack(venv.get_attr("last_mask")) for venv in (env, ref_env)))
    finally:
        ref_env.close()
        env.close()


class StepRecorder(BaseCallback):
    """Records what sb3-contrib's ``collect_rollouts`` shows callbacks at each step; stops after ``stop_at``."""

    def __init__(self, stop_at: int) -> None:
        super().__init__()
        self.stop_at = stop_at
        self.seen: list[tuple[Any, ...]] = []
        self.rollouts = 0

    def _on_rollout_start(self) -> None:
        self.rollouts += 1

    def _on_step(self) -> bool:
        loc = self.locals
        self.seen.append(
            (
                loc["n_steps"],
                loc["actions"].copy(),
                loc["rewards"].copy(),
                loc["dones"].copy(),
                np.asarray(loc["action_masks"]).copy(),
                loc["values"].clone(),
                loc["log_probs"].clone(),
                self.num_timesteps,
            )
        )
        return len(self.seen) < self.stop_at


def test_callbacks_see_sb3_contribs_locals_and_can_stop_the_rollout(monkeypatch: pytest.MonkeyPatch) -> None:
    recorders = {}
    for name, algorithm in [("sb3-contrib", SB3ContribMaskablePPO), ("torchrl_mask", MaskablePPO)]:
        if name == "torchrl_mask":
            forbid_sb3_contrib_path(monkeypatch)
        model = algorithm("MlpPolicy", make_venv("method", True), **SETTINGS)
        recorders[name] = recorder = StepRecorder(stop_at=21)
        model.learn(10 * model.n_steps * 2, callback=recorder)
        assert model.num_timesteps == 21 * 2 and recorder.rollouts == 2
    ref, ours = recorders["sb3-contrib"].seen, recorders["torchrl_mask"].seen
    assert len(ours) == len(ref) == 21
    for ref_step, our_step in zip(ref, ours, strict=True):
        for theirs, mine in zip(ref_step, our_step, strict=True):
            same = torch.equal(theirs, mine) if isinstance(theirs, torch.Tensor) else np.array_equal(theirs, mine)
            assert same, (ref_step, our_step)


# ------------------------------------------------------------------------------------------------ fallback


class CustomPolicy(MaskableActorCriticPolicy):
    """A user's subclass: the fast path cannot know what it changes."""


def count_sb3_contrib_rollouts(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    calls: list[int] = []
    original = SB3ContribMaskablePPO.collect_rollouts

    def counting(self: Any, *args: Any, **kwargs: Any) -> bool:
        calls.append(1)
        return original(self, *args, **kwargs)

    monkeypatch.setattr(SB3ContribMaskablePPO, "collect_rollouts", counting)
    return calls


def test_a_custom_policy_takes_sb3_contribs_path(monkeypatch: pytest.MonkeyPatch) -> None:
    ref = learn(SB3ContribMaskablePPO, make_venv("method", True), CustomPolicy, "method")
    calls = count_sb3_contrib_rollouts(monkeypatch)
    ours = learn(MaskablePPO, make_venv("method", True), CustomPolicy, "method")
    assert fast_rollout(ours, ours.get_env(), use_masking=True) is None
    assert len(calls) == 2  # both rollouts went through sb3-contrib's collect_rollouts
    assert_same_parameters(ref, ours)


def test_a_forward_hook_on_the_policy_takes_sb3_contribs_path_and_sees_every_step(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    model = MaskablePPO("MlpPolicy", make_venv("method", True), **SETTINGS)
    assert fast_rollout(model, model.get_env(), use_masking=True) is not None
    hooked: list[int] = []
    handle = model.policy.register_forward_hook(lambda module, args, output: hooked.append(len(output[0])))
    calls = count_sb3_contrib_rollouts(monkeypatch)
    try:
        assert fast_rollout(model, model.get_env(), use_masking=True) is None
        model.learn(model.n_steps * 2)
    finally:
        handle.remove()
    assert calls == [1] and hooked == [2] * model.n_steps
    assert fast_rollout(model, model.get_env(), use_masking=True) is not None


def test_a_hook_on_a_layer_keeps_the_fast_path_and_runs_every_step(monkeypatch: pytest.MonkeyPatch) -> None:
    model = MaskablePPO("MlpPolicy", make_venv("method", True), **SETTINGS)
    seen: list[int] = []
    handle = model.policy.action_net.register_forward_hook(lambda module, args, output: seen.append(len(output)))
    forbid_sb3_contrib_path(monkeypatch)
    try:
        model.learn(model.n_steps * 2)
    finally:
        handle.remove()
    # n_steps rollout calls on 2 rows, then train()'s minibatches (sb3-contrib's evaluate_actions) on 16 rows.
    assert seen[: model.n_steps] == [2] * model.n_steps and set(seen[model.n_steps :]) == {16}


def test_an_env_without_masks_is_left_to_sb3_contrib_which_raises() -> None:
    env = DummyVecEnv([lambda: TimeLimit(MaskConvention(InvalidActionEnvDiscrete(dim=6), "none"), 5)])
    model = MaskablePPO("MlpPolicy", env, **SETTINGS)
    assert fast_rollout(model, env, use_masking=True) is None
    with pytest.raises(ValueError, match="Environment does not support action masking"):
        model.learn(32)


def test_a_missing_info_mask_after_reset_names_the_env_and_the_fix() -> None:
    class DropsTheMask(gym.Wrapper):
        def step(self, action: Any) -> Any:
            obs, reward, terminated, truncated, _ = self.env.step(action)
            return obs, reward, terminated, truncated, {}

    env = DummyVecEnv([lambda: DropsTheMask(MaskConvention(InvalidActionEnvDiscrete(dim=6), "info"))])
    model = MaskablePPO("MlpPolicy", env, **SETTINGS)
    with pytest.raises(ValueError, match=r"Env 0's info has no 'action_mask' entry.*action_masks\(\) method"):
        model.learn(32)
