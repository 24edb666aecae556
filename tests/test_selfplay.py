"""Self-play on PettingZoo's classic games: per-seat trajectories, their GAE, opponents, and learning.

The games are PettingZoo's own tic-tac-toe and Connect Four; the collectors are TorchRL's. The scripted game's
per-seat returns and advantages are worked out by hand; random games are checked against an independent numpy
computation that walks the moves in time order.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import warnings
from pathlib import Path

import numpy as np
import pytest
import torch
from tensordict import TensorDictBase
from torchrl.collectors import Collector, MultiSyncCollector
from torchrl.envs import SerialEnv

pytest.importorskip("pettingzoo")

from torchrl_mask import MaskablePPO, MaskableRolloutBuffer, SeatEnv, SelfPlayPolicy, TurnBasedEnv
from torchrl_mask.app.cli import main
from torchrl_mask.app.config import SelfPlay, TrainConfig
from torchrl_mask.app.game_collector import worker_count
from torchrl_mask.app.game_task import GameTask
from torchrl_mask.app.run_folder import LOCK
from torchrl_mask.games.players import one_ply_heuristic, random_legal
from torchrl_mask.games.seat_split import pack_rows, seat_transitions

# Moves 0-4: X wins on the top row (O's loss arrives on X's move); 5-13: a draw; 14-16: a game the rollout cuts
# after X's move.
SCRIPT = [0, 3, 1, 4, 2, 0, 1, 2, 4, 3, 5, 7, 6, 8, 4, 0, 8]
LAST_VALUE = 0.7  # V of the position after the script, where O (seat 1) is to move


def _scripted_batch(values: list[float]) -> TensorDictBase:
    """The script played on PettingZoo's tic-tac-toe, with ``values[t]`` as the policy's value of move ``t``."""
    moves = iter(range(len(SCRIPT)))

    def policy(td: TensorDictBase) -> TensorDictBase:
        t = next(moves)
        td.update(
            {
                "action": torch.tensor(SCRIPT[t]),
                "state_value": torch.tensor([values[t]]),
                "action_log_prob": torch.tensor(0.0),
            }
        )
        return td

    env = TurnBasedEnv("tictactoe_v3")
    return env.rollout(len(SCRIPT), policy, break_when_any_done=False, auto_cast_to_device=False).unsqueeze(0)


def _buffer(rows: TensorDictBase, gamma: float, gae_lambda: float, game: str = "tictactoe_v3") -> MaskableRolloutBuffer:
    env = SeatEnv(game)
    buffer = MaskableRolloutBuffer(
        rows.shape[1], env.observation_space, env.action_space, gamma=gamma, gae_lambda=gae_lambda, n_envs=rows.shape[0]
    )
    buffer.extend(rows, ["observation"])
    return buffer


def test_scripted_game_per_seat_rewards_dones_and_monte_carlo_returns_by_hand() -> None:
    values = [t / 10 for t in range(len(SCRIPT))]
    rows = pack_rows(seat_transitions(_scripted_batch(values), torch.tensor([LAST_VALUE])), 1)
    # Seat 0 (X): moves 0, 2, 4 (wins), the draw's 5, 7, 9, 11, 13, then 14; its move 16 waits for O's reply.
    # Seat 1 (O): moves 1, 3 (loses on X's move 4), the draw's 6, 8, 10, 12, then 15 (cut, bootstrapped).
    times = [0, 2, 4, 5, 7, 9, 11, 13, 14, 1, 3, 6, 8, 10, 12, 15]
    assert rows["observation"].shape == (1, 16, 3, 3, 2)
    assert rows["action"][0].tolist() == [SCRIPT[t] for t in times]
    assert rows["state_value"][0, :, 0].tolist() == pytest.approx([values[t] for t in times])
    reward = [0, 0, 1, 0, 0, 0, 0, 0, 0, 0, -1, 0, 0, 0, 0, 0]
    done = [0, 0, 1, 0, 0, 0, 0, 1, 1, 0, 1, 0, 0, 0, 1, 1]
    terminated = [0, 0, 1, 0, 0, 0, 0, 1, 0, 0, 1, 0, 0, 0, 1, 0]
    assert rows["next", "reward"][0, :, 0].tolist() == reward
    assert rows["next", "done"][0, :, 0].tolist() == [bool(d) for d in done]
    assert rows["next", "terminated"][0, :, 0].tolist() == [bool(d) for d in terminated]
    # gamma = lambda = 1: each return is the seat's own result, or the bootstrap where the rollout cut it.
    buffer = _buffer(rows, gamma=1.0, gae_lambda=1.0)
    returns = [1, 1, 1, 0, 0, 0, 0, 0, values[16], -1, -1, 0, 0, 0, 0, LAST_VALUE]
    assert buffer.returns[:, 0].tolist() == pytest.approx(returns)
    assert buffer.advantages[:, 0].tolist() == pytest.approx(
        [r - values[t] for r, t in zip(returns, times, strict=True)]
    )


def test_scripted_game_discounted_advantages_by_hand() -> None:
    values = [0.5] * len(SCRIPT)
    rows = pack_rows(seat_transitions(_scripted_batch(values), torch.tensor([LAST_VALUE])), 1)
    gamma, lam = 0.9, 0.5
    advantages = _buffer(rows, gamma, lam).advantages[:, 0]
    # Seat 1's first game: move 3 loses (-1, terminal), move 1 leads to move 3.
    a3 = -1 - 0.5
    a1 = (0 + gamma * 0.5 - 0.5) + gamma * lam * a3
    assert advantages[9:11].tolist() == pytest.approx([a1, a3])
    # Seat 0's win: move 4 wins (+1, terminal); 2 -> 4; 0 -> 2.
    a4 = 1 - 0.5
    a2 = (gamma * 0.5 - 0.5) + gamma * lam * a4
    assert advantages[0:3].tolist() == pytest.approx([(gamma * 0.5 - 0.5) + gamma * lam * a2, a2, a4])
    # The draw's last moves are terminal with reward 0; the cut moves are truncated: delta only, bootstrapped.
    assert advantages[7].item() == pytest.approx(-0.5)
    assert advantages[8].item() == pytest.approx(gamma * 0.5 - 0.5)
    assert advantages[15].item() == pytest.approx(gamma * LAST_VALUE - 0.5)


def _numpy_per_seat_gae(batch: TensorDictBase, last: np.ndarray, gamma: float, lam: float) -> dict:
    """Per-seat GAE in float64, walking the moves in time order with one open transition per seat."""
    seat, next_seat = batch["seat"].numpy(), batch["next", "seat"][:, -1].numpy()
    rewards, done = batch["next", "seat_reward"].numpy(), batch["next", "done"][..., 0].numpy()
    values = batch["state_value"][..., 0].numpy().astype(np.float64)
    out = {}
    for env in range(seat.shape[0]):
        trajectories: dict[int, list[list]] = {0: [[]], 1: [[]]}  # per seat: lists of [t, r, v_next, terminal]
        open_move: dict[int, list | None] = {0: None, 1: None}
        for t in range(seat.shape[1]):
            s = int(seat[env, t])
            if open_move[s] is not None:
                open_move[s][2] = values[env, t]
                trajectories[s][-1].append(open_move[s])
            open_move[s] = [t, 0.0, 0.0, False]
            for other in (0, 1):
                if open_move[other] is not None:
                    open_move[other][1] += rewards[env, t, other]
            if done[env, t]:
                for other in (0, 1):
                    if open_move[other] is not None:
                        open_move[other][3] = True
                        trajectories[other][-1].append(open_move[other])
                        trajectories[other].append([])
                    open_move[other] = None
        s = int(next_seat[env])
        if open_move[s] is not None:
            open_move[s][2] = last[env]
            trajectories[s][-1].append(open_move[s])
        for s in (0, 1):
            for trajectory in trajectories[s]:
                advantage = 0.0
                for t, r, v_next, terminal in reversed(trajectory):
                    delta = r + gamma * v_next * (not terminal) - values[env, t]
                    advantage = delta + gamma * lam * advantage * (not terminal)
                    out[env, t] = advantage
    return out


def _random_batch(game: str, n_envs: int, frames: int, seed: int) -> TensorDictBase:
    env = SerialEnv(n_envs, [lambda: TurnBasedEnv(game)] * n_envs)
    env.set_seed(seed)
    rng = torch.Generator().manual_seed(seed)

    def policy(td: TensorDictBase) -> TensorDictBase:
        mask = td["action_mask"].float()
        td.update(
            {
                "action": torch.multinomial(mask, 1, generator=rng)[:, 0],
                "state_value": torch.rand(n_envs, 1, generator=rng),
                "action_log_prob": torch.zeros(n_envs),
            }
        )
        return td

    return env.rollout(frames, policy, break_when_any_done=False)


@pytest.mark.parametrize("game", ["tictactoe_v3", "connect_four_v3"])
def test_per_seat_gae_matches_an_independent_numpy_walk(game: str) -> None:
    batch = _random_batch(game, n_envs=3, frames=40, seed=1)
    last = np.array([0.3, -0.2, 0.9])
    transitions = seat_transitions(batch, torch.tensor(last))
    gamma, lam = 0.95, 0.8
    buffer = _buffer(pack_rows(transitions, 1), gamma, lam, game)
    expected = _numpy_per_seat_gae(batch, last, gamma, lam)
    times = transitions["next", "reward"].shape[0]
    assert times == len(expected)
    # the transitions' (env, t) are read back from their actions' positions in the batch
    keys = _transition_positions(batch, transitions)
    np.testing.assert_allclose(buffer.advantages[:, 0], [expected[key] for key in keys], rtol=1e-5, atol=1e-5)


def _transition_positions(batch: TensorDictBase, transitions: TensorDictBase) -> list[tuple[int, int]]:
    values = batch["state_value"][..., 0]
    return [tuple(int(i) for i in torch.nonzero(values == v)[0]) for v in transitions["state_value"][:, 0]]


def test_a_game_cut_by_a_move_limit_ends_its_seats_trajectories_as_a_finished_game() -> None:
    batch = _scripted_batch([1 + t / 10 for t in range(len(SCRIPT))])  # no value 0: a bootstrap would show
    ended = seat_transitions(batch, torch.tensor([LAST_VALUE]))
    batch["next", "terminated"][0, 4] = False  # X's winning move, recorded as a move limit (hanabi's)
    batch["next", "truncated"][0, 4] = True
    cut = seat_transitions(batch, torch.tensor([LAST_VALUE]))
    assert (ended["next", "state_value"] == 0).sum() >= 2  # both seats' ends of the first game
    for key in (("next", "reward"), ("next", "state_value"), ("next", "done"), ("next", "terminated"), "is_init"):
        assert torch.equal(cut[key], ended[key]), key  # the same transitions: its score stands, no bootstrap


def test_pack_rows_never_leaves_a_minibatch_of_one_row() -> None:
    transitions = seat_transitions(_scripted_batch([0.0] * len(SCRIPT)), torch.zeros(1))  # 16 transitions
    assert pack_rows(transitions, 1, batch_size=5).shape == (1, 15)  # 16 = 3 * 5 + 1 -> 15
    assert pack_rows(transitions, 3).shape == (3, 5)


def test_pack_rows_marks_each_rows_start_without_writing_into_the_transitions() -> None:
    # the self-play reader packs the played moves, then the played moves and their images again: the first
    # packing's row starts must not travel into the second as game starts
    transitions = seat_transitions(_scripted_batch([0.0] * len(SCRIPT)), torch.zeros(1))
    before = transitions["is_init"].clone()
    rows = pack_rows(transitions, 3)
    assert rows["is_init"][:, 0].all()
    assert torch.equal(rows["is_init"].reshape(15, 1), before[:15] | (torch.arange(15) % 5 == 0).unsqueeze(-1))
    assert torch.equal(transitions["is_init"], before) and not before[5:6].all()


def test_heuristic_wins_then_blocks_then_plays_random_legal() -> None:
    rng = np.random.default_rng(0)
    board = np.zeros((3, 3, 2), np.int8)
    board[0, 0, 0] = board[0, 1, 0] = 1  # mine: a win at cell 2
    board[1, 0, 1] = board[1, 1, 1] = 1  # theirs: a win at cell 5
    mask = (board.sum(-1) == 0).reshape(-1)
    assert one_ply_heuristic(board, mask, rng) == 2
    board[0, 1, 0] = 0
    mask = (board.sum(-1) == 0).reshape(-1)
    assert one_ply_heuristic(board, mask, rng) == 5
    connect = np.zeros((6, 7, 2), np.int8)
    connect[5, 3, 1] = connect[4, 3, 1] = connect[3, 3, 1] = 1  # theirs: three up column 3
    assert one_ply_heuristic(connect, np.ones(7, bool), rng) == 3
    assert random_legal(board, np.eye(9, dtype=bool)[7], rng) == 7


def _model(game: str = "tictactoe_v3", **kwargs: object) -> MaskablePPO:
    return MaskablePPO("MlpPolicy", SeatEnv(game), n_steps=32, batch_size=64, n_epochs=2, seed=0, **kwargs)


def test_learn_with_a_collector_trains_every_move_of_both_seats_and_plays_no_illegal_move() -> None:
    model = _model()
    collector = Collector(lambda: TurnBasedEnv("tictactoe_v3"), SelfPlayPolicy(model.policy), frames_per_batch=128)
    model.learn(500, collector=collector)  # an illegal move would raise in TurnBasedEnv.step
    rows = model.rollout_buffer.tensordict
    assert 126 <= model.rollout_buffer.buffer_size <= 128
    assert set(rows["next", "reward"].unique().tolist()) <= {-1.0, 0.0, 1.0}
    assert model.num_timesteps >= 500


def test_snapshot_pool_trains_the_learner_seat_only_and_refreshes_snapshots() -> None:
    model = _model()
    players = SelfPlayPolicy(model.policy, pool_size=2, snapshot_every=1)
    envs = SerialEnv(2, [lambda: TurnBasedEnv("tictactoe_v3", opponents=2)] * 2)
    collector = Collector(envs, players, frames_per_batch=128, total_frames=-1)
    batch = next(iter(collector))
    learner = players.learner_moves(batch)
    assert 0 < int(learner.sum()) < learner.numel()
    kept = seat_transitions(batch, torch.zeros(2), learner)
    # every kept transition is a learner move: its stored value is one of the learner's moves' values
    learner_values = set(batch["state_value"][learner][:, 0].tolist())
    assert set(kept["state_value"][:, 0].tolist()) <= learner_values
    collector.shutdown()
    before = [p.clone() for p in players.pool[0].policy.parameters()]
    model.learn(256, collector=Collector(envs, players, frames_per_batch=128, total_frames=-1))
    after = list(players.pool[0].policy.parameters())
    assert any(not torch.equal(a, b) for a, b in zip(after, before, strict=True))
    for snapshot, weights in zip(
        players.pool[0].policy.state_dict().values(), model.policy.state_dict().values(), strict=True
    ):
        assert snapshot.shape == weights.shape


@pytest.mark.parametrize(
    ("opponents", "error", "match"),
    [
        (0, KeyError, r"reads 'learner_seat' and 'opponent'.*TurnBasedEnv\(game, opponents=2\), or use pool_size=0"),
        (5, ValueError, r"drew opponent [2-4], but SelfPlayPolicy keeps 2 snapshots.*the same n"),
    ],
)
def test_a_pool_and_an_env_that_disagree_on_the_opponents_are_refused(opponents, error, match) -> None:
    players = SelfPlayPolicy(_model().policy, pool_size=2)
    env = TurnBasedEnv("tictactoe_v3", opponents=opponents)
    with pytest.raises(error, match=match):  # else the moves of opponents 2-4 would silently be the learner's
        for _ in range(50):
            players(env.reset())


def test_multisync_collector_workers_play_self_play_games() -> None:
    model = _model()
    makers = [lambda: TurnBasedEnv("tictactoe_v3", opponents=2)] * 2
    collector = MultiSyncCollector(
        makers, SelfPlayPolicy(model.policy, pool_size=2), frames_per_batch=128, total_frames=-1
    )
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        model.learn(300, collector=collector)
    assert model.num_timesteps >= 300


def test_multisync_splits_the_games_over_at_most_one_worker_per_core_with_equal_shares() -> None:
    assert [worker_count(games, cores) for games, cores in [(128, 2), (128, 16), (6, 4), (2, 8), (7, 2), (1, 4)]] == [
        2,
        16,
        3,
        2,
        1,
        1,
    ]


@pytest.mark.parametrize("algo", ["ppo_mask", "ppo_lstm_mask"])
def test_the_train_jobs_multisync_workers_each_play_a_batch_of_games(
    algo: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # 6 games on "2 cores": 2 worker processes of 3 games each, one policy forward per worker and step (the
    # reader flattens the (workers, games, moves) batch into the games' rows before splitting it by seat)
    monkeypatch.setattr(os, "cpu_count", lambda: 2)
    hyperparams = {"n_steps": 16, "batch_size": 48, "n_epochs": 1, "policy_kwargs": {"net_arch": [16]}}
    config = TrainConfig(
        env_id="pettingzoo:tictactoe_v3",
        algo=algo,
        n_timesteps=96,
        n_envs=6,
        hyperparams=hyperparams,
        seed=3,
        collector="multisync",
        selfplay=SelfPlay(pool_size=1, league_players=("random",)),
    )
    task = GameTask(config)
    model = task.build_model("cpu", None)
    collector = task.collector
    try:
        assert collector.num_workers == 2
        assert all(make().batch_size == (3,) for make in collector.create_env_fn)  # what each worker builds
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", DeprecationWarning)
            model.learn(96, collector=collector)
    finally:
        collector.shutdown()
    assert model.num_timesteps >= 96


@pytest.mark.slow
def test_self_play_on_tictactoe_learns_to_beat_random_without_an_illegal_move() -> None:
    from torchrl_mask.games.evaluation import evaluate_games

    model = MaskablePPO(
        "MlpPolicy",
        SeatEnv("tictactoe_v3"),
        n_steps=128,
        batch_size=256,
        n_epochs=10,
        learning_rate=1e-3,
        ent_coef=0.01,
        seed=0,
    )
    untrained = evaluate_games(model, "tictactoe_v3", "random", 200, seed=1000)
    games = TurnBasedEnv("tictactoe_v3", n_games=8)  # eight games batched, as the train command plays them
    games.set_seed(0)
    model.learn(SLOW_STEPS, collector=Collector(games, SelfPlayPolicy(model.policy), frames_per_batch=1024))
    rates = evaluate_games(model, "tictactoe_v3", "random", 200, seed=1000)
    assert rates["illegal_moves"] == 0
    assert rates["win"] + rates["draw"] >= WIN_OR_DRAW, rates
    assert rates["win"] >= untrained["win"] + 0.15, (untrained, rates)  # learned, not a lucky draw of games


# A short run: 0.80-0.83 win or draw with seeds 0-2 (random play scores about 0.57); the strength targets are
# measured by the benchmark and the docs' runs, not here.
SLOW_STEPS = 40_000
WIN_OR_DRAW = 0.7


def test_cli_trains_a_game_and_writes_the_evaluation(tmp_path: Path) -> None:
    out = tmp_path / "run"
    argv = [
        "train",
        "--env",
        "pettingzoo:tictactoe_v3",
        "-n",
        "600",
        "--hyperparams",
        "n_envs=2",
        "n_steps=64",
        "batch_size=64",
        "--eval-episodes",
        "4",
        "--out",
        str(out),
        "--no-progress",
        "--verbose",
        "0",
    ]
    assert main(argv) == 0
    evaluation = json.loads((out / "evaluation.json").read_text())
    assert evaluation["metric"] == "win_rate"
    for opponent in ("vs_random", "vs_heuristic", "vs_perfect"):  # tic-tac-toe's ladder
        rates = evaluation[opponent]
        assert rates["games"] == 4
        assert rates["win"] + rates["draw"] + rates["loss"] == pytest.approx(1.0)
    assert evaluation["illegal_moves"] == 0
    assert {"model.zip", "learning_curve.png", "win_rates.csv"} <= {path.name for path in out.iterdir()}


@pytest.mark.slow
@pytest.mark.parametrize(("signum", "code"), [(signal.SIGINT, 130), (signal.SIGTERM, 143)])
def test_an_interrupted_self_play_run_saves_its_model_and_win_rates(signum: int, code: int, tmp_path: Path) -> None:
    out = tmp_path / "run"
    command = [
        sys.executable,
        "-m",
        "torchrl_mask",
        "train",
        "--env",
        "pettingzoo:tictactoe_v3",
        "-n",
        "100000000",
        "--eval-freq",
        "128",
        "--hyperparams",
        "n_envs=2",
        "n_steps=64",
        "batch_size=64",
        "--eval-episodes",
        "4",
        "--out",
        str(out),
        "--no-progress",
    ]
    proc = subprocess.Popen(
        command, env={**os.environ, "PYTHONUNBUFFERED": "1"}, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    assert proc.stdout is not None
    seen = 0
    for line in proc.stdout:  # SB3's logger table, twice: two rollouts trained on, a win-rate point measured
        seen += "total_timesteps" in line
        if seen == 2:
            break
    proc.send_signal(signum)
    _, stderr = proc.communicate(timeout=120)
    assert proc.returncode == code, stderr
    lines = stderr.strip().splitlines()
    steps = MaskablePPO.load(out / "model.zip", device="cpu").num_timesteps
    assert lines == [f"torchrl-mask: interrupted at {steps:,} steps; saved to {out / 'model.zip'}"], stderr
    assert steps > 0 and (out / "win_rates.csv").read_text().count("\n") >= 2  # the header and a point
    assert not (out / LOCK).exists()


def test_cli_self_play_writes_checkpoints_and_tensorboard_events(tmp_path: Path) -> None:
    out, board = tmp_path / "run", tmp_path / "tb"
    argv = [
        "train",
        "--env",
        "pettingzoo:tictactoe_v3",
        "-n",
        "512",
        "--save-freq",
        "128",
        "--tensorboard-log",
        str(board),
        "--hyperparams",
        "n_envs=2",
        "n_steps=64",
        "batch_size=64",
        "--eval-episodes",
        "2",
        "--out",
        str(out),
        "--no-progress",
        "--verbose",
        "0",
    ]
    assert main(argv) == 0
    checkpoints = sorted(path.name for path in out.glob("rl_model_*_steps.zip"))
    assert len(checkpoints) >= 2, checkpoints
    for name in checkpoints:
        MaskablePPO.load(out / name, device="cpu")
    assert list(board.glob("MaskablePPO_1/events.out.tfevents.*")), list(board.rglob("*"))


def test_cli_unknown_game_is_one_line_and_writes_nothing(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    out = tmp_path / "run"
    assert main(["train", "--env", "pettingzoo:no_such_game_v0", "--out", str(out), "--no-progress"]) == 2
    assert "not a PettingZoo classic game" in capsys.readouterr().err
    assert not out.exists()


def test_batched_env_plays_each_of_its_games_as_pettingzoo_does_dealt_seed_plus_index() -> None:
    from test_games import _games, _replay

    env = TurnBasedEnv("connect_four_v3", n_games=3)
    env.set_seed(5)
    collector = Collector(
        env, SelfPlayPolicy(_model("connect_four_v3").policy), frames_per_batch=3 * 60, total_frames=-1
    )
    batch = next(iter(collector))
    collector.shutdown()
    assert batch.shape == (3, 60)
    for index in range(3):
        games = _games(batch[index])
        assert games, "no whole game in 60 moves"
        _replay("connect_four_v3", 5 + index, games)


@pytest.mark.parametrize("engine", ["numpy", "pettingzoo"])
def test_batched_env_refuses_an_illegal_move_in_any_game_and_moves_none(engine: str) -> None:
    env = TurnBasedEnv("tictactoe_v3", n_games=2, engine=engine)
    td = env.reset()
    td["action"] = torch.tensor([4, 4])
    td = env.step_mdp(env.step(td))  # both games: X took the centre
    td["action"] = torch.tensor([0, 4])  # game 1 replays the centre
    with pytest.raises(ValueError, match=r"Illegal move 4 by player_2 .* in game 1"):
        env.step(td)
    if env.boards is None:
        assert [game.unwrapped.board.squares.count(0) for game in env.games] == [8, 8]
    else:
        assert (env.boards.board == 0).sum(axis=(1, 2)).tolist() == [8, 8]
