"""``torchrl-mask train --env pettingzoo:<game>`` driven as a user drives it, in a subprocess: every masked classic
game trains and keeps its files, a crash after training began keeps the model (faults injected by real parts:
:mod:`selfplay_faults`), the same seed gives the same evaluation, and ``-i``/``--pool-size`` input is checked.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import cli_runs
import numpy as np
import pytest
from cli_runs import one_line

pytest.importorskip("pettingzoo")
from selfplay_faults import FaultyPolicy

from torchrl_mask import MaskablePPO, MaskableRecurrentPPO, SeatEnv
from torchrl_mask.app.cli import build_parser
from torchrl_mask.app.config import SelfPlay, TrainConfig
from torchrl_mask.app.game_collector import run_symmetries
from torchrl_mask.app.hyperparams import UsageError
from torchrl_mask.app.train_args import config_from_args

pytestmark = pytest.mark.slow  # every test starts a CLI subprocess

REPO = Path(__file__).resolve().parents[1]
TESTS = Path(__file__).resolve().parent
SMALL = ["--hyperparams", "n_envs=2", "n_steps=64", "batch_size=64", "n_epochs=2", "policy_kwargs=dict(net_arch=[32])"]
QUIET = ["--no-progress", "--verbose", "0"]


def run_cli(*args: str, stage: str = "") -> subprocess.CompletedProcess[str]:
    """``torchrl-mask train ARGS`` in a subprocess that can import :mod:`selfplay_faults`."""
    return cli_runs.run_cli("train", *args, env={**os.environ, "FAULT_STAGE": stage})


GAMES = {  # game: (moves trained, evaluation games per opponent)
    "tictactoe_v3": (512, 4),
    "connect_four_v3": (512, 4),
    "leduc_holdem_v4": (512, 4),
    "texas_holdem_v4": (512, 4),
    "texas_holdem_no_limit_v6": (512, 4),
    "chess_v6": (256, 2),
    "go_v5": (256, 2),
    "hanabi_v5": (512, 2),
}


@pytest.mark.parametrize("game", sorted(GAMES))
def test_every_masked_classic_game_trains_keeps_its_files_and_plays_no_illegal_move(game: str, tmp_path: Path) -> None:
    moves, games = GAMES[game]
    out = tmp_path / "run"
    proc = run_cli(
        "--env",
        f"pettingzoo:{game}",
        "-n",
        str(moves),
        *SMALL,
        "--eval-episodes",
        str(games),
        "--out",
        str(out),
        *QUIET,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert {"model.zip", "evaluation.json", "win_rates.csv", "learning_curve.png"} <= {p.name for p in out.iterdir()}
    assert MaskablePPO.load(out / "model.zip", device="cpu").num_timesteps >= moves
    evaluation = json.loads((out / "evaluation.json").read_text())
    played = [value for key, value in evaluation.items() if key.startswith("vs_") and "skipped" not in value]
    assert played and all(result["games"] == games for result in played), evaluation
    assert evaluation["illegal_moves"] == 0


def test_a_game_without_masked_observations_is_one_line_exit_2_and_writes_nothing(tmp_path: Path) -> None:
    out = tmp_path / "run"
    proc = run_cli("--env", "pettingzoo:rps_v2", "--out", str(out), *QUIET)
    assert proc.returncode == 2
    assert "rps_v2" in one_line(proc) and "masked Dict observations" in proc.stderr
    assert not out.exists()


def _faulty_model(path: Path) -> Path:
    model = MaskablePPO(
        FaultyPolicy, SeatEnv("tictactoe_v3"), n_steps=64, batch_size=64, seed=0, policy_kwargs={"net_arch": [32]}
    )
    model.save(path)
    return path


def _assert_model_kept(
    proc: subprocess.CompletedProcess[str], out: Path, stage_text: str, algo: type = MaskablePPO
) -> None:
    assert proc.returncode == 1, proc.stderr[-3000:]
    line = one_line(proc)
    assert stage_text in line and "InjectedFault" in line and str(out / "model.zip") in line, line
    algo.load(out / "model.zip", device="cpu")
    assert "InjectedFault" in (out / "crash.txt").read_text()


@pytest.mark.parametrize(
    ("stage", "stage_text"),
    [("training", "training (at move"), ("callback", "training (at move"), ("evaluation", "the final evaluation")],
)
def test_self_play_keeps_the_model_when_a_stage_raises(stage: str, stage_text: str, tmp_path: Path) -> None:
    agent, out = _faulty_model(tmp_path / "faulty.zip"), tmp_path / "run"
    proc = run_cli(
        "--env",
        "pettingzoo:tictactoe_v3",
        "-i",
        str(agent),
        "-n",
        "256",
        *SMALL[:5],
        "--eval-episodes",
        "2",
        "--out",
        str(out),
        *QUIET,
        stage=stage,
    )
    _assert_model_kept(proc, out, stage_text)
    if stage == "callback":
        assert "_on_rollout_end" in (out / "crash.txt").read_text()


def test_self_play_keeps_the_model_when_writing_the_plot_raises(tmp_path: Path) -> None:
    # No option makes matplotlib fail, so the child replaces the plot function before running the CLI's main.
    out = tmp_path / "run"
    code = (
        "import sys, selfplay_faults as faults, torchrl_mask.app.selfplay_files as job\n"
        "def plot(*args, **kwargs): raise faults.InjectedFault('injected into the plot')\n"
        "job.plot_win_rates = plot\n"
        "from torchrl_mask.app.cli import main\n"
        "sys.exit(main(sys.argv[1:]))\n"
    )
    path = os.pathsep.join(filter(None, [str(TESTS), os.environ.get("PYTHONPATH")]))
    command = [
        sys.executable,
        "-c",
        code,
        "train",
        "--env",
        "pettingzoo:tictactoe_v3",
        "-n",
        "128",
        *SMALL,
        "--eval-episodes",
        "2",
        "--out",
        str(out),
        *QUIET,
    ]
    proc = subprocess.run(command, cwd=REPO, env={**os.environ, "PYTHONPATH": path}, capture_output=True, text=True)
    _assert_model_kept(proc, out, "writing win_rates.csv, evaluation.json or learning_curve.png")
    assert (out / "evaluation.json").exists()


@pytest.mark.parametrize(
    ("algo", "stage", "extra", "stage_text"),
    [
        ("ppo_mask", "training", [], "training (at step"),
        ("ppo_mask", "callback", ["--eval-freq", "64"], "training (at step"),
        ("ppo_lstm_mask", "training", [], "training (at step"),
    ],
)
def test_gymnasium_paths_keep_the_model_when_a_stage_raises(algo, stage, extra, stage_text, tmp_path: Path) -> None:
    out = tmp_path / "run"
    proc = run_cli(
        "--env",
        "selfplay_faults:FaultyMasked-v0",
        "--algo",
        algo,
        "-n",
        "512",
        *extra,
        "--hyperparams",
        "n_envs=1",
        "n_steps=64",
        "batch_size=32",
        "--eval-episodes",
        "2",
        "--out",
        str(out),
        *QUIET,
        stage=stage,
    )
    _assert_model_kept(proc, out, stage_text, MaskableRecurrentPPO if algo == "ppo_lstm_mask" else MaskablePPO)


# a league with both shares: itself 30 % of the games, the fixed players half of the rest
SHARED_LEAGUE = [
    "--pool-size",
    "1",
    "--league-players",
    "perfect",
    "random",
    "--self-share",
    "0.3",
    "--fixed-share",
    "0.5",
]


@pytest.mark.parametrize(
    ("collector", "league"),
    [
        ("sync", []),
        ("multisync", SHARED_LEAGUE),
    ],
)
def test_the_same_seed_gives_the_same_evaluation_json(collector: str, league: list[str], tmp_path: Path) -> None:
    records = []
    for run in ("a", "b"):
        out = tmp_path / run
        proc = run_cli(
            "--env",
            "pettingzoo:tictactoe_v3",
            "-n",
            "256",
            *SMALL,
            "--collector",
            collector,
            "--seed",
            "7",
            *league,
            "--eval-episodes",
            "6",
            "--out",
            str(out),
            *QUIET,
        )
        assert proc.returncode == 0, proc.stderr[-3000:]
        workers = r" in [12] worker process(es)?" if collector == "multisync" else ""  # one per core, at most
        assert re.search(rf"moves: 2 games side by side{workers}, seed 7", proc.stdout), proc.stdout
        assert ("itself 30% of the games (every seat learning)" in proc.stdout) == bool(league), proc.stdout
        # the fixed share is of the games not against itself: 0.5 of 70 %, and the three shares add up to all
        assert ("the fixed players 35% of the games" in proc.stdout) == bool(league), proc.stdout
        records.append((out / "evaluation.json").read_text().replace(str(out), "<out>"))
    assert records[0] == records[1]
    if league:  # the league is in the record, as given, with the learner's final score against each opponent
        record = json.loads(records[0])
        assert record["config"]["league_players"] == ["perfect", "random"] and record["config"]["self_share"] == 0.3
        scores = record["league_scores"]
        assert list(scores) == ["snapshot_0", "perfect", "random"] and all(0 <= s <= 1 for s in scores.values())
        assert scores["perfect"] < 0.5  # nobody beats the perfect player: the learner's score against it fell
        header = (tmp_path / "a" / "win_rates.csv").read_text().splitlines()[0].split(",")
        assert header[:3] == ["timestep", "seconds", "snapshot"]  # which points measured a snapshot of the pool


def test_continuing_with_hyperparams_applies_them_and_records_what_was_used(tmp_path: Path) -> None:
    agent = tmp_path / "agent.zip"
    MaskablePPO(
        "MlpPolicy",
        SeatEnv("tictactoe_v3"),
        learning_rate=1e-3,
        ent_coef=0.0,
        n_steps=64,
        batch_size=64,
        policy_kwargs={"net_arch": [32]},
    ).save(agent)
    out = tmp_path / "run"
    proc = run_cli(
        "--env",
        "pettingzoo:tictactoe_v3",
        "-i",
        str(agent),
        "-n",
        "128",
        "--pool-size",
        "2",
        "--hyperparams",
        "n_envs=2",
        "learning_rate=0.0005",
        "ent_coef=0.02",
        "--eval-episodes",
        "2",
        "--out",
        str(out),
        *QUIET,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "Building 2 snapshots of the policy" in proc.stdout
    model = MaskablePPO.load(out / "model.zip", device="cpu")
    assert (model.learning_rate, model.ent_coef) == (0.0005, 0.02)
    used = json.loads((out / "evaluation.json").read_text())["used"]
    assert (used["learning_rate"], used["ent_coef"]) == (0.0005, 0.02)


def test_continuing_from_a_file_that_is_no_zip_is_one_line_exit_2(tmp_path: Path) -> None:
    agent, out = tmp_path / "model.zip", tmp_path / "run"
    agent.write_text("not a model")
    proc = run_cli("--env", "pettingzoo:tictactoe_v3", "-i", str(agent), "--out", str(out), *QUIET)
    assert proc.returncode == 2
    assert "cannot continue from it" in one_line(proc)
    assert not out.exists()


def test_continuing_from_another_games_model_is_one_line_exit_2(tmp_path: Path) -> None:
    agent, out = tmp_path / "tictactoe.zip", tmp_path / "run"
    MaskablePPO("MlpPolicy", SeatEnv("tictactoe_v3"), n_steps=64, batch_size=64).save(agent)
    proc = run_cli("--env", "pettingzoo:connect_four_v3", "-i", str(agent), "--out", str(out), *QUIET)
    assert proc.returncode == 2
    assert "cannot continue from it" in one_line(proc) and "spaces" in proc.stderr.lower()
    assert not out.exists()


def test_continuing_from_a_missing_file_is_one_line_exit_2(tmp_path: Path) -> None:
    out = tmp_path / "run"
    proc = run_cli("--env", "pettingzoo:tictactoe_v3", "-i", str(tmp_path / "none.zip"), "--out", str(out), *QUIET)
    assert proc.returncode == 2
    assert "no such file" in one_line(proc)
    assert not out.exists()


def test_a_fixed_share_that_is_no_share_is_one_line_exit_2_naming_it(tmp_path: Path) -> None:
    out = tmp_path / "run"
    proc = run_cli("--env", "pettingzoo:connect_four_v3", "--fixed-share", "1.5", "--out", str(out), *QUIET)
    assert proc.returncode == 2
    assert "--fixed-share 1.5" in one_line(proc) and "from 0 to 1" in one_line(proc)
    assert not out.exists()


@pytest.mark.parametrize(
    ("given", "says"),
    [
        (["--self-share", "1"], "'1' is not a share of games in [0, 1)"),
        (["--self-share", "half"], "'half' is not a share of games in [0, 1)"),
        (["--self-share", "0.5", "--pool-size", "0"], "--self-share 0.5 without a league"),
    ],
    ids=["one", "no-number", "no-league"],
)
def test_a_self_share_that_is_no_share_or_has_no_league_is_one_line_exit_2_naming_it(
    tmp_path: Path, given: list[str], says: str
) -> None:
    out = tmp_path / "run"
    proc = run_cli("--env", "pettingzoo:connect_four_v3", *given, "--out", str(out), *QUIET)
    assert proc.returncode == 2
    assert says in one_line(proc)
    assert not out.exists()


@pytest.mark.parametrize(
    ("env", "given", "why"),
    [
        ("pettingzoo:leduc_holdem_v4", [], "leduc_holdem_v4 has none listed"),
        ("pettingzoo:connect_four_v3", ["--algo", "ppo_lstm_mask"], "an LSTM's states follow the moves played"),
    ],
    ids=["no-symmetries-listed", "lstm"],
)
def test_symmetries_asked_for_where_none_apply_are_one_line_exit_2_saying_why(
    tmp_path: Path, env: str, given: list[str], why: str
) -> None:
    out = tmp_path / "run"
    proc = run_cli("--env", env, "--symmetries", *given, "--out", str(out), *QUIET)
    assert proc.returncode == 2
    assert "--symmetries:" in one_line(proc) and why in one_line(proc)
    assert not out.exists()


@pytest.mark.parametrize(
    ("env", "given", "why"),
    [
        ("pettingzoo:connect_four_v3", ["--no-symmetries"], "but --no-symmetries"),
        ("pettingzoo:leduc_holdem_v4", [], "but leduc_holdem_v4 has no symmetries"),
        ("pettingzoo:tictactoe_v3", ["--algo", "ppo_lstm_mask"], "but --algo ppo_lstm_mask trains on no images"),
    ],
    ids=["no-symmetries", "none-listed", "lstm"],
)
@pytest.mark.parametrize("images", ["random", "all"])
def test_images_without_symmetries_are_one_line_exit_2_saying_why(
    tmp_path: Path, env: str, given: list[str], why: str, images: str
) -> None:
    out = tmp_path / "run"
    proc = run_cli("--env", env, "--images", images, *given, "--out", str(out), *QUIET)
    assert proc.returncode == 2
    assert f"--images {images} says how a move's images are trained on" in one_line(proc) and why in one_line(proc)
    assert not out.exists()


def _config(*given: str) -> TrainConfig:
    return config_from_args(build_parser().parse_args(["train", *given]))


def test_which_symmetries_a_run_trains_on() -> None:
    def names(*given: str) -> list[str]:
        config = _config(*given)
        return [symmetry.name for symmetry in run_symmetries(config, config.kind.name)]

    assert names("--env", "pettingzoo:connect_four_v3") == ["mirror"]  # the game's, by default
    assert len(names("--env", "pettingzoo:tictactoe_v3")) == 7
    assert names("--env", "pettingzoo:connect_four_v3", "--no-symmetries") == []
    assert names("--env", "pettingzoo:connect_four_v3", "--algo", "ppo_lstm_mask") == []
    assert names("--env", "pettingzoo:leduc_holdem_v4") == []

    def images(*given: str) -> str:
        selfplay = _config(*given).selfplay
        assert selfplay is not None
        return selfplay.images

    assert images("--env", "pettingzoo:tictactoe_v3") == "random"  # the game's record
    assert images("--env", "pettingzoo:connect_four_v3") == "all"
    assert _config("--env", "Taxi-v4").selfplay is None  # a gymnasium env: no self-play at all
    assert images("--env", "pettingzoo:tictactoe_v3", "--images", "all") == "all"  # as given
    assert images("--env", "pettingzoo:connect_four_v3", "--images", "random") == "random"
    assert images("--env", "pettingzoo:tictactoe_v3", "--no-symmetries") == "all"  # no images, nothing to draw
    assert images("--env", "pettingzoo:tictactoe_v3", "--algo", "ppo_lstm_mask") == "all"


def test_a_pool_size_above_the_bound_is_one_line_exit_2_naming_it(tmp_path: Path) -> None:
    out = tmp_path / "run"
    proc = run_cli("--env", "pettingzoo:tictactoe_v3", "--pool-size", "1000000", "--out", str(out), *QUIET)
    assert proc.returncode == 2
    line = one_line(proc)
    assert "--pool-size 1000000 is above 64" in line and "copy of the policy's weights" in line
    assert not out.exists()


@pytest.mark.parametrize(
    ("given", "league"),
    [
        ([], (4, ("perfect", "heuristic", "random"))),  # tic-tac-toe's default: a league
        (["--pool-size", "0"], (0, ())),  # pure self-play, asked for
        (["--league-players", "perfect"], (0, ("perfect",))),  # one option given: the other is none
        (["--pool-size", "2"], (2, ())),
    ],
)
def test_the_board_games_train_against_their_league_unless_told_otherwise(given: list[str], league: tuple) -> None:
    def selfplay(*given: str) -> SelfPlay:
        played = _config(*given).selfplay
        assert played is not None
        return played

    config = selfplay("--env", "pettingzoo:tictactoe_v3", *given)
    assert (config.pool_size, config.league_players) == league
    assert config.fixed_share is None  # one draw over all the opponents, unless --fixed-share
    four = selfplay("--env", "pettingzoo:connect_four_v3")
    assert (four.pool_size, four.league_players) == (4, ("heuristic", "negamax_2", "random"))
    assert (four.fixed_share, four.self_share) == (0.5, 0.5)  # Connect Four's own shares
    drawn = selfplay("--env", "pettingzoo:connect_four_v3", "--fixed-share", "none", "--self-share", "0")
    assert (drawn.fixed_share, drawn.self_share) == (None, 0.0)  # one draw over all the opponents, asked for
    with pytest.raises(UsageError, match=r"'half' is not a share of games.*or none for one draw"):
        build_parser().parse_args(["train", "--env", "pettingzoo:connect_four_v3", "--fixed-share", "half"])
    shares = selfplay("--env", "pettingzoo:connect_four_v3", "--fixed-share", "0.2", "--self-share", "0.25")
    assert (shares.fixed_share, shares.self_share) == (0.2, 0.25)  # as given
    assert config.self_share == 0.0  # tic-tac-toe: no games against itself, unless --self-share
    alone = selfplay("--env", "pettingzoo:connect_four_v3", "--pool-size", "0")
    assert alone.self_share == 0.0 and alone.fixed_share is None  # no league: no share to give
    other = selfplay("--env", "pettingzoo:leduc_holdem_v4")
    assert (other.pool_size, other.league_players) == (0, ())  # a card game: pure self-play by default


def test_connect_four_runs_on_two_threads_unless_told_otherwise_or_its_envs_step_in_workers() -> None:
    def threads(*given: str) -> int:
        return _config(*given).threads

    cores = len(os.sched_getaffinity(0))
    assert threads("--env", "pettingzoo:connect_four_v3") == min(2, cores)  # at most the cores it may use
    assert threads("--env", "pettingzoo:connect_four_v3", "--collector", "sync") == min(2, cores)
    assert threads("--env", "pettingzoo:connect_four_v3", "--threads", "1") == 1  # as given
    assert threads("--env", "pettingzoo:connect_four_v3", "--collector", "multisync") == 1  # the workers' cores
    assert threads("--env", "pettingzoo:tictactoe_v3") == threads("--env", "Taxi-v4") == 1  # not listed


def test_the_curves_top_axis_gives_the_moves_at_each_time_and_labels_them_without_an_offset() -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from torchrl_mask.app.selfplay_files import moves_at_seconds, moves_axis

    curve = [
        {"timestep": 477, "seconds": 0.25},
        {"timestep": 600_000, "seconds": 500.0},
        {"timestep": 1_351_840, "seconds": 1310.0},
    ]
    fig, ax = plt.subplots()
    try:
        ax.plot([point["seconds"] for point in curve], [0.0, 0.5, 1.0])
        top = moves_axis(ax, curve)
        fig.canvas.draw()
        to_moves, to_seconds = moves_at_seconds(curve)
        assert to_moves(500.0) == pytest.approx(600_000) and to_seconds(1_351_840) == pytest.approx(1310.0)
        # past the last point the moves go on at the run's rate instead of piling onto 1,351,840
        assert to_moves(1400.0) > to_moves(1350.0) > 1_351_840
        positions = [to_seconds(tick) for tick in top.get_xticks()]
        assert len(set(np.round(positions, 6))) == len(positions)  # no two ticks in one place
        labels = [label.get_text() for label in top.get_xticklabels() if label.get_text()]
        assert "1.2M" in labels and "400k" in labels and not top.xaxis.get_offset_text().get_text()
        assert moves_axis(ax, curve[:1]) is None
    finally:
        plt.close(fig)


def test_the_solver_as_a_league_player_is_refused_in_one_line_where_its_package_is_missing(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Where bitbully is not installed the ladder leaves the solver out and says why; train says the same, in one line
    # before anything is built (it was a KeyError in the collector).
    from torchrl_mask.games import ladder as ladders

    monkeypatch.setattr(ladders, "solver_available", lambda: False)
    ladders.ladder.cache_clear()
    try:
        with pytest.raises(UsageError, match=r"--league-players solver: the perfect Connect Four player needs"):
            _config("--env", "pettingzoo:connect_four_v3", "--league-players", "solver")
    finally:
        ladders.ladder.cache_clear()


def test_openings_come_from_the_option_or_a_file_and_reach_every_game(tmp_path: Path) -> None:
    from stable_baselines3.common.vec_env import DummyVecEnv

    from torchrl_mask.app.game_collector import build_collector

    four = _config("--env", "pettingzoo:connect_four_v3").selfplay
    assert four is not None and four.openings == 6  # the record's
    none = _config("--env", "pettingzoo:connect_four_v3", "--openings", "0").selfplay
    assert none is not None and none.openings == 0  # the option over the record
    conf = tmp_path / "c4.yml"
    conf.write_text("pettingzoo:tictactoe_v3:\n  n_timesteps: 2048\n  n_envs: 4\n  n_steps: 8\n  openings: 3\n")
    from_file = _config("--env", "pettingzoo:tictactoe_v3", "--conf-file", str(conf))
    assert from_file.selfplay is not None and from_file.selfplay.openings == 3
    config = _config("--env", "pettingzoo:tictactoe_v3", "--conf-file", str(conf), "--openings", "4")
    assert config.selfplay is not None and config.selfplay.openings == 4  # the option over the file
    assert config.record(tmp_path)["openings"] == 4  # evaluation.json records it
    model = MaskablePPO("MlpPolicy", DummyVecEnv([lambda: SeatEnv("tictactoe_v3")]), n_steps=8)
    collector = build_collector(config, model, "tictactoe_v3")
    try:
        assert collector.env.openings == 4 and collector.env.batch_size == (4,)
    finally:
        collector.shutdown()


@pytest.mark.parametrize(
    ("env", "openings", "says"),
    [
        ("pettingzoo:leduc_holdem_v4", "2", "--openings 2: random openings are for connect_four_v3 and tictactoe_v3"),
        (
            "pettingzoo:tictactoe_v3",
            "5",
            "--openings 5: give 0 to 4 moves; past 4, a random move can end a game of tictactoe_v3",
        ),
        ("Taxi-v4", "2", "--openings is for a pettingzoo:<game>'s self-play"),
    ],
    ids=["no-boards", "too-long", "gymnasium"],
)
def test_openings_that_do_not_fit_the_game_are_refused_naming_the_fix(env: str, openings: str, says: str) -> None:
    with pytest.raises(UsageError, match=re.escape(says)):
        _config("--env", env, "--openings", openings)
