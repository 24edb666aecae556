"""The masked evaluation that keeps the LSTM state: against sb3-contrib's, which drops it, on the memory task; its
``EvalCallback``; and ``torchrl-mask train --algo ppo_lstm_mask --eval-freq`` through the command line."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from collector_envs import CueRecall, StrictMask
from sb3_contrib.common.envs import InvalidActionEnvDiscrete
from sb3_contrib.common.maskable.evaluation import evaluate_policy as sb3_contrib_evaluate_policy
from stable_baselines3.common.env_util import make_vec_env
from stable_baselines3.common.logger import Logger

from torchrl_mask import MaskablePPO, MaskableRecurrentPPO
from torchrl_mask.algorithms.recurrent_evaluation import MaskableRecurrentEvalCallback, evaluate_policy

REPO = Path(__file__).resolve().parents[1]
EPISODES = 100


@pytest.fixture
def remembering_model() -> MaskableRecurrentPPO:
    """An LSTM model set by hand to solve the memory task when its state is carried, and only then.

    One LSTM cell: its input and output gates always open, its forget gate closed (it keeps what it holds), it adds
    -1 for cue 0 and +1 for cue 1 and nothing otherwise; answer 2 is preferred when the cell's output is positive,
    answer 1 when negative. With a fresh state at the answer step the output is 0 and the two answers tie (the
    first, 1, is taken): right only when the cue was 0.
    """
    env = make_vec_env(CueRecall, n_envs=1, seed=0)
    model = MaskableRecurrentPPO(
        "MlpLstmPolicy", env, n_steps=16, batch_size=16, seed=0, policy_kwargs={"lstm_hidden_size": 1, "net_arch": []}
    )
    lstm, head = model.policy.lstm_actor, model.policy.action_net
    with torch.no_grad():
        for weights in (lstm.weight_hh_l0, lstm.weight_ih_l0, lstm.bias_hh_l0, head.bias):
            weights.zero_()
        lstm.bias_ih_l0.copy_(torch.tensor([10.0, 10.0, 0.0, 10.0]))  # gates i, f, g, o
        lstm.weight_ih_l0[2] = torch.tensor([-10.0, 10.0, 0.0])  # g: the cue's sign
        head.weight.copy_(torch.tensor([[0.0], [-10.0], [10.0]]))  # wait, answer 1, answer 2
    return model


def eval_env(seed: int = 7) -> Any:
    return make_vec_env(CueRecall, n_envs=1, seed=seed)


def test_sb3_contribs_masked_evaluation_drops_the_memory_and_ours_keeps_it(
    remembering_model: MaskableRecurrentPPO,
) -> None:
    ours, _ = evaluate_policy(remembering_model, eval_env(), n_eval_episodes=EPISODES)
    theirs, _ = sb3_contrib_evaluate_policy(remembering_model, eval_env(), n_eval_episodes=EPISODES)
    assert ours == 1.0
    assert theirs <= 0.7  # right only when the cue was 0: forgotten by the time it is asked for


def test_the_eval_callback_records_what_the_state_keeping_evaluation_scores(
    remembering_model: MaskableRecurrentPPO, tmp_path: Path
) -> None:
    callback = MaskableRecurrentEvalCallback(
        eval_env(), n_eval_episodes=EPISODES, eval_freq=1, log_path=str(tmp_path), best_model_save_path=str(tmp_path)
    )
    remembering_model.set_logger(Logger(folder=None, output_formats=[]))  # learn() would set one
    callback.init_callback(remembering_model)
    assert callback.on_step()
    recorded = np.load(tmp_path / "evaluations.npz")["results"]
    assert recorded.shape == (1, EPISODES)
    assert recorded.mean() == evaluate_policy(remembering_model, eval_env(), n_eval_episodes=EPISODES)[0] == 1.0
    assert callback.model is remembering_model  # the player stood in only for the evaluation
    assert MaskableRecurrentPPO.load(tmp_path / "best_model.zip").num_timesteps == remembering_model.num_timesteps


@pytest.mark.parametrize(("cls", "policy"), [(MaskableRecurrentPPO, "MlpLstmPolicy"), (MaskablePPO, "MlpPolicy")])
def test_evaluation_takes_only_legal_actions_for_both_models(cls: Any, policy: str) -> None:
    def strict() -> Any:  # raises in step on an action its mask forbids
        return StrictMask(InvalidActionEnvDiscrete(dim=6, n_invalid_actions=4), "method")

    env = make_vec_env(strict, n_envs=2, seed=0)
    model = cls(policy, env, n_steps=16, batch_size=16, seed=0)
    returns, lengths = evaluate_policy(model, env, n_eval_episodes=4, return_episode_rewards=True, warn=False)
    assert len(returns) == 4 and sum(lengths) > 4


def test_masking_an_env_without_masks_is_refused_naming_the_wrapper() -> None:
    import gymnasium as gym

    env = make_vec_env(lambda: gym.make("CartPole-v1"), n_envs=1)
    model = MaskableRecurrentPPO("MlpLstmPolicy", env, n_steps=16, batch_size=16)
    with pytest.raises(ValueError, match="ActionMasker"):
        evaluate_policy(model, env)
    with pytest.raises(ValueError, match="ActionMasker"):
        MaskableRecurrentEvalCallback(env)


@pytest.mark.slow
def test_train_with_eval_freq_writes_the_state_keeping_evaluations(tmp_path: Path) -> None:
    out = tmp_path / "run"
    path = os.pathsep.join(filter(None, [str(REPO / "tests"), os.environ.get("PYTHONPATH")]))
    hyperparams = ["n_envs=2", "n_steps=16", "batch_size=32", "policy_kwargs=dict(lstm_hidden_size=8)"]
    command = [
        sys.executable,
        "-m",
        "torchrl_mask",
        "train",
        "--algo",
        "ppo_lstm_mask",
        "--env",
        "collector_envs:CueRecall-v0",
        "--steps",
        "128",
        "--eval-freq",
        "128",
        "--eval-episodes",
        "20",
        "--hyperparams",
        *hyperparams,
        "--no-progress",
        "--out",
        str(out),
    ]
    run = subprocess.run(command, cwd=REPO, env={**os.environ, "PYTHONPATH": path}, capture_output=True, text=True)
    assert run.returncode == 0, run.stderr
    evaluations = np.load(out / "evaluations.npz")
    assert evaluations["timesteps"].tolist() == [128]
    model = MaskableRecurrentPPO.load(out / "model.zip")
    seed = json.loads((out / "evaluation.json").read_text())["config"]["seed"]
    from torchrl_mask.app.masked_env import make_masked_env
    from torchrl_mask.app.results import EVAL_SEED_OFFSET

    env = make_vec_env(make_masked_env, n_envs=1, seed=seed + EVAL_SEED_OFFSET, env_kwargs={"env_id": "CueRecall-v0"})
    returns, _ = evaluate_policy(model, env, n_eval_episodes=20, return_episode_rewards=True)
    assert evaluations["results"][0].tolist() == returns  # the periodic evaluation ran with the final model
    assert json.loads((out / "evaluation.json").read_text())["evaluation"]["masked"]["mean"] == np.mean(returns)
