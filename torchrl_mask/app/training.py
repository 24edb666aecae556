"""The main job behind ``torchrl-mask train``: a masked env from a gymnasium id, MaskablePPO on it (SB3's
VecEnv or a TorchRL collector) with rl-zoo3's callbacks, an evaluation with and without masks, and the files a
user looks at.

:func:`train` takes the :class:`~torchrl_mask.app.config.TrainConfig` the command line builds, checks all of it
before it writes anything, locks the output folder (:mod:`torchrl_mask.app.run_folder`), and writes to it, the
model and the curve's CSV right after training (also when a ``KeyboardInterrupt`` stops it:
:class:`TrainingInterrupted`), the rest after the evaluation:

- ``model.zip``: the trained model (``torchrl_mask.MaskablePPO.load`` or sb3-contrib's ``MaskablePPO.load``; with
  ``algo="ppo_lstm_mask"``, ``torchrl_mask.MaskableRecurrentPPO.load``);
- ``learning_curve.png``: episode return over timesteps beside the evaluation;
- ``learning_curve.csv``: the points of that curve (``timestep,episode_return``);
- ``evaluation.json``: the evaluation, and the configuration that produced it;
- ``monitor/``: SB3's ``Monitor`` files, one per env, the curve's source;
- with ``save_freq``: ``rl_model_<steps>_steps.zip`` checkpoints (SB3's ``CheckpointCallback``);
- with ``eval_freq``: ``best_model.zip`` and ``evaluations.npz`` (sb3-contrib's ``MaskableEvalCallback``; for the
  recurrent model ``MaskableRecurrentEvalCallback``, which keeps the LSTM state).

With ``tensorboard_log``, SB3's logger writes TensorBoard event files under ``<tensorboard_log>/MaskablePPO_<n>``.
The evaluation, the curve and the PNG are :mod:`torchrl_mask.app.results`.

The env is made and masked by :mod:`torchrl_mask.app.masked_env`, whatever convention it reports its mask in.
"""

from __future__ import annotations

import inspect
import json
import sys
from dataclasses import asdict, dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

import torch
from gymnasium import spaces
from sb3_contrib.common.maskable.callbacks import MaskableEvalCallback
from stable_baselines3.common.callbacks import BaseCallback, CheckpointCallback, EvalCallback
from stable_baselines3.common.env_util import make_vec_env
from stable_baselines3.common.logger import HumanOutputFormat, Logger
from stable_baselines3.common.preprocessing import is_image_space
from stable_baselines3.common.utils import LinearSchedule
from stable_baselines3.common.vec_env import DummyVecEnv, VecEnv

from torchrl_mask.algorithms.collector_checks import was_shut_down
from torchrl_mask.algorithms.ppo import MaskablePPO
from torchrl_mask.algorithms.recurrent_evaluation import MaskableRecurrentEvalCallback
from torchrl_mask.algorithms.recurrent_ppo import MaskableRecurrentPPO
from torchrl_mask.app import results, run_folder
from torchrl_mask.app.config import (
    TrainConfig,
    TrainingInterrupted,
    UsageError,
    check_config,
    check_device,
    failed,
)
from torchrl_mask.app.masked_env import make_masked_env
from torchrl_mask.app.results import EVAL_SEED_OFFSET
from torchrl_mask.app.train_collectors import make_collector
from torchrl_mask.app.trained_agent import check_trained_agent
from torchrl_mask.torchrl.workers import shutdown as shutdown_collector

__all__ = ["TrainResult", "TrainingInterrupted", "describe_masks", "model_kwargs", "train"]

MASK_SOURCE_TEXT = {
    "method": "its action_masks()",
    "info": "info['action_mask']",
    "observation": "observation['action_mask']",
}
OUTPUT_FILES = ("model.zip", "learning_curve.png", "learning_curve.csv", "evaluation.json")
# The policy's constructor arguments that MaskablePPO fills in itself; policy_kwargs cannot set them.
POLICY_SET_BY_PPO = {"self", "observation_space", "action_space", "lr_schedule"}
#: The model each ``--algo`` trains.
ALGORITHMS: dict[str, type[MaskablePPO] | type[MaskableRecurrentPPO]] = {
    "ppo_mask": MaskablePPO,
    "ppo_lstm_mask": MaskableRecurrentPPO,
}


