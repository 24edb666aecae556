"""Masked envs for TorchRL: every mask convention in use becomes a bool ``"action_mask"`` entry of each step.

- an ``action_masks()`` method (sb3-contrib's convention, ``ActionMasker``), ``info["action_mask"]`` (gymnasium's
  Taxi) or a Dict observation entry (PettingZoo's convention): :func:`masked_gym_env` over the gymnasium env,
  through :class:`ActionMaskInObservation` (:class:`ActionMaskInInfo` puts the mask in ``info`` instead, for
  gymnasium code that reads it there);
- a TorchRL env that already writes ``"action_mask"``: as it is (rename another key with TorchRL's
  ``RenameTransform``);
- an SB3 ``DummyVecEnv`` or ``SubprocVecEnv`` (``MaskablePPO``'s fast rollouts): :func:`vec_env_masks` resolves
  the convention once per VecEnv and reads each step's masks without an ``env_method`` round trip.

Example:
    >>> import gymnasium as gym
    >>> env = masked_gym_env(gym.make("Taxi-v4"))
    >>> td = env.reset()
    >>> td["action_mask"].dtype, tuple(td["action_mask"].shape)
    (torch.bool, (6,))
"""

from __future__ import annotations

from typing import Any, Literal, SupportsFloat, cast

import gymnasium as gym
import numpy as np
import torch
from gymnasium import spaces
from sb3_contrib.common.maskable.utils import EXPECTED_METHOD_NAME, is_masking_supported
from stable_baselines3.common.vec_env import DummyVecEnv, SubprocVecEnv, VecEnv
from stable_baselines3.common.vec_env.base_vec_env import VecEnvObs, VecEnvStepReturn
from torchrl.data import Binary
from torchrl.envs import Compose, EnvBase, GymWrapper, InitTracker, RewardSum, StepCounter, TransformedEnv

from torchrl_mask.rollout import storage as st
from torchrl_mask.rollout.masks import mask_spec

__all__ = [
    "ActionMaskInInfo",
    "ActionMaskInObservation",
    "MaskSource",
    "VecEnvMasks",
    "masked_gym_env",
    "vec_env_masks",
]

MaskSource = Literal["auto", "method", "info", "observation"]
ACTION_MASK = st.ACTION_MASK


class _MaskReader(gym.Wrapper):
    """Reads each step's mask where the env keeps it, in the env's own process; see :class:`ActionMaskInInfo`."""

    def __init__(self, env: gym.Env, source: MaskSource = "auto", key: str = ACTION_MASK) -> None:
        super().__init__(env)
        self._spec = mask_spec(env.action_space)
        self._mask_size = self._spec.size
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

    def _read(self, obs: Any, info: dict[str, Any]) -> tuple[Any, np.ndarray]:
        """The observation (less the mask entry if it was in it) and the mask, flat bool ``(mask_dims,)``."""
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
        # The buffers' own reader (masks.MaskSpec): 0/1 or bool entries only, NaN or 2 refused rather than read
        # as allowed. A row that allows no action reaches the learner, whose extend() names the env and step.
        rows = self._spec.reshape(mask.reshape(1, self._mask_size), 1)
        return obs, np.asarray(rows).reshape(self._mask_size)


class ActionMaskInInfo(_MaskReader):
    """A gymnasium wrapper that puts each step's action mask in ``info["action_mask"]`` as a flat bool array, and
    serves it through ``action_masks()``, as sb3-contrib's ``MaskablePPO`` asks for it.

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

    _mask: np.ndarray | None = None

    def reset(self, **kwargs: Any) -> tuple[Any, dict[str, Any]]:
        """Reset the env; ``info["action_mask"]`` holds the first observation's mask."""
        obs, info = self.env.reset(**kwargs)
        obs, self._mask = self._read(obs, info)
        return obs, {**info, ACTION_MASK: self._mask}

    def step(self, action: Any) -> tuple[Any, SupportsFloat, bool, bool, dict[str, Any]]:
        """Step the env; ``info["action_mask"]`` holds the mask of the observation returned."""
        obs, reward, terminated, truncated, info = self.env.step(action)
        obs, self._mask = self._read(obs, info)
        return obs, reward, terminated, truncated, {**info, ACTION_MASK: self._mask}

    def action_masks(self) -> np.ndarray:
        """The mask of the last observation returned, flat bool ``(mask_dims,)`` (sb3-contrib's convention).

        :raises RuntimeError: called before :meth:`reset`.
        """
        if self._mask is None:
            raise RuntimeError("action_masks() was called before reset(); reset the env first.")
        return self._mask


