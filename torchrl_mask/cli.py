"""``torchrl-mask``: train MaskablePPO on a masked env, or benchmark it against sb3-contrib.

``torchrl-mask train`` trains :class:`~torchrl_mask.MaskablePPO` on a gymnasium env that reports action masks
(by default ``Taxi-v4``, which ships with gymnasium and puts its mask in ``info["action_mask"]``), with SB3's
progress bar; then it evaluates the trained policy with masks, without masks and against random legal
actions, and writes to the output folder:

- ``model.zip``: the trained model (``torchrl_mask.MaskablePPO.load`` or sb3-contrib's ``MaskablePPO.load``);
- ``learning_curve.png``: episode return over timesteps beside the evaluation;
- ``learning_curve.csv``: the points of that curve (``timestep,episode_return``);
- ``evaluation.json``: the evaluation, and the configuration that produced it.

An env is masked when it has an ``action_masks()`` method (sb3-contrib's convention, e.g. an env wrapped in
``sb3_contrib.common.wrappers.ActionMasker``), reports ``info["action_mask"]`` after ``reset`` and ``step``
(gymnasium's convention), or has an ``"action_mask"`` entry in a Dict observation.

``torchrl-mask bench`` hands every argument after it to :func:`torchrl_mask.benchmark.main`.

Input a user can fix (an unknown env id, an env without masks, a bad option value) ends with one line on
stderr that says what is wrong and how to fix it, and exit status 2.

Example:
    >>> from torchrl_mask.cli import main
    >>> main(["train", "--steps", "2048", "--n-envs", "2", "--out", "runs/smoke"])  # doctest: +SKIP
    0
"""

from __future__ import annotations

import argparse
import csv
import importlib
import json
import re
import sys
import time
import warnings
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field, replace
from functools import partial
from pathlib import Path
from typing import Any, Literal, cast

import gymnasium as gym
import numpy as np
import torch
from gymnasium import spaces
from sb3_contrib.common.maskable.evaluation import evaluate_policy
from sb3_contrib.common.wrappers import ActionMasker
from stable_baselines3.common.env_util import make_vec_env
from stable_baselines3.common.monitor import Monitor
from stable_baselines3.common.vec_env import DummyVecEnv, VecEnv
from torchrl.collectors import BaseCollector, Collector, MultiSyncCollector
from torchrl.envs import SerialEnv, TransformedEnv

from torchrl_mask.collectors import ActionMaskInInfo, MaskablePolicyModule, learn_from_collector, masked_gym_env
from torchrl_mask.masks import mask_spec
from torchrl_mask.ppo import MaskablePPO

__all__ = [
    "InfoActionMasker",
    "TrainConfig",
    "TrainResult",
    "UsageError",
    "main",
    "make_masked_env",
    "mask_source",
    "train",
]

MaskSource = Literal["method", "info", "observation"]
MASK_KEY = "action_mask"
MASK_SOURCE_TEXT = {
    "method": "its action_masks()",
    "info": "info['action_mask']",
    "observation": "observation['action_mask']",
}
COLLECTOR_TEXT = {
    "sync": "TorchRL Collector over a SerialEnv",
    "multisync": "TorchRL MultiSyncCollector, one worker process each",
}
EXIT_USAGE = 2


class UsageError(ValueError):
    """Input the user can fix: the message says what is wrong and how to fix it, on one line."""


