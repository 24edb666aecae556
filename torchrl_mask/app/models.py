"""The model a run trains: :class:`~torchrl_mask.MaskablePPO` or :class:`~torchrl_mask.MaskableRecurrentPPO`, built
from checked hyperparameters (or continued from ``-i``), for every kind of run.

:func:`model_kwargs` turns rl-zoo3's values into the model's arguments (``lin_<x>`` as SB3's ``LinearSchedule``,
``activation_fn="nn.ReLU"`` as the class, the policy's arguments checked by name) and :func:`build_model` makes the
model, or loads the ``-i`` one with the run's hyperparameters (its policy kept, as rl-zoo3 does).
"""

from __future__ import annotations

import inspect
import sys
from pathlib import Path
from typing import Any

import torch
from stable_baselines3.common.logger import HumanOutputFormat, Logger
from stable_baselines3.common.utils import LinearSchedule

from torchrl_mask.algorithms.ppo import MaskablePPO
from torchrl_mask.algorithms.recurrent_ppo import MaskableRecurrentPPO
from torchrl_mask.app.config import TrainConfig
from torchrl_mask.app.hyperparams import UsageError

__all__ = ["ALGORITHMS", "Model", "build_model", "model_kwargs", "quiet_logger", "recorded_policy_kwargs"]

Model = MaskablePPO | MaskableRecurrentPPO

#: The model each ``--algo`` trains.
ALGORITHMS: dict[str, type[MaskablePPO] | type[MaskableRecurrentPPO]] = {
    "ppo_mask": MaskablePPO,
    "ppo_lstm_mask": MaskableRecurrentPPO,
}
# The policy's constructor arguments that MaskablePPO fills in itself; policy_kwargs cannot set them.
POLICY_SET_BY_PPO = {"self", "observation_space", "action_space", "lr_schedule"}
_VARIADIC = (inspect.Parameter.VAR_POSITIONAL, inspect.Parameter.VAR_KEYWORD)


def model_kwargs(hyperparams: dict[str, Any], policy: str | type, algo: str = "ppo_mask") -> dict[str, Any]:
    """The model's keyword arguments from checked hyperparameters.

    :param hyperparams: the run's hyperparameters (``policy`` is left out: it is the model's first argument).
    :param policy: the policy's name (or class), whose arguments ``policy_kwargs`` must be.
    :param algo: ``"ppo_mask"`` or ``"ppo_lstm_mask"``.
    :return: the arguments: ``lin_<x>`` as SB3's ``LinearSchedule`` (from x to 0), ``activation_fn`` as its class.
    :raises UsageError: an activation that is no ``torch.nn`` activation, or a ``policy_kwargs`` name the policy
        does not take.
    """
    kwargs = {key: value for key, value in hyperparams.items() if key != "policy"}
    for key in ("learning_rate", "clip_range", "clip_range_vf"):
        if isinstance(kwargs.get(key), str):
            kwargs[key] = LinearSchedule(float(kwargs[key].removeprefix("lin_")), 0.0, 1.0)
    if "policy_kwargs" not in kwargs:
        return kwargs
    policy_kwargs = dict(kwargs["policy_kwargs"])
    if "activation_fn" in policy_kwargs:
        policy_kwargs["activation_fn"] = _activation(policy_kwargs["activation_fn"])
    policy_class = policy if isinstance(policy, type) else ALGORITHMS[algo].policy_aliases[policy]
    accepted = _policy_parameters(policy_class) - POLICY_SET_BY_PPO
    unknown = sorted(set(policy_kwargs) - accepted)
    if unknown:
        takes = ", ".join(sorted(accepted))
        name = policy.__name__ if isinstance(policy, type) else policy
        raise UsageError(f"policy_kwargs: {', '.join(unknown)} is not an argument of {name}; it takes {takes}.")
    kwargs["policy_kwargs"] = policy_kwargs
    return kwargs


