"""The checks of ``torchrl-mask train -i model.zip``, before anything is written: the file loads as the model
``--algo`` trains (an LSTM model for ``ppo_lstm_mask``, one without for ``ppo_mask``), with the env's spaces.

A zip saved by sb3-contrib's ``RecurrentPPO`` continues as :class:`~torchrl_mask.MaskableRecurrentPPO`, whose
``load`` gives it the masked twin of its policy; a zip of the other kind is refused in one line naming the
``--algo`` that continues it.
"""

from __future__ import annotations

import pickle
import zipfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import gymnasium as gym
from sb3_contrib import RecurrentPPO
from sb3_contrib.common.recurrent.policies import RecurrentActorCriticPolicy
from stable_baselines3.common.base_class import BaseAlgorithm
from stable_baselines3.common.save_util import load_from_zip_file
from stable_baselines3.common.utils import check_for_correct_spaces

from torchrl_mask.app.hyperparams import UsageError
from torchrl_mask.app.masked_env import one_line

__all__ = ["check_trained_agent"]

_LOAD_ERRORS = (
    AssertionError,
    ValueError,
    KeyError,
    TypeError,
    AttributeError,
    OSError,
    RuntimeError,
    EOFError,
    pickle.UnpicklingError,
    zipfile.BadZipFile,
)


def check_trained_agent(
    path: Path,
    env: gym.Env,
    algorithm: type[BaseAlgorithm],
    check_saved: Callable[[Path, dict[str, Any]], None] | None = None,
) -> None:
    """``path`` loads as ``algorithm``'s model, of the same kind (with or without an LSTM), its spaces the env's.

    :param path: the ``-i`` file.
    :param env: the run's env (made with its masks).
    :param algorithm: the class ``--algo`` trains (``MaskablePPO`` or ``MaskableRecurrentPPO``).
    :param check_saved: the task's own check of the saved data (the zip's ``data``: its spaces, its policy class),
        made before the spaces are compared, so that its message comes first; it raises a ``UsageError``.
    :raises UsageError: a file that does not load as such a model, of the other kind, or for other spaces.
    """
    try:
        data, _, _ = load_from_zip_file(path, device="cpu", print_system_info=False)
        _check_kind(path, data, algorithm)
        if check_saved is not None:
            check_saved(path, data or {})
        saved = algorithm.load(path, device="cpu")
        check_for_correct_spaces(env, saved.observation_space, saved.action_space)
    except UsageError:
        raise
    except _LOAD_ERRORS as err:
        raise UsageError(
            f"-i {path}: cannot continue from it: {one_line(err)} Pass a {algorithm.__name__} .zip saved for this env."
        ) from None


def _check_kind(path: Path, data: dict | None, algorithm: type[BaseAlgorithm]) -> None:
    """Refuse a model of the other kind than ``algorithm`` (an LSTM policy or not), naming the ``--algo`` it needs."""
    policy_class = (data or {}).get("policy_class")
    if not isinstance(policy_class, type):
        return  # the load that follows says what is wrong
    recurrent = issubclass(policy_class, RecurrentActorCriticPolicy)
    if recurrent == issubclass(algorithm, RecurrentPPO):
        return
    if recurrent:
        raise UsageError(
            f"-i {path} holds an LSTM model ({policy_class.__name__}), which MaskablePPO cannot continue; add "
            "--algo ppo_lstm_mask to continue it with MaskableRecurrentPPO."
        )
    raise UsageError(
        f"-i {path} holds a model without an LSTM ({policy_class.__name__}, MaskablePPO's), which --algo "
        "ppo_lstm_mask cannot continue; drop --algo ppo_lstm_mask to continue it with MaskablePPO, or train a new "
        "recurrent model without -i."
    )
