"""A network shaped for boards: :class:`BoardCNN`, a small convolutional features extractor for ``(H, W, C)`` planes.

PettingZoo's board games give each seat its view as channels-last planes of 0 and 1: ``tictactoe_v3`` ``(3, 3, 2)``,
``connect_four_v3`` ``(6, 7, 2)``, ``go_v5`` ``(19, 19, 17)``, ``chess_v6`` ``(8, 8, 111)``. SB3's own extractors do
not fit them: ``FlattenExtractor`` (``MlpPolicy``) forgets which cells are neighbours, and ``NatureCNN`` needs uint8
images of at least 36x36 and strides that a 3x3 board has no room for. :class:`BoardCNN` keeps the board's height
and width through 3x3 convolutions with padding, so it serves every board from 3x3 up, and is passed to any
``MaskablePPO`` (or SB3 algorithm) through ``policy_kwargs``.

The planes reach it as they are: SB3 divides an observation by 255 and moves its channels first only for an *image*
space (a uint8 ``Box`` from 0 to 255, ``stable_baselines3.common.preprocessing.is_image_space``). The boards are
int8, float32 or bool planes, so SB3 hands them over as floats, unscaled and channels-last, and :class:`BoardCNN`
moves the channels first itself. A uint8 image space is refused, since SB3 would have rescaled and transposed it.

Example:
    >>> from torchrl_mask import BoardCNN, MaskablePPO, SeatEnv
    >>> model = MaskablePPO("MlpPolicy", SeatEnv("tictactoe_v3"), n_steps=64, batch_size=32, seed=0,
    ...                     policy_kwargs={"features_extractor_class": BoardCNN,
    ...                                    "features_extractor_kwargs": {"channels": 16, "features_dim": 64}})
    >>> model.policy.features_extractor.convolutions[0]
    Conv2d(2, 16, kernel_size=(3, 3), stride=(1, 1), padding=(1, 1))
    >>> _ = model.learn(64)
"""

from __future__ import annotations

import torch
from gymnasium import spaces
from stable_baselines3.common.preprocessing import is_image_space
from stable_baselines3.common.torch_layers import BaseFeaturesExtractor
from torch import nn

__all__ = ["EXTRACTORS", "BoardCNN", "ResidualBlock", "with_extractor_classes"]


class ResidualBlock(nn.Module):
    """Two 3x3 convolutions with padding and a skip connection: ``relu(x + conv(relu(conv(x))))``.

    :param channels: the channels in and out.
    """

    def __init__(self, channels: int) -> None:
        super().__init__()
        self.first = nn.Conv2d(channels, channels, kernel_size=3, padding=1)
        self.second = nn.Conv2d(channels, channels, kernel_size=3, padding=1)

    def forward(self, planes: torch.Tensor) -> torch.Tensor:
        """:param planes: ``(batch, channels, H, W)``.
        :return: ``(batch, channels, H, W)``.
        """
        return torch.relu(planes + self.second(torch.relu(self.first(planes))))


def _board_shape(observation_space: spaces.Space) -> tuple[int, int, int]:
    """``(H, W, C)`` of a board space, or a ValueError that says which extractor fits instead."""
    if not isinstance(observation_space, spaces.Box) or len(observation_space.shape) != 3:
        raise ValueError(
            f"BoardCNN needs a 3-D Box of (height, width, channels) planes; got {observation_space!r}. For vector "
            "observations (the card games) use the default MlpPolicy extractor, without features_extractor_class."
        )
    if is_image_space(observation_space, check_channels=False):
        raise ValueError(
            f"BoardCNN reads boards of 0/1 planes, but {observation_space!r} is a uint8 image space, which SB3 "
            "divides by 255 and moves channels-first before any extractor sees it; give the board as int8, "
            "float32 or bool planes, or use SB3's NatureCNN (CnnPolicy) for images."
        )
    height, width, channels = (int(size) for size in observation_space.shape)
    return height, width, channels


class BoardCNN(BaseFeaturesExtractor):
    """Convolutions over a channels-last board, then one linear layer to ``features_dim`` features.

    ``conv_layers`` 3x3 convolutions with padding 1 (each followed by a ReLU; the first maps ``C`` planes to
    ``channels``), then ``residual_blocks`` :class:`ResidualBlock`, then flatten and ``Linear(channels * H * W,
    features_dim)`` with a ReLU. Height and width are kept throughout, so a 3x3 board works as well as a 19x19.

    :param observation_space: a ``Box`` of shape ``(H, W, C)``: the board's planes, channels last, as PettingZoo's
        boards give them (not a uint8 image space).
    :param features_dim: the features out, ``(batch, features_dim)``.
    :param channels: the channels of every convolution after the first's input.
    :param conv_layers: the plain 3x3 convolutions (at least 1).
    :param residual_blocks: the residual blocks after them (0 for none).
    :raises ValueError: a space that is not a 3-D Box, a uint8 image space, or sizes below their minimum.
    """

    def __init__(
        self,
        observation_space: spaces.Space,
        features_dim: int = 128,
        channels: int = 32,
        conv_layers: int = 2,
        residual_blocks: int = 1,
    ) -> None:
        height, width, planes = _board_shape(observation_space)
        if min(features_dim, channels, conv_layers) < 1 or residual_blocks < 0:
            raise ValueError(
                f"BoardCNN needs features_dim, channels and conv_layers >= 1 and residual_blocks >= 0; got "
                f"features_dim={features_dim}, channels={channels}, conv_layers={conv_layers}, "
                f"residual_blocks={residual_blocks}."
            )
        super().__init__(observation_space, features_dim)
        layers: list[nn.Module] = []
        for index in range(conv_layers):
            layers += [nn.Conv2d(planes if index == 0 else channels, channels, kernel_size=3, padding=1), nn.ReLU()]
        layers += [ResidualBlock(channels) for _ in range(residual_blocks)]
        self.convolutions = nn.Sequential(*layers)
        self.linear = nn.Sequential(nn.Flatten(), nn.Linear(channels * height * width, features_dim), nn.ReLU())

    def forward(self, observations: torch.Tensor) -> torch.Tensor:
        """The features of a batch of boards.

        :param observations: float ``(batch, H, W, C)``, channels last, as SB3's ``preprocess_obs`` hands them over.
        :return: ``(batch, features_dim)``.
        """
        return self.linear(self.convolutions(observations.permute(0, 3, 1, 2)))


#: Extractors by name, for configurations that hold text (``features_extractor_class="BoardCNN"``).
EXTRACTORS: dict[str, type[BaseFeaturesExtractor]] = {"BoardCNN": BoardCNN}


def with_extractor_classes(policy_kwargs: dict) -> dict:
    """``policy_kwargs`` with a ``features_extractor_class`` given by name (:data:`EXTRACTORS`) replaced by the class.

    :param policy_kwargs: SB3's policy keyword arguments, as a configuration file or table holds them.
    :return: a copy, ready for ``MaskablePPO(policy_kwargs=...)``.
    :raises ValueError: a name that is not in :data:`EXTRACTORS`.
    """
    name = policy_kwargs.get("features_extractor_class")
    if not isinstance(name, str):
        return dict(policy_kwargs)
    if name not in EXTRACTORS:
        raise ValueError(f"features_extractor_class={name!r} is not known; use one of {sorted(EXTRACTORS)}.")
    return {**policy_kwargs, "features_extractor_class": EXTRACTORS[name]}
