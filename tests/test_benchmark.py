"""The benchmark grid runs and reports what it claims to (no timing is asserted: machines here are noisy)."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from torchrl_mask.bench import buffers as benchmark
from torchrl_mask.bench import charts
from torchrl_mask.bench import grid as grid
from torchrl_mask.bench import report as report


def test_quick_grid_reports_both_libraries_every_phase_and_the_worst_cell(capsys, tmp_path):
    page = tmp_path / "page.md"
    page.write_text(f"# Title\n\n{report.BEGIN}\nold text\n{report.END}\n\nkept\n")
    raw = tmp_path / "raw.json"
    argv = ["--grid", "quick", "--rounds", "1", "--memory", "none", "--update", str(page), "--json", str(raw)]
    assert benchmark.main(argv) == 0
    out = capsys.readouterr().out
    ms, ratio = r"[\d.]+ / [\d.]+ / [\d.]+", r"[\d.]+x"
    for cell in grid.GRIDS["quick"]:
        row = (
            rf"\| {cell.n_steps} x {cell.n_envs} \| {cell.dones} \| {cell.obs} \| {cell.mask} \| {cell.batch_size} "
            rf"\| {ms} \| {ms} \| {ratio} \| {ratio} \| {ratio} \| \*\*{ratio}\*\* \|"
        )
        assert re.search(row, out), cell.key
    assert "| sb3-contrib ms add / GAE / get | torchrl_mask ms add / GAE / get |" in out
    summary = re.search(r"`default`: lowest speed-up over the 2 cells, per phase: (.*)\. Highest", out)
    assert summary is not None
    for label in ("add", "GAE", "get", "iteration"):
        assert re.search(rf"{label} \*\*[\d.]+x\*\* \((128x1|128x8)-", summary.group(1)), label
    text = page.read_text()
    assert "old text" not in text and text.startswith("# Title") and text.endswith("kept\n")
    assert "### Buffer grid, one PPO iteration (cpu)" in text and "torchrl-mask bench --grid quick" in text
    cells = json.loads(raw.read_text())["cells"]
    assert [c["cell"] for c in cells] == [cell.key for cell in grid.GRIDS["quick"]]
    for c in cells:  # both sides did the same work, and each ratio is the pairing of the two times
        assert c["max_difference"]["default"] < 1e-4
        assert set(c["times"]) == {"sb3-contrib", "default"}
        times = c["times"]
        assert c["speedup"]["default"]["total"] == pytest.approx(
            times["sb3-contrib"]["total"] / times["default"]["total"], rel=1e-9
        )  # one round: the median of one ratio


def test_default_grid_covers_every_axis_value_and_sb3s_default_shape():
    cells = grid.GRIDS["default"]
    for axis, values in grid.AXES.items():
        assert {getattr(cell, axis) for cell in cells} == set(values), axis
    assert {(2048, 8, "image"), (2048, 8, "vector")} <= {(c.n_steps, c.n_envs, c.obs) for c in cells}
    assert len(grid.GRIDS["full"]) == 2 * 3 * 3 * 2 * 3
    assert all(grid.Cell.from_key(cell.key) == cell for cell in grid.GRIDS["full"])


def test_axis_filters_keep_matching_cells_and_refuse_an_empty_selection():
    cells = grid.grid("full", n_envs=[8], obs=["vector"], dones=None)
    assert len(cells) == 2 * 3 * 3 and all(c.n_envs == 8 and c.obs == "vector" for c in cells)
    with pytest.raises(ValueError, match="no cell of the 'quick' grid"):
        grid.grid("quick", n_steps=[2048])


@pytest.mark.parametrize("n_envs", [1, 8])
def test_done_patterns_have_the_episode_ends_they_claim(n_envs):
    rng = np.random.default_rng(0)
    assert not grid.done_pattern("none", 2048, n_envs, rng).any()
    assert 0.005 < grid.done_pattern("uniform", 2048, n_envs, rng).mean() < 0.02
    mixed = grid.done_pattern("mixed", 2048, n_envs, rng)
    long_env = mixed[:1024, 0]  # env 0 runs one long episode (with one env: the first half of the rollout)
    assert not long_env.any()
    short = mixed[:, 1:] if n_envs > 1 else mixed[1024:, :1]
    gaps = [np.diff(np.flatnonzero(column)) for column in short.T]
    assert all(gap.size and gap.min() >= 16 and gap.max() <= 24 for gap in gaps)


def test_inputs_are_what_maskable_ppo_passes_to_add():
    cell = grid.Cell.from_key("128x8-mixed-image-multidiscrete")
    inputs = grid.make_inputs(cell, "cpu")
    (obs, actions, rewards, starts, values, log_probs), masks = inputs.steps[5]
    assert obs["image"].dtype == np.uint8 and obs["image"].shape == (8, 3, 64, 64)
    assert actions.dtype == np.int64 and actions.shape == (8, 4)
    assert rewards.dtype == np.float32 and starts.dtype == bool and masks.dtype == bool and masks.shape == (8, 20)
    assert isinstance(values, torch.Tensor) and values.shape == (8, 1) and log_probs.shape == (8,)
    starts_next = inputs.steps[6][0][3]
    dones = grid.done_pattern("mixed", 128, 8, np.random.default_rng(0))
    assert starts_next.dtype == bool and starts_next.shape == dones[5].shape
    assert isinstance(inputs.last_values, torch.Tensor) and inputs.dones.dtype == bool


def test_a_variant_the_buffers_reject_is_an_error_unless_listed_to_skip(monkeypatch, capsys):
    bogus = grid.Variant("bogus", {"no_such_option": True}, "an argument no buffer takes")
    monkeypatch.setitem(grid.VARIANTS, "bogus", bogus)
    with pytest.raises(ValueError, match="pass --skip bogus"):
        benchmark.resolve_variants(["default", "bogus"])
    variants, skipped = benchmark.resolve_variants(["default", "bogus"], skip=["bogus"])
    assert [v.name for v in variants] == ["default"] and "no_such_option" in skipped["bogus"]
    with pytest.raises(ValueError, match="unknown variants"):
        benchmark.resolve_variants(["nope"])


def test_update_refuses_a_file_without_the_markers_before_running(tmp_path, capsys):
    page = tmp_path / "page.md"
    page.write_text("no markers here\n")
    with pytest.raises(SystemExit) as info:
        benchmark.main(["--grid", "quick", "--update", str(page)])
    assert info.value.code == 2
    assert report.BEGIN in capsys.readouterr().err
    assert page.read_text() == "no markers here\n"


def test_peak_memory_of_an_image_iteration_covers_at_least_the_rollout_it_stores():
    cell = grid.Cell.from_key("128x1-none-image-discrete")
    image_bytes = cell.n_steps * cell.n_envs * 3 * 64 * 64
    peak = benchmark.peak_memory("default", cell, "cpu")
    assert peak is not None and peak >= image_bytes


def test_bench_refuses_cuda_without_a_gpu_in_one_line(capsys):
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
    args = [
        "--repeats",
        "1",
        "--total-timesteps",
        "256",
        "--n-steps",
        "64",
        "--batch-size",
        "64",
        "--n-epochs",
        "1",
        "--step-cost",
        "0",
    ]
    done = subprocess.run([sys.executable, str(script), *args], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    run = re.search(
        r"run 0: sb3-contrib SubprocVecEnv +([\d.]+) steps/s +torchrl_mask MultiSyncCollector +([\d.]+) "
        r"steps/s +ratio ([\d.]+)x",
        done.stdout,
    )
    assert run is not None, done.stdout
    theirs, ours, ratio = (float(group) for group in run.groups())
    assert theirs > 0 and ours > 0
    assert ratio == pytest.approx(ours / theirs, abs=0.01)
    assert "median of the runs' ratios" in done.stdout


@pytest.mark.slow
def test_bench_learn_checks_parity_and_reports_speed_ups_and_the_envs_bound():
    # `torchrl-mask bench learn` as a user runs it, on a tiny learn(): both libraries learn (and the benchmark
    # checks that they learn the same parameters, else it exits 1), the envs alone are stepped for the bound.
    args = [
        "bench",
        "learn",
        "--rounds",
        "1",
        "--timesteps",
        "128",
        "--n-steps",
        "16",
        "--batch-size",
        "32",
        "--n-epochs",
        "1",
        "--workloads",
        "dict-dummy",
        "multidiscrete",
    ]
    done = subprocess.run([sys.executable, "-m", "torchrl_mask", *args], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    for workload in ("dict-dummy", "multidiscrete"):
        line = re.search(rf"^{workload} +([\d.]+) +([\d.]+) +([\d.]+)x .* ([\d.]+) +([\d.]+)x$", done.stdout, re.M)
        assert line is not None, done.stdout
        theirs, ours, speed_up, envs, bound = (float(group) for group in line.groups())
        # One round: its ratio, of the printed times (rounded to the millisecond, the ratio to the hundredth).
        assert (theirs - 5e-4) / (ours + 5e-4) - 5e-3 <= speed_up <= (theirs + 5e-4) / (ours - 5e-4) + 5e-3
        assert 0 < envs < ours and bound > 0


def test_bench_ppo_script_is_bench_learn(capsys):
    # benchmarks/bench_ppo.py runs the same benchmark as `torchrl-mask bench learn`, and `bench --help` points there.
    script = Path(__file__).resolve().parents[1] / "benchmarks" / "bench_ppo.py"
    done = subprocess.run([sys.executable, str(script), "--help"], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0 and "--workloads" in done.stdout and "dict-dummy" in done.stdout
    with pytest.raises(SystemExit):
        benchmark.main(["--help"])
    assert "torchrl-mask bench learn" in capsys.readouterr().out


def test_bench_learn_action_spaces_times_three_algorithms_and_checks_parity():
    # `torchrl-mask bench learn --action-spaces` on two tiny cells: a row per cell with SB3's PPO, sb3-contrib and
    # ours, parameters checked equal (else a FAIL row and exit 1), and the worst cost of masking named.
    args = [
        "bench",
        "learn",
        "--action-spaces",
        "--rounds",
        "1",
        "--timesteps",
        "128",
        "--n-envs",
        "2",
        "--n-steps",
        "32",
        "--n-epochs",
        "1",
        "--batch-sizes",
        "32",
        "--observations",
        "box",
        "dict",
        "--spaces",
        "MultiBinary(16)",
    ]
    done = subprocess.run([sys.executable, "-m", "torchrl_mask", *args], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    rows = re.findall(
        r"^\| MultiBinary\(16\) \| (box|dict) \| 32 \| ([\d.]+) \| ([\d.]+) \| ([\d.]+) \| ([\d.]+)x \|",
        done.stdout,
        re.M,
    )
    assert [row[0] for row in rows] == ["box", "dict"], done.stdout
    for _, ppo, _, ours, cost in rows:  # one round: the cost is the ratio of the printed times, within rounding
        assert (
            (float(ours) - 5e-4) / (float(ppo) + 5e-4) - 5e-3
            <= float(cost)
            <= (float(ours) + 5e-4) / (float(ppo) - 5e-4) + 5e-3
        )
    assert "worst cost of masking" in done.stdout and "FAIL" not in done.stdout
    # The floor is timed in the round it is compared with: with one round, ours / floor is ours / PPO over
    # floor / PPO, within the printed rounding.
    floors = re.findall(
        r"^\| MultiBinary\(16\) \| (?:box|dict) \| 32 \|(?: [\d.]+ \|){3} ([\d.]+)x \| ([\d.]+)x \| "
        r"[\d.]+x \| ([\d.]+) \|$",
        done.stdout,
        re.M,
    )
    assert len(floors) == 2, done.stdout
    for cost, floor, above in floors:  # each printed to 2 decimals: the ratio's bounds from the rounding of all three
        low, high = (float(cost) - 5e-3) / (float(floor) + 5e-3), (float(cost) + 5e-3) / (float(floor) - 5e-3)
        assert low - 5e-3 <= float(above) <= high + 5e-3, (cost, floor, above)
    assert "furthest above its floor" in done.stdout


def test_bench_learn_recurrent_checks_unmasked_parity_with_recurrent_ppo_and_reports_the_ratio():
    # `torchrl-mask bench learn --recurrent` on a tiny learn(): a row per workload, sb3-contrib's RecurrentPPO and
    # MaskableRecurrentPPO(use_masking=False) checked to learn the same parameters (else a FAIL line and exit 1).
    args = [
        "bench",
        "learn",
        "--recurrent",
        "--rounds",
        "1",
        "--timesteps",
        "64",
        "--n-envs",
        "2",
        "--n-steps",
        "32",
        "--batch-size",
        "32",
        "--n-epochs",
        "1",
        "--lstm-hidden-size",
        "8",
    ]
    done = subprocess.run([sys.executable, "-m", "torchrl_mask", *args], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    rows = re.findall(r"^(cartpole|dict) +[\d.]+ +[\d.]+ +[\d.]+x \(", done.stdout, re.M)
    assert rows == ["cartpole", "dict"], done.stdout
    assert "FAIL" not in done.stdout


def test_bench_selfplay_reports_both_speeds_of_each_game_as_ratios_to_its_own_random_play(tmp_path):
    # `torchrl-mask bench selfplay` as a user runs it, tiny: one round of random play, collection and a whole train
    # job per game; each ratio is the round's speed over the round's random play (one round: its own). --json
    # writes the same figures as the benchmarks page's chart reads them.
    data_file = tmp_path / "selfplay_speed.json"
    args = [
        "bench",
        "selfplay",
        "--rounds",
        "1",
        "--random-moves",
        "200",
        "--batches",
        "1",
        "--timesteps",
        "256",
        "--n-envs",
        "4",
        "--games",
        "tictactoe_v3",
        "connect_four_v3",
        "--json",
        str(data_file),
        "--",
        "--self-share",
        "0.5",
    ]
    done = subprocess.run([sys.executable, "-m", "torchrl_mask", *args], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    assert "`torchrl-mask bench selfplay --rounds 1" in done.stdout and "-- --self-share 0.5`" in done.stdout
    refused = subprocess.run(
        [sys.executable, "-m", "torchrl_mask", *args[:2], "--n-envs", "0"], capture_output=True, text=True, timeout=300
    )
    assert refused.returncode == 2 and "--n-envs must be at least 1" in refused.stderr, refused.stderr
    data = charts.load(data_file)  # the fields the chart reads, all there
    # the chart names the command that measured (where its figures went is no part of it)
    assert data["command"] == done.stdout.split("`")[1].replace(f" --json {data_file}", "")
    assert "--json" not in data["command"] and data["date"].endswith(" UTC")
    speed, ratio = r"([\d,]+)", r"([\d.]+)x \(([\d.]+)x-([\d.]+)x\)"
    three = rf" \| {speed} \| {ratio}" * 3  # collection, whole run, collection through PettingZoo's env
    for game in ("tictactoe_v3", "connect_four_v3"):
        row = re.search(rf"^\| {game} \| {speed}{three} \|$", done.stdout, re.M)
        assert row is not None, done.stdout
        base, *cells = (float(value.replace(",", "")) for value in row.groups())
        # collection, the whole run, collection through PettingZoo's env: a speed and its ratio each
        for speed_value, median, low, high in (cells[0:4], cells[4:8], cells[8:12]):
            assert speed_value > 0
            assert low == median == high  # one round: one ratio
            assert median == pytest.approx(speed_value / base, abs=0.01 + 0.5 * speed_value / base**2)
        run = cells[4]
        # where the time goes, microseconds a move: the parts fit in their whole (each printed to the microsecond)
        costs = re.search(rf"^\| {game} \|((?: [\d,-]+ \|){{10}})$", done.stdout, re.M)
        assert costs is not None, done.stdout
        random_us, collect_us, policy, steps, run_us, *phases = (
            float(value.replace(",", "")) for value in costs.group(1).strip(" |").split(" | ")
        )
        # each speed is printed to the move a second: 1e6 / speed is known to 0.5e6 / speed**2 (more on a slow run)
        assert random_us == pytest.approx(1e6 / base, abs=1 + 0.5e6 / base**2)
        assert run_us == pytest.approx(1e6 / run, abs=1 + 0.5e6 / run**2)
        assert policy > 0 and steps > 0 and policy + steps <= collect_us + 1
        collecting, updating, measuring, final, other = phases
        assert min(collecting, updating, measuring, final) > 0 and other > -3
        assert sum(phases) == pytest.approx(run_us, abs=3)
        # the chart's file holds the printed figures: speeds to the move a second, ratios to two decimals
        (row_data,) = [row for row in data["games"] if row["game"] == game]
        assert row_data["random_play_moves_s"] == base
        for name, (speed_value, median, low, high) in zip(
            ("collection", "whole_run", "pettingzoo_collection"), (cells[0:4], cells[4:8], cells[8:12]), strict=True
        ):
            assert row_data[f"{name}_moves_s"] == speed_value
            assert (row_data[f"{name}_ratio"], row_data[f"{name}_ratio_min"], row_data[f"{name}_ratio_max"]) == (
                median,
                low,
                high,
            )
        us = row_data["us_per_move"]
        assert [us[key] for key in ("random_play", "collection", "policy", "games_steps", "whole_run")] == [
            random_us,
            collect_us,
            policy,
            steps,
            run_us,
        ]
        assert [us[phase] for phase in ("collecting", "updating", "measuring", "final", "other")] == phases
    charts.draw_selfplay_speed(data, tmp_path / "selfplay_speed.png")
    assert (tmp_path / "selfplay_speed.png").stat().st_size > 0


def test_bench_memory_trains_both_models_for_the_same_time_and_reports_their_chips_and_illegal_moves():
    # `torchrl-mask bench memory` as a user runs it, tiny: each model trains for one rollout's worth of seconds.
    args = ["bench", "memory", "--minutes", "0.01", "--seeds", "0", "--games", "4"]
    done = subprocess.run([sys.executable, "-m", "torchrl_mask", *args], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    chips = r"[+-]\d\.\d{3} ± \d\.\d{3}"
    for model in ("feed-forward", "LSTM"):
        row = re.search(
            rf"^\| 0 \| {model} \| ([\d,]+) \| {chips} \| {chips} \| ({chips}) \| (\d+) \|$", done.stdout, re.M
        )
        assert row is not None, done.stdout
        assert int(row.group(1).replace(",", "")) >= 512 and row.group(3) == "0"  # a whole rollout; no illegal move
    head_to_head = re.findall(rf"^\| 0 \| \S+ \| [\d,]+ \| {chips} \| {chips} \| ([+-]\d\.\d{{3}})", done.stdout, re.M)
    assert float(head_to_head[0]) == -float(head_to_head[1])  # one model's chips are the other's loss
    refused = subprocess.run(
        [sys.executable, "-m", "torchrl_mask", "bench", "memory", "--game", "tictactoe_v3"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert refused.returncode == 2 and "this benchmark counts chips" in refused.stderr


def test_bench_selfplay_measures_the_run_that_train_would_make_of_the_options_after_the_double_dash():
    from torchrl_mask.app.hyperparams import UsageError
    from torchrl_mask.bench.selfplay import _parse, train_config

    args = _parse(["--games", "connect_four_v3", "--rounds", "2", "--", "--self-share", "0.25", "--threads", "1"])
    assert (args.rounds, args.train_args) == (2, ["--self-share", "0.25", "--threads", "1"])
    config = train_config("connect_four_v3", 3, args.train_args)
    selfplay = config.selfplay
    assert (selfplay.self_share, config.threads, config.seed, selfplay.pool_size) == (0.25, 1, 3, 4)  # its league kept
    assert selfplay.fixed_share == 0.5  # the game's, not given
    assert config.hyperparams["policy_kwargs"]["features_extractor_class"] == "BoardCNN"  # the game's defaults
    assert _parse(["--rounds", "1"]).train_args == []
    with pytest.raises(UsageError, match="not a share of games"):
        _parse(["--", "--self-share", "1.5"])


def test_bench_selfplay_says_not_run_for_the_whole_runs_it_skipped():
    # --no-run measures collection alone: its whole-run cells say so instead of printing nan.
    from torchrl_mask.bench.selfplay import GameSpeeds, render

    speeds = GameSpeeds(
        "tictactoe_v3",
        random_play=[100.0],
        collection=[50.0],
        run=[float("nan")],
        pettingzoo=[20.0],
        costs=[{"policy": 4000.0, "game": 9000.0}],
    )
    report = render([speeds], "torchrl-mask bench selfplay --no-run", 1).splitlines()
    assert "| tictactoe_v3 | 100 | 50 | 0.50x (0.50x-0.50x) | not run | not run | 20 | 0.20x (0.20x-0.20x) |" in report
    assert report[-1] == "| tictactoe_v3 | 10,000 | 20,000 | 4,000 | 9,000 | not run" + " | not run" * 5 + " |"


@pytest.mark.parametrize(
    ("options", "says"),
    [
        (["--no-run"], "leave out --no-run, or --json"),
        (["--json", "no-such-folder/selfplay_speed.json"], "no folder no-such-folder"),
    ],
)
def test_bench_selfplay_refuses_a_json_it_could_not_write_before_measuring(
    options: list[str], says: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    # the chart's file needs the whole runs, and a folder to go in: refused in one line, before anything is timed
    from torchrl_mask.bench.selfplay import _parse

    monkeypatch.chdir(tmp_path)
    json_options = [] if "--json" in options else ["--json", "selfplay_speed.json"]
    with pytest.raises(SystemExit) as exit_info:
        _parse(["--games", "tictactoe_v3", *json_options, *options])
    assert exit_info.value.code == 2
    assert says in capsys.readouterr().err
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize(("game", "says"), [("foo_v1", "is not a PettingZoo classic game"), ("rps_v2", "action mask")])
def test_bench_selfplay_refuses_a_game_it_cannot_play_in_one_line(game: str, says: str) -> None:
    refused = subprocess.run(
        [sys.executable, "-m", "torchrl_mask", "bench", "selfplay", "--games", game, "--rounds", "1"],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert refused.returncode == 2, refused.stderr
    assert refused.stderr.count("\n") == 1 and says in refused.stderr and "Traceback" not in refused.stderr
