"""TorchRL side: MaskablePPO learning from a TorchRL collector.

The masked envs (every mask convention as a bool ``"action_mask"`` entry) are in :mod:`torchrl_mask.envs` and
the SB3 policy as a TorchRL policy (:class:`~torchrl_mask.policy.MaskablePolicyModule`) in
:mod:`torchrl_mask.policy`; both are re-exported here.

sb3-contrib steps its envs in lockstep with the learner and fetches each step's masks with an extra
``env_method("action_masks")`` round trip. Here TorchRL's collectors run the envs *and* a copy of the policy in
worker processes (or on other machines), deliver the mask in each step's TensorDict, and hand whole rollouts
to the learner (:func:`learn_from_collector`); MaskablePPO's policy, loss, callbacks and logger are
sb3-contrib's own. A worker that dies or an env that raises ends in :class:`CollectorFailed` within seconds, a
worker that stops answering after ``batch_timeout``, and no worker outlives the learner
(:mod:`torchrl_mask.workers`).

The flow::

    gymnasium env --masked_gym_env--> TorchRL env with "action_mask"
        --Collector / MultiSyncCollector / DistributedCollector (runs MaskablePolicyModule)--> batch
        --MaskablePolicyModule.add_next_state_value--> batch with ("next", "state_value")
        --MaskableRolloutBuffer.extend--> rollout with GAE --model.train()--> new weights --> collector

Example:
    >>> import gymnasium as gym
    >>> from torchrl.collectors import Collector
    >>> from torchrl_mask import MaskablePPO
    >>> from torchrl_mask import MaskablePolicyModule, learn_from_collector, masked_gym_env
    >>> model = MaskablePPO("MlpPolicy", gym.make("Taxi-v4"), n_steps=32, batch_size=32, n_epochs=1)
    >>> collector = Collector(lambda: masked_gym_env(gym.make("Taxi-v4")), MaskablePolicyModule(model.policy),
    ...                       frames_per_batch=32)
    >>> model = learn_from_collector(model, collector, total_timesteps=64)
    >>> model.num_timesteps
    64
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, TypeVar

import torch
from stable_baselines3.common.callbacks import BaseCallback
from stable_baselines3.common.type_aliases import MaybeCallback
from tensordict import TensorDictBase
from tensordict.utils import NestedKey
from torchrl.collectors import BaseCollector
from torchrl.collectors.distributed import DistributedSyncCollector

from torchrl_mask import storage as st
from torchrl_mask.buffers import MaskableRolloutBuffer
from torchrl_mask.envs import ActionMaskInInfo, ActionMaskInObservation, MaskSource, masked_gym_env
from torchrl_mask.policy import MaskablePolicyModule, default_observation_keys
from torchrl_mask.workers import CollectorFailed, guarded, orphan_guard
from torchrl_mask.workers import shutdown as shutdown_collector

__all__ = [
    "ActionMaskInInfo",
    "ActionMaskInObservation",
    "CollectorFailed",
    "MaskSource",
    "MaskablePolicyModule",
    "default_observation_keys",
    "learn_from_collector",
    "masked_gym_env",
]

ACTION_MASK = st.ACTION_MASK
EPISODE_REWARD = ("next", "episode_reward")
STEP_COUNT = ("next", "step_count")

_Model = TypeVar("_Model")
DEFAULT_BATCH_TIMEOUT = 600.0


# -------------------------------------------------------------------------------------------- learning


def learn_from_collector(
    model: _Model,
    collector: BaseCollector,
    total_timesteps: int,
    callback: MaybeCallback = None,
    log_interval: int = 1,
    tb_log_name: str = "MaskablePPO",
    reset_num_timesteps: bool = True,
    progress_bar: bool = False,
    *,
    observation_keys: Sequence[NestedKey] | None = None,
    reward_key: NestedKey = st.NEXT_REWARD,
    shutdown: bool = True,
    batch_timeout: float | None = DEFAULT_BATCH_TIMEOUT,
) -> _Model:
    """MaskablePPO's ``learn``, with the rollouts from a TorchRL collector instead of the model's VecEnv.

    Each iteration takes one batch from the collector, computes ``("next", "state_value")`` with the model's
    policy, fills ``model.rollout_buffer`` with :meth:`~torchrl_mask.MaskableRolloutBuffer.extend` (GAE with
    TorchRL's truncation handling), runs sb3-contrib's own ``model.train()``, and sends the new weights to the
    collector (``collector.update_policy_weights_()``), so the next batch is collected with them. SB3's
    ``_setup_learn``, callbacks, logger and progress bar are used as ``learn`` uses them: ``on_step`` runs once
    per collected step of all envs (``buffer_size`` times per batch), after the batch is in. ``model.env`` is
    used for its spaces and SB3's bookkeeping only; it is not stepped.

    The collector must run :class:`MaskablePolicyModule` over ``model.policy`` with ``total_frames=-1`` or at
    least ``total_timesteps``. Each batch ``(n_envs, T)`` (or flat ``(T,)`` from one env, or ``(workers, envs, T)``
    from workers that each run a batched env such as a ``SerialEnv``) is one rollout; the
    model's rollout buffer is re-made with that shape on the first batch (its class and
    ``rollout_buffer_kwargs`` kept), so ``n_steps`` is the collector's ``T``.

    The collector is shut down at the end, also on an error or a ``KeyboardInterrupt``, unless ``shutdown`` is
    False. A failure in collection is raised as :class:`CollectorFailed`, naming the worker: a worker that
    died, an env or policy that raised (with its exception's type and message), or workers that sent nothing
    for ``batch_timeout`` seconds (then they are killed). If this process itself is killed, a watcher process
    kills the collector's worker processes, so none is left behind.

    Worker processes on this machine (``MultiSyncCollector``; each worker runs its env and a policy copy). The
    workers are started with multiprocessing's spawn method, which re-imports the script in each worker: the
    code that creates the collector and trains must sit under ``if __name__ == "__main__":`` (a script that
    starts workers outside it gets one clear error, before any worker starts):

    ```python
    import gymnasium as gym
    import torch
    from torchrl.collectors import MultiSyncCollector

    from torchrl_mask import MaskablePolicyModule, MaskablePPO, learn_from_collector, masked_gym_env


    def make_env():  # runs in the worker
        torch.set_num_threads(1)
        return masked_gym_env(gym.make("Taxi-v4"))


    if __name__ == "__main__":  # each worker re-imports this file: start the workers only from the main process
        model = MaskablePPO("MlpPolicy", gym.make("Taxi-v4"))
        collector = MultiSyncCollector([make_env] * 2, MaskablePolicyModule(model.policy), frames_per_batch=2048)
        learn_from_collector(model, collector, total_timesteps=100_000)  # n_steps = 2048 / 2 per env
    ```

    Several machines (TorchRL's ``DistributedCollector`` over ``torch.distributed``): the learner runs this
    script; each env factory runs as a worker job on the cluster, which connects back to the learner's host on
    ``tcp_port`` (open it between the nodes). ``launcher="submitit"`` starts the workers as SLURM jobs; with
    ``launcher="mp"`` they are local processes (what the tests run, on loopback):

    ```python
    from torchrl.collectors.distributed import DistributedCollector

    collector = DistributedCollector(
        [make_env] * 8,  # 8 workers, one env each
        MaskablePolicyModule(model.policy),
        frames_per_batch=8 * 256,  # one batch: (8, 256)
        total_frames=1 << 40,  # must divide by the workers; learn_from_collector stops at total_timesteps
        sync=True,  # one batch from every worker per iteration: on-policy
        backend="gloo",
        launcher="submitit",
        slurm_kwargs={"slurm_partition": "cpu", "slurm_cpus_per_task": 2, "timeout_min": 240},
        tcp_port="10003",
    )
    learn_from_collector(model, collector, total_timesteps=10_000_000)
    ```

    :param model: a :class:`torchrl_mask.MaskablePPO` (sb3-contrib's works too, with our buffer class).
    :param collector: a TorchRL collector. On-policy (each batch collected with the weights just trained, as
        the tests check): ``Collector``, ``MultiSyncCollector``, ``DistributedCollector(sync=True)``.
        ``MultiAsyncCollector`` works but each batch is one worker's, gathered while the learner trained: it
        lags the weights by one update (PPO's clipping absorbs a little of that).
    :param total_timesteps: env steps to train on, counted as SB3 counts them.
    :param callback: SB3 callback(s), as for ``learn``.
    :param log_interval: iterations between logger dumps.
    :param tb_log_name: name of the TensorBoard run.
    :param reset_num_timesteps: start ``num_timesteps`` from 0 (else continue the count).
    :param progress_bar: SB3's progress bar (tqdm and rich).
    :param observation_keys: the batch key of each observation leaf, as for :class:`MaskablePolicyModule`;
        None takes them from the collector's :class:`MaskablePolicyModule` (else the default keys).
    :param reward_key: where the reward is in the batch, ``(*B, 1)``.
    :param shutdown: shut the collector down when done.
    :param batch_timeout: seconds that collecting one batch (or sending the new weights) may take before the
        workers that have not answered are declared stuck; None waits forever. Applies to worker processes; an
        in-process ``Collector`` steps its env in this thread and is not timed.
    :return: the model.
    :raises CollectorFailed: collection failed; the collector is shut down and its workers are gone.
    :raises TypeError: the model's rollout buffer is not a :class:`~torchrl_mask.MaskableRolloutBuffer`, or the
        collector is a ``DistributedSyncCollector`` (its batches lag the weights by one update).
    :raises RuntimeError: the collector's worker processes are being started (by spawn) from the top level of
        a script, outside ``if __name__ == "__main__":`` (raised as the collector is created).
    """
    algo: Any = model
    if isinstance(collector, DistributedSyncCollector):
        raise TypeError(
            "DistributedSyncCollector collects each batch before the last update's weights reach its workers "
            "(measured: off-policy by one update) and has no update_policy_weights_(); use "
            "torchrl.collectors.distributed.DistributedCollector(..., sync=True) for on-policy batches."
        )
    if not isinstance(algo.rollout_buffer, MaskableRolloutBuffer):
        raise TypeError(
            f"learn_from_collector needs torchrl_mask's rollout buffer (it has extend()); the model has "
            f"{type(algo.rollout_buffer).__name__}. Use torchrl_mask.MaskablePPO."
        )
    if observation_keys is None:
        shipped = getattr(collector, "policy", None)
        observation_keys = shipped.observation_keys if isinstance(shipped, MaskablePolicyModule) else None
    module = MaskablePolicyModule(algo.policy, observation_keys=observation_keys)
    try:
        with orphan_guard(collector):
            _learn(algo, collector, module, total_timesteps, callback, log_interval, tb_log_name,
                   reset_num_timesteps, progress_bar, reward_key, batch_timeout)  # fmt: skip
    finally:
        if shutdown:
            shutdown_collector(collector)
    return model


def _learn(
    algo: Any,
    collector: BaseCollector,
    module: MaskablePolicyModule,
    total_timesteps: int,
    callback: MaybeCallback,
    log_interval: int,
    tb_log_name: str,
    reset_num_timesteps: bool,
    progress_bar: bool,
    reward_key: NestedKey,
    batch_timeout: float | None,
) -> None:
    """The loop of :func:`learn_from_collector`: collect, extend the rollout, call back, train, send weights."""
    total, sb3_callback = algo._setup_learn(total_timesteps, callback, reset_num_timesteps, tb_log_name, progress_bar)
    sb3_callback.on_training_start(locals(), globals())
    batches = iter(collector)
    episode_starts: torch.Tensor | None = None
    iteration = 0
    while algo.num_timesteps < total:
        sb3_callback.on_rollout_start()
        batch = guarded(lambda: next(batches), collector, "collecting a batch", batch_timeout)
        if batch.ndim == 1:
            batch = batch.unsqueeze(0)
        elif batch.ndim > 2:  # workers that each run a batched env: (workers, envs, T) -> (workers * envs, T)
            batch = batch.reshape(-1, batch.shape[-1])
        if episode_starts is None:
            episode_starts = torch.ones(batch.shape[0], dtype=torch.bool)
        module.add_next_state_value(batch)
        buffer = _buffer_for(algo, batch.shape[0], batch.shape[1])
        buffer.reset()
        buffer.extend(batch, module.observation_keys, reward_key, episode_starts=episode_starts)
        episode_starts = batch.get(st.NEXT_DONE)[:, -1, 0].cpu()
        continue_training = _step_callbacks(algo, sb3_callback, batch)
        _record_episodes(algo, batch)
        if not continue_training:
            break
        sb3_callback.update_locals(locals())
        sb3_callback.on_rollout_end()
        iteration += 1
        algo._update_current_progress_remaining(algo.num_timesteps, total)
        if log_interval is not None and iteration % log_interval == 0:
            algo.dump_logs(iteration)
        algo.train()
        guarded(collector.update_policy_weights_, collector, "sending the new weights", batch_timeout)
    sb3_callback.on_training_end()


def _buffer_for(algo: Any, n_envs: int, steps: int) -> MaskableRolloutBuffer:
    """The model's rollout buffer, re-made once if the collector's batch shape differs from it."""
    buffer: MaskableRolloutBuffer = algo.rollout_buffer
    if (buffer.n_envs, buffer.buffer_size) != (n_envs, steps):
        buffer = type(buffer)(
            steps,
            algo.observation_space,
            algo.action_space,
            device=algo.device,
            gamma=algo.gamma,
            gae_lambda=algo.gae_lambda,
            n_envs=n_envs,
            **(algo.rollout_buffer_kwargs or {}),
        )
        algo.rollout_buffer = buffer
    return buffer


def _step_callbacks(algo: Any, callback: BaseCallback, batch: TensorDictBase) -> bool:
    """Advance ``num_timesteps`` and call ``on_step`` once per collected step of all envs, as ``learn`` does."""
    n_envs, steps = batch.shape
    dones = batch.get(st.NEXT_DONE)[..., 0].cpu().numpy()
    infos: list[dict[str, Any]] = [{} for _ in range(n_envs)]
    for t in range(steps):
        algo.num_timesteps += n_envs
        callback.update_locals({"dones": dones[:, t], "infos": infos, "n_steps": t})
        if not callback.on_step():
            return False
    return True


def _record_episodes(algo: Any, batch: TensorDictBase) -> None:
    """Feed finished episodes' return and length to SB3's ``ep_info_buffer`` (``rollout/ep_rew_mean``)."""
    rewards = batch.get(EPISODE_REWARD, None)
    lengths = batch.get(STEP_COUNT, None)
    if rewards is None or lengths is None or algo.ep_info_buffer is None:
        return
    done = batch.get(st.NEXT_DONE)[..., 0]
    for reward, length in zip(rewards[done].reshape(-1).tolist(), lengths[done].reshape(-1).tolist(), strict=True):
        algo.ep_info_buffer.append({"r": reward, "l": int(length)})
    algo._episode_num += int(done.sum())
