"""Self-play with memory: MaskableRecurrentPPO's LSTM policy in every seat, each seat's state its own.

The central check: once a batch is in the recurrent rollout, re-running the policy over the rollout's sequences (as
``train()`` does) gives back every move's stored log-probability and value. That holds only if each seat's LSTM
followed that seat's own moves during collection, reset at its games' starts, and if training restarts each seat's
trajectory from the state it stored."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from stable_baselines3.common.callbacks import BaseCallback
from torchrl.collectors import Collector

from torchrl_mask import MaskablePPO, MaskableRecurrentPPO, SeatEnv, SelfPlayPolicy, TurnBasedEnv
from torchrl_mask.games.evaluation import RecurrentPlayer, model_player, seated
from torchrl_mask.games.players import leduc_rule_v2
from torchrl_mask.games.recurrent_selfplay import RecurrentSelfPlayPolicy, RecurrentSelfPlayRollout
from torchrl_mask.rollout.recurrent_buffers import MaskableRecurrentRolloutBuffer

REPO = Path(__file__).resolve().parents[1]
LEDUC_ACTIONS = ("call", "raise", "fold", "check")  # rlcard's names, in PettingZoo's action order
LSTM = {"lstm_hidden_size": 8, "net_arch": [16]}


def recurrent_model(game: str, seed: int = 0) -> MaskableRecurrentPPO:
    return MaskableRecurrentPPO(
        "MlpLstmPolicy", SeatEnv(game), n_steps=32, batch_size=32, n_epochs=1, policy_kwargs=LSTM, seed=seed
    )


def replayed(buffer: MaskableRecurrentRolloutBuffer, policy) -> tuple[float, float, int]:
    """The largest gaps between the stored and the re-evaluated log-probs and values, over the whole rollout."""
    policy.set_training_mode(False)
    samples = next(buffer.get(None))
    with torch.no_grad():
        values, log_prob, _ = policy.evaluate_actions(
            samples.observations,
            samples.actions.long().flatten(),
            samples.lstm_states,
            samples.episode_starts,
            action_masks=samples.action_masks,
        )
    valid = samples.mask > 0
    gap_log_prob = (log_prob - samples.old_log_prob)[valid].abs().max().item()
    gap_value = (values.flatten() - samples.old_values)[valid].abs().max().item()
    return gap_log_prob, gap_value, int(valid.sum())


class Replays(BaseCallback):
    """At each rollout's end (before ``train()``): the rollout re-evaluated, and the same rollout with its sequences
    cut only where sb3-contrib cuts them (each row's first step and the games' starts)."""

    def __init__(self) -> None:
        super().__init__()
        self.gaps: list[tuple[float, float, int]] = []
        self.uncut: list[tuple[float, float, int]] = []

    def _on_step(self) -> bool:
        return True

    def _on_rollout_end(self) -> None:
        buffer = self.model.rollout_buffer
        self.gaps.append(replayed(buffer, self.model.policy))
        cuts = buffer._sequence_cuts
        buffer._sequence_cuts = buffer._env_change  # what the rollout would be without the trajectories' cuts
        self.uncut.append(replayed(buffer, self.model.policy))
        buffer._sequence_cuts = cuts


@pytest.mark.parametrize(
    ("game", "pool_size", "fixed", "self_share"),
    [
        ("leduc_holdem_v4", 0, {}, 0.0),
        ("tictactoe_v3", 0, {}, 0.0),
        ("leduc_holdem_v4", 2, {"rule_v2": leduc_rule_v2}, 0.0),
        ("leduc_holdem_v4", 2, {"rule_v2": leduc_rule_v2}, 0.5),  # half the games against itself, both seats learn
    ],
)
def test_training_replays_every_seats_moves_from_the_states_that_seat_played_with(
    game: str, pool_size: int, fixed: dict, self_share: float
) -> None:
    model = recurrent_model(game)
    players = RecurrentSelfPlayPolicy(model.policy, pool_size=pool_size, fixed=fixed, self_share=self_share)
    if pool_size:  # the snapshots play other weights than the learner's
        with torch.no_grad():
            for parameter in model.policy.parameters():
                parameter.add_(0.3 * torch.randn_like(parameter))
    opponents = pool_size + len(fixed) + (self_share > 0)
    games = TurnBasedEnv(game, opponents, n_games=4).append_transform(players.make_tensordict_primer())
    games.set_seed(0)
    replays = Replays()
    model.learn(3 * 96, callback=replays, collector=Collector(games, players, frames_per_batch=96))
    assert len(replays.gaps) >= 3
    for gap_log_prob, gap_value, moves in replays.gaps:
        assert moves > 20 and gap_log_prob < 1e-5 and gap_value < 1e-5, replays.gaps
    # The check can fail: without the cuts at each seat's trajectory, training would read another seat's state.
    assert max(gap for gap, _, _ in replays.uncut) > 1e-3, replays.uncut


def test_every_seat_keeps_its_own_state_and_a_game_start_clears_them() -> None:
    model = recurrent_model("leduc_holdem_v4")
    players = RecurrentSelfPlayPolicy(model.policy)
    games = TurnBasedEnv("leduc_holdem_v4", n_games=4).append_transform(players.make_tensordict_primer())
    games.set_seed(1)
    batch = next(iter(Collector(games, players, frames_per_batch=64, total_frames=64))).reshape(4, -1)
    key = ("recurrent_state", "actor", "hidden")
    before, after, seat = batch.get(key), batch.get(("next", *key)), batch.get("seat")
    is_init = batch.get("is_init")[..., 0]
    assert before.shape[-3:] == (2, 1, 8)
    moved = torch.nn.functional.one_hot(seat, 2).bool()
    still = ~moved & ~is_init[..., None]
    assert torch.equal(after[still], before[still])  # a seat that does not move keeps its state
    assert (after[moved].abs().sum(-1) > 0).all()  # the mover's state changed
    cleared = is_init[..., None] & ~moved
    assert (after[cleared] == 0).all()  # a new game: the seat that has not moved yet starts from zeros


def test_the_self_play_policies_refuse_the_other_kind_of_model_and_an_env_without_the_seats_states() -> None:
    recurrent, feedforward = recurrent_model("tictactoe_v3"), MaskablePPO("MlpPolicy", SeatEnv("tictactoe_v3"))
    with pytest.raises(TypeError, match=r"use RecurrentSelfPlayPolicy\(model.policy\)"):
        SelfPlayPolicy(recurrent.policy)
    with pytest.raises(TypeError, match=r"use SelfPlayPolicy\(model.policy\)"):
        RecurrentSelfPlayPolicy(feedforward.policy)
    players = RecurrentSelfPlayPolicy(recurrent.policy)
    with pytest.raises(KeyError, match=r"append_transform\(policy.make_tensordict_primer\(\)\)"):
        players(TurnBasedEnv("tictactoe_v3").reset())
    with pytest.raises(ValueError, match="keeps states for n_seats=1"):
        lonely = RecurrentSelfPlayPolicy(recurrent.policy, n_seats=1)
        env = TurnBasedEnv("tictactoe_v3").append_transform(lonely.make_tensordict_primer())
        td = env.reset()
        td["seat"] = torch.tensor(1)
        lonely(td)
    collector = Collector(
        TurnBasedEnv("tictactoe_v3").append_transform(players.make_tensordict_primer()), players, frames_per_batch=32
    )
    with pytest.raises(TypeError, match="MaskableRecurrentPPO's masked rollout buffer"):
        feedforward.learn(32, collector=collector)
    assert players.rollout_reader is RecurrentSelfPlayRollout


def test_an_lstm_player_carries_its_state_over_its_moves_and_each_seat_of_each_game_starts_fresh() -> None:
    model = recurrent_model("leduc_holdem_v4")
    player = model_player(model)
    assert isinstance(player, RecurrentPlayer)
    one, other = seated(player), seated(player)
    assert one is not other and one.state is None
    rng = np.random.default_rng(0)
    views = rng.random((5, 36)).astype(np.float32)
    mask = np.ones(4, dtype=bool)
    state = None
    for step, view in enumerate(views):
        expected, state = model.predict(
            view, state=state, episode_start=np.array([step == 0]), action_masks=mask, deterministic=True
        )
        assert one(view, mask, rng) == int(expected)
        assert all(np.array_equal(mine, theirs) for mine, theirs in zip(one.state, state, strict=True))
    assert other.state is None


def test_rlcards_rule_agent_plays_on_the_seats_view_exactly_as_on_rlcards_raw_state() -> None:
    from pettingzoo.classic import leduc_holdem_v4
    from rlcard.models.leducholdem_rule_models import LeducHoldemRuleAgentV2

    env, rng, decisions = leduc_holdem_v4.env(), np.random.default_rng(0), 0
    for deal in range(200):
        env.reset(seed=deal)
        for _ in env.agent_iter():
            observation, _, terminated, truncated, _ = env.last()
            if terminated or truncated:
                env.step(None)
                continue
            rlcard_env = env.unwrapped.env
            raw = rlcard_env.get_state(rlcard_env.get_player_id())
            ours = leduc_rule_v2(observation["observation"], observation["action_mask"].astype(bool), rng)
            assert ours == LEDUC_ACTIONS.index(LeducHoldemRuleAgentV2.step(raw))
            decisions += 1
            env.step(int(rng.choice(np.flatnonzero(observation["action_mask"]))))
    assert decisions > 400


def test_train_algo_ppo_lstm_mask_on_a_card_game_keeps_its_files_and_plays_no_illegal_move(tmp_path: Path) -> None:
    out = tmp_path / "run"
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "torchrl_mask",
            "train",
            "--algo",
            "ppo_lstm_mask",
            "--env",
            "pettingzoo:leduc_holdem_v4",
            "-n",
            "512",
            "--hyperparams",
            "n_envs=2",
            "n_steps=64",
            "batch_size=64",
            "n_epochs=2",
            "policy_kwargs=dict(net_arch=[32], lstm_hidden_size=16)",
            "--eval-episodes",
            "6",
            "--out",
            str(out),
            "--no-progress",
            "--verbose",
            "0",
        ],
        cwd=REPO,
        capture_output=True,
        text=True,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "Training MaskableRecurrentPPO on pettingzoo:leduc_holdem_v4 by self-play" in proc.stdout
    assert {"model.zip", "evaluation.json", "win_rates.csv", "learning_curve.png"} <= {p.name for p in out.iterdir()}
    model = MaskableRecurrentPPO.load(out / "model.zip", device="cpu")
    assert model.num_timesteps >= 512 and model.policy.lstm_hidden_state_shape[-1] == 16
    evaluation = json.loads((out / "evaluation.json").read_text())
    assert evaluation["illegal_moves"] == 0
    assert evaluation["vs_random"]["games"] == 6 and evaluation["vs_rule_v2"]["games"] == 6
