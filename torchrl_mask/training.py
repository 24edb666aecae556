"""The main job behind ``torchrl-mask train``: a masked env from a gymnasium id, MaskablePPO on it (SB3's
VecEnv or a TorchRL collector), an evaluation with and without masks, and the files a user looks at.

:func:`train` takes the :class:`~torchrl_mask.cli.TrainConfig` the command line builds, and writes:

- ``model.zip``: the trained model (``torchrl_mask.MaskablePPO.load`` or sb3-contrib's ``MaskablePPO.load``);
- ``learning_curve.png``: episode return over timesteps beside the evaluation;
- ``learning_curve.csv``: the points of that curve (``timestep,episode_return``);
- ``evaluation.json``: the evaluation, and the configuration that produced it.

An env is masked when it has an ``action_masks()`` method (sb3-contrib's convention, e.g. an env wrapped in
``sb3_contrib.common.wrappers.ActionMasker``), reports ``info["action_mask"]`` after ``reset`` and ``step``
(gymnasium's convention), or has an ``"action_mask"`` entry in a Dict observation.
"""

from __future__ import annotations

import csv
import json
import tempfile
import warnings
from dataclasses import asdict, dataclass, field
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

from torchrl_mask.cli import TrainConfig, UsageError
from torchrl_mask.collectors import learn_from_collector
from torchrl_mask.envs import ActionMaskInInfo, masked_gym_env
from torchrl_mask.masks import mask_spec
from torchrl_mask.policy import MaskablePolicyModule
from torchrl_mask.ppo import MaskablePPO

__all__ = [
    "InfoActionMasker",
    "TrainResult",
    "describe_masks",
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
    :class:`~torchrl_mask.envs.ActionMaskInInfo` beneath it, which brings the other conventions (an
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

    The env is wrapped in :class:`~torchrl_mask.envs.ActionMaskInInfo` (the mask, wherever the env keeps
    it, goes to ``info["action_mask"]``; an entry of a Dict observation leaves the observation) and
    :class:`InfoActionMasker`: the observation space is the one :func:`~torchrl_mask.envs.masked_gym_env`
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
        collector.set_seed(config.seed)
    else:  # seeded before the Collector resets it, so that the first episodes are seeded too
        envs = SerialEnv(config.n_envs, makers)
        envs.set_seed(config.seed)
        collector = Collector(envs, policy, frames_per_batch=frames, total_frames=-1)
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
    """``out`` if a folder can be made there: probed with a folder created and removed in its nearest existing
    ancestor, so that a path under a file, in a read-only place or under ``/proc`` is refused before training."""
    if out.exists() and not out.is_dir():
        raise UsageError(f"--out {out} is a file; pass a folder (it is created if missing).")
    base = next(folder for folder in (out, *out.absolute().parents) if folder.exists())
    if not base.is_dir():
        raise UsageError(f"--out {out} is under {base}, which is a file; pass a folder path (created if missing).")
    try:
        tempfile.TemporaryDirectory(prefix=".torchrl_mask_probe_", dir=base).cleanup()
    except OSError as err:
        raise UsageError(
            f"--out {out}: cannot create a folder in {base} ({err.strerror or err}); pass a folder you can write to."
        ) from None
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


def describe_masks(config: TrainConfig) -> str:
    """Check the configuration a user gave and say where the env's masks come from, before any training.

    :param config: what to train.
    :return: e.g. ``"info['action_mask']"``.
    :raises UsageError: a bad device, an output path that is a file, an unknown env id or an env without masks.
    """
    _check_out(config.output_dir())
    _check_device(config.device)
    env = make_masked_env(config.env_id)
    source = MASK_SOURCE_TEXT[env.get_wrapper_attr("source")]
    env.close()
    return source