class ActionMaskInObservation(_MaskReader):
    """A gymnasium wrapper that makes the observation a Dict with the step's action mask as its ``"action_mask"``.

    The mask is read as :class:`ActionMaskInInfo` reads it (same ``source`` and ``key``) and becomes a flat bool
    entry ``(mask_dims,)``. A Dict observation keeps its other entries; any other observation becomes the
    ``"observation"`` entry, which is where TorchRL's ``GymWrapper`` would put it anyway. This is what
    :func:`masked_gym_env` uses: TorchRL reads the mask with the observation, which costs less per step than its
    info-dict reader (figures in the benchmarks page).

    :param env: a gymnasium env with a Discrete, MultiDiscrete or 1-D MultiBinary action space.
    :param source: where the mask is, see :class:`ActionMaskInInfo`.
    :param key: the mask's name in ``info`` or in the Dict observation.
    :raises TypeError: the action space cannot be masked.
    :raises ValueError: ``source="observation"`` without a Dict observation space holding ``key``, or a Dict
        observation that already has an ``"action_mask"`` entry the mask does not come from.
    """

    def __init__(self, env: gym.Env, source: MaskSource = "auto", key: str = ACTION_MASK) -> None:
        super().__init__(env, source, key)
        inner = self.observation_space  # the env's, less the mask entry when the mask came from it
        self._is_dict = isinstance(inner, spaces.Dict)
        entries = dict(inner.spaces) if isinstance(inner, spaces.Dict) else {st.OBSERVATION: inner}
        if ACTION_MASK in entries:
            raise ValueError(
                f"The env's Dict observation already has an {ACTION_MASK!r} entry, but the mask is read from "
                f"source={self.source!r} (key={key!r}): rename that entry, or read the mask from it with "
                f"source='observation', key={ACTION_MASK!r}."
            )
        self.observation_space = spaces.Dict({**entries, ACTION_MASK: spaces.MultiBinary(self._mask_size)})

    def _with_mask(self, obs: Any, info: dict[str, Any]) -> dict[str, Any]:
        obs, mask = self._read(obs, info)  # a fresh dict already when the mask came out of it
        entries = (obs if self.source == "observation" else dict(obs)) if self._is_dict else {st.OBSERVATION: obs}
        entries[ACTION_MASK] = mask
        return entries

    def reset(self, **kwargs: Any) -> tuple[dict[str, Any], dict[str, Any]]:
        """Reset the env; the observation's ``"action_mask"`` is its mask."""
        obs, info = self.env.reset(**kwargs)
        return self._with_mask(obs, info), info

    def step(self, action: Any) -> tuple[dict[str, Any], SupportsFloat, bool, bool, dict[str, Any]]:
        """Step the env; the observation's ``"action_mask"`` is the mask of the observation returned."""
        obs, reward, terminated, truncated, info = self.env.step(action)
        return self._with_mask(obs, info), reward, terminated, truncated, info


def masked_gym_env(
    env: gym.Env,
    source: MaskSource = "auto",
    key: str = ACTION_MASK,
    device: torch.device | str | None = None,
    episode_stats: bool = True,
    init_tracker: bool = True,
) -> EnvBase:
    """A TorchRL env over a masked gymnasium env, with a bool ``"action_mask"`` in every step's TensorDict.

    The env is wrapped in :class:`ActionMaskInObservation` and TorchRL's ``GymWrapper`` (Discrete actions as
    indices),
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
        ``("next", "done")``); without it and without ``episode_stats`` the env is the bare ``GymWrapper``, the
        cheapest per step. Give such envs' collectors
        ``auto_register_policy_transforms=False``: TorchRL 0.14 warns that the env lacks ``InitTracker`` (it
        assumes every policy needs ``"is_init"``) and 0.15 would add it back.
    :return: the TorchRL env; ``"action_mask"`` has shape ``(mask_dims,)``, dtype ``torch.bool``.
    """
    masked = ActionMaskInObservation(env, source=source, key=key)
    wrapped = GymWrapper(masked, categorical_action_encoding=True, device=device)
    # gymnasium's MultiBinary is int8; the mask entry is bool (what the buffers and the policy read).
    wrapped.set_spec_lock_(False)
    wrapped.observation_spec[ACTION_MASK] = Binary(n=masked._mask_size, dtype=torch.bool, device=device)
    wrapped.set_spec_lock_(True)
    transforms = [InitTracker()] if init_tracker else []
    if episode_stats:
        transforms += [RewardSum(), StepCounter()]
    return TransformedEnv(wrapped, Compose(*transforms)) if transforms else wrapped


