"""BoardCNN: a convolutional features extractor for PettingZoo's channels-last boards, used by any MaskablePPO."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch
from gymnasium import spaces
from sb3_contrib.common.maskable.evaluation import evaluate_policy
from stable_baselines3.common.monitor import Monitor
from stable_baselines3.common.preprocessing import is_image_space
from stable_baselines3.common.torch_layers import FlattenExtractor
from stable_baselines3.common.vec_env import VecTransposeImage

from torchrl_mask import MaskablePPO, SeatEnv
from torchrl_mask.games.env import game_spaces, make_game
from torchrl_mask.games.network import BoardCNN, with_extractor_classes
from torchrl_mask.games.profile import game_profile

BOARD_GAMES = {"tictactoe_v3": (3, 3, 2), "connect_four_v3": (6, 7, 2), "go_v5": (19, 19, 17), "chess_v6": (8, 8, 111)}
SMALL = {"features_extractor_class": BoardCNN, "features_extractor_kwargs": {"channels": 8, "features_dim": 32}}


def _played_views(game_name: str, moves: int) -> np.ndarray:
    """The mover's view after each of ``moves`` random legal moves of a real game, stacked ``(moves, H, W, C)``."""
    game = make_game(game_name)
    game.reset(seed=0)
    rng = np.random.default_rng(0)
    views = []
    for _ in range(moves):
        view = game.observe(game.agent_selection)
        views.append(np.asarray(view["observation"]))
        game.step(int(rng.choice(np.flatnonzero(view["action_mask"]))))
    return np.stack(views)


@pytest.mark.parametrize("game_name", sorted(BOARD_GAMES))
def test_board_cnn_reads_each_board_games_view_into_features_dim(game_name: str) -> None:
    space, _ = game_spaces(make_game(game_name))
    assert space.shape == BOARD_GAMES[game_name]
    net = BoardCNN(space, features_dim=48, channels=8, residual_blocks=2)
    views = torch.as_tensor(_played_views(game_name, 4)).float()
    features = net(views)
    assert features.shape == (4, 48)
    assert net.features_dim == 48
    assert net.convolutions[0].in_channels == BOARD_GAMES[game_name][2]  # channels-last planes became channels
    assert torch.isfinite(features).all()


def test_sb3_hands_the_board_to_board_cnn_unscaled_and_channels_last() -> None:
    env = SeatEnv("connect_four_v3")
    assert not is_image_space(env.observation_space, check_channels=False)
    model = MaskablePPO("MlpPolicy", env, policy_kwargs=SMALL, n_steps=16, batch_size=16, seed=0)
    assert not isinstance(model.get_env(), VecTransposeImage)
    assert model.observation_space.shape == (6, 7, 2)
    seen: list[torch.Tensor] = []
    extractor = model.policy.features_extractor
    assert isinstance(extractor, BoardCNN)
    extractor.register_forward_pre_hook(lambda _module, args: seen.append(args[0].clone()))
    observation, _ = env.reset(seed=1)
    env.step(int(np.flatnonzero(env.action_masks())[0]))
    observation = env._observation()
    assert observation.any(), "the board should hold pieces, so that a rescaling would show"
    model.predict(observation, action_masks=env.action_masks(), deterministic=True)
    assert seen[0].shape == (1, 6, 7, 2)
    assert torch.equal(seen[0], torch.as_tensor(observation).float()[None])  # 0 and 1: not divided by 255


def test_board_cnn_refuses_a_vector_and_an_image_space_naming_what_fits() -> None:
    with pytest.raises(ValueError, match="MlpPolicy extractor"):
        BoardCNN(spaces.Box(0, 1, (36,), np.float32))
    with pytest.raises(ValueError, match="uint8 image space"):
        BoardCNN(spaces.Box(0, 255, (8, 8, 3), np.uint8))
    with pytest.raises(ValueError, match="conv_layers >= 1"):
        BoardCNN(spaces.Box(0, 1, (3, 3, 2), np.int8), conv_layers=0)


