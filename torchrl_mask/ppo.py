"""MaskablePPO: sb3-contrib's class, with the TensorDict rollout buffers by default.

Change one import, ``from sb3_contrib import MaskablePPO`` to ``from torchrl_mask import MaskablePPO``; the
constructor, ``learn``, ``predict(..., action_masks=...)``, ``save``/``load``, callbacks and policies are
sb3-contrib's own. Under one seed it learns the same parameters.

``collect_rollouts`` takes a rollout source from :mod:`torchrl_mask.rollouts`: the fast VecEnv path for
sb3-contrib's stock policies on a ``DummyVecEnv`` or ``SubprocVecEnv`` (masks read without a per-step
``env_method`` round trip, from an ``action_masks()`` method, a Dict observation entry or ``info["action_mask"]``;
the masked forward inlined, drawing the same random numbers), and sb3-contrib's own ``collect_rollouts`` for
everything else. Both fill the buffer with the same rollout under one seed.

Example:
    >>> from sb3_contrib.common.envs import InvalidActionEnvDiscrete
    >>> from torchrl_mask import MaskablePPO
    >>> env = InvalidActionEnvDiscrete(dim=6, n_invalid_actions=3)
    >>> model = MaskablePPO("MlpPolicy", env, n_steps=32, batch_size=16, n_epochs=1, seed=0).learn(32)
    >>> type(model.rollout_buffer).__module__
    'torchrl_mask.buffers'
    >>> action, _ = model.predict(env.reset()[0], action_masks=env.action_masks())
    >>> bool(env.action_masks()[int(action)])
    True
"""

from __future__ import annotations

from gymnasium import spaces
from sb3_contrib import MaskablePPO as _SB3ContribMaskablePPO
from sb3_contrib.common.maskable import buffers as sb3c_buffers
from stable_baselines3.common.buffers import RolloutBuffer
from stable_baselines3.common.callbacks import BaseCallback
from stable_baselines3.common.vec_env import VecEnv

from torchrl_mask.buffers import MaskableDictRolloutBuffer, MaskableRolloutBuffer
from torchrl_mask.rollouts import fast_rollout

__all__ = ["MaskablePPO"]


class MaskablePPO(_SB3ContribMaskablePPO):
    """Proximal Policy Optimization with invalid action masking, rollouts stored in a TensorDict.

    Takes every argument sb3-contrib's ``MaskablePPO`` takes (see its documentation). The one difference:
    with ``rollout_buffer_class`` None (or sb3-contrib's own buffer, as a model saved by sb3-contrib
    carries), the rollout buffer is :class:`~torchrl_mask.MaskableDictRolloutBuffer` for Dict observation
    spaces and :class:`~torchrl_mask.MaskableRolloutBuffer` otherwise; ``rollout_buffer_kwargs`` reach it
    (e.g. ``{"storage": "memmap"}``). ``rollout_buffer_class`` keeps the value given, so that a saved model
    loads in sb3-contrib (with sb3-contrib's buffers) even where torchrl_mask is not installed.
    """

    def _setup_model(self) -> None:
        # sb3-contrib's hook: it honours rollout_buffer_class, so choosing ours is all this class does.
        requested = self.rollout_buffer_class
        if requested in (None, sb3c_buffers.MaskableRolloutBuffer, sb3c_buffers.MaskableDictRolloutBuffer):
            dict_obs = isinstance(self.observation_space, spaces.Dict)
            self.rollout_buffer_class = MaskableDictRolloutBuffer if dict_obs else MaskableRolloutBuffer
        super()._setup_model()
        # Keep what was asked for: save() pickles this attribute, and a save that names no torchrl_mask class
        # loads in sb3-contrib where torchrl_mask is not installed.
        self.rollout_buffer_class = requested

    def collect_rollouts(
        self,
        env: VecEnv,
        callback: BaseCallback,
        rollout_buffer: RolloutBuffer,
        n_rollout_steps: int,
        use_masking: bool = True,
    ) -> bool:
        """Fill ``rollout_buffer`` with ``n_rollout_steps`` steps of each env of ``env`` (sb3-contrib's contract).

        :param env: the training VecEnv.
        :param callback: called at rollout start, at each step and at rollout end.
        :param rollout_buffer: a maskable rollout buffer.
        :param n_rollout_steps: steps per env.
        :param use_masking: draw actions under the envs' masks.
        :return: False if a callback stopped the rollout, else True.
        """
        # Overridden for speed only: the same rollout without sb3-contrib's per-step mask round trip and
        # distribution objects, where torchrl_mask.rollouts can read the masks; sb3-contrib's own path otherwise.
        source = fast_rollout(self, env, use_masking, rollout_buffer)
        if source is None:
            return super().collect_rollouts(env, callback, rollout_buffer, n_rollout_steps, use_masking)
        return bool(source.collect(callback, rollout_buffer, n_rollout_steps))

    def _excluded_save_params(self) -> list[str]:
        # The VecEnv mask reader belongs to the env, which is not saved either.
        return [*super()._excluded_save_params(), "_vec_env_masks"]
