"""Collector workers that hang, scripts that stop early or forget the main guard, a learner that is killed:
every path ends promptly, with one clear error where there is one, and leaves no process behind.

Each case that could hang the interpreter runs as a script in a subprocess with a timeout, as a user runs it.
"""

from __future__ import annotations

import functools
import os
import re
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path
from typing import Any

import gymnasium as gym
import psutil
import pytest
import torch
from collector_envs import SMALL, TAXI, exiting_env, exploding_env, taxi_env, worker_children
from stable_baselines3.common.callbacks import BaseCallback
from torchrl.collectors import Collector, MultiSyncCollector

from torchrl_mask import CollectorFailed, MaskablePolicyModule, MaskablePPO, learn_from_collector, masked_gym_env

TESTS = Path(__file__).resolve().parent

# A learner script: MultiSyncCollector over two Taxi workers; argv picks how it stops and what worker 1 does.
SCRIPT = textwrap.dedent(
    """
    import sys
    import time

    import gymnasium as gym
    import numpy as np
    from stable_baselines3.common.callbacks import BaseCallback
    from torchrl.collectors import MultiSyncCollector

    from torchrl_mask import MaskablePolicyModule, MaskablePPO, learn_from_collector, masked_gym_env


    class NoMask(gym.Wrapper):
        def reset(self, **kwargs):
            obs, info = self.env.reset(**kwargs)
            return obs, {**info, "action_mask": np.zeros(6, dtype=np.int8)}


    class Sleeps(gym.Wrapper):
        def step(self, action):
            time.sleep(600)


    def taxi():
        return masked_gym_env(gym.make("Taxi-v4"))


    def second():
        env = gym.make("Taxi-v4")
        wrapper = {"no_mask": NoMask, "sleeps": Sleeps}.get(sys.argv[-1], lambda env: env)
        return masked_gym_env(wrapper(env))


    class Stop(BaseCallback):
        def __init__(self, case):
            super().__init__()
            self.case = case

        def _on_step(self):
            if self.case == "raising_callback":
                raise KeyError("the callback broke")
            return False


    COLLECTORS = []  # alive until the interpreter exits, as in a script that keeps its objects


    def main(case=None):
        case = case or sys.argv[1]
        model = MaskablePPO("MlpPolicy", gym.make("Taxi-v4"), n_steps=16, batch_size=32)
        policy = MaskablePolicyModule(model.policy)
        COLLECTORS.append(MultiSyncCollector([taxi, second], policy, frames_per_batch=32))
        print(*(proc.pid for proc in COLLECTORS[-1].procs), flush=True)
        learn_from_collector(model, COLLECTORS[-1], total_timesteps=1_000, callback=Stop(case), batch_timeout=None)


    GUARD
    """
)


def write_script(folder: Path, guarded: bool = True) -> Path:
    path = folder / "learner.py"
    guard = 'if __name__ == "__main__":\n    main()' if guarded else "main()"
    path.write_text(SCRIPT.replace("GUARD", guard))
    return path