class VecEnvMasks:
    """Each step's action masks of a ``DummyVecEnv`` or ``SubprocVecEnv``, read where the envs keep them.

    :meth:`step` steps the VecEnv and :meth:`masks` gives the masks of an observation it returned,
    ``(n_envs, mask_dims)`` as the envs give them, with no ``env_method`` round trip per step:

    - ``"method"`` (sb3-contrib's ``action_masks()``, found through wrappers as ``env_method`` finds it): in a
      ``DummyVecEnv`` each env's bound method is resolved once and called directly; in a ``SubprocVecEnv`` the
      ``env_method`` request is sent to each worker right behind its step request, on the same pipe, so the
      worker answers both in one go and the learner waits once. This uses the message that SB3's own
      ``SubprocVecEnv.env_method`` sends, and no worker-side code: it works with any env the workers run;
    - ``"observation"``: the ``key`` entry of the Dict observation (which stays in the observation);
    - ``"info"``: ``infos[i][key]``, or the reset info where the step ended an episode (the mask belongs to
      the reset observation).

    Masks are tied to the observation object they belong to; for an observation this object did not return
    (a fresh ``env.reset()``), they are read from the envs (method), the observation, or the reset infos.

    :param env: the VecEnv (exactly a ``DummyVecEnv`` or ``SubprocVecEnv``).
    :param source: ``"method"``, ``"observation"`` or ``"info"``, see :func:`vec_env_masks`.
    :param key: the mask's name in the Dict observation or the infos.
    """

    def __init__(self, env: VecEnv, source: Literal["method", "info", "observation"], key: str = ACTION_MASK):
        self.env = env
        self.source = source
        self.key = key
        self._methods = (
            [gym_env.get_wrapper_attr(EXPECTED_METHOD_NAME) for gym_env in env.envs]
            if source == "method" and isinstance(env, DummyVecEnv)
            else None
        )
        self._pipelined = source == "method" and isinstance(env, SubprocVecEnv)
        self._last: tuple[Any, np.ndarray | None] = (None, None)  # (observation, its masks) from the last step

    def masks(self, obs: VecEnvObs) -> np.ndarray:
        """The masks of ``obs`` (the last observation :meth:`step` returned, or a reset's), ``(n_envs, ...)``."""
        if self.source == "observation":
            return cast(dict[str, np.ndarray], obs)[self.key]
        last_obs, last_masks = self._last
        if last_obs is obs and last_masks is not None:
            return last_masks
        if self._methods is not None:
            return np.stack([method() for method in self._methods])
        if self.source == "method":
            return np.stack(self.env.env_method(EXPECTED_METHOD_NAME))
        return self.from_infos(self.env.reset_infos, np.ones(self.env.num_envs, bool), self.env.reset_infos)

    def step(self, actions: np.ndarray) -> VecEnvStepReturn:
        """``env.step(actions)``, keeping the masks of the returned observation for :meth:`masks`."""
        env = self.env
        env.step_async(actions)
        if self._pipelined:
            request: tuple[str, Any] = ("env_method", (EXPECTED_METHOD_NAME, (), {}))
            for remote in cast(SubprocVecEnv, env).remotes:
                remote.send(request)
        new_obs, rewards, dones, infos = env.step_wait()
        masks = None
        if self._pipelined:
            masks = np.stack([remote.recv() for remote in cast(SubprocVecEnv, env).remotes])
        elif self.source == "info":
            masks = self.from_infos(infos, dones, env.reset_infos)
        self._last = (new_obs, masks)
        return new_obs, rewards, dones, infos

    def from_infos(self, infos: Any, dones: np.ndarray, reset_infos: list[dict[str, Any]]) -> np.ndarray:
        """Each env's mask from its step info, or from its reset info where ``dones`` (auto-reset).

        :param infos: the step's infos, one per env.
        :param dones: ``(n_envs,)``, True where the step ended an episode (the env was reset).
        :param reset_infos: the VecEnv's ``reset_infos``.
        :return: ``(n_envs, ...)``, the masks as the infos hold them.
        :raises ValueError: an info without the mask's key.
        """
        rows = []
        for i, info in enumerate(infos):
            where = reset_infos[i] if dones[i] else info
            if self.key not in where:
                raise ValueError(
                    f"Env {i}'s {'reset ' if dones[i] else ''}info has no {self.key!r} entry (keys: {sorted(where)}): "
                    "give every info the mask, or give the env an action_masks() method (sb3-contrib's ActionMasker)."
                )
            rows.append(where[self.key])
        return np.stack(rows)


def vec_env_masks(env: VecEnv, key: str = ACTION_MASK) -> VecEnvMasks | None:
    """Resolve, once, where the envs of a ``DummyVecEnv`` or ``SubprocVecEnv`` keep their masks.

    In this order: an ``action_masks()`` method (what sb3-contrib reads, so it wins wherever it exists), a
    ``key`` entry of the Dict observation space, a ``key`` entry in every reset info.

    :param env: the VecEnv, just reset if the masks may be in the infos.
    :param key: the mask's name in the observation or the infos.
    :return: the reader, or None for another VecEnv type (a ``VecEnvWrapper`` included) or no mask found.
    """
    if type(env) not in (DummyVecEnv, SubprocVecEnv):
        return None
    if is_masking_supported(env):
        return VecEnvMasks(env, "method", key)
    obs_space = env.observation_space
    if isinstance(obs_space, spaces.Dict) and key in obs_space.spaces:
        return VecEnvMasks(env, "observation", key)
    if all(key in info for info in env.reset_infos):
        return VecEnvMasks(env, "info", key)
    return None
