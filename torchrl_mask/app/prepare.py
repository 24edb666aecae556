"""Every check of a ``torchrl-mask train`` run, once, before anything is written: :func:`prepare` turns a
:class:`~torchrl_mask.app.config.TrainConfig` into the :class:`~torchrl_mask.app.pipeline.Plan` that
:func:`~torchrl_mask.app.pipeline.run` carries out without checking it again.

In the order a user fixes them: the rollout (no minibatch of one row), the paths (the output folder can be made
and is not another run's, the ``-i`` file exists, TensorBoard is installed for ``--tensorboard-log``), the device,
then the env's own checks, made by its task (:mod:`torchrl_mask.app.gym_task`: the env is made, its masks found,
the policy fits; :mod:`torchrl_mask.app.game_task`: the game exists and has masks), the ``-i`` model among them.
Each failure is one :class:`~torchrl_mask.app.hyperparams.UsageError` line.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path
from typing import Any

from torchrl_mask.app import run_folder
from torchrl_mask.app.config import TrainConfig, check_rollout
from torchrl_mask.app.hyperparams import UsageError
from torchrl_mask.app.pipeline import Plan

__all__ = ["check_device", "check_paths", "prepare"]


def check_paths(config: TrainConfig) -> Path:
    """Check every path a configuration names; nothing is written, and torch is not imported.

    :param config: the run's configuration.
    :return: the output folder (:meth:`~torchrl_mask.app.config.TrainConfig.output_dir`).
    :raises UsageError: an output or TensorBoard folder that cannot be made, an output folder in use or holding
        files (without ``overwrite``), a trained agent that is not a file, or ``tensorboard_log`` without
        TensorBoard installed.
    """
    out = run_folder.check_folder(config.output_dir(), "--out")
    agent = config.trained_agent
    if agent is not None and not agent.is_file():
        what = "a folder" if agent.is_dir() else "no such file"
        raise UsageError(f"-i {agent}: {what}; pass a model saved by torchrl-mask train (.zip).")
    run_folder.check_out(out, config.overwrite, agent)
    if config.tensorboard_log is not None:
        run_folder.check_folder(config.tensorboard_log, "--tensorboard-log")
        if importlib.util.find_spec("tensorboard") is None:
            raise UsageError("--tensorboard-log needs TensorBoard: pip install 'torchrl-mask[tensorboard]'.")
    return out


def check_device(device: str) -> str:
    """``device`` if this machine can train on it (``auto`` passes as it is).

    :param device: ``cpu``, ``cuda``, ``cuda:N``, ``mps`` or ``auto``.
    :return: ``device``.
    :raises UsageError: not a torch device, or one this machine does not have.
    """
    import torch  # only once the configuration and its paths are checked: a bad path answers fast

    if device == "auto":
        return device
    try:
        parsed = torch.device(device)
    except RuntimeError:
        raise UsageError(f"--device {device!r} is not a torch device; use cpu, cuda, cuda:0, mps or auto.") from None
    if parsed.type == "cuda":
        count = torch.cuda.device_count()
        if count == 0:
            raise UsageError(f"--device {device}: CUDA is not available on this machine; use --device cpu.")
        if parsed.index is not None and parsed.index >= count:
            raise UsageError(
                f"--device {device}: this machine has {count} CUDA device(s); use cuda:0 to cuda:{count - 1}."
            )
    if parsed.type == "mps" and not torch.backends.mps.is_available():
        raise UsageError(f"--device {device}: MPS is not available on this machine; use --device cpu.")
    if parsed.type not in ("cpu", "cuda", "mps"):
        raise UsageError(f"--device {device}: torchrl_mask trains on cpu, cuda or mps; use one of those.")
    return device


def make_task(config: TrainConfig, **options: Any) -> Any:
    """The task of the run's kind of env, made (and so checked: see the module).

    :param config: the run.
    :param options: the task's own options (:class:`~torchrl_mask.app.game_task.GameTask`'s ``engine``,
        ``snapshots``).
    :return: a :class:`~torchrl_mask.app.pipeline.Task`.
    """
    if config.kind.is_game:
        from torchrl_mask.app.game_task import GameTask

        return GameTask(config, **options)
    if config.kind.kind == "jobshop":
        from torchrl_mask.app.jobshop_task import JobShopTask

        return JobShopTask(config, **options)
    from torchrl_mask.app.gym_task import GymTask

    return GymTask(config, **options)


def prepare(config: TrainConfig, **options: Any) -> Plan:
    """Check a run (see the module) and hand back its plan; nothing is written.

    :param config: the run, as :func:`~torchrl_mask.app.config.train_config` made it.
    :param options: the task's own options (see :func:`make_task`).
    :return: the plan: the configuration, the output folder, the device and the task.
    :raises UsageError: the first check that fails.
    """
    check_rollout(config)
    out = check_paths(config)
    device = check_device(config.device)
    return Plan(config, out, device, make_task(config, **options))
