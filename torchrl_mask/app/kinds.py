"""What an ``--env`` names: a gymnasium env, or a PettingZoo classic game trained by self-play. The one place that
reads an env id's prefix; everything else asks :func:`env_kind`. Nothing heavy is imported.

Example:
    >>> env_kind("pettingzoo:tictactoe_v3")
    EnvKind(kind='game', name='tictactoe_v3')
    >>> env_kind("Taxi-v4").kind, game_env_id("connect_four_v3")
    ('gym', 'pettingzoo:connect_four_v3')
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

__all__ = ["GAME_PREFIX", "EnvKind", "env_kind", "game_env_id"]

GAME_PREFIX = "pettingzoo:"

Kind = Literal["gym", "game"]


@dataclass(frozen=True)
class EnvKind:
    """The kind of env an id names.

    :param kind: ``"gym"`` (a registered gymnasium id, ``module:Id`` too) or ``"game"`` (a PettingZoo classic game).
    :param name: the gymnasium id, or the game's name without its prefix (``"tictactoe_v3"``).
    """

    kind: Kind
    name: str

    @property
    def is_game(self) -> bool:
        """Whether it is a PettingZoo classic game, trained by self-play."""
        return self.kind == "game"


def env_kind(env_id: str) -> EnvKind:
    """The kind of env ``env_id`` names.

    :param env_id: ``--env``'s value: ``"Taxi-v4"``, ``"my_pkg:MyEnv-v0"`` or ``"pettingzoo:<game>"``.
    :return: its kind and name.
    """
    if env_id.startswith(GAME_PREFIX):
        return EnvKind("game", env_id.removeprefix(GAME_PREFIX))
    return EnvKind("gym", env_id)


def game_env_id(game: str) -> str:
    """The ``--env`` id of a PettingZoo classic game.

    :param game: the game's name (``"tictactoe_v3"``).
    :return: ``"pettingzoo:tictactoe_v3"``.
    """
    return GAME_PREFIX + game