@dataclass(frozen=True)
class TrainConfig:
    """Everything ``torchrl-mask train`` needs; the defaults are what ``make train`` runs.

    The PPO defaults are tuned for ``Taxi-v4``: 100k steps take about a minute on 2 CPU cores and reach a
    mean return near the env's solved threshold of 8 (random legal actions score about -175).

    :param env_id: a registered gymnasium id of an env that reports action masks.
    :param steps: total env steps to train for (across all envs).
    :param seed: seeds the envs, the policy and the evaluation env.
    :param n_envs: envs stepped side by side (``DummyVecEnv``).
    :param device: torch device of the policy and the rollout (``cpu``, ``cuda``, ``cuda:1``, ``mps``, ``auto``).
    :param out: output folder; None means ``runs/<env_id>-<date>-<time>``.
    :param eval_episodes: episodes per evaluation (each of: masked, unmasked, random legal actions).
    :param n_steps: steps per env per rollout (the buffer holds ``n_steps * n_envs`` transitions).
    :param batch_size: minibatch size; None means a quarter of the rollout.
    :param learning_rate: Adam step size.
    :param ent_coef: entropy bonus weight.
    :param gamma: discount factor.
    :param net_arch: hidden layer sizes of the policy and value networks.
    :param progress_bar: show SB3's progress bar while training.
    :param threads: torch CPU threads (``torch.set_num_threads``); one is fastest for small networks, and far
        faster than several when other processes share the cores.
    :param collector: None steps the envs with SB3's ``DummyVecEnv`` in ``learn``; ``"sync"`` collects with
        TorchRL's ``Collector`` over a ``SerialEnv`` in this process, ``"multisync"`` with TorchRL's
        ``MultiSyncCollector``, one worker process per env, both through
        :func:`~torchrl_mask.collectors.learn_from_collector`.
    """

    env_id: str = "Taxi-v4"
    steps: int = 100_000
    seed: int = 0
    n_envs: int = 8
    device: str = "cpu"
    out: Path | None = None
    eval_episodes: int = 20
    n_steps: int = 256
    batch_size: int | None = None
    learning_rate: float = 1e-3
    ent_coef: float = 0.01
    gamma: float = 0.99
    net_arch: tuple[int, ...] = (64, 64)
    progress_bar: bool = True
    threads: int = 1
    collector: Literal["sync", "multisync"] | None = None

    def output_dir(self) -> Path:
        """The output folder: :attr:`out`, or ``runs/<env_id>-<date>-<time>`` (env id made file-safe)."""
        if self.out is not None:
            return self.out
        safe_id = re.sub(r"[^A-Za-z0-9._-]+", "_", self.env_id)
        return Path("runs") / f"{safe_id}-{time.strftime('%Y%m%d-%H%M%S')}"


@dataclass
class TrainResult:
    """What :func:`train` produced.

    :param model: the trained model.
    :param out: the output folder.
    :param evaluation: mean and std of the episode return for ``"masked"``, ``"unmasked"`` and ``"random"``.
    :param curve: ``(timestep, episode_return)`` of every training episode, in the order they ended.
    """

    model: MaskablePPO
    out: Path
    evaluation: dict[str, dict[str, float]]
    curve: list[tuple[int, float]] = field(default_factory=list)


class InfoActionMasker(ActionMasker):
    """sb3-contrib's :class:`~sb3_contrib.common.wrappers.ActionMasker` for an env that reports its mask in ``info``.

    gymnasium's convention (``Taxi-v4``, ``CliffWalking``...) puts the mask of the new state in
    ``info["action_mask"]`` after ``reset`` and ``step``. This wrapper keeps the last one and serves it through
    ``action_masks()``, which MaskablePPO calls each step. :func:`make_masked_env` puts
    :class:`~torchrl_mask.collectors.ActionMaskInInfo` beneath it, which brings the other conventions (an
    ``action_masks()`` method, an entry of a Dict observation) into ``info``, as the collectors see them.

    :param env: the env to wrap; its ``info`` must hold ``"action_mask"`` after every ``reset`` and ``step``.
    """

    def __init__(self, env: gym.Env) -> None:
        super().__init__(env, self._last_mask)
        self._mask: np.ndarray | None = None

    def _last_mask(self, env: gym.Env) -> np.ndarray:
        if self._mask is None:
            raise RuntimeError("action_masks() was called before reset(); reset the env first.")
        return self._mask

    def _record(self, info: dict[str, Any]) -> None:
        if MASK_KEY not in info:
            raise KeyError(
                f"{self.env.spec.id if self.env.spec else self.env}: info has no {MASK_KEY!r} entry on this step; "
                "the env must report its mask after every reset and step."
            )
        self._mask = np.asarray(info[MASK_KEY]).astype(bool)

    def reset(self, **kwargs: Any) -> tuple[Any, dict[str, Any]]:
        obs, info = self.env.reset(**kwargs)
        self._record(info)
        return obs, info

    def step(self, action: Any) -> tuple[Any, Any, bool, bool, dict[str, Any]]:
        obs, reward, terminated, truncated, info = self.env.step(action)
        self._record(info)
        return obs, reward, terminated, truncated, info


