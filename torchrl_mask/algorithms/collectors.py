"""TorchRL side: MaskablePPO learning from a TorchRL collector.

The masked envs (every mask convention as a bool ``"action_mask"`` entry) are in :mod:`torchrl_mask.torchrl.envs` and
the SB3 policy as a TorchRL policy (:class:`~torchrl_mask.torchrl.policy.MaskablePolicyModule`) in
:mod:`torchrl_mask.torchrl.policy`; both are re-exported here. Reading a collector batch into the rollout is
:mod:`torchrl_mask.algorithms.collector_source`, and watching worker processes :mod:`torchrl_mask.torchrl.workers`.

sb3-contrib steps its envs in lockstep with the learner and fetches each step's masks with an extra
``env_method("action_masks")`` round trip. TorchRL's collectors run the envs *and* a copy of the policy in
worker processes (or on other machines), deliver the mask in each step's TensorDict, and hand whole rollouts
to the learner: ``MaskablePPO.learn(total_timesteps, collector=collector)`` runs sb3-contrib's own ``learn``
loop with one collector batch per rollout, so the policy, loss, callbacks, logger and progress bar are
sb3-contrib's own. :func:`learn_from_collector` is that call as a function. A worker that dies or an env that
raises ends in :class:`CollectorFailed` within seconds, a worker that stops answering after ``batch_timeout``,
and no worker outlives the learner.

The flow::

    gymnasium env --masked_gym_env--> TorchRL env with "action_mask"
        --Collector / MultiSyncCollector / DistributedCollector / RayCollector (runs MaskablePolicyModule)--> batch
        --MaskablePPO.collect_rollouts: add_next_state_value, MaskableRolloutBuffer.extend (GAE)--> rollout
        --sb3-contrib's train()--> new weights --update_policy_weights_()--> collector

Example:
    >>> import gymnasium as gym
    >>> from torchrl.collectors import Collector
    >>> from torchrl_mask import MaskablePolicyModule, MaskablePPO, masked_gym_env
    >>> model = MaskablePPO("MlpPolicy", gym.make("Taxi-v4"), n_steps=32, batch_size=32, n_epochs=1)
    >>> collector = Collector(lambda: masked_gym_env(gym.make("Taxi-v4")), MaskablePolicyModule(model.policy),
    ...                       frames_per_batch=32)
    >>> model = model.learn(64, collector=collector)
    >>> model.num_timesteps
    64
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TypeVar

from stable_baselines3.common.type_aliases import MaybeCallback
from tensordict.utils import NestedKey
from torchrl.collectors import BaseCollector

from torchrl_mask.algorithms.collector_source import DEFAULT_BATCH_TIMEOUT
from torchrl_mask.algorithms.ppo import MaskablePPO
from torchrl_mask.rollout import storage as st
from torchrl_mask.torchrl.envs import ActionMaskInInfo, ActionMaskInObservation, MaskSource, masked_gym_env
from torchrl_mask.torchrl.policy import MaskablePolicyModule, default_observation_keys
from torchrl_mask.torchrl.workers import CollectorFailed

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

_Model = TypeVar("_Model", bound="MaskablePPO")


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
    """``model.learn(total_timesteps, ..., collector=collector)``: MaskablePPO's ``learn`` fed by a collector.

    A thin wrapper kept for the scripts that call it; :meth:`torchrl_mask.MaskablePPO.learn` documents the
    behaviour (one batch per rollout, the weights just trained sent before each batch, the rollout buffer
    re-made for the batch's shape ``(n_envs, T)``, callbacks called once per collected step of all envs, the
    collector shut down at the end, also on an error or a ``KeyboardInterrupt``, unless ``shutdown`` is False).

    The collector must run :class:`MaskablePolicyModule` over ``model.policy`` with ``total_frames=-1`` or at
    least ``total_timesteps``. Each batch ``(n_envs, T)`` (or flat ``(T,)`` from one env, or ``(workers, envs, T)``
    from workers that each run a batched env such as a ``SerialEnv``) is one rollout.

    Worker processes on this machine (``MultiSyncCollector``; each worker runs its env and a policy copy). The
    workers are started with multiprocessing's spawn method, which re-imports the script in each worker: the
    code that creates the collector and trains must sit under ``if __name__ == "__main__":`` (a script that
    starts workers outside it gets one clear error, before any worker starts):

    ```python
    import gymnasium as gym
    import torch
    from torchrl.collectors import MultiSyncCollector

    from torchrl_mask import MaskablePolicyModule, MaskablePPO, masked_gym_env


    def make_env():  # runs in the worker
        torch.set_num_threads(1)
        return masked_gym_env(gym.make("Taxi-v4"))


    if __name__ == "__main__":  # each worker re-imports this file: start the workers only from the main process
        model = MaskablePPO("MlpPolicy", gym.make("Taxi-v4"))
        collector = MultiSyncCollector([make_env] * 2, MaskablePolicyModule(model.policy), frames_per_batch=2048)
        model.learn(100_000, collector=collector)  # n_steps = 2048 / 2 per env
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
        total_frames=1 << 40,  # must divide by the workers; learn stops at total_timesteps
        sync=True,  # one batch from every worker per iteration: on-policy
        backend="gloo",
        launcher="submitit",
        slurm_kwargs={"slurm_partition": "cpu", "slurm_cpus_per_task": 2, "timeout_min": 240},
        tcp_port="10003",
    )
    model.learn(10_000_000, collector=collector)
    ```

    A Ray cluster (TorchRL's ``RayCollector``; ``pip install "torchrl-mask[ray]"``): each env factory runs in a
    Ray actor, a remote ``Collector`` with its own policy copy, which gets the weights just trained before each
    batch. ``sync=True`` stacks one batch from every remote collector, ``(remote collectors, T)``, as
    ``MultiSyncCollector`` stacks its workers (with the same seeded envs the parameters after each update are the
    same, as the tests check). ``total_frames`` must be positive: a ``RayCollector`` with ``-1`` yields no batch,
    and ``learn`` refuses it, as it refuses ``sync=False`` over several remote collectors (off-policy); a refused
    ``RayCollector`` is shut down, so that its actors free their Ray CPUs for the corrected one. A dead actor
    ends in :class:`CollectorFailed`; ``batch_timeout`` does not apply (Ray does the waiting):

    ```python
    import ray
    from torchrl.collectors.distributed import RayCollector

    ray.init()  # a local cluster; ray.init(address="auto") joins a running one
    collector = RayCollector(
        [make_env] * 8,  # 8 remote collectors, one env each
        MaskablePolicyModule(model.policy),
        frames_per_batch=8 * 256,  # one batch: (8, 256)
        total_frames=1 << 40,  # not -1: a RayCollector stops when its frames reach total_frames
        sync=True,  # one batch from every remote collector per rollout: on-policy
        remote_configs={"num_cpus": 1},  # each actor's Ray resources (TorchRL's default also asks 2 GiB of memory)
    )
    model.learn(10_000_000, collector=collector)  # kills the actors at the end (shutdown=True)
    ray.shutdown()
    ```

    :param model: a :class:`torchrl_mask.MaskablePPO`.
    :param collector: a TorchRL collector. On-policy (each batch collected with the weights just trained, as
        the tests check): ``Collector``, ``MultiSyncCollector``, ``DistributedCollector(sync=True)``,
        ``RayCollector(sync=True)``.
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
    :raises TypeError: the model is not a :class:`torchrl_mask.MaskablePPO`, its rollout buffer is not a
        :class:`~torchrl_mask.MaskableRolloutBuffer`, the collector's policy is not a
        :class:`MaskablePolicyModule`, or the collector is a ``DistributedSyncCollector`` or a
        ``RayCollector(sync=False)`` over several remote collectors (their batches lag the weights by one update).
    :raises ValueError: a ``RayCollector`` without a positive ``total_frames``, or batches without
        ``"action_mask"``.
    :raises RuntimeError: the collector has been shut down (by an earlier ``learn``, unless ``shutdown=False``).
    :raises RuntimeError: the collector's worker processes are being started (by spawn) from the top level of
        a script, outside ``if __name__ == "__main__":`` (raised as the collector is created).
    """
    if not isinstance(model, MaskablePPO):
        raise TypeError(
            f"learn_from_collector needs torchrl_mask.MaskablePPO (its learn() takes collector=...); got "
            f"{type(model).__module__}.{type(model).__name__}. Build the model with torchrl_mask.MaskablePPO."
        )
    return model.learn(
        total_timesteps,
        callback,
        log_interval,
        tb_log_name,
        reset_num_timesteps,
        progress_bar=progress_bar,
        collector=collector,
        observation_keys=observation_keys,
        reward_key=reward_key,
        batch_timeout=batch_timeout,
        shutdown=shutdown,
    )
