"""The TorchRL collector of ``torchrl-mask train --collector sync|multisync``, for either model."""

from __future__ import annotations

from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any

from torchrl.collectors import BaseCollector, Collector, MultiSyncCollector
from torchrl.envs import EnvBase, SerialEnv, TensorDictPrimer

from torchrl_mask.algorithms.ppo import MaskablePPO
from torchrl_mask.algorithms.recurrent_ppo import MaskableRecurrentPPO
from torchrl_mask.app.config import TrainConfig
from torchrl_mask.app.masked_env import collector_env, user_env
from torchrl_mask.torchrl.policy import MaskablePolicyModule
from torchrl_mask.torchrl.recurrent_policy import MaskableRecurrentPolicyModule

__all__ = ["make_collector"]


def make_collector(
    config: TrainConfig,
    model: MaskablePPO | MaskableRecurrentPPO,
    monitor_dir: Path,
    make_env: Callable[[], Any] | None = None,
) -> BaseCollector:
    """The collector of a ``--collector`` run: ``sync``, the envs step in this process (``SerialEnv``);
    ``multisync``, one worker process per env. The recurrent model's envs also carry its LSTM states (its policy
    module's primer; the masked env has TorchRL's ``InitTracker``).

    :param config: the run (``env_id``, ``n_envs``, ``collector``, ``seed``, ``threads``).
    :param model: the model that learns; its policy runs in the collector.
    :param monitor_dir: where each env's Monitor file goes (one folder per env).
    :param make_env: makes one env, unmasked, in this process or a worker's; None: the gymnasium id
        ``config.env_id``.
    :return: a collector of ``n_envs * n_steps`` steps a batch, never ending by itself.
    """
    make = partial(user_env, config.env_id) if make_env is None else make_env
    makers = [partial(collector_env, make, str(monitor_dir / str(rank))) for rank in range(config.n_envs)]
    policy: MaskablePolicyModule | MaskableRecurrentPolicyModule
    if isinstance(model, MaskableRecurrentPPO):
        policy = MaskableRecurrentPolicyModule(model.policy)
        makers = [partial(_primed, maker, policy.make_tensordict_primer()) for maker in makers]
    else:
        policy = MaskablePolicyModule(model.policy)
    frames = config.n_envs * model.n_steps
    collector: BaseCollector
    if config.collector == "multisync":
        collector = MultiSyncCollector(
            makers,
            policy,
            frames_per_batch=frames,
            total_frames=-1,
            num_threads=config.threads,
            auto_register_policy_transforms=False,  # the envs carry what the policy reads (InitTracker, primer)
        )
        collector.set_seed(config.seed)
        collector.reset()  # set_seed reseeds the envs but keeps the step (and mask) each worker holds: start anew
    else:  # seeded before the Collector resets it, so that the first episodes are seeded too
        envs = SerialEnv(config.n_envs, makers)
        envs.set_seed(config.seed)
        collector = Collector(
            envs, policy, frames_per_batch=frames, total_frames=-1, auto_register_policy_transforms=False
        )
    return collector


def _primed(make_env: Callable[[], EnvBase], primer: TensorDictPrimer) -> EnvBase:
    """``make_env()`` with ``primer`` appended: the LSTM states in the env's specs, zeros at each reset.

    :param make_env: the env's maker (run in a worker process with ``multisync``).
    :param primer: :meth:`MaskableRecurrentPolicyModule.make_tensordict_primer`'s transform.
    :return: the env with the primer as its last transform.
    """
    return make_env().append_transform(primer)
