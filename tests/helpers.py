"""Shared by the tests: random rollouts fed identically to sb3-contrib's buffers and ours, and small envs."""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np
import torch
from gymnasium import spaces
from sb3_contrib.common.maskable import buffers as sb3c

import torchrl_mask
from torchrl_mask import MaskablePPO, SeatEnv
from torchrl_mask.rollout.masks import mask_spec

OBS_SPACES: dict[str, spaces.Space] = {
    "box": spaces.Box(-2.0, 2.0, (3,), np.float32),
    "image": spaces.Box(0, 255, (3, 6, 5), np.uint8),
    "discrete": spaces.Discrete(7),
    "multidiscrete": spaces.MultiDiscrete([3, 5]),
    "multibinary": spaces.MultiBinary(4),
    "dict": spaces.Dict(
        {"image": spaces.Box(0, 255, (1, 6, 6), np.uint8), "vec": spaces.Box(-1, 1, (4,)), "pos": spaces.Discrete(9)}
    ),
}
ACTION_SPACES: dict[str, spaces.Space] = {
    "discrete": spaces.Discrete(6),
    "multidiscrete": spaces.MultiDiscrete([3, 2, 4]),
    "multibinary": spaces.MultiBinary(3),
}


def random_masks(action_space: spaces.Space, n_envs: int, rng: np.random.Generator) -> np.ndarray:
    """Random masks with at least one allowed entry in every group."""
    groups = mask_spec(action_space).groups
    parts = []
    for size in groups:
        part = rng.random((n_envs, size)) < 0.5
        part[np.arange(n_envs), rng.integers(0, size, n_envs)] = True
        parts.append(part)
    return np.concatenate(parts, axis=1)


def random_obs(space: spaces.Space, n_envs: int, rng: np.random.Generator) -> Any:
    if isinstance(space, spaces.Dict):
        return {key: random_obs(sub, n_envs, rng) for key, sub in space.spaces.items()}
    space.seed(int(rng.integers(1 << 31)))
    return np.stack([space.sample() for _ in range(n_envs)])


