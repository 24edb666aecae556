"""MaskablePPO learning from TorchRL's ``RayCollector`` on a local Ray cluster (loopback, two CPUs), against the
same run through ``MultiSyncCollector``; the RayCollector settings learn() refuses; and MaskableRecurrentPPO through
it.

Ray is the optional extra ``ray``; without it these tests are skipped. The cluster is started here and shut
down after, and no process it started outlives it.
"""

from __future__ import annotations

import functools
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psutil
import pytest
import torch
from collector_envs import (
    CollectedByTheLearnersLSTM,
    CueRecall,
    invalid_discrete_env,
    recurrent_cue_recall_env,
    seeded_invalid_discrete_env,
    small_model,
)
from stable_baselines3.common.env_util import make_vec_env
from torchrl.collectors import MultiSyncCollector

from torchrl_mask import MaskablePolicyModule, MaskablePPO, MaskableRecurrentPPO
from torchrl_mask.torchrl.recurrent_policy import MaskableRecurrentPolicyModule
from torchrl_mask.torchrl.workers import shutdown

ray = pytest.importorskip("ray")
from torchrl.collectors.distributed import RayCollector  # noqa: E402  (after the skip: it needs ray)

TESTS = Path(__file__).resolve().parent
# Each remote collector is a Ray actor of one CPU; the cluster has two, for the two envs of a batch.
ONE_CPU = {"num_cpus": 1}


def descendants() -> set[psutil.Process]:
    """This process's descendants, less multiprocessing's resource tracker (MultiSyncCollector starts it once; it
    lives as long as this process)."""
    found = set()
    for proc in psutil.Process().children(recursive=True):
        try:
            if "multiprocessing.resource_tracker" not in " ".join(proc.cmdline()):
                found.add(proc)
        except psutil.Error:  # gone, or a zombie: not running
            continue
    return found


@pytest.fixture(scope="module")
def ray_cluster() -> Iterator[None]:
    """A local Ray cluster on loopback; its actors import this checkout's torchrl_mask and the tests' envs."""
    before = descendants()
    ray.init(
        num_cpus=2,
        include_dashboard=False,
        _node_ip_address="127.0.0.1",
        log_to_driver=False,
        runtime_env={"env_vars": {"PYTHONPATH": f"{TESTS.parent}:{TESTS}"}},
    )
    try:
        yield
    finally:
        started = descendants() - before
        ray.shutdown()
        _, alive = psutil.wait_procs(list(started), timeout=60)
        running = [proc for proc in alive if proc.is_running() and proc.status() != psutil.STATUS_ZOMBIE]
        assert running == [], f"{running} outlived ray.shutdown()"


def learned(collector_class: Any, **kwargs: Any) -> tuple[torch.Tensor, MaskablePPO, Any]:
    """Three PPO updates on batches of two seeded envs; the parameters after them, the model, the collector."""
    model = small_model()
    envs = [functools.partial(seeded_invalid_discrete_env, seed) for seed in (10, 11)]
    collector = collector_class(envs, MaskablePolicyModule(model.policy), frames_per_batch=64, **kwargs)
    model.learn(192, collector=collector)
    return torch.nn.utils.parameters_to_vector(model.policy.parameters()).detach(), model, collector


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_a_ray_collector_learns_the_parameters_a_multisync_collector_learns(ray_cluster: None) -> None:
    """RayCollector(sync=True) over two remote Collectors stacks (2, T) as MultiSyncCollector stacks its two
    workers; the envs and the policy's samples are seeded in the worker processes, and the weights just trained
    reach the remote policies before each batch: the parameters after three updates are the same, bit for bit."""
    local, local_model, _ = learned(MultiSyncCollector)
    remote, remote_model, collector = learned(RayCollector, total_frames=1 << 40, sync=True, remote_configs=ONE_CPU)
    assert remote_model.num_timesteps == local_model.num_timesteps == 192
    assert remote_model.rollout_buffer.tensordict.batch_size == (2, 32)
    remote_rollout, local_rollout = remote_model.rollout_buffer.tensordict, local_model.rollout_buffer.tensordict
    assert torch.equal(remote_rollout["action"], local_rollout["action"])
    assert torch.equal(remote, local)
    assert not torch.equal(remote, torch.nn.utils.parameters_to_vector(small_model().policy.parameters()))
    assert collector.remote_collectors == []  # learn() shut it down: its actors are killed
    with pytest.raises(RuntimeError, match=r"RayCollector has been shut down.*shutdown=False"):
        remote_model.learn(64, collector=collector)


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_learn_refuses_a_ray_collector_that_gives_no_batch_or_off_policy_batches(ray_cluster: None) -> None:
    model = small_model()
    endless = RayCollector(
        [invalid_discrete_env],
        MaskablePolicyModule(model.policy),
        frames_per_batch=32,
        total_frames=-1,
        remote_configs=ONE_CPU,
    )
    try:
        with pytest.raises(ValueError, match=r"total_frames=-1\) yields no batch.*total_frames of at least"):
            model.learn(64, collector=endless)
    finally:
        shutdown(endless)
    racing = RayCollector(
        [invalid_discrete_env] * 2,
        MaskablePolicyModule(model.policy),
        frames_per_batch=32,
        total_frames=1 << 40,
        sync=False,
        remote_configs=ONE_CPU,
    )
    try:
        with pytest.raises(TypeError, match=r"sync=False\) over 2 remote collectors.*create it with sync=True"):
            model.learn(64, collector=racing)
    finally:
        shutdown(racing)
    assert model.num_timesteps == 0