def alive(pids: list[int]) -> list[int]:
    return [pid for pid in pids if psutil.pid_exists(pid) and psutil.Process(pid).status() != psutil.STATUS_ZOMBIE]


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_every_early_stop_of_learn_from_collector_lets_the_interpreter_exit(tmp_path: Path) -> None:
    script = tmp_path / "stops.py"
    cases = {"stopping_callback": "returned", "raising_callback": "KeyError", "no_mask": "ValueError"}
    run_all = """
    for case in sys.argv[1:]:  # each case's worker factories read sys.argv[-1]
        sys.argv.append(case)
        try:
            main(case)
            print(case, "returned", flush=True)
        except Exception as error:
            print(case, type(error).__name__, flush=True)
    """
    script.write_text(SCRIPT.replace("GUARD", 'if __name__ == "__main__":' + textwrap.indent(run_all, "    ")))
    run = subprocess.run([sys.executable, str(script), *cases], capture_output=True, text=True, timeout=240)
    assert run.returncode == 0, run.stderr  # a hang at exit times out above
    lines = run.stdout.splitlines()
    assert lines[1::2] == [f"{case} {outcome}" for case, outcome in cases.items()]
    pids = [int(pid) for line in lines[0::2] for pid in line.split()]
    assert len(pids) == 6
    assert alive(pids) == []


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_a_script_without_the_main_guard_gets_one_clear_error_and_starts_no_worker(tmp_path: Path) -> None:
    script = write_script(tmp_path, guarded=False)
    marker = {"TORCHRL_MASK_TEST_RUN": str(tmp_path)}  # inherited by any process the script starts
    run = subprocess.run(
        [sys.executable, str(script), "stop"], env={**os.environ, **marker}, capture_output=True, text=True, timeout=240
    )
    assert run.returncode == 1
    last = run.stderr.strip().splitlines()[-1]
    assert last.startswith(f"RuntimeError: {script}, line ")
    assert 'under `if __name__ == "__main__":`' in last
    assert run.stdout == ""  # the collector was never made, so no worker was started
    assert "bootstrapping phase" not in run.stderr
    assert [p for p in psutil.process_iter(["environ"]) if marker.items() <= (p.info["environ"] or {}).items()] == []


def sleeping_env(at: int = 3) -> Any:
    """Taxi whose step ``at`` never returns (in the time of a test)."""
    torch.set_num_threads(1)
    return masked_gym_env(SleepsOnStep(gym.make(TAXI), at))


class SleepsOnStep(gym.Wrapper):
    def __init__(self, env: gym.Env, at: int) -> None:
        super().__init__(env)
        self.steps = 0
        self.at = at

    def step(self, action: Any) -> Any:
        self.steps += 1
        if self.steps == self.at:
            time.sleep(600)
        return self.env.step(action)


@pytest.mark.slow
@pytest.mark.timeout(180)
@pytest.mark.parametrize(
    ("makers", "silent"),
    [
        ([functools.partial(sleeping_env, 3), taxi_env], 0),  # on the first batch (16 steps a worker)
        ([taxi_env, functools.partial(sleeping_env, 40)], 1),  # on the third
    ],
    ids=["worker 0 on the first batch", "worker 1 on the third batch"],
)
def test_a_silent_worker_ends_in_collector_failed_naming_it_alone_after_the_batch_timeout(
    makers: list[Any], silent: int
) -> None:
    model = MaskablePPO("MlpPolicy", gym.make(TAXI), n_steps=16, batch_size=32, policy_kwargs=SMALL)
    collector = MultiSyncCollector(makers, MaskablePolicyModule(model.policy), frames_per_batch=32)
    pids = [proc.pid for proc in collector.procs]
    started = time.monotonic()
    # ": worker 0 (pid N) sent nothing", not ": worker 0 (pid N), worker 1 (pid M) sent nothing"
    named = rf"batch_timeout=4 s while collecting a batch: worker {silent} \(pid {pids[silent]}\) sent nothing"
    with pytest.raises(CollectorFailed, match=named):
        learn_from_collector(model, collector, total_timesteps=1_000, batch_timeout=4)
    assert time.monotonic() - started < 60  # a bound on a hang: the worker sleeps 600 s
    assert worker_children() == []
    assert alive(pids) == []


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_workers_do_not_outlive_a_killed_learner(tmp_path: Path) -> None:
    script = write_script(tmp_path)
    learner = subprocess.Popen(
        [sys.executable, str(script), "sleeps"], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True
    )
    assert learner.stdout is not None
    pids = [int(pid) for pid in learner.stdout.readline().split()]
    assert len(pids) == 2
    time.sleep(3)  # inside learn_from_collector, worker 1 asleep in its env
    os.kill(learner.pid, signal.SIGKILL)
    learner.wait(timeout=60)
    deadline = time.monotonic() + 60
    while alive(pids) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert alive(pids) == []