def _activation(name: str) -> type[torch.nn.Module]:
    """The ``torch.nn`` activation ``name`` names, one SB3 can make as ``activation_fn()``."""
    activation = getattr(torch.nn, name.rsplit(".", 1)[-1], None)
    if not (isinstance(activation, type) and issubclass(activation, torch.nn.Module)):
        raise UsageError(f"policy_kwargs: activation_fn={name} is not a torch.nn module; use e.g. nn.ReLU.")
    if activation.__module__ != "torch.nn.modules.activation" or activation is torch.nn.MultiheadAttention:
        raise UsageError(
            f"policy_kwargs: activation_fn={name} is not an activation function; use one of torch.nn's "
            "activations, e.g. nn.ReLU or nn.Tanh."
        )
    needed = [
        parameter.name
        for parameter in inspect.signature(activation).parameters.values()
        if parameter.default is inspect.Parameter.empty
        and parameter.kind in (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)
    ]
    if needed:
        raise UsageError(
            f"policy_kwargs: activation_fn={name} needs constructor arguments ({', '.join(needed)}), but SB3 makes "
            "each activation as activation_fn() without any; use one that needs none, e.g. nn.ReLU or nn.Tanh."
        )
    return activation


def _policy_parameters(policy_class: type) -> set[str]:
    """The arguments a policy class takes: its own named ones, and its bases' where it passes ``**kwargs`` on (the
    masked LSTM policies, the job scorer)."""
    names: set[str] = set()
    for cls in policy_class.__mro__:
        parameters = inspect.signature(cls).parameters
        names |= {name for name, parameter in parameters.items() if parameter.kind not in _VARIADIC}
        if not any(parameter.kind is parameter.VAR_KEYWORD for parameter in parameters.values()):
            return names
    return names


def recorded_policy_kwargs(model: MaskablePPO | MaskableRecurrentPPO) -> dict[str, Any]:
    """The policy_kwargs the model's policy was built with, as a file gives them (``activation_fn="nn.Tanh"``).

    :param model: a built or loaded model.
    """
    policy = model.policy
    return {**model.policy_kwargs, "net_arch": policy.net_arch, "activation_fn": f"nn.{policy.activation_fn.__name__}"}


def quiet_logger(model: Any, verbose: int) -> None:
    """SB3's own logger choice without TensorBoard (stdout when verbose), but not its empty /tmp/SB3-<date>
    folder, which ``learn()`` would otherwise leave behind at every run.

    :param model: the model, made without ``tensorboard_log``.
    :param verbose: the run's ``verbose``.
    """
    model.set_logger(Logger(None, [HumanOutputFormat(sys.stdout)] if verbose >= 1 else []))


def build_model(config: TrainConfig, policy: str | type, kwargs: dict[str, Any], env: Any, device: str) -> Model:
    """A new model of ``config.algo``, or the ``-i`` model with the run's hyperparameters set (its policy kept).

    :param config: the run (``algo``, ``seed``, ``verbose``, ``tensorboard_log``, ``trained_agent``).
    :param policy: the policy's name, or its class.
    :param kwargs: :func:`model_kwargs`' arguments (``policy_kwargs`` with its classes).
    :param env: the VecEnv the model reads its spaces (and, for a gymnasium run, its steps) from.
    :param device: the torch device.
    :return: the model; without TensorBoard, its logger is :func:`quiet_logger`'s.
    """
    algorithm = ALGORITHMS[config.algo]
    tensorboard_log = None if config.tensorboard_log is None else str(config.tensorboard_log)
    common: dict[str, Any] = {"tensorboard_log": tensorboard_log, "verbose": config.verbose, "seed": config.seed}
    if config.trained_agent is not None:  # SB3's load sets the keyword arguments, then rebuilds schedules
        rest = {key: value for key, value in kwargs.items() if key != "policy_kwargs"}
        model = algorithm.load(Path(config.trained_agent), env=env, device=device, **common, **rest)
    else:
        model = algorithm(policy, env, device=device, **common, **kwargs)
    if tensorboard_log is None:
        quiet_logger(model, config.verbose)
    return model