def train_within(model: MaskablePPO, collector: Any, steps: int, seconds: float) -> None:
    """``model.learn(steps, collector=collector)``, failing (not hanging) if it has not returned after ``seconds``:
    a learn() whose actors can never be scheduled waits forever for its first batch."""
    outcome: dict[str, BaseException | None] = {}

    def learn() -> None:
        try:
            model.learn(steps, collector=collector)
            outcome["error"] = None
        except BaseException as error:  # handed to the test below
            outcome["error"] = error

    thread = threading.Thread(target=learn, daemon=True)
    thread.start()
    thread.join(seconds)
    if thread.is_alive():
        shutdown(collector)  # kills its pending actors: the waiting learn() ends with an error
        thread.join(60)
        pytest.fail(f"learn() on a correct RayCollector did not finish within {seconds:g} s")
    if outcome["error"] is not None:
        raise outcome["error"]


@pytest.mark.slow
@pytest.mark.timeout(400)
def test_after_a_refused_ray_collector_a_correct_one_in_the_same_process_trains(ray_cluster: None) -> None:
    """The refused collector's actors hold both of the cluster's CPUs; learn() kills them as it refuses it (and
    says so), so the collector the error asks for, made next in the same process (a notebook), gets its actors."""
    model = small_model()
    envs = [functools.partial(seeded_invalid_discrete_env, seed) for seed in (10, 11)]
    endless = RayCollector(
        envs, MaskablePolicyModule(model.policy), frames_per_batch=64, total_frames=-1, remote_configs=ONE_CPU
    )
    try:
        with pytest.raises(ValueError, match=r"total_frames=-1\) yields no batch") as refused:
            model.learn(64, collector=endless)
        assert endless.remote_collectors == []
        deadline = time.monotonic() + 60  # Ray frees a killed actor's CPU once its process is gone
        while ray.available_resources().get("CPU", 0) < 2 and time.monotonic() < deadline:
            time.sleep(0.2)
        assert ray.available_resources().get("CPU", 0) == 2, "the refused collector's actors still hold the CPUs"
        corrected = RayCollector(
            envs,
            MaskablePolicyModule(model.policy),
            frames_per_batch=64,
            total_frames=1 << 40,
            sync=True,
            remote_configs=ONE_CPU,
        )
        train_within(model, corrected, 128, seconds=150)
        assert model.num_timesteps == 128
        assert corrected.remote_collectors == []  # learn() shut it down at the end
        assert "learn() has shut this RayCollector down (collector.shutdown())" in str(refused.value)
    finally:
        shutdown(endless)


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_a_recurrent_model_learns_through_a_ray_collector_with_the_weights_just_trained(ray_cluster: None) -> None:
    """MaskableRecurrentPPO over RayCollector(sync=True): the remote policies carry the LSTM states and collect with
    the weights just trained."""
    model = MaskableRecurrentPPO(
        "MlpLstmPolicy",
        make_vec_env(CueRecall, n_envs=1),
        n_steps=16,
        batch_size=32,
        n_epochs=2,
        learning_rate=3e-3,
        seed=0,
        policy_kwargs={"lstm_hidden_size": 8, "net_arch": [16]},
    )
    module = MaskableRecurrentPolicyModule(model.policy)
    make_env = functools.partial(recurrent_cue_recall_env, module.make_tensordict_primer(), 1)
    collector = RayCollector(
        [make_env] * 2, module, frames_per_batch=32, total_frames=1 << 40, sync=True, remote_configs=ONE_CPU
    )
    check = CollectedByTheLearnersLSTM()
    model.learn(96, callback=check, collector=collector)
    assert model.num_timesteps == 96 and model.rollout_buffer.tensordict.batch_size == (2, 16)
    check.check(rollouts=3)
    assert collector.remote_collectors == []