def _make_env(env_id: str) -> gym.Env:
    # gymnasium warns before it raises (e.g. "Taxi-v3 is out of date"); show its warnings only if it succeeds.
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        env = gym.make(env_id)
    for warning in caught:
        warnings.warn_explicit(warning.message, warning.category, warning.filename, warning.lineno)
    return env


def _make_user_env(env_id: str) -> gym.Env:
    try:
        return _make_env(env_id)
    except gym.error.Error as err:  # unknown id, unknown version, deprecated version, missing extra
        raise UsageError(
            f"cannot make env {env_id!r}: {_one_line(err)} Pass a registered gymnasium id with --env, "
            "e.g. --env Taxi-v4 (see gymnasium.pprint_registry())."
        ) from None
    except ModuleNotFoundError as err:  # "some_module:Env-v0" with a module that is not installed
        raise UsageError(
            f"cannot make env {env_id!r}: {_one_line(err)} Install the package that registers it, or pass a "
            "registered gymnasium id with --env, e.g. --env Taxi-v4."
        ) from None


def mask_source(env: gym.Env) -> MaskSource:
    """Find where an env reports its action mask; resets the env once to look at ``info``.

    :param env: a freshly made env.
    :return: ``"method"`` (it has ``action_masks()``), ``"observation"`` (``"action_mask"`` key in a Dict
        observation) or ``"info"`` (``info["action_mask"]`` after reset).
    :raises UsageError: the action space cannot be masked, or the env reports no mask.
    """
    name = env.spec.id if env.spec is not None else type(env.unwrapped).__name__
    try:
        mask_spec(env.action_space)
    except TypeError:
        raise UsageError(
            f"{name} has action space {env.action_space}, which cannot be masked; MaskablePPO needs Discrete, "
            "MultiDiscrete or MultiBinary actions. Pick an env with discrete actions, e.g. --env Taxi-v4."
        ) from None
    try:
        if callable(env.get_wrapper_attr("action_masks")):
            return "method"
    except AttributeError:
        pass
    if isinstance(env.observation_space, spaces.Dict) and MASK_KEY in env.observation_space.spaces:
        return "observation"
    _, info = env.reset()
    if MASK_KEY in info:
        return "info"
    raise UsageError(
        f"{name} reports no action mask: it has no action_masks() method, no info['action_mask'] and no "
        "'action_mask' key in a Dict observation. Wrap it in sb3_contrib.common.wrappers.ActionMasker and "
        "register the wrapped env, or pick a masked env, e.g. --env Taxi-v4."
    )


def make_masked_env(env_id: str) -> InfoActionMasker:
    """Make a gymnasium env whose masks MaskablePPO reads through ``action_masks()``, whatever the convention.

    The env is wrapped in :class:`~torchrl_mask.collectors.ActionMaskInInfo` (the mask, wherever the env keeps
    it, goes to ``info["action_mask"]``; an entry of a Dict observation leaves the observation) and
    :class:`InfoActionMasker`: the observation space is the one :func:`~torchrl_mask.collectors.masked_gym_env`
    gives TorchRL's collectors.

    :param env_id: a registered gymnasium id (``module:Id`` imports ``module`` first).
    :return: the wrapped env.
    :raises UsageError: unknown id, a space that cannot be masked, or no mask.
    """
    env = _make_user_env(env_id)
    try:
        mask_source(env)
    except UsageError:
        env.close()
        raise
    return InfoActionMasker(ActionMaskInInfo(env))


