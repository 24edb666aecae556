"""Rollout sources of :meth:`MaskablePPO.collect_rollouts <torchrl_mask.MaskablePPO.collect_rollouts>`.

``collect_rollouts`` fills the rollout buffer from one of these sources:

- :class:`VecEnvRollout`, the fast path for the common case: a ``DummyVecEnv`` or ``SubprocVecEnv`` whose masks
  :func:`~torchrl_mask.torchrl.envs.vec_env_masks` can read without a per-step ``env_method`` round trip, and one of
  sb3-contrib's stock policies (``MlpPolicy``, ``CnnPolicy``, ``MultiInputPolicy``) with its stock masked
  distribution. Actions are drawn by :class:`~torchrl_mask.distributions.MaskedCategoricals`, all sub-actions at
  once, without building distribution objects: same actions, log-probabilities and values, same random numbers
  consumed, so the same parameters under one seed. Callbacks, ``num_timesteps``, the episode info buffer,
  timeout bootstrapping and episode starts follow sb3-contrib's ``collect_rollouts`` step for step;
- sb3-contrib's own ``collect_rollouts`` for everything else (:func:`fast_rollout` returns None): a custom policy
  or distribution, a forward hook on the policy or a global one, ``use_masking=False``, gSDE, another VecEnv type
  (a ``VecEnvWrapper`` included), an env whose masks cannot be found.

The third source, a TorchRL collector given to ``learn(..., collector=...)``, is
:class:`~torchrl_mask.algorithms.collector_source.CollectorRollout`: one collector batch per ``collect_rollouts`` call.

Example:
    >>> from sb3_contrib.common.envs import InvalidActionEnvDiscrete
    >>> from torchrl_mask import MaskablePPO
    >>> model = MaskablePPO("MlpPolicy", InvalidActionEnvDiscrete(dim=6, n_invalid_actions=3), n_steps=32)
    >>> fast_rollout(model, model.get_env(), use_masking=True) is not None
    True
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np
import torch
from sb3_contrib.common.maskable.buffers import MaskableDictRolloutBuffer, MaskableRolloutBuffer
from stable_baselines3.common.callbacks import BaseCallback
from stable_baselines3.common.utils import obs_as_tensor
from stable_baselines3.common.vec_env import VecEnv

from torchrl_mask.fastpath.stock import StockForward, forward_hooked, stock_policy
from torchrl_mask.torchrl.envs import VecEnvMasks, vec_env_masks

if TYPE_CHECKING:
    from sb3_contrib import MaskablePPO

__all__ = ["VecEnvRollout", "fast_rollout"]


class VecEnvRollout:
    """The fast VecEnv source: sb3-contrib's rollout, with masks read by ``masks`` and the stock forward inlined.

    :param model: the MaskablePPO being trained.
    :param masks: the reader of the VecEnv's masks (from :func:`~torchrl_mask.torchrl.envs.vec_env_masks`).
    """

    def __init__(self, model: MaskablePPO, masks: VecEnvMasks) -> None:
        self.model = model
        self.masks = masks
        self.forward = StockForward(model.policy)

    def collect(self, callback: BaseCallback, rollout_buffer: Any, n_rollout_steps: int) -> bool:
        """Fill ``rollout_buffer`` with ``n_rollout_steps`` steps of each env, as sb3-contrib's
        ``collect_rollouts`` does.

        :param callback: called at rollout start, each step (``on_step`` with sb3-contrib's locals) and end.
        :param rollout_buffer: a maskable rollout buffer (reset here).
        :param n_rollout_steps: steps per env.
        :return: False if a callback stopped the rollout, else True.
        """
        model, env = self.model, self.masks.env
        assert model._last_obs is not None, "No previous observation was provided"
        model.policy.set_training_mode(False)
        rollout_buffer.reset()
        callback.on_rollout_start()
        for n_steps in range(n_rollout_steps):
            obs: Any = model._last_obs
            with torch.no_grad():
                obs_tensor = obs_as_tensor(obs, model.device)
                action_masks = self.masks.masks(obs)
                actions, values, log_probs = self.forward(obs_tensor, action_masks)
            actions_np = actions.cpu().numpy()
            new_obs: Any
            new_obs, rewards, dones, infos = self.masks.step(actions_np)
            model.num_timesteps += env.num_envs
            callback.update_locals(
                {
                    "self": model,
                    "env": env,
                    "callback": callback,
                    "rollout_buffer": rollout_buffer,
                    "n_rollout_steps": n_rollout_steps,
                    "use_masking": True,
                    "n_steps": n_steps,
                    "obs_tensor": obs_tensor,
                    "action_masks": action_masks,
                    "actions": actions_np,
                    "values": values,
                    "log_probs": log_probs,
                    "new_obs": new_obs,
                    "rewards": rewards,
                    "dones": dones,
                    "infos": infos,
                }
            )
            if not callback.on_step():
                return False
            model._update_info_buffer(infos, dones)
            self._bootstrap_timeouts(rewards, dones, infos)
            rollout_buffer.add(
                obs,
                actions_np.reshape(len(actions_np), -1),
                rewards,
                model._last_episode_starts,
                values,
                log_probs,
                action_masks=action_masks,
            )
            model._last_obs = new_obs
            model._last_episode_starts = dones
        with torch.no_grad():
            values = model.policy.predict_values(obs_as_tensor(new_obs, model.device))
        rollout_buffer.compute_returns_and_advantage(last_values=values, dones=dones)
        callback.on_rollout_end()
        return True

    def _bootstrap_timeouts(self, rewards: np.ndarray, dones: np.ndarray, infos: list[dict[str, Any]]) -> None:
        """Add ``gamma * V(terminal observation)`` to the reward of each env truncated by a time limit (in place,
        one env at a time as sb3-contrib does, so the values are bit for bit its own)."""
        policy = self.model.policy
        for idx in np.flatnonzero(dones):
            info = infos[idx]
            if info.get("terminal_observation") is not None and info.get("TimeLimit.truncated", False):
                terminal_obs = policy.obs_to_tensor(info["terminal_observation"])[0]
                with torch.no_grad():
                    terminal_value = policy.predict_values(terminal_obs)[0]
                rewards[idx] += self.model.gamma * terminal_value


def fast_rollout(
    model: MaskablePPO, env: VecEnv, use_masking: bool, rollout_buffer: Any = None
) -> VecEnvRollout | None:
    """The fast source for this rollout, or None where sb3-contrib's ``collect_rollouts`` must run.

    The VecEnv's mask source is resolved once per VecEnv and kept on the model (``_vec_env_masks``).

    :param model: the MaskablePPO being trained.
    :param env: the training VecEnv.
    :param use_masking: ``learn``'s ``use_masking``; False takes sb3-contrib's path.
    :param rollout_buffer: the buffer to fill; None skips its check (it must be a maskable rollout buffer).
    :return: a :class:`VecEnvRollout`, or None.
    """
    policy = model.policy
    if (
        not use_masking
        or getattr(model, "use_sde", False)
        or not stock_policy(policy)
        or forward_hooked(policy)  # the fast path runs the policy without its __call__ (submodules: with)
        or not isinstance(rollout_buffer, (MaskableRolloutBuffer, MaskableDictRolloutBuffer, type(None)))
    ):
        return None
    masks: VecEnvMasks | None = getattr(model, "_vec_env_masks", None)
    if masks is None or masks.env is not env:
        masks = vec_env_masks(env)
        model._vec_env_masks = masks  # type: ignore[attr-defined]
    return VecEnvRollout(model, masks) if masks is not None else None
