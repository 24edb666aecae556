"""The job-shop benchmarks: bench jobshop's paired ratio, and the table harness's runs, baselines and report."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from torchrl_mask.bench import jobshop, jobshop_table
from torchrl_mask.scheduling import check_instance, rule_makespans


def test_bench_jobshop_reports_learn_over_random_play_from_the_same_round(capsys: pytest.CaptureFixture) -> None:
    argv = ["--instance", "ft06", "--rounds", "1", "--random-steps", "360", "--timesteps", "1800"]
    assert jobshop.main(argv) == 0
    out = capsys.readouterr().out
    play, learn, ratio = re.search(
        r"random play ([\d,]+), learn\(\) ([\d,]+) dispatches/s, ratio ([\d.]+)", out
    ).groups()
    # the printed ratio is the round's two speeds divided (each printed rounded to a dispatch a second)
    assert float(ratio) == pytest.approx(
        float(learn.replace(",", "")) / float(play.replace(",", "")), rel=0.02, abs=2e-3
    )
    assert "| ft06 |" in out


def test_bench_jobshop_refuses_an_unknown_instance_in_one_line() -> None:
    with pytest.raises(ValueError, match="unknown job-shop instance 'ta00'"):
        jobshop.main(["--instance", "ta00"])


@pytest.mark.slow
@pytest.mark.parametrize("train_on", [None, "random:6x6"])
def test_table_trains_judges_and_reports_beside_the_rules_and_cp_sat(
    train_on: str | None, tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    path = tmp_path / "table.json"
    argv = ["--instances", "ft06", "--seeds", "0", "1", "--timesteps", "500", "--samples", "3"]
    argv += ["--cp-sat-seconds", "5", "--jobs", "1", "--json", str(path)]
    assert jobshop_table.main(argv + (["--train-on", train_on] if train_on else [])) == 0
    saved = json.loads(path.read_text())
    runs, base = saved["runs"], saved["baselines"]["ft06"]
    assert [run["seed"] for run in runs] == [0, 1]
    assert all(run["all_legal"] and run["valid"] and run["best_of_k"] <= run["greedy"] for run in runs)
    assert all(run["trained_on"] == (train_on or "ft06") for run in runs)
    assert base["rules"] == rule_makespans("ft06")
    assert (base["cp_sat"], base["best_known"]) == (55, check_instance("ft06").upper_bound)
    out = capsys.readouterr().out
    median = sorted(run["greedy"] for run in runs)
    assert f"| ft06 | 55 | {base['rules']['SPT']} (60.0%)" in out
    assert f"{sum(median) / 2:g} ({100 * (sum(median) / 2 / 55 - 1):.1f}%)" in out
