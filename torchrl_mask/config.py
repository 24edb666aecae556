"""The configuration of ``torchrl-mask train`` and the errors a user can fix, below both the CLI and the job.

:mod:`torchrl_mask.cli` builds a :class:`TrainConfig` from the command line and :mod:`torchrl_mask.training`
runs it; this module imports neither, and nothing heavy (no torch), so ``--help`` and a bad value answer fast.

Hyperparameters come as rl-zoo3 writes them (`rl-baselines3-zoo <https://github.com/DLR-RM/rl-baselines3-zoo>`_):
a YAML file whose top-level keys are env ids (``default`` for any other env), each holding ``n_timesteps``,
``n_envs``, ``policy``, ``policy_kwargs`` and MaskablePPO's own arguments; ``--hyperparams key=value`` overrides
them one by one. A value is a Python literal (``0.001``, ``[64, 64]``, ``None``), ``lin_<number>`` for a
schedule that falls linearly to 0 (``learning_rate``, ``clip_range``), or for ``policy_kwargs`` a
``dict(...)`` call of literals, where ``nn.<Name>`` names a ``torch.nn`` class (``activation_fn=nn.ReLU``).
Every value is checked here, before anything is trained or written.

Example:
    >>> parse_hyperparam("policy_kwargs=dict(net_arch=[32, 32], activation_fn=nn.Tanh)")
    ('policy_kwargs', {'net_arch': [32, 32], 'activation_fn': 'nn.Tanh'})
    >>> check_hyperparams({"n_timesteps": 1e5, "learning_rate": "lin_3e-4"}, "--hyperparams")
    {'n_timesteps': 100000, 'learning_rate': 'lin_3e-4'}
"""

from __future__ import annotations

import ast
import importlib.util
import re
import tempfile
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

__all__ = [
    "DEFAULT_HYPERPARAMS",
    "HYPERPARAMS",
    "TrainConfig",
    "UsageError",
    "check_device",
    "check_folder",
    "check_hyperparams",
    "check_paths",
    "load_conf_file",
    "parse_hyperparam",
]


class UsageError(ValueError):
    """Input the user can fix: the message says what is wrong and how to fix it, on one line."""


# What `torchrl-mask train` trains with when no --conf-file is given; tuned for Taxi-v4: 100k steps take about a
# minute on 2 CPU cores and reach a mean return near the env's solved threshold of 8 (random legal actions: -175).
# Without a file and without batch_size, the minibatch is a quarter of the rollout (n_steps * n_envs / 4).
DEFAULT_HYPERPARAMS: dict[str, Any] = {
    "n_timesteps": 100_000,
    "n_envs": 8,
    "n_steps": 256,
    "learning_rate": 1e-3,
    "ent_coef": 0.01,
    "gamma": 0.99,
    "policy_kwargs": {"net_arch": [64, 64]},
}
POLICIES = ("MlpPolicy", "MultiInputPolicy", "CnnPolicy")
_FLOAT = re.compile(r"[+-]?(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?")
_SCHEDULE = re.compile(r"lin_(" + _FLOAT.pattern + ")")
_TORCH_NN = re.compile(r"(?:th\.|torch\.)?nn\.[A-Za-z_]\w*")


def _number(value: Any, low: float, high: float = float("inf"), *, open_low: bool = False) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    if not (low < value if open_low else low <= value) or not value <= high:
        return None
    return float(value)


def _positive_int(value: Any) -> tuple[Any, str]:
    integral = isinstance(value, int | float) and not isinstance(value, bool) and float(value).is_integer()
    return (int(value), "") if integral and value > 0 else (value, "a positive integer")


def _unit(value: Any) -> tuple[Any, str]:
    return (value, "") if _number(value, 0.0, 1.0) is not None else (value, "a number from 0 to 1")


def _non_negative(value: Any) -> tuple[Any, str]:
    return (value, "") if _number(value, 0.0) is not None else (value, "a number >= 0")


def _positive(value: Any) -> tuple[Any, str]:
    return (value, "") if _number(value, 0.0, open_low=True) is not None else (value, "a number > 0")


def _optional_positive(value: Any) -> tuple[Any, str]:
    return (value, "") if value is None else (value, _positive(value)[1] and "None or a number > 0")


def _schedule(value: Any) -> tuple[Any, str]:
    """A number > 0, or rl-zoo3's ``lin_<number>`` (linear from that number at the start to 0 at the end)."""
    match = _SCHEDULE.fullmatch(value) if isinstance(value, str) else None
    if match is not None:
        return (value, "") if float(match.group(1)) > 0 else (value, "a number > 0 or lin_<number > 0>")
    return (value, "") if _number(value, 0.0, open_low=True) is not None else (value, "a number > 0 or lin_<number>")