@dataclass
class TrainResult:
    """What :func:`train` produced.

    :param model: the trained model.
    :param out: the output folder.
    :param evaluation: mean and std of the episode return for ``"masked"``, ``"unmasked"`` and ``"random"``
        (``{"error": message}`` for one that raised).
    :param curve: ``(timestep, episode_return)`` of every training episode, in the order they ended.
    :param files: the names of the files written in ``out`` (checkpoints and best model included).
    """

    model: MaskablePPO | MaskableRecurrentPPO
    out: Path
    evaluation: dict[str, dict[str, Any]]
    curve: list[tuple[int, float]] = field(default_factory=list)
    files: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class _Plan:
    """What :func:`_prepare` checked and worked out, before anything is written."""

    out: Path
    device: str
    policy: str
    model_kwargs: dict[str, Any]
    mask_text: str


def _policy(config: TrainConfig, observation_space: spaces.Space) -> str:
    policy = config.hyperparams.get("policy")
    fits = "MultiInputPolicy" if isinstance(observation_space, spaces.Dict) else "MlpPolicy"
    cnn = "CnnPolicy"
    if config.algo == "ppo_lstm_mask":  # sb3-contrib's names for the same three with an LSTM
        fits, cnn = fits.replace("Policy", "LstmPolicy"), "CnnLstmPolicy"
    if policy is None:
        return fits
    if policy != fits and (policy != cnn or not is_image_space(observation_space)):
        raise UsageError(
            f"policy={policy} does not fit {config.env_id}'s observation space {observation_space}; use policy={fits}."
        )
    return str(policy)


def model_kwargs(hyperparams: dict[str, Any], policy: str, algo: str = "ppo_mask") -> dict[str, Any]:
    """MaskablePPO's keyword arguments from checked hyperparameters: rl-zoo3's ``lin_<x>`` as SB3's
    ``LinearSchedule`` (from x to 0), ``activation_fn="nn.ReLU"`` as the class; policy_kwargs checked by name."""
    kwargs = {key: value for key, value in hyperparams.items() if key != "policy"}
    for key in ("learning_rate", "clip_range", "clip_range_vf"):
        if isinstance(kwargs.get(key), str):
            kwargs[key] = LinearSchedule(float(kwargs[key].removeprefix("lin_")), 0.0, 1.0)
    if "policy_kwargs" not in kwargs:
        return kwargs
    policy_kwargs = dict(kwargs["policy_kwargs"])
    if "activation_fn" in policy_kwargs:
        name = policy_kwargs["activation_fn"]
        activation = getattr(torch.nn, name.rsplit(".", 1)[-1], None)
        if not (isinstance(activation, type) and issubclass(activation, torch.nn.Module)):
            raise UsageError(f"policy_kwargs: activation_fn={name} is not a torch.nn module; use e.g. nn.ReLU.")
        if activation.__module__ != "torch.nn.modules.activation" or activation is torch.nn.MultiheadAttention:
            raise UsageError(
                f"policy_kwargs: activation_fn={name} is not an activation function; use one of torch.nn's "
                "activations, e.g. nn.ReLU or nn.Tanh."
            )
        _refuse_constructor_arguments(name, activation)
        policy_kwargs["activation_fn"] = activation
    accepted = _policy_parameters(ALGORITHMS[algo].policy_aliases[policy]) - POLICY_SET_BY_PPO
    unknown = sorted(set(policy_kwargs) - accepted)
    if unknown:
        takes = ", ".join(sorted(accepted))
        raise UsageError(f"policy_kwargs: {', '.join(unknown)} is not an argument of {policy}; it takes {takes}.")
    kwargs["policy_kwargs"] = policy_kwargs
    return kwargs


def _refuse_constructor_arguments(name: str, activation: type[torch.nn.Module]) -> None:
    """SB3 makes each activation layer as ``activation_fn()``: one whose constructor needs arguments is refused."""
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


def _recorded_policy_kwargs(model: MaskablePPO) -> dict[str, Any]:
    """The policy_kwargs the model's policy was built with, as a file gives them (``activation_fn="nn.Tanh"``)."""
    policy = model.policy
    return {**model.policy_kwargs, "net_arch": policy.net_arch, "activation_fn": f"nn.{policy.activation_fn.__name__}"}


def _policy_parameters(policy_class: type) -> set[str]:
    """The arguments a policy class takes: its own, or its base's where it passes ``*args, **kwargs`` on (the
    masked LSTM policies)."""
    for cls in policy_class.__mro__:
        parameters = inspect.signature(cls).parameters
        if not any(parameter.kind is parameter.VAR_KEYWORD for parameter in parameters.values()):
            return set(parameters)
    return set()


