"""Every private name of torch, SB3, sb3-contrib, TorchRL, tensordict and job-shop-lib (and CPython) the package
relies on, in one place: an upgrade that moves one fails here, by name, rather than in a user's run.

Each entry says where the package uses the name. The version bounds in pyproject.toml are the ones this list
forces (see the comments there); tensordict has no entry, so the package sets no ceiling of its own on it.
Where a lookup fails, the fast path that reads the name falls back to the library's own code (hooks are then
taken as present), so a moved name costs speed, not correctness; the recurrent and collector paths need theirs.
"""

from __future__ import annotations

import multiprocessing
import sys
from collections.abc import Callable
from typing import Any

import gymnasium as gym
import pytest
import torch
from collector_envs import SMALL, TAXI, taxi_env
from sb3_contrib import RecurrentPPO
from sb3_contrib.common.envs import InvalidActionEnvDiscrete
from sb3_contrib.common.maskable.policies import MaskableActorCriticPolicy
from sb3_contrib.common.recurrent.buffers import RecurrentRolloutBuffer
from stable_baselines3.common.base_class import BaseAlgorithm
from stable_baselines3.common.policies import BasePolicy
from torch import nn
from torch.optim import optimizer as optimizer_module
from torchrl.collectors import Collector, MultiSyncCollector
from torchrl.collectors.distributed import DistributedCollector

from torchrl_mask import MaskablePolicyModule, MaskablePPO


def _trained_model() -> MaskablePPO:
    model = MaskablePPO("MlpPolicy", InvalidActionEnvDiscrete(dim=4, n_invalid_actions=1), n_steps=8, batch_size=8)
    model.learn(8)
    return model


def _adam() -> torch.optim.Adam:
    return torch.optim.Adam([nn.Parameter(torch.ones(1))])


def _flatten_extractor() -> Any:
    from gymnasium import spaces
    from stable_baselines3.common.torch_layers import FlattenExtractor

    return FlattenExtractor(spaces.Box(0, 1, (3,)))


def _or_tools_solver() -> Any:
    from job_shop_lib.constraint_programming import ORToolsSolver

    return ORToolsSolver


def _collector() -> Collector:
    return Collector(taxi_env, None, frames_per_batch=8, total_frames=-1)


# (library, what owns the names, how to get it, the private names, where the package uses them)
ENTRIES: list[tuple[str, str, Callable[[], Any], tuple[str, ...], str]] = [
    # torch: the flat Adam step, and the checks that nothing is hooked where a fast path skips __call__.
    ("torch", "torch", lambda: torch, ("_foreach_add_", "_foreach_addcdiv_"), "fastpath/adam.py"),
    (
        "torch",
        "torch.optim.optimizer",
        lambda: optimizer_module,
        ("_global_optimizer_pre_hooks", "_global_optimizer_post_hooks"),
        "fastpath/adam.py",
    ),
    ("torch", "an Adam", _adam, ("_optimizer_step_pre_hooks", "_optimizer_step_post_hooks"), "fastpath/adam.py"),
    (
        "torch",
        "torch.nn.modules.module",
        lambda: nn.modules.module,
        ("_global_forward_hooks", "_global_forward_pre_hooks", "_global_backward_hooks", "_global_backward_pre_hooks"),
        "fastpath/stock.py",
    ),
    (
        "torch",
        "an nn.Linear",
        lambda: nn.Linear(1, 1),
        ("_forward_hooks", "_forward_pre_hooks", "_backward_hooks", "_backward_pre_hooks", "_modules"),
        "fastpath/stock.py; torchrl/policy.py (_modules: the module shipped to workers)",
    ),
    # SB3: the state collect_rollouts carries between rollouts, and the hooks MaskablePPO extends.
    (
        "stable-baselines3",
        "a model after learn()",
        _trained_model,
        ("_last_obs", "_last_episode_starts"),
        "algorithms/vecenv_source.py",
    ),
    (
        "stable-baselines3",
        "BaseAlgorithm",
        lambda: BaseAlgorithm,
        ("_update_info_buffer", "_setup_model", "_excluded_save_params", "_wrap_env"),
        "algorithms/ppo.py, recurrent_ppo.py, vecenv_source.py, collector_source.py",
    ),
    (
        "stable-baselines3",
        "BasePolicy",
        lambda: BasePolicy,
        ("_get_constructor_parameters",),
        "games/selfplay.py (a snapshot of the policy); scheduling/network.py (JobScorerPolicy saves its width)",
    ),
    # sb3-contrib: the masked policy's distribution hook, the recurrent buffer's sample builder.
    (
        "sb3-contrib",
        "MaskableActorCriticPolicy",
        lambda: MaskableActorCriticPolicy,
        ("_get_action_dist_from_latent",),
        "torchrl/policy.py",
    ),
    (
        "sb3-contrib",
        "MaskableActorCriticPolicy",
        lambda: MaskableActorCriticPolicy,
        ("_predict",),
        "fastpath/stock.py (stock_predict: the hook predict() calls, swapped for one call)",
    ),
    (
        "sb3-contrib",
        "MaskableActorCriticPolicy",
        lambda: MaskableActorCriticPolicy,
        ("_build", "_build_mlp_extractor"),
        "scheduling/network.py (JobScorerPolicy: the job scores are the logits)",
    ),
    # job-shop-lib (the scheduling extra): where its OR-Tools solver makes CP-SAT's solver, to set its workers.
    (
        "job-shop-lib",
        "ORToolsSolver",
        _or_tools_solver,
        ("_initialize_model",),
        "scheduling/evaluation.py (CpSatSolver sets num_workers)",
    ),
    (
        "sb3-contrib",
        "RecurrentRolloutBuffer",
        lambda: RecurrentRolloutBuffer,
        ("_get_samples",),
        "rollout/recurrent_buffers.py",
    ),
    ("sb3-contrib", "RecurrentPPO", lambda: RecurrentPPO, ("_setup_model", "_wrap_env"), "algorithms/recurrent_ppo.py"),
    (
        "stable-baselines3",
        "a FlattenExtractor",
        _flatten_extractor,
        ("_features_dim",),
        "algorithms/recurrent_policies.py (an int size for nn.LSTM)",
    ),
    # TorchRL: the collectors' weight-sync schemes, shut down before an unguarded script's error.
    ("torchrl", "a Collector", _collector, ("_weight_sync_schemes",), "torchrl/workers.py"),
    # CPython: a stuck worker's frame in the error, and the caller that starts a spawned worker.
    ("python", "sys", lambda: sys, ("_current_frames", "_getframe"), "torchrl/workers.py"),
]