def _flag(value: Any) -> tuple[Any, str]:
    return (value, "") if isinstance(value, bool) else (value, "True or False")


def _policy(value: Any) -> tuple[Any, str]:
    return (value, "") if value in POLICIES else (value, "one of " + ", ".join(POLICIES))


def _policy_kwargs(value: Any) -> tuple[Any, str]:
    if isinstance(value, str):
        try:
            value = _literal(value)
        except UsageError as err:
            return value, f"a dict(...) of literals ({err})"
    if not isinstance(value, dict) or not all(isinstance(key, str) for key in value):
        return value, "a dict of keyword arguments, e.g. dict(net_arch=[64, 64])"
    activation = value.get("activation_fn")
    if activation is not None and not (isinstance(activation, str) and _TORCH_NN.fullmatch(activation)):
        return value, "a dict whose activation_fn names a torch.nn class, e.g. activation_fn=nn.ReLU"
    return value, ""


# Every key a file or --hyperparams may set, with the check its value passes: rl-zoo3's keys for PPO that
# MaskablePPO has (n_timesteps and n_envs are the run's, the rest MaskablePPO's constructor arguments).
HYPERPARAMS: dict[str, Callable[[Any], tuple[Any, str]]] = {
    "n_timesteps": _positive_int,
    "n_envs": _positive_int,
    "policy": _policy,
    "policy_kwargs": _policy_kwargs,
    "learning_rate": _schedule,
    "n_steps": _positive_int,
    "batch_size": _positive_int,
    "n_epochs": _positive_int,
    "gamma": _unit,
    "gae_lambda": _unit,
    "clip_range": _schedule,
    "clip_range_vf": lambda value: (value, "") if value is None else _schedule(value),
    "normalize_advantage": _flag,
    "ent_coef": _non_negative,
    "vf_coef": _non_negative,
    "max_grad_norm": _positive,
    "target_kl": _optional_positive,
    "stats_window_size": _positive_int,
}
# rl-zoo3's keys that wrap the env or its VecEnv, or SB3 features MaskablePPO lacks: refused by name.
RL_ZOO_ONLY = {
    "normalize", "env_wrapper", "vec_env_wrapper", "frame_stack", "callback", "monitor_kwargs", "use_sde",
    "sde_sample_freq", "env_kwargs",
}  # fmt: skip


def check_hyperparams(values: Mapping[str, Any], source: str) -> dict[str, Any]:
    """Check hyperparameters by name and value; ``policy_kwargs`` given as ``"dict(...)"`` comes back a dict.

    :param values: name -> value, as read from a file or the command line.
    :param source: where they came from, for the message (``"--hyperparams"``, ``"f.yml, Taxi-v4"``).
    :return: the checked values, whole numbers as ``int``.
    :raises UsageError: an unknown name or a value its check refuses.
    """
    checked: dict[str, Any] = {}
    for key, value in values.items():
        if isinstance(value, str) and _FLOAT.fullmatch(value.strip()):
            value = float(value)  # YAML 1.1 reads 1e-3 (no dot) as text; rl-zoo3's files write !!float 1e-3
        check = HYPERPARAMS.get(key)
        if key in RL_ZOO_ONLY:
            raise UsageError(
                f"{source}: rl-zoo3's {key!r} is not supported here (the env is trained as gymnasium makes it, "
                "wrapped for its masks only); remove it."
            )
        if check is None:
            raise UsageError(
                f"{source}: unknown hyperparameter {key!r}; torchrl-mask train takes " + ", ".join(HYPERPARAMS) + "."
            )
        checked[key], expected = check(value)
        if expected:
            raise UsageError(f"{source}: {key}={value!r} is not valid; expected {expected}.")
    return checked


def _node_value(node: ast.expr) -> Any:
    """A literal, ``dict(k=v, ...)`` of literals, or ``nn.Name`` (kept as its dotted name)."""
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "dict" and not node.args:
        if any(keyword.arg is None for keyword in node.keywords):
            raise UsageError("dict(**...) is not a literal")
        return {keyword.arg: _node_value(keyword.value) for keyword in node.keywords}
    if isinstance(node, ast.Dict):
        return {_node_value(key): _node_value(value) for key, value in zip(node.keys, node.values, strict=True) if key}
    if isinstance(node, ast.List | ast.Tuple):
        return [_node_value(item) for item in node.elts]
    if isinstance(node, ast.Attribute) and _TORCH_NN.fullmatch(ast.unparse(node)):
        return ast.unparse(node)
    try:
        return ast.literal_eval(node)
    except ValueError:
        raise UsageError(f"{ast.unparse(node)!r} is not a literal") from None