# ------------------------------------------------------------------------------------------- failure


class KillWorker(BaseCallback):
    """Kills collector worker 0 as the second rollout starts, i.e. while the collector gathers it."""

    def __init__(self, collector: MultiSyncCollector) -> None:
        super().__init__()
        self.collector = collector
        self.killed_at: float | None = None

    def _on_step(self) -> bool:
        return True

    def _on_rollout_start(self) -> None:
        if self.model.num_timesteps > 0 and self.killed_at is None:
            os.kill(self.collector.procs[0].pid, signal.SIGKILL)
            self.killed_at = time.monotonic()


@pytest.mark.slow
@pytest.mark.timeout(180)
def test_killed_worker_raises_a_clear_error_promptly_and_leaves_no_process() -> None:
    model = MaskablePPO("MlpPolicy", gym.make(TAXI), n_steps=32, batch_size=64, policy_kwargs=SMALL)
    collector = MultiSyncCollector([taxi_env] * 2, MaskablePolicyModule(model.policy), frames_per_batch=64)
    worker_pids = [proc.pid for proc in collector.procs]
    kill = KillWorker(collector)
    # Our watcher ("worker 0 (pid N) was killed by signal 9") or TorchRL's own check ("worker 0 (exit code -9)").
    with pytest.raises(CollectorFailed, match=r"worker 0 \(.*(killed by signal 9|exit code -9)"):
        model.learn(10_000, callback=kill, collector=collector)
    assert kill.killed_at is not None
    assert time.monotonic() - kill.killed_at < 60  # a bound on a hang, not a speed claim
    assert worker_children() == []
    assert not any(psutil.pid_exists(pid) and psutil.Process(pid).status() != "zombie" for pid in worker_pids)


@pytest.mark.slow
@pytest.mark.timeout(180)
def test_env_that_raises_in_a_worker_gives_a_clear_error_and_leaves_no_process() -> None:
    model = MaskablePPO("MlpPolicy", gym.make(TAXI), n_steps=32, batch_size=64, policy_kwargs=SMALL)
    collector = MultiSyncCollector([taxi_env, exploding_env], MaskablePolicyModule(model.policy), frames_per_batch=64)
    # Whichever sees it first, our watcher or TorchRL itself, the error names the worker, its exit code and
    # the exception its env raised.
    with pytest.raises(CollectorFailed, match=r"worker 1 \(.*exited with code 1: it raised ValueError: the env broke"):
        model.learn(10_000, collector=collector)
    assert worker_children() == []


@pytest.mark.slow
@pytest.mark.timeout(180)
def test_a_worker_that_exits_without_an_exception_is_reported_by_its_exit_code_without_a_traceback(
    capfd: pytest.CaptureFixture[str],
) -> None:
    model = MaskablePPO("MlpPolicy", gym.make(TAXI), n_steps=32, batch_size=64, policy_kwargs=SMALL)
    collector = MultiSyncCollector([taxi_env, exiting_env], MaskablePolicyModule(model.policy), frames_per_batch=64)
    with pytest.raises(CollectorFailed) as failed:
        model.learn(10_000, collector=collector)
    assert re.search(
        r"worker 1 \(pid \d+\) exited with code 3: it raised no exception and printed no traceback", str(failed.value)
    ), failed.value
    assert "traceback above" not in str(failed.value)
    assert "Traceback" not in capfd.readouterr().err  # what the message says is true: the worker printed none
    assert worker_children() == []


def test_env_that_raises_in_process_is_reported_with_its_own_error() -> None:
    model = MaskablePPO("MlpPolicy", gym.make(TAXI), n_steps=32, batch_size=32, policy_kwargs=SMALL)
    collector = Collector(exploding_env, MaskablePolicyModule(model.policy), frames_per_batch=32)
    with pytest.raises(CollectorFailed, match=r"collecting a batch.*the env broke on its 40th step") as info:
        model.learn(1_000, collector=collector)
    assert isinstance(info.value.__cause__, ValueError)
