"""The run behind ``torchrl-mask train``, in process (its checks, then the pipeline): the same seed gives the same
model on every path."""

from __future__ import annotations

import tempfile
from pathlib import Path

import pytest
import torch

from torchrl_mask.app import pipeline
from torchrl_mask.app.config import TrainConfig
from torchrl_mask.app.prepare import prepare


def train(config: TrainConfig) -> pipeline.RunResult:
    return pipeline.run(prepare(config))


@pytest.mark.slow
@pytest.mark.parametrize("collector", [None, "sync", "multisync"])
def test_the_same_seed_trains_the_same_model_on_every_collection_path(collector: str | None, tmp_path: Path) -> None:
    params = []
    for run in range(2):
        hyperparams = {"n_steps": 64, "batch_size": 32, "policy_kwargs": {"net_arch": [16]}}
        config = TrainConfig(
            n_timesteps=256,
            n_envs=2,
            hyperparams=hyperparams,
            eval_episodes=1,
            progress_bar=False,
            verbose=0,
            collector=collector,
            out=tmp_path / str(run),
            seed=3,
        )
        model = train(config).model
        params.append(torch.nn.utils.parameters_to_vector(model.policy.parameters()).detach())
    torch.testing.assert_close(params[0], params[1], rtol=0, atol=0)


def test_a_run_without_tensorboard_leaves_no_sb3_folder_in_the_temporary_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # SB3's learn() makes tempdir/SB3-<date> when it configures its own logger and $SB3_LOGDIR is unset.
    monkeypatch.delenv("SB3_LOGDIR", raising=False)
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path / "tmp"))
    (tmp_path / "tmp").mkdir()
    config = TrainConfig(
        n_timesteps=64,
        n_envs=1,
        hyperparams={"n_steps": 32, "batch_size": 32, "policy_kwargs": {"net_arch": [8]}},
        eval_freq=0,
        save_freq=0,
        progress_bar=False,
        verbose=1,
        out=tmp_path / "run",
        seed=0,
    )
    train(config)
    assert not list((tmp_path / "tmp").glob("SB3-*"))