def _literal(text: str) -> Any:
    try:
        tree = ast.parse(text.strip(), mode="eval")
    except SyntaxError:
        raise UsageError(f"{text!r} is not a Python literal") from None
    return _node_value(tree.body)


def parse_hyperparam(text: str) -> tuple[str, Any]:
    """One ``--hyperparams`` item: ``name=value`` (rl-zoo3's ``name:value`` too), its value read as rl-zoo3 reads it.

    A value that is no Python literal (``MlpPolicy``, ``lin_0.001``) is kept as text; the name and the value
    are checked later, by :func:`check_hyperparams`.

    :param text: e.g. ``"learning_rate=3e-4"``, ``"policy_kwargs=dict(net_arch=[64, 64])"``.
    :return: the name and the value.
    :raises UsageError: no ``=`` after a name, or a ``dict(...)`` that is not made of literals.
    """
    match = re.fullmatch(r"\s*([A-Za-z_]\w*)\s*[=:](.*)", text, flags=re.DOTALL)
    if match is None:
        raise UsageError(f"--hyperparams {text!r}: expected name=value, e.g. learning_rate=3e-4")
    key, raw = match.group(1), match.group(2).strip()
    try:
        return key, _literal(raw)
    except UsageError as err:
        if raw.startswith(("dict(", "{", "[")):
            raise UsageError(f"--hyperparams {text!r}: {err}; use literals, e.g. dict(net_arch=[64, 64])") from None
        return key, raw


def load_conf_file(path: Path, env_id: str) -> dict[str, Any]:
    """The hyperparameters for ``env_id`` in an rl-zoo3 YAML file: its ``env_id`` entry, else its ``default``.

    :param path: a ``.yml``/``.yaml`` file whose top-level keys are env ids.
    :param env_id: the env to train.
    :return: the checked entry (``policy_kwargs`` strings parsed).
    :raises UsageError: a missing or unreadable file, YAML that does not parse or is not a mapping of env
        ids, no entry for ``env_id`` and no ``default``, or an entry :func:`check_hyperparams` refuses.
    """
    import yaml  # only when a file is given: --help stays fast

    if path.suffix not in (".yml", ".yaml"):
        raise UsageError(f"--conf-file {path}: expected a YAML file (.yml or .yaml) in rl-zoo3's format.")
    try:
        document = yaml.safe_load(path.read_text())
    except OSError as err:
        raise UsageError(f"--conf-file {path}: cannot read it ({err.strerror or err}); pass a YAML file.") from None
    except yaml.YAMLError as err:
        where = getattr(err, "problem_mark", None)
        line = f" at line {where.line + 1}" if where is not None else ""
        raise UsageError(f"--conf-file {path}: not valid YAML{line}; fix the file.") from None
    if not isinstance(document, dict) or not all(isinstance(entry, dict) for entry in document.values()):
        raise UsageError(
            f"--conf-file {path}: expected env ids at the top level, each with its hyperparameters "
            "(rl-zoo3's format, e.g. 'Taxi-v4:' then '  n_timesteps: 100000')."
        )
    name = env_id if env_id in document else "default" if "default" in document else None
    if name is None:
        raise UsageError(
            f"--conf-file {path} has no entry for {env_id!r} and no 'default' (it has: "
            + ", ".join(map(str, document))
            + "); add one, or pass --env with one of those."
        )
    return check_hyperparams(document[name], f"--conf-file {path}, {name}")


def check_device(device: str) -> str:
    """``device`` if this machine can train on it (``auto`` passes as it is).

    :param device: ``cpu``, ``cuda``, ``cuda:N``, ``mps`` or ``auto``.
    :return: ``device``.
    :raises UsageError: not a torch device, or one this machine does not have.
    """
    import torch  # only when a run is checked: --help stays fast

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


def check_folder(folder: Path, option: str) -> Path:
    """``folder`` if a folder can be made there: probed with a folder created and removed in its nearest existing
    ancestor, so that a path under a file, in a read-only place or under ``/proc`` is refused before training.

    :param folder: the folder to write into (created later if missing).
    :param option: the option that gave it, for the message (``--out``).
    :return: ``folder``.
    :raises UsageError: a file, a path under a file, or a place where no folder can be created.
    """
    if folder.exists() and not folder.is_dir():
        raise UsageError(f"{option} {folder} is a file; pass a folder (it is created if missing).")
    base = next(parent for parent in (folder, *folder.absolute().parents) if parent.exists())
    if not base.is_dir():
        raise UsageError(
            f"{option} {folder} is under {base}, which is a file; pass a folder path (created if missing)."
        )
    try:
        tempfile.TemporaryDirectory(prefix=".torchrl_mask_probe_", dir=base).cleanup()
    except OSError as err:
        raise UsageError(
            f"{option} {folder}: cannot create a folder in {base} ({err.strerror or err}); "
            "pass a folder you can write to."
        ) from None
    return folder