def _prepare(config: TrainConfig) -> _Plan:
    """Every check of the configuration, in the order a user fixes them; nothing is written."""
    out = check_config(config)
    device = check_device(config.device)
    env = make_masked_env(config.env_id)
    try:
        policy = _policy(config, env.observation_space)
        kwargs = model_kwargs(config.hyperparams, policy, config.algo)
        if config.trained_agent is not None:
            check_trained_agent(config.trained_agent, env, ALGORITHMS[config.algo])
        mask_text = MASK_SOURCE_TEXT[env.get_wrapper_attr("source")]
    finally:
        env.close()
    return _Plan(out, device, policy, kwargs, mask_text)


def _build_model(config: TrainConfig, plan: _Plan, env: VecEnv) -> MaskablePPO | MaskableRecurrentPPO:
    """A new model of ``config.algo``, or the trained agent with the hyperparameters given (its policy kept, as
    rl-zoo3 does)."""
    algorithm = ALGORITHMS[config.algo]
    tensorboard_log = None if config.tensorboard_log is None else str(config.tensorboard_log)
    common: dict[str, Any] = {"tensorboard_log": tensorboard_log, "verbose": config.verbose, "seed": config.seed}
    if config.trained_agent is not None:
        kwargs = {key: value for key, value in plan.model_kwargs.items() if key != "policy_kwargs"}
        model = algorithm.load(config.trained_agent, env=env, device=plan.device, **common, **kwargs)
    else:
        model = algorithm(plan.policy, env, device=plan.device, **common, **plan.model_kwargs)
    if tensorboard_log is None:
        quiet_logger(model, config)
    return model


def quiet_logger(model: Any, config: TrainConfig) -> None:
    """SB3's own logger choice without TensorBoard (stdout when verbose), but not its empty /tmp/SB3-<date>
    folder, which ``learn()`` would otherwise leave behind at every run.

    :param model: the model, made without ``tensorboard_log``.
    :param config: the run.
    """
    model.set_logger(Logger(None, [HumanOutputFormat(sys.stdout)] if config.verbose >= 1 else []))


