"""MaskablePPO: sb3-contrib's class, with the TensorDict rollout buffers by default.

Change one import, ``from sb3_contrib import MaskablePPO`` to ``from torchrl_mask import MaskablePPO``; the
constructor, ``learn``, ``predict(..., action_masks=...)``, ``save``/``load``, callbacks and policies are
sb3-contrib's own. Under one seed it learns the same parameters.

``learn(total_timesteps, collector=collector)`` takes each rollout from a TorchRL collector instead of the VecEnv
(:mod:`torchrl_mask.algorithms.collector_source`), inside sb3-contrib's own ``learn`` loop. Without a collector,
``collect_rollouts`` takes a rollout source from :mod:`torchrl_mask.algorithms.vecenv_source`: the fast VecEnv path for
sb3-contrib's stock policies on a ``DummyVecEnv`` or ``SubprocVecEnv`` (masks read without a per-step
``env_method`` round trip, from an ``action_masks()`` method, a Dict observation entry or ``info["action_mask"]``;
the masked forward inlined, drawing the same random numbers), and sb3-contrib's own ``collect_rollouts`` for
everything else. Both fill the buffer with the same rollout under one seed.

A gymnasium env with a nested Dict observation space is flattened one level for SB3
(:class:`~torchrl_mask.torchrl.nested.FlattenNestedDict`, keys like ``"board/cells"``), ``predict`` takes the nested
observation as the env returns it, and the rollout keeps the nested keys; see :mod:`torchrl_mask.torchrl.nested`.

Example:
    >>> from sb3_contrib.common.envs import InvalidActionEnvDiscrete
    >>> from torchrl_mask import MaskablePPO
    >>> env = InvalidActionEnvDiscrete(dim=6, n_invalid_actions=3)
    >>> model = MaskablePPO("MlpPolicy", env, n_steps=32, batch_size=16, n_epochs=1, seed=0).learn(32)
    >>> type(model.rollout_buffer).__module__
    'torchrl_mask.rollout.buffers'
    >>> action, _ = model.predict(env.reset()[0], action_masks=env.action_masks())
    >>> bool(env.action_masks()[int(action)])
    True
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, TypeVar

import numpy as np
import torch
from gymnasium import spaces
from sb3_contrib import MaskablePPO as _SB3ContribMaskablePPO
from sb3_contrib.common.maskable import buffers as sb3c_buffers
from stable_baselines3.common.buffers import RolloutBuffer
from stable_baselines3.common.callbacks import BaseCallback
from stable_baselines3.common.type_aliases import GymEnv, MaybeCallback
from stable_baselines3.common.vec_env import VecEnv
from tensordict.utils import NestedKey
from torchrl.collectors import BaseCollector

from torchrl_mask.algorithms.collector_source import (
    DEFAULT_BATCH_TIMEOUT,
    CollectorRollout,
    learn_through,
)
from torchrl_mask.algorithms.minibatches import check_minibatches
from torchrl_mask.algorithms.predict_masks import UnmaskedPredictWarning, predict_masks
from torchrl_mask.algorithms.vecenv_source import fast_rollout
from torchrl_mask.fastpath.evaluation import fast_train
from torchrl_mask.fastpath.stock import stock_predict
from torchrl_mask.rollout import storage as st
from torchrl_mask.rollout.buffers import MaskableDictRolloutBuffer, MaskableRolloutBuffer
from torchrl_mask.torchrl.nested import flatten_nested_env, flatten_observation

__all__ = ["MaskablePPO", "UnmaskedPredictWarning"]


_Self = TypeVar("_Self", bound="MaskablePPO")


class MaskablePPO(_SB3ContribMaskablePPO):
    """Proximal Policy Optimization with invalid action masking, rollouts stored in a TensorDict.

    Takes every argument sb3-contrib's ``MaskablePPO`` takes (see its documentation). The one difference:
    with ``rollout_buffer_class`` None (or sb3-contrib's own buffer, as a model saved by sb3-contrib
    carries), the rollout buffer is :class:`~torchrl_mask.MaskableDictRolloutBuffer` for Dict observation
    spaces and :class:`~torchrl_mask.MaskableRolloutBuffer` otherwise; ``rollout_buffer_kwargs`` reach it
    (e.g. ``{"storage": "memmap"}``). ``rollout_buffer_class`` keeps the value given, so that a saved model
    loads in sb3-contrib (with sb3-contrib's buffers) even where torchrl_mask is not installed.

    A gymnasium env with a nested Dict observation space (which SB3 refuses) is wrapped in
    :class:`~torchrl_mask.torchrl.nested.FlattenNestedDict`: the model's space is the Dict flattened one level
    (``"board/cells"``), ``"MultiInputPolicy"`` is SB3's ``CombinedExtractor`` over its leaves, and the rollout
    stores them under nested keys (``("observation", "board", "cells")``). Give an SB3 ``VecEnv`` of such envs
    the wrapper yourself: ``make_vec_env(..., wrapper_class=FlattenNestedDict)``.

    ``learn(..., collector=...)`` takes the rollouts from a TorchRL collector instead of the VecEnv.
    """

    _collector_rollout: CollectorRollout | None = None  # the source while learn(collector=...) runs
    _kept_collector_rollout: CollectorRollout | None = None  # after learn(..., shutdown=False), for the next learn

    @staticmethod
    def _wrap_env(env: GymEnv, verbose: int = 0, monitor_wrapper: bool = True) -> VecEnv:
        # SB3's hook for every env the model gets (constructor, set_env, load): a nested Dict space, which SB3's
        # check refuses, is flattened one level first; everything else is SB3's own wrapping.
        return _SB3ContribMaskablePPO._wrap_env(flatten_nested_env(env), verbose, monitor_wrapper)

    def predict(
        self,
        observation: np.ndarray | Mapping[str, Any],
        state: tuple[np.ndarray, ...] | None = None,
        episode_start: np.ndarray | None = None,
        deterministic: bool = False,
        action_masks: np.ndarray | torch.Tensor | None = None,
    ) -> tuple[np.ndarray, tuple[np.ndarray, ...] | None]:
        """sb3-contrib's ``predict``, which also takes a nested Dict observation as the env returns it, and draws
        through :class:`~torchrl_mask.distributions.MaskedCategoricals` for the stock policies (the same actions).

        :param observation: the observation (or a batch of them); nested dicts are flattened one level, as
            :class:`~torchrl_mask.torchrl.nested.FlattenNestedDict` flattens them.
        :param state: the policy's hidden state (recurrent policies; None here).
        :param episode_start: episode starts (recurrent policies).
        :param deterministic: take the most likely action instead of sampling.
        :param action_masks: the mask, ``(mask_dims,)`` or ``(n, mask_dims)`` for ``n`` observations, checked by
            :func:`~torchrl_mask.algorithms.predict_masks.predict_masks`; None reads a Dict observation's
            ``"action_mask"`` entry if it has one (else predicts unmasked, with a warning where the model's env
            has masks).
        :return: the action(s) and the next hidden state.
        :raises ValueError: a mask of the wrong size or row count, with entries other than 0 and 1, or allowing no
            action.
        """
        if isinstance(observation, Mapping) and any(isinstance(v, Mapping) for v in observation.values()):
            observation = flatten_observation(observation)
        action_masks, groups = predict_masks(
            self.action_space, self.observation_space, observation, action_masks, self.env
        )
        with stock_predict(self.policy, groups):  # the one masked distribution draws, as in the rollouts
            return super().predict(observation, state, episode_start, deterministic, action_masks)  # type: ignore[arg-type]

    def _setup_model(self) -> None:
        # sb3-contrib's hook: it honours rollout_buffer_class, so choosing ours is all this class does; and, as
        # SB3's PPO does, it refuses a rollout whose last minibatch of one row would make the parameters NaN.
        check_minibatches(
            self.n_steps, self.n_envs, self.batch_size or self.n_steps * self.n_envs, self.normalize_advantage
        )
        requested = self.rollout_buffer_class
        if requested in (None, sb3c_buffers.MaskableRolloutBuffer, sb3c_buffers.MaskableDictRolloutBuffer):
            dict_obs = isinstance(self.observation_space, spaces.Dict)
            self.rollout_buffer_class = MaskableDictRolloutBuffer if dict_obs else MaskableRolloutBuffer
        super()._setup_model()
        # Keep what was asked for: save() pickles this attribute, and a save that names no torchrl_mask class
        # loads in sb3-contrib where torchrl_mask is not installed.
        self.rollout_buffer_class = requested

    def learn(  # type: ignore[override]
        self: _Self,
        total_timesteps: int,
        callback: MaybeCallback = None,
        log_interval: int = 1,
        tb_log_name: str = "MaskablePPO",
        reset_num_timesteps: bool = True,
        use_masking: bool = True,
        progress_bar: bool = False,
        *,
        collector: BaseCollector | None = None,
        observation_keys: Sequence[NestedKey] | None = None,
        reward_key: NestedKey = st.NEXT_REWARD,
        batch_timeout: float | None = DEFAULT_BATCH_TIMEOUT,
        shutdown: bool = True,
    ) -> _Self:
        """sb3-contrib's ``learn``; with ``collector``, each rollout is one batch of that TorchRL collector.

        The loop, callbacks, logger, progress bar, ``num_timesteps`` and ``ep_info_buffer`` are sb3-contrib's
        own on both paths. With a collector (see :mod:`torchrl_mask.algorithms.collector_source`), each rollout sends
        the weights just trained to the collector, takes one batch ``(n_envs, T)`` (the rollout buffer is re-made
        with that shape on the first batch, so ``n_steps`` is the collector's ``T``), fills the buffer with
        ``extend`` (GAE with TorchRL's truncation handling) and calls ``on_step`` once per collected step of
        all envs. ``self.env`` is then used for its spaces only, not stepped. The collector is shut down at the
        end, also on an error or ``KeyboardInterrupt``, unless ``shutdown`` is False; if this process is killed,
        a watcher process kills the collector's workers.

        :param total_timesteps: env steps to train on, counted as SB3 counts them.
        :param callback: SB3 callback(s).
        :param log_interval: iterations between logger dumps.
        :param tb_log_name: name of the TensorBoard run.
        :param reset_num_timesteps: start ``num_timesteps`` from 0 (else continue the count).
        :param use_masking: draw actions under the envs' masks (must be True with a collector).
        :param progress_bar: SB3's progress bar (tqdm and rich).
        :param collector: a TorchRL collector running :class:`~torchrl_mask.MaskablePolicyModule` over
            ``self.policy`` (``Collector``, ``MultiSyncCollector``, ``DistributedCollector(sync=True)``,
            ``RayCollector(sync=True)``: on-policy); None steps ``self.env``.
        :param observation_keys: the batch key of each observation leaf; None takes them from the collector's
            :class:`~torchrl_mask.MaskablePolicyModule`.
        :param reward_key: where the reward is in a collector batch, ``(*B, 1)``.
        :param batch_timeout: seconds one batch (or weight update) may take from worker processes before the
            silent workers are declared stuck and killed; None waits forever.
        :param shutdown: shut the collector down when done; with False, a later ``learn`` on the same collector
            continues its batches (e.g. ``learn(..., reset_num_timesteps=False)`` in a loop).
        :return: this model.
        :raises CollectorFailed: collection failed; the collector is shut down and its workers are gone.
        :raises TypeError: a ``DistributedSyncCollector`` or ``RayCollector(sync=False)`` over several workers
            (off-policy by one update), a collector policy that is not a ``MaskablePolicyModule`` (or names a
            ``rollout_reader`` that is no ``CollectorRollout``), or a rollout
            buffer without ``extend()``; refused before anything runs, the collector left as it was (a refused
            ``RayCollector`` is shut down, its actors killed: they hold Ray resources that the corrected collector
            needs).
        :raises RuntimeError: the collector has been shut down (by an earlier ``learn``, unless
            ``shutdown=False``).
        :raises ValueError: ``use_masking`` False with a collector (its policy always draws under the masks), a
            ``MaskablePolicyModule`` over another policy, a ``RayCollector`` without a positive ``total_frames``
            (it yields no batch), or batches without ``"action_mask"``.
        """
        if collector is None:
            return super().learn(
                total_timesteps, callback, log_interval, tb_log_name, reset_num_timesteps, use_masking, progress_bar
            )
        run = lambda: super(MaskablePPO, self).learn(  # noqa: E731
            total_timesteps, callback, log_interval, tb_log_name, reset_num_timesteps, use_masking, progress_bar
        )
        return learn_through(
            self,
            CollectorRollout,
            collector,
            run,
            observation_keys=observation_keys,
            reward_key=reward_key,
            batch_timeout=batch_timeout,
            use_masking=use_masking,
            shutdown=shutdown,
        )

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
        # Overridden to choose the rollout source: a collector given to learn(); else, for speed, the same
        # rollout as sb3-contrib's without its per-step mask round trip where torchrl_mask.algorithms.vecenv_source
        # can read the masks; else sb3-contrib's own.
        if self._collector_rollout is not None:
            return self._collector_rollout.collect(callback)
        source = fast_rollout(self, env, use_masking, rollout_buffer)
        if source is None:
            return super().collect_rollouts(env, callback, rollout_buffer, n_rollout_steps, use_masking)
        return bool(source.collect(callback, rollout_buffer, n_rollout_steps))

    def train(self) -> None:
        """sb3-contrib's ``train()`` (one PPO update on the rollout buffer), as it is.

        Underneath it, for sb3-contrib's stock policies and optimizer,
        :func:`~torchrl_mask.fastpath.evaluation.fast_train` runs the policy's ``evaluate_actions`` without
        ``torch.distributions`` objects and Adam's step over flat
        buffers on the CPU: the same operations, so the same parameters bit for bit.
        """
        with fast_train(self.policy):
            super().train()

    def _excluded_save_params(self) -> list[str]:
        # The VecEnv mask reader belongs to the env, which is not saved either.
        return [*super()._excluded_save_params(), "_vec_env_masks", "_collector_rollout", "_kept_collector_rollout"]
