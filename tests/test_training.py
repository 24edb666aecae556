"""The job behind ``torchrl-mask train``, run in process: the same seed gives the same model on every path."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from torchrl_mask.cli import TrainConfig
from torchrl_mask.training import train


@pytest.mark.slow
@pytest.mark.parametrize("collector", [None, "sync", "multisync"])
def test_the_same_seed_trains_the_same_model_on_every_collection_path(collector: str | None, tmp_path: Path) -> None:
    params = []
    for run in range(2):
        config = TrainConfig(
            steps=256, n_envs=2, n_steps=64, eval_episodes=1, net_arch=(16,), progress_bar=False,
            collector=collector, out=tmp_path / str(run), seed=3,
        )  # fmt: skip
        model = train(config).model
        params.append(torch.nn.utils.parameters_to_vector(model.policy.parameters()).detach())
    torch.testing.assert_close(params[0], params[1], rtol=0, atol=0)