def _collector_env(env_id: str, monitor_file: str) -> TransformedEnv:
    """One env of a TorchRL collector: SB3's ``Monitor`` (for the learning curve) under the masked TorchRL env."""
    return masked_gym_env(Monitor(_make_env(env_id), filename=monitor_file))


def _make_collector(config: TrainConfig, model: MaskablePPO, monitor_dir: Path) -> BaseCollector:
    """``sync``: the envs step in this process (``SerialEnv``); ``multisync``: one worker process per env."""
    makers = [partial(_collector_env, config.env_id, str(monitor_dir / str(rank))) for rank in range(config.n_envs)]
    policy = MaskablePolicyModule(model.policy)
    frames = config.n_envs * config.n_steps
    collector: BaseCollector
    if config.collector == "multisync":
        collector = MultiSyncCollector(
            makers, policy, frames_per_batch=frames, total_frames=-1, num_threads=config.threads
        )
    else:
        collector = Collector(SerialEnv(config.n_envs, makers), policy, frames_per_batch=frames, total_frames=-1)
    collector.set_seed(config.seed)
    return collector


def _monitor_curve(monitor_dir: Path) -> list[tuple[int, float]]:
    """``(timestep, return)`` of every episode in SB3's Monitor files, read as SB3's ``results_plotter`` reads them.

    Episodes of all envs are ordered by the time they ended; the timestep is the running sum of their lengths.
    """
    rows: list[tuple[float, int, float]] = []
    for path in sorted(monitor_dir.glob("*.monitor.csv")):
        with path.open() as file:
            t_start = float(json.loads(file.readline().lstrip("#"))["t_start"])
            rows += [(t_start + float(row["t"]), int(row["l"]), float(row["r"])) for row in csv.DictReader(file)]
    rows.sort()
    steps = np.cumsum([length for _, length, _ in rows])
    return [(int(step), ret) for step, (_, _, ret) in zip(steps, rows, strict=True)]


class _RandomLegalPolicy:
    """Picks a uniformly random allowed action in every mask group: the baseline a trained policy must beat."""

    def __init__(self, action_space: spaces.Space, seed: int) -> None:
        self.action_space = action_space
        self.groups = mask_spec(action_space).groups
        self.rng = np.random.default_rng(seed)

    def predict(self, observation: Any, *args: Any, action_masks: np.ndarray, **kwargs: Any) -> tuple[Any, None]:
        masks = np.asarray(action_masks, dtype=bool).reshape(-1, sum(self.groups))
        parts = np.split(masks, np.cumsum(self.groups)[:-1], axis=1)
        choice = np.array([[self.rng.choice(np.flatnonzero(row)) for row in part] for part in parts]).T
        if isinstance(self.action_space, spaces.Discrete):
            return choice[:, 0] + self.action_space.start, None
        return choice, None


def _evaluate(model: MaskablePPO, env_id: str, config: TrainConfig) -> dict[str, dict[str, float]]:
    results: dict[str, dict[str, float]] = {}
    players: dict[str, tuple[Any, bool]] = {
        "masked": (model, True),
        "unmasked": (model, False),
        "random": (_RandomLegalPolicy(model.action_space, config.seed), True),
    }
    for name, (player, use_masking) in players.items():
        # A fresh, identically seeded env per evaluation: all three see the same start states.
        env = make_vec_env(make_masked_env, n_envs=1, seed=config.seed + 10_000, env_kwargs={"env_id": env_id})
        returns, _ = evaluate_policy(
            cast(Any, player),
            env,
            n_eval_episodes=config.eval_episodes,
            deterministic=True,
            return_episode_rewards=True,
            use_masking=use_masking,
        )
        env.close()
        results[name] = {"mean": float(np.mean(returns)), "std": float(np.std(returns))}
    return results


