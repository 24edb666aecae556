"""The TorchRL collector as a rollout source of :meth:`MaskablePPO.collect_rollouts
<torchrl_mask.MaskablePPO.collect_rollouts>`.

``MaskablePPO.learn(total_timesteps, collector=collector)`` runs sb3-contrib's own ``learn`` loop; each of its
``collect_rollouts`` calls takes one batch from the collector through :class:`CollectorRollout`:

1. send the weights just trained to the collector's policy copies (``collector.update_policy_weights_()``), unless
   the collector plays in this process with the model's own parameters (a ``Collector`` on the policy's device),
   where TorchRL's update would copy each weight onto itself;
2. take the next batch, watched by :func:`~torchrl_mask.torchrl.workers.guarded` (a dead, raising or silent worker ends
   in :class:`~torchrl_mask.torchrl.workers.CollectorFailed`);
3. compute ``("next", "state_value")`` with the model's policy and fill the rollout buffer with
   :meth:`~torchrl_mask.MaskableRolloutBuffer.extend` (GAE with TorchRL's truncation handling); the buffer is
   re-made for the batch's shape ``(n_envs, T)`` on the first batch, so ``n_steps`` is the collector's ``T``;
4. advance ``num_timesteps`` and call the callbacks once per collected step of all envs, with the locals SB3's
   callbacks read (``dones``, ``infos``, ``rewards``, ...), and feed finished episodes (TorchRL's
   ``("next", "episode_reward")`` and ``("next", "step_count")``) to ``ep_info_buffer`` as sb3-contrib does.

The call, with a worker-process and a multi-machine example, is in :mod:`torchrl_mask.algorithms.collectors`.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from typing import TYPE_CHECKING, Any, TypeVar

import numpy as np
import torch
from stable_baselines3.common.callbacks import BaseCallback
from tensordict import TensorDictBase
from tensordict.utils import NestedKey
from torch import nn
from torchrl.collectors import BaseCollector, Collector

from torchrl_mask.algorithms.collector_checks import more_frames, refuse_collector, refuse_policy, release_refused
from torchrl_mask.rollout import storage as st
from torchrl_mask.rollout.buffers import MaskableRolloutBuffer
from torchrl_mask.torchrl.policy import MaskablePolicyModule
from torchrl_mask.torchrl.workers import CollectorFailed, guarded, orphan_guard
from torchrl_mask.torchrl.workers import shutdown as shutdown_collector

if TYPE_CHECKING:
    from sb3_contrib import MaskablePPO

__all__ = [
    "DEFAULT_BATCH_TIMEOUT",
    "CollectorRollout",
    "check_masks_kept",
    "learn_through",
    "release_refused",
    "rollout_reader",
]

_M = TypeVar("_M")

DEFAULT_BATCH_TIMEOUT = 600.0
EPISODE_REWARD = ("next", "episode_reward")
STEP_COUNT = ("next", "step_count")


class CollectorRollout:
    """One collector batch per ``collect_rollouts`` call, as the rollout of the model's ``learn`` loop.

    :param model: the MaskablePPO being trained; its rollout buffer must be a torchrl_mask buffer.
    :param collector: a TorchRL collector running :class:`~torchrl_mask.MaskablePolicyModule` over
        ``model.policy``, with ``total_frames=-1`` or at least the steps to train on.
    :param observation_keys: the batch key of each observation leaf; None takes them from the collector's
        :class:`~torchrl_mask.MaskablePolicyModule` (else the default keys).
    :param reward_key: where the reward is in the batch, ``(*B, 1)``.
    :param batch_timeout: seconds that one batch (or one weight update) may take from worker processes before
        the silent workers are declared stuck; None waits forever.
    :param use_masking: ``learn``'s ``use_masking``; it must be True (the default).
    :param previous: the source of an earlier ``learn`` left running (``shutdown=False``); over the same
        collector, its batch stream and episode starts are continued (TorchRL ends a collector's workers when
        the iterator that drives them is dropped).
    :raises ValueError: ``use_masking`` is False: the collector's policy always draws under the envs' masks.
    :raises TypeError: the collector is a ``DistributedSyncCollector`` or a ``RayCollector(sync=False)`` over
        several workers (their batches lag the weights by one update), its policy is not a
        :class:`~torchrl_mask.MaskablePolicyModule`, or the model's rollout buffer has no ``extend()``.
    :raises ValueError: the collector's ``MaskablePolicyModule`` is over another policy, or a ``RayCollector``
        has no positive ``total_frames`` (it yields no batch with ``-1``).
    :raises RuntimeError: the collector was shut down (by an earlier ``learn()``, or ``collector.shutdown()``).
    """

    def __init__(
        self,
        model: MaskablePPO,
        collector: BaseCollector,
        observation_keys: Sequence[NestedKey] | None = None,
        reward_key: NestedKey = st.NEXT_REWARD,
        batch_timeout: float | None = DEFAULT_BATCH_TIMEOUT,
        use_masking: bool = True,
        previous: CollectorRollout | None = None,
    ) -> None:
        if not use_masking:
            raise ValueError(
                f"use_masking=False is not available with a collector: its {self._module_name} always draws "
                "under the envs' masks. Drop use_masking, or learn from the VecEnv (collector=None)."
            )
        refuse_collector(collector)
        self._check_buffer(model)
        shipped = getattr(collector, "policy", None)
        self._check_policy(shipped, model)
        if observation_keys is None:
            observation_keys = getattr(shipped, "observation_keys", None)
        self.model = model
        self.collector = collector
        self.module = self._learner_module(model, observation_keys)
        self.reward_key = reward_key
        self.batch_timeout = batch_timeout
        self._batches: Iterator[TensorDictBase] | None = None
        self._episode_starts: torch.Tensor | None = None
        self._sends_weights = not plays_own_weights(collector, model)
        if previous is not None and previous.collector is collector:
            self._batches, self._episode_starts = previous._batches, previous._episode_starts

    def _check_buffer(self, model: Any) -> None:
        """Refuse a model whose rollout buffer has no ``extend()``; the hook a source of another buffer overrides
        (:class:`~torchrl_mask.algorithms.recurrent_collector_source.RecurrentCollectorRollout`).

        :param model: the model that learns.
        :raises TypeError: not a torchrl_mask rollout buffer.
        """
        if not isinstance(model.rollout_buffer, MaskableRolloutBuffer):
            raise TypeError(
                f"Learning from a collector needs torchrl_mask's rollout buffer (it has extend()); the model has "
                f"{type(model.rollout_buffer).__name__}. Use torchrl_mask.MaskablePPO with rollout_buffer_class "
                f"None or a torchrl_mask buffer."
            )

    def _learner_module(self, model: Any, observation_keys: Sequence[NestedKey] | None) -> Any:
        """The policy module over ``model.policy`` that reads the batches here (``("next", "state_value")``).

        :param model: the model that learns.
        :param observation_keys: the batch key of each observation leaf; None: the default keys.
        :return: a :class:`~torchrl_mask.MaskablePolicyModule` (the recurrent source's own module, there).
        """
        return MaskablePolicyModule(model.policy, observation_keys=observation_keys)

    _module_name = "MaskablePolicyModule"  # the policy module a collector of this source runs, for messages

    def _check_policy(self, shipped: Any, model: MaskablePPO) -> None:
        """Refuse a collector policy that is not a MaskablePolicyModule over ``model.policy``; the hook a source
        whose collector runs another policy module overrides
        (:class:`~torchrl_mask.games.selfplay.SelfPlayRollout`).

        :param shipped: the collector's policy (None for a ``policy_factory``).
        :param model: the model that learns.
        :raises TypeError: not a MaskablePolicyModule.
        :raises ValueError: a MaskablePolicyModule over another policy.
        """
        refuse_policy(shipped, model)

    def collect(self, callback: BaseCallback) -> bool:
        """Fill the model's rollout buffer with the collector's next batch, as ``collect_rollouts`` does.

        :param callback: called at rollout start, once per collected step of all envs, and at rollout end.
        :return: False if a callback stopped training, else True.
        :raises CollectorFailed: collection failed (the caller shuts the collector down).
        """
        model = self.model
        callback.on_rollout_start()
        buffer, batch = self._fill()
        steps = _StepLocals(batch, self.reward_key)
        for n_steps in range(batch.shape[1]):
            model.num_timesteps += batch.shape[0]
            dones, infos = steps.dones[:, n_steps], steps.infos(n_steps)
            callback.update_locals(
                {
                    "self": model,
                    "callback": callback,
                    "rollout_buffer": buffer,
                    "n_rollout_steps": batch.shape[1],
                    "use_masking": True,
                    "n_steps": n_steps,
                    "batch": batch,
                    "actions": steps.actions[:, n_steps],
                    "rewards": steps.rewards[:, n_steps],
                    "values": steps.values[:, n_steps],
                    "log_probs": steps.log_probs[:, n_steps],
                    "action_masks": steps.masks[:, n_steps],
                    "dones": dones,
                    "infos": infos,
                }
            )
            if not callback.on_step():
                return False
            model._update_info_buffer(infos, dones)  # as sb3-contrib's collect_rollouts feeds ep_info_buffer
        callback.on_rollout_end()
        return True

    def _fill(self) -> tuple[MaskableRolloutBuffer, TensorDictBase]:
        """The next batch into the model's rollout buffer (GAE included); the hook a source of another batch
        layout overrides (:class:`~torchrl_mask.games.selfplay.SelfPlayRollout`).

        :return: the filled buffer and the batch as it went in, ``(n_envs, T)``, which the callbacks read.
        """
        batch = self._next_batch()
        check_masks_kept(batch)
        self.module.add_next_state_value(batch)
        buffer = self._buffer_for(batch.shape[0], batch.shape[1])
        buffer.reset()
        if self._episode_starts is None:
            self._episode_starts = torch.ones(batch.shape[0], dtype=torch.bool)
        buffer.extend(batch, self.module.observation_keys, self.reward_key, episode_starts=self._episode_starts)
        self._episode_starts = batch.get(st.NEXT_DONE)[:, -1, 0].cpu()
        return buffer, batch

    def _next_batch(self) -> TensorDictBase:
        """The weights just trained sent to the workers, then the next batch as ``(n_envs, T)``."""
        # Also before the first batch: a collector kept from an earlier learn() holds the weights before its last
        # train(); for a fresh one the model's weights are the ones it was built with, and sending them is cheap.
        if self._sends_weights:
            guarded(
                self.collector.update_policy_weights_, self.collector, "sending the new weights", self.batch_timeout
            )
        if self._batches is None:
            self._batches = iter(self.collector)
        batches = self._batches
        batch = guarded(lambda: next(batches, None), self.collector, "collecting a batch", self.batch_timeout)
        if batch is None:
            raise CollectorFailed(
                f"The collector stopped after {self.model.num_timesteps:,} steps, before total_timesteps were "
                f"collected: {more_frames(self.collector)}"
            )
        if batch.ndim == 1:
            return batch.unsqueeze(0)
        if batch.ndim > 2:  # workers that each run a batched env: (workers, envs, T) -> (workers * envs, T)
            return batch.reshape(-1, batch.shape[-1])
        return batch

    def _buffer_for(self, n_envs: int, steps: int) -> Any:
        """The model's rollout buffer, re-made once if the collector's batch shape differs from it."""
        buffer = self.model.rollout_buffer
        if (buffer.n_envs, buffer.buffer_size) != (n_envs, steps):
            buffer = self.model.rollout_buffer = self._new_buffer(n_envs, steps)
        return buffer

    def _new_buffer(self, n_envs: int, steps: int) -> MaskableRolloutBuffer:
        """A rollout buffer of the model's kind for ``n_envs`` rows of ``steps`` (the hook the recurrent source
        overrides: its buffer also takes the LSTM states' shape)."""
        model = self.model
        return type(model.rollout_buffer)(  # type: ignore[return-value]
            steps,
            model.observation_space,
            model.action_space,
            device=model.device,
            gamma=model.gamma,
            gae_lambda=model.gae_lambda,
            n_envs=n_envs,
            **(model.rollout_buffer_kwargs or {}),
        )


def plays_own_weights(collector: BaseCollector, model: Any) -> bool:
    """Whether ``collector`` plays in this process with ``model.policy``'s own parameters, not copies of them: a
    ``Collector`` whose policy holds those very tensors (TorchRL copies a policy only to move it to another
    device), so the weights just trained are the ones it plays, and there is nothing to send.

    :param collector: the collector ``learn()`` reads.
    :param model: the model that learns.
    :return: True for a same-process ``Collector`` over the model's parameters.
    """
    policy = getattr(collector, "policy", None)
    if not isinstance(collector, Collector) or not isinstance(policy, nn.Module):
        return False
    played = {id(parameter) for parameter in policy.parameters()}
    return all(id(parameter) in played for parameter in model.policy.parameters())


def check_masks_kept(batch: TensorDictBase) -> None:
    """Refuse a collector batch without the masks its actions were drawn under.

    :param batch: the collector batch.
    :raises ValueError: no ``"action_mask"`` entry; the message names the batch's keys and the fix.
    """
    if st.ACTION_MASK not in batch.keys(True):
        raise ValueError(
            f"The collector's batch has no {st.ACTION_MASK!r} entry (its keys: "
            f"{sorted(map(str, batch.keys(True, True)))}): learn() reads the masks the actions were drawn under "
            f"there. Make the envs with torchrl_mask.masked_gym_env (it writes {st.ACTION_MASK!r}), or rename "
            "the env's mask entry with TorchRL's RenameTransform."
        )


def learn_through(
    model: Any,
    reader: type[CollectorRollout],
    collector: BaseCollector,
    learn: Callable[[], _M],
    *,
    observation_keys: Sequence[NestedKey] | None,
    reward_key: NestedKey,
    batch_timeout: float | None,
    use_masking: bool,
    shutdown: bool,
) -> _M:
    """Run ``learn`` (the model's own SB3 ``learn`` loop) with ``collector`` as its rollout source: what
    ``learn(..., collector=)`` of both models does around that loop.

    The source is made first (``reader(model, collector, ...)``): a refusal leaves the collector as it was
    (:func:`release_refused`). While ``learn`` runs, ``model._collector_rollout`` is the source that the model's
    ``collect_rollouts`` reads, and :func:`~torchrl_mask.torchrl.workers.orphan_guard` watches the workers; then the
    collector is shut down (also on an error), or with ``shutdown`` False kept as ``model._kept_collector_rollout``
    for the next ``learn`` to continue.

    :param model: the model that learns (``MaskablePPO`` or ``MaskableRecurrentPPO``).
    :param reader: the model's own source class, :class:`CollectorRollout` or a subclass; a collector policy that
        names a ``rollout_reader`` of its own (a self-play policy reads its batches seat by seat) is read by that.
    :param collector: the TorchRL collector.
    :param learn: runs the model's SB3 ``learn`` loop and returns the model.
    :param observation_keys: as :class:`CollectorRollout` takes it.
    :param reward_key: as :class:`CollectorRollout` takes it.
    :param batch_timeout: as :class:`CollectorRollout` takes it.
    :param use_masking: as :class:`CollectorRollout` takes it.
    :param shutdown: shut the collector down when done.
    :return: what ``learn`` returned.
    :raises TypeError: the source refused the collector (see :class:`CollectorRollout`), or the collector's
        policy names a ``rollout_reader`` that is no :class:`CollectorRollout`.
    :raises ValueError: the source refused the collector (see :class:`CollectorRollout`).
    :raises RuntimeError: the source refused the collector (see :class:`CollectorRollout`).
    """
    try:
        reader = rollout_reader(getattr(collector, "policy", None), reader)
        source = reader(
            model,
            collector,
            observation_keys,
            reward_key,
            batch_timeout,
            use_masking,
            previous=model._kept_collector_rollout,
        )
    except (TypeError, ValueError, RuntimeError) as refusal:
        release_refused(collector, refusal)
    model._kept_collector_rollout = None
    try:
        model._collector_rollout = source
        with orphan_guard(collector):
            return learn()
    finally:
        model._collector_rollout = None
        if shutdown:
            shutdown_collector(collector)
        else:  # a later learn() on this collector continues its batches
            model._kept_collector_rollout = source


class _StepLocals:
    """A batch read once as the per-step arrays SB3's callbacks see: ``(n_envs, T, ...)`` numpy views, and
    Monitor's ``info["episode"] = {"r", "l"}`` where an episode ended (from TorchRL's episode statistics).

    :param batch: the collector batch, ``(n_envs, T)``.
    :param reward_key: where the reward is in the batch, ``(n_envs, T, 1)``.
    """

    def __init__(self, batch: TensorDictBase, reward_key: NestedKey) -> None:
        self.dones: np.ndarray = batch.get(st.NEXT_DONE)[..., 0].cpu().numpy()
        self.rewards: np.ndarray = batch.get(reward_key)[..., 0].cpu().numpy()
        self.actions: np.ndarray = batch.get(st.ACTION).cpu().numpy()
        self.masks: np.ndarray = batch.get(st.ACTION_MASK).cpu().numpy()
        self.values: torch.Tensor = batch.get(st.VALUE)
        self.log_probs: torch.Tensor = batch.get(st.LOG_PROB)
        self._n_envs = batch.shape[0]
        self._episodes: dict[tuple[int, int], dict[str, Any]] = {}
        rewards, lengths = batch.get(EPISODE_REWARD, None), batch.get(STEP_COUNT, None)
        if rewards is not None and lengths is not None:
            for env, t in zip(*np.nonzero(self.dones), strict=True):
                self._episodes[env, t] = {"r": float(rewards[env, t].sum()), "l": int(lengths[env, t].sum())}

    def infos(self, t: int) -> list[dict[str, Any]]:
        """:return: one info dict per env at step ``t``; ``{"episode": {"r", "l"}}`` where an episode ended."""
        return [
            {"episode": self._episodes[env, t]} if (env, t) in self._episodes else {} for env in range(self._n_envs)
        ]


def rollout_reader(policy: Any, default: type[CollectorRollout]) -> type[CollectorRollout]:
    """The reader of a collector's batches: the one its policy module names (``rollout_reader``), else ``default``.

    :param policy: the collector's policy module (None for a ``policy_factory``).
    :param default: the model's own reader.
    :return: a :class:`CollectorRollout` subclass.
    :raises TypeError: the policy names something that is not one.
    """
    reader = getattr(policy, "rollout_reader", default)
    if not (isinstance(reader, type) and issubclass(reader, CollectorRollout)):
        raise TypeError(
            f"The collector's policy names rollout_reader={reader!r}; it must be a subclass of "
            "torchrl_mask.algorithms.collector_source.CollectorRollout (or leave it out to read batches step by step)."
        )
    return reader
