"""The benchmark runs and reports what it claims to (no timing is asserted: machines here are noisy)."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from torchrl_mask import benchmark


def test_bench_prints_a_row_per_phase_with_medians_and_ratios(capsys):
    assert benchmark.main(["--workloads", "vector", "--rounds", "1", "--no-memory", "--device", "cpu"]) == 0
    out = capsys.readouterr().out
    for phase in ("add", "gae", "get", "**total**"):
        assert re.search(rf"\| vector \| {re.escape(phase)} \| [\d.]+ \| [\d.]+ \| [\d.]+x \|", out), phase
    assert "sb3-contrib time / torchrl_mask time" in out


def test_peak_memory_of_an_image_iteration_covers_at_least_the_rollout_it_stores():
    workload = benchmark.WORKLOADS["image"]
    image_bytes = workload.n_steps * workload.n_envs * 64 * 64
    peak = benchmark.peak_memory("torchrl_mask", "image", "cpu")
    assert peak is not None and peak >= image_bytes


def test_bench_refuses_cuda_without_a_gpu_in_one_line(capsys):
    import torch

    if torch.cuda.is_available():
        pytest.skip("a GPU is present: the refusal cannot happen")
    with pytest.raises(SystemExit) as info:
        benchmark.main(["--device", "cuda"])
    assert info.value.code == 2
    assert "no CUDA device is visible here" in capsys.readouterr().err


@pytest.mark.slow
def test_collection_benchmark_script_runs_both_sides_and_reports_their_ratio():
    # benchmarks/bench_collect.py as a user runs it: real SubprocVecEnv and MultiSyncCollector worker processes.
    script = Path(__file__).resolve().parents[1] / "benchmarks" / "bench_collect.py"
    args = ["--repeats", "1", "--total-timesteps", "256", "--n-steps", "64", "--batch-size", "64", "--n-epochs", "1",
            "--step-cost", "0"]  # fmt: skip
    done = subprocess.run([sys.executable, str(script), *args], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    run = re.search(r"run 0: sb3-contrib SubprocVecEnv +([\d.]+) steps/s +torchrl_mask MultiSyncCollector +([\d.]+) "
                    r"steps/s +ratio ([\d.]+)x", done.stdout)  # fmt: skip
    assert run is not None, done.stdout
    theirs, ours, ratio = (float(group) for group in run.groups())
    assert theirs > 0 and ours > 0
    assert ratio == pytest.approx(ours / theirs, abs=0.01)
    assert "median of the runs' ratios" in done.stdout