def _plot(
    curve: list[tuple[int, float]], evaluation: dict[str, dict[str, float]], config: TrainConfig, path: Path
) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (ax_curve, ax_eval) = plt.subplots(1, 2, figsize=(11, 4.2), width_ratios=(2.2, 1), layout="constrained")
    if curve:
        steps, returns = (np.asarray(column) for column in zip(*curve, strict=True))
        window = max(1, min(50, len(returns) // 10))
        smooth = np.convolve(returns, np.ones(window) / window, mode="valid")
        ax_curve.scatter(steps, returns, s=4, alpha=0.25, color="tab:blue", label="episode")
        ax_curve.plot(steps[window - 1 :], smooth, color="tab:blue", lw=2, label=f"mean of last {window}")
        ax_curve.legend(loc="lower right")
    else:
        ax_curve.text(0.5, 0.5, "no episode ended during training", ha="center", transform=ax_curve.transAxes)
    ax_curve.set(xlabel="timestep", ylabel="episode return", title=f"MaskablePPO on {config.env_id}: training")
    ax_curve.grid(alpha=0.3)

    labels = {"masked": "trained,\nmasks", "unmasked": "trained,\nno masks", "random": "random\nlegal"}
    means = [evaluation[key]["mean"] for key in labels]
    bars = ax_eval.bar(list(labels.values()), means, color=["tab:green", "tab:red", "tab:gray"])
    ax_eval.bar_label(bars, labels=[f"{mean:.1f}" for mean in means], padding=2)
    ax_eval.axhline(0, color="black", lw=0.8)
    ax_eval.set(ylabel="mean episode return", title=f"evaluation, {config.eval_episodes} episodes")
    fig.savefig(path, dpi=100)
    plt.close(fig)


def _check_device(device: str) -> str:
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


def _check_out(out: Path) -> Path:
    if out.exists() and not out.is_dir():
        raise UsageError(f"--out {out} is a file; pass a folder (it is created if missing).")
    return out


def train(config: TrainConfig) -> TrainResult:
    """Train, evaluate, and write the model, the learning curve and the evaluation to the output folder.

    :param config: what to train and where to write it.
    :return: the model, the output folder, the evaluation and the learning curve.
    Sets torch's CPU thread count to ``config.threads`` for the process.

    :raises UsageError: an unknown env id, an env without masks, a bad device, or an output path that is a file.
    """
    device = _check_device(config.device)
    out = _check_out(config.output_dir())
    make_masked_env(config.env_id).close()  # fail here, with one clear line, before anything is written
    torch.set_num_threads(config.threads)
    out.mkdir(parents=True, exist_ok=True)

    monitor_dir = out / "monitor"
    monitor_dir.mkdir(exist_ok=True)
    for stale in monitor_dir.glob("*.monitor.csv"):  # a rerun into the same folder starts a new curve
        stale.unlink()
    if config.collector is None:
        env: VecEnv = make_vec_env(
            make_masked_env,
            n_envs=config.n_envs,
            seed=config.seed,
            env_kwargs={"env_id": config.env_id},
            monitor_dir=str(monitor_dir),
        )
    else:  # never stepped: it gives the spaces and the env count (SB3's progress bar counts by it)
        env = DummyVecEnv([partial(make_masked_env, config.env_id)] * config.n_envs)
    model = MaskablePPO(
        "MultiInputPolicy" if isinstance(env.observation_space, spaces.Dict) else "MlpPolicy",
        env,
        n_steps=config.n_steps,
        batch_size=config.batch_size or max(1, config.n_steps * config.n_envs // 4),
        learning_rate=config.learning_rate,
        ent_coef=config.ent_coef,
        gamma=config.gamma,
        policy_kwargs={"net_arch": list(config.net_arch)},
        seed=config.seed,
        device=device,
        verbose=0,
    )
    if config.collector is None:
        model.learn(config.steps, progress_bar=config.progress_bar)
    else:
        collector = _make_collector(config, model, monitor_dir)
        learn_from_collector(model, collector, config.steps, progress_bar=config.progress_bar)
    env.close()
    curve = _monitor_curve(monitor_dir)

    evaluation = _evaluate(model, config.env_id, config)
    model.save(out / "model.zip")
    _plot(curve, evaluation, config, out / "learning_curve.png")
    lines = ["timestep,episode_return", *(f"{step},{ret:g}" for step, ret in curve)]
    (out / "learning_curve.csv").write_text("\n".join(lines) + "\n")
    record = {"config": {**asdict(config), "out": str(out)}, "evaluation": evaluation}
    (out / "evaluation.json").write_text(json.dumps(record, indent=2) + "\n")
    return TrainResult(model=model, out=out, evaluation=evaluation, curve=curve)


def _one_line(err: BaseException) -> str:
    text = " ".join(str(err).split())
    return text if text.endswith((".", "?", "!")) else text + "."


def _positive_int(text: str) -> int:
    try:
        value = int(text.replace("_", ""))
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}") from None
    if value <= 0:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}")
    return value


def _seed(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected an integer from 0 to 2**32 - 1, got {text!r}") from None
    if not 0 <= value < 2**32:
        raise argparse.ArgumentTypeError(f"expected an integer from 0 to 2**32 - 1, got {text!r}")
    return value


class _Parser(argparse.ArgumentParser):
    """argparse, with its errors raised as one-line :class:`UsageError` instead of usage text and exit."""

    def error(self, message: str) -> Any:  # argparse's hook; typed NoReturn there
        raise UsageError(f"{message}; see `{self.prog} --help`.")


def build_parser() -> argparse.ArgumentParser:
    """The ``torchrl-mask`` argument parser.

    :return: a parser whose errors raise :class:`UsageError`.
    """
    defaults = TrainConfig()
    parser = _Parser(prog="torchrl-mask", description="Action-masked PPO with TorchRL-backed rollouts.")
    commands = parser.add_subparsers(dest="command", required=True, metavar="{train,bench}", parser_class=_Parser)
    train_parser = commands.add_parser(
        "train",
        help="train MaskablePPO on a masked env, evaluate it, save the model and a learning-curve PNG",
        description="Train MaskablePPO on a gymnasium env that reports action masks, evaluate it with and "
        "without masks, and save the model, a learning-curve PNG and the evaluation.",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    train_parser.add_argument(
        "--env",
        default=defaults.env_id,
        help="gymnasium id of an env with masks (action_masks(), info['action_mask'] or a Dict observation "
        "with 'action_mask')",
    )
    train_parser.add_argument("--steps", type=_positive_int, default=defaults.steps, help="total env steps")
    train_parser.add_argument("--seed", type=_seed, default=defaults.seed, help="seed of envs, policy, evaluation")
    train_parser.add_argument("--n-envs", type=_positive_int, default=defaults.n_envs, help="envs stepped together")
    train_parser.add_argument("--device", default=defaults.device, help="cpu, cuda, cuda:N, mps or auto")
    train_parser.add_argument(
        "--out", type=Path, default=None, help="output folder (default: runs/<env>-<date>-<time>)"
    )
    train_parser.add_argument(
        "--eval-episodes", type=_positive_int, default=defaults.eval_episodes, help="episodes per evaluation"
    )
    train_parser.add_argument(
        "--n-steps", type=_positive_int, default=defaults.n_steps, help="steps per env per rollout"
    )
    train_parser.add_argument(
        "--threads",
        type=_positive_int,
        default=defaults.threads,
        help="torch CPU threads (1 is fastest for small nets)",
    )
    train_parser.add_argument(
        "--collector",
        choices=sorted(COLLECTOR_TEXT),
        default=None,
        help="collect rollouts with TorchRL instead of SB3's VecEnv: sync (envs in this process) or multisync "
        "(one worker process per env)",
    )
    train_parser.add_argument("--no-progress", action="store_true", help="hide the progress bar")
    commands.add_parser(
        "bench",
        add_help=False,  # every argument after `bench`, --help included, belongs to the benchmark
        help="benchmark torchrl_mask against sb3-contrib (arguments go to the benchmark; try bench --help)",
    )
    return parser


def _config_from_args(args: argparse.Namespace) -> TrainConfig:
    return TrainConfig(
        env_id=args.env,
        steps=args.steps,
        seed=args.seed,
        n_envs=args.n_envs,
        device=args.device,
        out=args.out,
        eval_episodes=args.eval_episodes,
        n_steps=args.n_steps,
        progress_bar=not args.no_progress,
        threads=args.threads,
        collector=args.collector,
    )


def _report(config: TrainConfig, result: TrainResult) -> None:
    rows = {
        "trained policy, with masks": result.evaluation["masked"],
        "trained policy, without masks": result.evaluation["unmasked"],
        "random legal actions": result.evaluation["random"],
    }
    print(f"\nEvaluation on {config.env_id}, {config.eval_episodes} episodes each (mean ± std episode return):")
    for label, stats in rows.items():
        print(f"  {label:<31}{stats['mean']:>10.2f} ± {stats['std']:.2f}")
    print(f"\nSaved to {result.out}/: model.zip, learning_curve.png, learning_curve.csv, evaluation.json")


def _run_train(args: argparse.Namespace) -> int:
    config = _config_from_args(args)
    config = replace(config, out=_check_out(config.output_dir()))
    _check_device(config.device)
    env = make_masked_env(config.env_id)
    source = MASK_SOURCE_TEXT[env.get_wrapper_attr("source")]
    env.close()
    rollouts = "SB3's DummyVecEnv" if config.collector is None else COLLECTOR_TEXT[config.collector]
    print(
        f"Training MaskablePPO on {config.env_id} (masks from {source}) for {config.steps:,} steps: "
        f"{config.n_envs} envs ({rollouts}), seed {config.seed}, device {config.device}."
    )
    result = train(config)
    _report(config, result)
    return 0


def _run_bench(argv: list[str]) -> int:
    try:
        benchmark = importlib.import_module("torchrl_mask.benchmark")
    except ModuleNotFoundError as err:
        if err.name != "torchrl_mask.benchmark":
            raise
        print(
            "torchrl-mask bench: this install has no benchmark (module torchrl_mask.benchmark is missing); "
            "update torchrl_mask, or run the scripts in benchmarks/ from a clone of the repository.",
            file=sys.stderr,
        )
        return 1
    return int(benchmark.main(argv))


def main(argv: Sequence[str] | None = None) -> int:
    """Run ``torchrl-mask`` with ``argv`` (default: the process's arguments) and return the exit status.

    :param argv: the arguments after the program name.
    :return: 0 on success; 2 for input the user can fix (one line on stderr says what and how); the
        benchmark's own status for ``bench``.
    """
    argv = list(sys.argv[1:] if argv is None else argv)
    parser = build_parser()
    try:
        args, extra = parser.parse_known_args(argv)
        if args.command == "bench":
            return _run_bench(argv[argv.index("bench") + 1 :])
        if extra:
            raise UsageError(f"unrecognized arguments: {' '.join(extra)}; see `torchrl-mask {args.command} --help`.")
        return _run_train(args)
    except UsageError as err:
        print(f"torchrl-mask: error: {err}", file=sys.stderr)
        return EXIT_USAGE


if __name__ == "__main__":
    sys.exit(main())
