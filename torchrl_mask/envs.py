"""Masked envs for TorchRL: every mask convention in use becomes a bool ``"action_mask"`` entry of each step.

- an ``action_masks()`` method (sb3-contrib's convention, ``ActionMasker``), ``info["action_mask"]`` (gymnasium's
  Taxi) or a Dict observation entry (PettingZoo's convention): :func:`masked_gym_env` over the gymnasium env,
  through :class:`ActionMaskInInfo`;
- a TorchRL env that already writes ``"action_mask"``: as it is (rename another key with TorchRL's
  ``RenameTransform``).

Example:
    >>> import gymnasium as gym
    >>> env = masked_gym_env(gym.make("Taxi-v4"))
    >>> td = env.reset()
    >>> td["action_mask"].dtype, tuple(td["action_mask"].shape)
    (torch.bool, (6,))
"""

from __future__ import annotations

from typing import Any, Literal, SupportsFloat

import gymnasium as gym
import numpy as np
import torch
from gymnasium import spaces
from torchrl.data import Binary, Composite
from torchrl.envs import Compose, EnvBase, GymWrapper, InitTracker, RewardSum, StepCounter, TransformedEnv
from torchrl.envs.gym_like import default_info_dict_reader

from torchrl_mask import storage as st
from torchrl_mask.masks import mask_spec

__all__ = ["ActionMaskInInfo", "MaskSource", "masked_gym_env"]

MaskSource = Literal["auto", "method", "info", "observation"]
ACTION_MASK = st.ACTION_MASK


class ActionMaskInInfo(gym.Wrapper):
    """A gymnasium wrapper that puts each step's action mask in ``info["action_mask"]`` as a flat bool array.

    It reads the mask where the env keeps it, in the env's own process (no extra round trip):

    - ``"method"``: the env's ``action_masks()`` (sb3-contrib's convention, e.g. ``ActionMasker``);
    - ``"info"``: ``info[key]`` at reset and step (gymnasium's Taxi);
    - ``"observation"``: the ``key`` entry of a Dict observation (PettingZoo's convention), which is taken out of
      the observation and its space;
    - ``"auto"``: ``"observation"`` if the Dict observation space has ``key`` (it must leave the observation
      either way), else ``"method"`` if the env has ``action_masks``, else ``"info"``.

    :param env: a gymnasium env with a Discrete, MultiDiscrete or 1-D MultiBinary action space.
    :param source: where the mask is, see above.
    :param key: the mask's name in ``info`` or in the Dict observation.
    :raises TypeError: the action space cannot be masked.
    :raises ValueError: ``source="observation"`` without a Dict observation space holding ``key``.
    """

    def __init__(self, env: gym.Env, source: MaskSource = "auto", key: str = ACTION_MASK) -> None:
        super().__init__(env)
        self._mask_size = mask_spec(env.action_space).size
        obs_space = env.observation_space
        has_obs_entry = isinstance(obs_space, spaces.Dict) and key in obs_space.spaces
        if source == "auto":
            source = "observation" if has_obs_entry else "method" if env.has_wrapper_attr("action_masks") else "info"
        if source not in ("method", "info", "observation"):
            raise ValueError(f"source={source!r} is not a mask source: use 'auto', 'method', 'info' or 'observation'.")
        if source == "observation":
            if not has_obs_entry:
                raise ValueError(
                    f"source='observation' needs a Dict observation space with a {key!r} entry; "
                    f"the env's observation space is {obs_space!r}."
                )
            assert isinstance(obs_space, spaces.Dict)
            self.observation_space = spaces.Dict({k: v for k, v in obs_space.spaces.items() if k != key})
        self.source: str = source
        self.key = key

    def _mask(self, obs: Any, info: dict[str, Any]) -> tuple[Any, dict[str, Any]]:
        if self.source == "method":
            mask = self.env.get_wrapper_attr("action_masks")()
        elif self.source == "observation":
            obs = dict(obs)
            mask = obs.pop(self.key)
        else:
            if self.key not in info:
                raise ValueError(
                    f"The env's info has no {self.key!r} entry (keys: {sorted(info)}); give the mask's source: "
                    "source='method' for an action_masks() method, 'observation' for a Dict observation entry."
                )
            mask = info[self.key]
        mask = np.asarray(mask)
        if mask.size != self._mask_size:
            raise ValueError(
                f"The env's action mask has {mask.size} entries, but {self.env.action_space!r} needs "
                f"{self._mask_size} (sb3-contrib's layout)."
            )
        info = dict(info)
        info[ACTION_MASK] = mask.reshape(self._mask_size).astype(bool, copy=False)
        return obs, info

    def reset(self, **kwargs: Any) -> tuple[Any, dict[str, Any]]:
        """Reset the env; ``info["action_mask"]`` holds the first observation's mask."""
        obs, info = self.env.reset(**kwargs)
        return self._mask(obs, info)

    def step(self, action: Any) -> tuple[Any, SupportsFloat, bool, bool, dict[str, Any]]:
        """Step the env; ``info["action_mask"]`` holds the mask of the observation returned."""
        obs, reward, terminated, truncated, info = self.env.step(action)
        obs, info = self._mask(obs, info)
        return obs, reward, terminated, truncated, info