@pytest.mark.slow
@pytest.mark.parametrize("game_name", sorted(BOARD_GAMES))
def test_maskable_ppo_with_board_cnn_trains_on_each_board_game(game_name: str) -> None:
    env = SeatEnv(game_name)
    model = MaskablePPO("MlpPolicy", env, policy_kwargs=SMALL, n_steps=32, batch_size=16, n_epochs=1, seed=0)
    before = [parameter.clone() for parameter in model.policy.features_extractor.parameters()]
    model.learn(32)
    after = list(model.policy.features_extractor.parameters())
    assert model.num_timesteps == 32
    assert any(not torch.equal(old, new) for old, new in zip(before, after, strict=True))
    assert env.illegal_moves == 0


@pytest.mark.slow
def test_board_cnn_model_saves_and_loads_with_the_same_moves(tmp_path: Path) -> None:
    env = SeatEnv("connect_four_v3")
    model = MaskablePPO("MlpPolicy", env, policy_kwargs=SMALL, n_steps=32, batch_size=16, n_epochs=1, seed=0)
    model.learn(32)
    model.save(tmp_path / "model.zip")
    loaded = MaskablePPO.load(tmp_path / "model.zip")
    assert isinstance(loaded.policy.features_extractor, BoardCNN)
    views = _played_views("connect_four_v3", 10)
    masks = np.ones((10, 7), bool)
    original, _ = model.predict(views, action_masks=masks, deterministic=True)
    again, _ = loaded.predict(views, action_masks=masks, deterministic=True)
    assert np.array_equal(original, again)
    assert all(torch.equal(a, b) for a, b in zip(model.policy.parameters(), loaded.policy.parameters(), strict=True))


@pytest.mark.slow
def test_maskable_ppo_with_board_cnn_learns_tic_tac_toe_against_random_a_little() -> None:
    env = SeatEnv("tictactoe_v3", opponent="random")
    kwargs = {"features_extractor_class": BoardCNN, "features_extractor_kwargs": {"channels": 16, "features_dim": 64}}
    model = MaskablePPO(
        "MlpPolicy", env, policy_kwargs=kwargs, n_steps=256, batch_size=64, learning_rate=1e-3, ent_coef=0.01, seed=0
    )
    before, _ = evaluate_policy(model, Monitor(SeatEnv("tictactoe_v3")), n_eval_episodes=200)
    model.learn(6_000)
    after, _ = evaluate_policy(model, Monitor(SeatEnv("tictactoe_v3")), n_eval_episodes=200)
    assert after > before + 0.2, f"mean result vs random: {before:.2f} untrained, {after:.2f} after 6,000 moves"


def test_board_games_default_to_board_cnn_and_the_rest_keep_the_mlp() -> None:
    for game_name in BOARD_GAMES:
        policy_kwargs = with_extractor_classes(game_profile(game_name).hyperparams["policy_kwargs"])
        assert policy_kwargs["features_extractor_class"] is BoardCNN
    for game_name in ("leduc_holdem_v4", "texas_holdem_v4", "texas_holdem_no_limit_v6", "hanabi_v5"):
        assert "features_extractor_class" not in game_profile(game_name).hyperparams["policy_kwargs"]
    assert "features_extractor_class" not in game_profile("default").hyperparams["policy_kwargs"]
    default = MaskablePPO("MlpPolicy", SeatEnv("tictactoe_v3"), seed=0)  # MlpPolicy's own extractor is untouched
    assert isinstance(default.policy.features_extractor, FlattenExtractor)


def test_an_unknown_extractor_name_is_refused_with_the_known_ones() -> None:
    with pytest.raises(ValueError, match=r"one of \['BoardCNN'\]"):
        with_extractor_classes({"features_extractor_class": "ResNet50"})