def checkpoints(config: TrainConfig, out: Path) -> list[BaseCallback]:
    """rl-zoo3's checkpoints (SB3's ``CheckpointCallback``): ``rl_model_<steps>_steps.zip`` in ``out`` every
    ``save_freq`` env steps over all envs; none for ``save_freq`` 0.

    :param config: the run.
    :param out: the output folder.
    """
    if config.save_freq <= 0:
        return []
    every = max(config.save_freq // config.n_envs, 1)
    return [CheckpointCallback(every, str(out), name_prefix="rl_model", verbose=config.verbose)]


def checkpoint_files(out: Path) -> list[str]:
    """The checkpoints :func:`checkpoints` wrote into ``out``, by name."""
    return sorted(path.name for path in out.glob("rl_model_*_steps.zip"))


def _callbacks(config: TrainConfig, out: Path) -> list[BaseCallback]:
    """rl-zoo3's: checkpoints and periodic evaluation, their frequencies in env steps over all envs."""
    callbacks = checkpoints(config, out)
    if config.eval_freq > 0:
        eval_env = make_vec_env(
            make_masked_env, n_envs=1, seed=config.seed + EVAL_SEED_OFFSET, env_kwargs={"env_id": config.env_id}
        )
        # sb3-contrib's drops the LSTM state at every step (docs/reference/algorithms/recurrent_evaluation.md)
        evaluator = MaskableRecurrentEvalCallback if config.algo == "ppo_lstm_mask" else MaskableEvalCallback
        callbacks.append(
            evaluator(
                eval_env,
                n_eval_episodes=config.eval_episodes,
                eval_freq=max(config.eval_freq // config.n_envs, 1),
                best_model_save_path=str(out),
                log_path=str(out),
                deterministic=True,
                verbose=config.verbose,
            )
        )
    return callbacks


def _learn(config: TrainConfig, model: Any, monitor_dir: Path, callbacks: list[BaseCallback]) -> None:
    continuing = config.trained_agent is not None  # num_timesteps goes on from the saved model's
    if config.collector is None:
        model.learn(config.n_timesteps, callbacks, progress_bar=config.progress_bar, reset_num_timesteps=not continuing)
    else:
        collector = make_collector(config, model, monitor_dir)
        try:
            model.learn(config.n_timesteps, callbacks, progress_bar=config.progress_bar,
                        reset_num_timesteps=not continuing, collector=collector)  # fmt: skip
        finally:  # learn() shuts it down itself, but not a collector it refused before starting
            if not was_shut_down(collector):
                shutdown_collector(collector)


def _make_env(config: TrainConfig, monitor_dir: Path) -> VecEnv:
    if config.collector is None:
        return make_vec_env(
            make_masked_env, n_envs=config.n_envs, seed=config.seed, env_kwargs={"env_id": config.env_id},
            monitor_dir=str(monitor_dir),
        )  # fmt: skip
    # never stepped: it gives the spaces and the env count (SB3's progress bar counts by it)
    return DummyVecEnv([partial(make_masked_env, config.env_id)] * config.n_envs)


def _learn_and_save(config: TrainConfig, plan: _Plan, monitor_dir: Path) -> tuple[Any, list[tuple[int, float]]]:
    """Train, then save the model and the learning curve at once (also after an interrupt, then re-raised)."""
    env = _make_env(config, monitor_dir)
    try:
        model = _build_model(config, plan, env)
        callbacks = _callbacks(config, plan.out)
    except BaseException:
        env.close()
        raise
    interrupt: KeyboardInterrupt | None = None
    error: Exception | None = None
    try:
        _learn(config, model, monitor_dir, callbacks)
    except KeyboardInterrupt as stop:
        interrupt = stop
    except Exception as err:  # an env, the collector or a callback: keep what was trained, then say so
        error = err
    finally:
        env.close()
        for callback in callbacks:
            if isinstance(callback, EvalCallback):
                callback.eval_env.close()
    model.save(plan.out / "model.zip")
    curve = results.learning_curve(monitor_dir)
    lines = ["timestep,episode_return", *(f"{step},{ret:g}" for step, ret in curve)]
    (plan.out / "learning_curve.csv").write_text("\n".join(lines) + "\n")
    if interrupt is not None:
        raise TrainingInterrupted(plan.out, model.num_timesteps) from interrupt
    if error is not None:
        raise failed(plan.out, f"training (at step {model.num_timesteps:,})", error) from error
    return model, curve


def train(config: TrainConfig) -> TrainResult:
    """Train; save the model and the learning curve; evaluate; write the PNG and the evaluation.

    Sets torch's CPU thread count to ``config.threads`` for the process. The output folder is locked while the
    run writes to it (:mod:`torchrl_mask.app.run_folder`). An evaluation that raises (an env that refuses an
    illegal move, played without masks) is recorded as ``{"error": ...}``; the model is saved before.

    :param config: what to train and where to write it.
    :return: the model, the output folder, the evaluation, the learning curve and the files written.
    :raises UsageError: an unknown env id, an env without masks, a bad device, an output path that cannot be a
        folder or is in use, a policy or policy_kwargs that do not fit, or a trained agent that does not load.
    :raises TrainingInterrupted: a ``KeyboardInterrupt`` while training; the model and curve were saved.
    """
    plan = _prepare(config)  # fail here, with one clear line, before anything is written
    torch.set_num_threads(config.threads)
    out = plan.out
    with run_folder.claim(out, config.overwrite):
        monitor_dir = out / "monitor"
        with run_folder.made_folder(monitor_dir):  # removed again if training ends before an env wrote to it
            model, curve = _learn_and_save(config, plan, monitor_dir)
        try:
            evaluation = results.evaluate(
                model, partial(make_masked_env, config.env_id), config.eval_episodes, config.seed
            )
            results.plot(
                curve, evaluation, config.env_id, config.eval_episodes, out / "learning_curve.png",
                algo_name=type(model).__name__,
            )  # fmt: skip
            recorded = {**asdict(config), "out": str(out)}
            if config.trained_agent is not None:  # its saved policy was kept: record that one
                recorded["hyperparams"]["policy_kwargs"] = _recorded_policy_kwargs(model)
            record = {"config": recorded, "evaluation": evaluation}
            (out / "evaluation.json").write_text(json.dumps(record, indent=2, default=str) + "\n")
        except KeyboardInterrupt as stop:  # while evaluating: the model is saved already
            raise TrainingInterrupted(out, model.num_timesteps) from stop
        except Exception as err:  # the evaluation, the plot or a file: the model is saved already
            raise failed(out, "the evaluation after training (or writing its files)", err) from err
    files = [*OUTPUT_FILES, *checkpoint_files(out)]
    files += [name for name in ("best_model.zip", "evaluations.npz") if (out / name).exists()]
    return TrainResult(model=model, out=out, evaluation=evaluation, curve=curve, files=files)


def describe_masks(config: TrainConfig) -> str:
    """Check the configuration a user gave and say where the env's masks come from, before any training.

    :param config: what to train.
    :return: e.g. ``"info['action_mask']"``.
    :raises UsageError: what :func:`train` raises before it writes anything.
    """
    return _prepare(config).mask_text