@dataclass(frozen=True)
class TrainConfig:
    """Everything ``torchrl-mask train`` needs; the defaults are what ``make train`` runs.

    :param env_id: a registered gymnasium id of an env that reports action masks.
    :param n_timesteps: env steps to train for (across all envs); added to the steps already taken when
        continuing a ``trained_agent``.
    :param n_envs: envs stepped side by side (``DummyVecEnv``, or the collector's envs).
    :param hyperparams: MaskablePPO's arguments as :func:`check_hyperparams` returns them (``policy``,
        ``policy_kwargs``, ``learning_rate``...); a missing ``policy`` is ``MultiInputPolicy`` for a Dict
        observation and ``MlpPolicy`` otherwise.
    :param seed: seeds the envs, the policy and the evaluation envs.
    :param device: torch device of the policy and the rollout (``cpu``, ``cuda``, ``cuda:1``, ``mps``, ``auto``).
    :param out: output folder; None means ``runs/<env_id>-<date>-<time>``.
    :param eval_episodes: episodes per evaluation: the final ones, and each periodic one.
    :param eval_freq: evaluate every ``eval_freq`` env steps (sb3-contrib's ``MaskableEvalCallback``, best model
        saved as ``best_model.zip``); 0 for none.
    :param save_freq: save a checkpoint every ``save_freq`` env steps (SB3's ``CheckpointCallback``); 0 for none.
    :param trained_agent: a saved model (``.zip``) to continue training; its policy is kept.
    :param tensorboard_log: folder for TensorBoard event files (SB3's logger); None for none.
    :param verbose: SB3's logger output: 0 none, 1 the training table, 2 also debug messages.
    :param progress_bar: show SB3's progress bar while training.
    :param threads: torch CPU threads (``torch.set_num_threads``); one is fastest for small networks, and far
        faster than several when other processes share the cores.
    :param collector: None steps the envs with SB3's ``DummyVecEnv``; ``"sync"`` collects with TorchRL's
        ``Collector`` over a ``SerialEnv`` in this process, ``"multisync"`` with TorchRL's
        ``MultiSyncCollector``, one worker process per env.
    :param conf_file: the file the hyperparameters came from, recorded in ``evaluation.json``.
    """

    env_id: str = "Taxi-v4"
    n_timesteps: int = DEFAULT_HYPERPARAMS["n_timesteps"]
    n_envs: int = DEFAULT_HYPERPARAMS["n_envs"]
    hyperparams: dict[str, Any] = field(
        default_factory=lambda: {
            key: value for key, value in DEFAULT_HYPERPARAMS.items() if key not in ("n_timesteps", "n_envs")
        }
    )
    seed: int = 0
    device: str = "cpu"
    out: Path | None = None
    eval_episodes: int = 20
    eval_freq: int = 0
    save_freq: int = 0
    trained_agent: Path | None = None
    tensorboard_log: Path | None = None
    verbose: Literal[0, 1, 2] = 1
    progress_bar: bool = True
    threads: int = 1
    collector: Literal["sync", "multisync"] | None = None
    conf_file: Path | None = None

    def output_dir(self) -> Path:
        """The output folder: :attr:`out`, or ``runs/<env_id>-<date>-<time>`` (env id made file-safe)."""
        if self.out is not None:
            return self.out
        safe_id = re.sub(r"[^A-Za-z0-9._-]+", "_", self.env_id)
        return Path("runs") / f"{safe_id}-{time.strftime('%Y%m%d-%H%M%S')}"


def check_paths(config: TrainConfig) -> Path:
    """Check every path a configuration names, before torch is imported; nothing is written.

    :param config: the run's configuration.
    :return: the output folder (:meth:`TrainConfig.output_dir`).
    :raises UsageError: an output or TensorBoard folder that cannot be made, a trained agent that is not a file,
        or ``tensorboard_log`` without TensorBoard installed.
    """
    out = check_folder(config.output_dir(), "--out")
    if config.trained_agent is not None and not config.trained_agent.is_file():
        raise UsageError(f"-i {config.trained_agent}: no such file; pass a model saved by torchrl-mask train (.zip).")
    if config.tensorboard_log is not None:
        check_folder(config.tensorboard_log, "--tensorboard-log")
        if importlib.util.find_spec("tensorboard") is None:
            raise UsageError("--tensorboard-log needs TensorBoard: pip install 'torchrl-mask[tensorboard]'.")
    return out