def masked_gym_env(
    env: gym.Env,
    source: MaskSource = "auto",
    key: str = ACTION_MASK,
    device: torch.device | str | None = None,
    episode_stats: bool = True,
    init_tracker: bool = True,
) -> EnvBase:
    """A TorchRL env over a masked gymnasium env, with a bool ``"action_mask"`` in every step's TensorDict.

    The env is wrapped in :class:`ActionMaskInInfo` and TorchRL's ``GymWrapper`` (Discrete actions as indices),
    and carries TorchRL's ``InitTracker`` (``"is_init"``) and, with ``episode_stats``, ``RewardSum``
    (``"episode_reward"``) and ``StepCounter`` (``"step_count"``), which :func:`learn_from_collector` logs as
    SB3's ``rollout/ep_rew_mean`` and ``rollout/ep_len_mean`` (as SB3's ``Monitor`` does).
    Observation keys are ``"observation"`` for a non-Dict space and the Dict's keys otherwise.

    Call it inside the function a collector runs in its workers: ``lambda: masked_gym_env(gym.make(...))``.

    :param env: a gymnasium env (a fresh instance; it is not copied).
    :param source: where the env keeps its mask, see :class:`ActionMaskInInfo`.
    :param key: the mask's name in ``info`` or in the Dict observation.
    :param device: the TorchRL env's device; None leaves tensors on the CPU.
    :param episode_stats: track each episode's return and length (two transforms, a little time per step).
    :param init_tracker: add ``"is_init"`` (TorchRL's ``InitTracker``, for recurrent policies and TorchRL's own
        losses). :func:`learn_from_collector` does not need it (it derives episode starts from
        ``("next", "done")``); without it and without ``episode_stats`` the env is the bare ``GymWrapper``, which
        measured about 0.15 ms less per step here.
    :return: the TorchRL env; ``"action_mask"`` has shape ``(mask_dims,)``, dtype ``torch.bool``.
    """
    masked = ActionMaskInInfo(env, source=source, key=key)
    size = mask_spec(env.action_space).size
    wrapped = GymWrapper(masked, categorical_action_encoding=True, device=device)
    wrapped.set_info_dict_reader(
        default_info_dict_reader([ACTION_MASK], spec=Composite({ACTION_MASK: Binary(n=size, dtype=torch.bool)}))
    )
    transforms = [InitTracker()] if init_tracker else []
    if episode_stats:
        transforms += [RewardSum(), StepCounter()]
    return TransformedEnv(wrapped, Compose(*transforms)) if transforms else wrapped