def random_actions(action_space: spaces.Space, masks: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """One action per mask row, each choice drawn among the entries its group allows, in the space's dtype."""
    spec = mask_spec(action_space)
    starts = np.cumsum((0, *spec.groups[:-1]))
    choices = [
        [rng.choice(np.flatnonzero(row[start : start + size])) for start, size in zip(starts, spec.groups, strict=True)]
        for row in masks
    ]
    actions = np.asarray(choices, dtype=action_space.dtype)
    return actions[:, 0] if isinstance(action_space, spaces.Discrete) else actions


def random_step(obs_space, action_space, n_envs, rng, p_start=0.15):
    masks = random_masks(action_space, n_envs, rng)
    return dict(
        obs=random_obs(obs_space, n_envs, rng),
        action=random_actions(action_space, masks, rng),
        reward=rng.normal(size=n_envs).astype(np.float32),
        episode_start=(rng.random(n_envs) < p_start).astype(np.float32),
        value=torch.as_tensor(rng.normal(size=(n_envs, 1)), dtype=torch.float32),
        log_prob=torch.as_tensor(rng.normal(size=n_envs), dtype=torch.float32),
        action_masks=masks,
    )


def make_pair(obs_space, action_space, buffer_size, n_envs, gamma=0.97, gae_lambda=0.9, **kwargs):
    dict_obs = isinstance(obs_space, spaces.Dict)
    ref_cls = sb3c.MaskableDictRolloutBuffer if dict_obs else sb3c.MaskableRolloutBuffer
    our_cls = torchrl_mask.MaskableDictRolloutBuffer if dict_obs else torchrl_mask.MaskableRolloutBuffer
    args = (buffer_size, obs_space, action_space, "cpu")
    ref = ref_cls(*args, gae_lambda=gae_lambda, gamma=gamma, n_envs=n_envs)
    ours = our_cls(*args, gae_lambda=gae_lambda, gamma=gamma, n_envs=n_envs, **kwargs)
    return ref, ours


def fill_pair(ref, ours, seed: int) -> None:
    """Add the same random rollout to both buffers and compute GAE on both."""
    rng = np.random.default_rng(seed)
    for _ in range(ref.buffer_size):
        step = random_step(ref.observation_space, ref.action_space, ref.n_envs, rng)
        masks = step.pop("action_masks")
        ref.add(*step.values(), action_masks=masks)
        ours.add(*step.values(), action_masks=masks)
    last_values = torch.as_tensor(rng.normal(size=(ref.n_envs, 1)), dtype=torch.float32)
    dones = rng.random(ref.n_envs) < 0.3
    ref.compute_returns_and_advantage(last_values=last_values, dones=dones)
    ours.compute_returns_and_advantage(last_values=last_values, dones=dones)


def assert_same_tensor(ref: torch.Tensor, ours: torch.Tensor, name: str) -> None:
    """Equal dtype, shape and values: advantages and returns too, as the default GAE is bit-identical."""
    assert ours.dtype == ref.dtype, f"{name}: dtype {ours.dtype} != sb3-contrib's {ref.dtype}"
    assert ours.shape == ref.shape, f"{name}: shape {tuple(ours.shape)} != sb3-contrib's {tuple(ref.shape)}"
    assert torch.equal(ours, ref), f"{name} differs from sb3-contrib"


def assert_same_samples(ref_batch, our_batch) -> None:
    assert type(our_batch) is type(ref_batch)
    for field in ref_batch._fields:
        ref_value, our_value = getattr(ref_batch, field), getattr(our_batch, field)
        if isinstance(ref_value, dict):
            assert list(our_value) == list(ref_value)
            for key in ref_value:
                assert_same_tensor(ref_value[key], our_value[key], f"observations[{key!r}]")
        else:
            assert_same_tensor(ref_value, our_value, field)


def assert_same_epochs(ref, ours, batch_size, seed: int, epochs: int = 2) -> int:
    """Draw ``epochs`` epochs from both under one numpy seed; every minibatch must match. Returns the count."""
    np.random.seed(seed)
    ref_batches = [b for _ in range(epochs) for b in ref.get(batch_size)]
    np.random.seed(seed)
    our_batches = [b for _ in range(epochs) for b in ours.get(batch_size)]
    assert len(our_batches) == len(ref_batches)
    for ref_batch, our_batch in zip(ref_batches, our_batches, strict=True):
        assert_same_samples(ref_batch, our_batch)
    return len(ref_batches)


class MaskInObservation(gym.Wrapper):
    """InvalidActionEnvDiscrete whose mask is also a Dict observation entry, as PettingZoo's games give it."""

    def __init__(self, env: gym.Env) -> None:
        super().__init__(env)
        n = int(env.action_space.n)
        self.observation_space = spaces.Dict({"obs": env.observation_space, "action_mask": spaces.MultiBinary(n)})

    def _with_mask(self, obs: Any) -> dict[str, Any]:
        return {"obs": obs, "action_mask": np.asarray(self.env.unwrapped.action_masks(), dtype=np.int8)}

    def reset(self, **kwargs: Any) -> tuple[dict[str, Any], dict]:
        obs, info = self.env.reset(**kwargs)
        return self._with_mask(obs), info

    def step(self, action: Any) -> tuple[dict[str, Any], Any, bool, bool, dict]:
        obs, reward, terminated, truncated, info = self.env.step(action)
        return self._with_mask(obs), reward, terminated, truncated, info


def seat_model(game: str) -> MaskablePPO:
    """A small MaskablePPO for one seat of a PettingZoo classic game: 64 moves a rollout, one epoch, 16 units.

    :param game: the game's name (``"tictactoe_v3"``).
    """
    return MaskablePPO(
        "MlpPolicy", SeatEnv(game), n_steps=64, batch_size=64, n_epochs=1, policy_kwargs={"net_arch": [16]}, seed=0
    )