@pytest.mark.parametrize(("library", "what", "get", "names", "where"), ENTRIES, ids=[f"{e[0]}:{e[1]}" for e in ENTRIES])
def test_private_names_the_package_relies_on_are_still_there(
    library: str, what: str, get: Callable[[], Any], names: tuple[str, ...], where: str
) -> None:
    owner = get()
    missing = [name for name in names if not hasattr(owner, name)]
    assert not missing, f"{library}: {what} has no {missing} any more; torchrl_mask uses them in {where}: adapt it"


def test_collectors_expose_their_local_worker_processes_as_the_watcher_reads_them() -> None:
    # torchrl/workers.py finds a collector's local processes in `procs` (multi-process collectors) or `jobs`
    # (DistributedCollector with launcher="mp"); they are public-looking names but not documented API.
    model = MaskablePPO("MlpPolicy", gym.make(TAXI), n_steps=16, batch_size=16, policy_kwargs=SMALL)
    collector = MultiSyncCollector([taxi_env], MaskablePolicyModule(model.policy), frames_per_batch=8, total_frames=-1)
    try:
        assert len(collector.procs) == 1 and isinstance(collector.procs[0], multiprocessing.process.BaseProcess)
    finally:
        collector.shutdown()
    assert "self.jobs" in _source(DistributedCollector), "DistributedCollector keeps its local jobs elsewhere"


def test_the_collector_state_learn_reads_is_where_it_looks() -> None:
    # algorithms/collector_source.py tells a shut-down collector by `closed` (Collector and the multi-process
    # ones, an attribute) or DistributedCollector's `_shutdown`, and RayCollector's on-policy mode by `_sync`.
    from torchrl.collectors.distributed import RayCollector

    collector = Collector(taxi_env, None, frames_per_batch=8, total_frames=-1)
    collector.shutdown()
    assert collector.closed is True
    assert "self._shutdown = True" in _source(DistributedCollector)
    assert "self._sync = sync" in _source(RayCollector)
    assert "self.num_collectors =" in _source(RayCollector) and "remote_collectors" in dir(RayCollector)


def test_a_spawned_worker_is_told_apart_while_it_unpickles_its_job() -> None:
    # torchrl/workers.py reads multiprocessing's `_inheriting` flag, set on the current process by spawn's
    # bootstrap only while the child unpickles its job (so it cannot be looked up from here, only in the source).
    import inspect
    import multiprocessing.spawn

    assert "current_process()._inheriting = True" in inspect.getsource(multiprocessing.spawn)


def _source(cls: type) -> str:
    import inspect

    return "".join(inspect.getsource(klass) for klass in cls.__mro__ if klass.__module__.startswith("torchrl"))
