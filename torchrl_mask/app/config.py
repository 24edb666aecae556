"""The configuration of ``torchrl-mask train`` and the errors a user can fix, below both the CLI and the job.

:mod:`torchrl_mask.app.cli` builds a :class:`TrainConfig` from the command line and :mod:`torchrl_mask.app.training`
runs it; this module imports neither, and nothing heavy (no torch), so ``--help`` and a bad value answer fast.

Hyperparameters come as rl-zoo3 writes them (`rl-baselines3-zoo <https://github.com/DLR-RM/rl-baselines3-zoo>`_):
a YAML file whose top-level keys are env ids (``default`` for any other env), each holding ``n_timesteps``,
``n_envs``, ``policy``, ``policy_kwargs`` and MaskablePPO's own arguments; ``--hyperparams key=value`` overrides
them one by one; :mod:`torchrl_mask.app.hyperparams` says what each value may be, and this module re-exports it.
Every value is checked here, before anything is trained or written; the output folder's ownership (refused when
another run's files are in it, unless ``--overwrite``) is :mod:`torchrl_mask.app.run_folder`.

Example:
    >>> parse_hyperparam("policy_kwargs=dict(net_arch=[32, 32], activation_fn=nn.Tanh)")
    ('policy_kwargs', {'net_arch': [32, 32], 'activation_fn': 'nn.Tanh'})
    >>> check_hyperparams({"n_timesteps": 1e5, "learning_rate": "lin_3e-4"}, "--hyperparams")
    {'n_timesteps': 100000, 'learning_rate': 'lin_3e-4'}
"""

from __future__ import annotations

import importlib.util
import re
import tempfile
import time
import traceback
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from torchrl_mask.app import run_folder
from torchrl_mask.app.game_config import (
    GAME_FIXED_SHARES,
    GAME_HYPERPARAMS,
    GAME_IMAGES,
    GAME_LEAGUES,
    GAME_PREFIX,
    GAME_SELF_SHARES,
    GAME_THREADS,
    POOL_SIZE_MAX,
    Images,
    check_pool_size,
    game_fixed_share,
    game_hyperparams,
    game_images,
    game_league,
    game_self_share,
    game_threads,
)
from torchrl_mask.app.hyperparams import (
    DEFAULT_HYPERPARAMS,
    HYPERPARAMS,
    UsageError,
    check_hyperparams,
    check_minibatches,
    parse_hyperparam,
)

__all__ = [
    "ALGOS",
    "CRASH_FILE",
    "DEFAULT_HYPERPARAMS",
    "GAME_FIXED_SHARES",
    "GAME_HYPERPARAMS",
    "GAME_IMAGES",
    "GAME_LEAGUES",
    "GAME_PREFIX",
    "GAME_SELF_SHARES",
    "GAME_THREADS",
    "HYPERPARAMS",
    "POOL_SIZE_MAX",
    "TrainConfig",
    "TrainingFailed",
    "TrainingInterrupted",
    "UsageError",
    "check_config",
    "check_device",
    "check_folder",
    "check_hyperparams",
    "check_minibatches",
    "check_paths",
    "check_pool_size",
    "failed",
    "game_fixed_share",
    "game_hyperparams",
    "game_images",
    "game_league",
    "game_self_share",
    "game_threads",
    "load_conf_file",
    "parse_hyperparam",
]


class TrainingInterrupted(Exception):
    """Training stopped by a ``KeyboardInterrupt`` (Ctrl-C, or SIGTERM as the command line raises it); the model
    and the learning curve were saved first. The interrupt is the ``__cause__``.

    :param out: the output folder.
    :param steps: the env steps taken when it stopped (``model.num_timesteps``).
    """

    def __init__(self, out: Path, steps: int) -> None:
        super().__init__(f"interrupted at {steps:,} steps; saved to {out / 'model.zip'}")
        self.out = out
        self.steps = steps


class TrainingFailed(Exception):
    """Something raised after training had begun (the collector, a callback, an evaluation, a player, a file being
    written); the model trained so far was saved first, and the traceback written beside it. The error is the
    ``__cause__``.

    :param out: the output folder (it holds ``model.zip`` and :data:`CRASH_FILE`).
    :param stage: what was running, for the message (``"the final evaluation"``).
    :param error: what it raised.
    """

    def __init__(self, out: Path, stage: str, error: BaseException) -> None:
        text = " ".join(str(error).split()) or "(no message)"
        super().__init__(
            f"{stage} raised {type(error).__name__}: {text[:300]}; the model trained so far is saved in "
            f"{out / 'model.zip'} (traceback in {out / CRASH_FILE})."
        )
        self.out = out
        self.stage = stage


CRASH_FILE = "crash.txt"  # the traceback of a TrainingFailed, in the output folder


def failed(out: Path, stage: str, error: BaseException) -> TrainingFailed:
    """The :class:`TrainingFailed` to raise for ``error``, its traceback written to ``out``'s :data:`CRASH_FILE`.

    :param out: the output folder, where the model was saved.
    :param stage: what was running (``"the final evaluation"``).
    :param error: what it raised.
    :return: the exception; its message names the stage, the error, where it was raised and the saved model.
    """
    (out / CRASH_FILE).write_text("".join(traceback.format_exception(error)))
    frames = traceback.extract_tb(error.__traceback__)
    where = f" in {Path(frames[-1].filename).name}:{frames[-1].lineno} ({frames[-1].name})" if frames else ""
    return TrainingFailed(out, stage + where, error)


#: ``--algo``'s choices (rl-zoo3's names) and the model each trains.
ALGOS = {"ppo_mask": "MaskablePPO", "ppo_lstm_mask": "MaskableRecurrentPPO"}


def _read_yaml(path: Path) -> Any:
    """The YAML document in ``path``, read as UTF-8 with YAML's safe loader (no ``!!python`` tags)."""
    import yaml  # only when a file is given: --help stays fast

    if path.suffix not in (".yml", ".yaml"):
        raise UsageError(f"--conf-file {path}: expected a YAML file (.yml or .yaml) in rl-zoo3's format.")
    try:
        return yaml.safe_load(path.read_text(encoding="utf-8"))
    except OSError as err:
        raise UsageError(f"--conf-file {path}: cannot read it ({err.strerror or err}); pass a YAML file.") from None
    except UnicodeDecodeError as err:
        raise UsageError(
            f"--conf-file {path}: not UTF-8 text (byte {err.object[err.start]:#04x} at offset {err.start}); "
            "save the file as UTF-8."
        ) from None
    except yaml.YAMLError as err:
        where = getattr(err, "problem_mark", None)
        line = f" at line {where.line + 1}" if where is not None else ""
        tag = re.search(r"tag:yaml\.org,2002:(python/[^'\s]*)", str(getattr(err, "problem", "")))
        if tag is not None:
            raise UsageError(
                f"--conf-file {path}: the tag !!{tag.group(1)}{line} is refused (a python tag runs code when the "
                'file is read); write the value as text, e.g. policy_kwargs: "dict(activation_fn=nn.ReLU)".'
            ) from None
        raise UsageError(f"--conf-file {path}: not valid YAML{line}; fix the file.") from None


def load_conf_file(path: Path, env_id: str) -> dict[str, Any]:
    """The hyperparameters for ``env_id`` in an rl-zoo3 YAML file: its ``env_id`` entry, else its ``default``.

    :param path: a ``.yml``/``.yaml`` file whose top-level keys are env ids.
    :param env_id: the env to train.
    :return: the checked entry (``policy_kwargs`` strings parsed).
    :raises UsageError: a missing or unreadable file, YAML that does not parse or is not a mapping of env
        ids, no entry for ``env_id`` and no ``default``, or an entry :func:`check_hyperparams` refuses.
    """
    document = _read_yaml(path)
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
    :param eval_freq: evaluate every ``eval_freq`` env steps (sb3-contrib's ``MaskableEvalCallback``; for
        ``ppo_lstm_mask``, :class:`~torchrl_mask.algorithms.recurrent_evaluation.MaskableRecurrentEvalCallback`,
        which keeps the LSTM state), best model saved as ``best_model.zip``; 0 for none.
    :param save_freq: save a checkpoint every ``save_freq`` env steps (SB3's ``CheckpointCallback``); 0 for none.
    :param trained_agent: a saved model (``.zip``) to continue training; its policy is kept.
    :param tensorboard_log: folder for TensorBoard event files (SB3's logger); None for none.
    :param verbose: SB3's logger output: 0 none, 1 the training table, 2 also debug messages.
    :param progress_bar: show SB3's progress bar while training.
    :param threads: torch CPU threads (``torch.set_num_threads``); one is fastest for small networks, and far
        faster than several when other processes share the cores. The CLI gives a game's
        (:func:`~torchrl_mask.app.game_config.game_threads`: two for Connect Four) unless ``--threads``.
    :param collector: None steps the envs with SB3's ``DummyVecEnv``; ``"sync"`` collects with TorchRL's
        ``Collector`` over a ``SerialEnv`` in this process, ``"multisync"`` with TorchRL's
        ``MultiSyncCollector``, one worker process per env.
    :param conf_file: the file the hyperparameters came from, recorded in ``evaluation.json``.
    :param overwrite: train into an output folder that holds another run's files, removing them first (without
        it such a folder is refused).
    :param pool_size: a ``pettingzoo:`` game only: 0 trains by pure self-play; ``n`` plays the learner against
        ``n`` snapshots of its past weights (:class:`~torchrl_mask.SelfPlayPolicy`).
    :param league_players: a ``pettingzoo:`` game only: fixed players of the game's ladder the learner also meets
        (``("perfect",)`` for tic-tac-toe), drawn with the snapshots by what the learner does not beat yet
        (:mod:`torchrl_mask.games.league`).
    :param fixed_share: a ``pettingzoo:`` game's league only: the fixed players' share of its games, the snapshots
        the rest (:class:`~torchrl_mask.games.league.League`); None: one draw over all the opponents.
    :param self_share: a ``pettingzoo:`` game's league only: the share of its games the learner plays against
        itself, every seat learning; 0 none.
    :param symmetries: a ``pettingzoo:`` game only: train on each move's images under the game's symmetries
        (:mod:`torchrl_mask.games.symmetry`) too; None: the game's (Connect Four's mirror, tic-tac-toe's eight)
        with ``ppo_mask``, none with an LSTM.
    :param images: with the game's symmetries: ``"all"`` trains on each move and all its images, ``"random"`` on
        each move as one of them drawn at random (:class:`~torchrl_mask.SelfPlayPolicy`'s ``images``).
    :param algo: ``"ppo_mask"`` trains :class:`~torchrl_mask.MaskablePPO`, ``"ppo_lstm_mask"``
        :class:`~torchrl_mask.MaskableRecurrentPPO` (LSTM policies: ``MlpLstmPolicy`` or ``MultiInputLstmPolicy``
        by default, with ``policy_kwargs`` such as ``lstm_hidden_size``; from a VecEnv or a collector).
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
    overwrite: bool = False
    pool_size: int = 0
    league_players: tuple[str, ...] = ()
    fixed_share: float | None = None
    self_share: float = 0.0
    symmetries: bool | None = None
    images: Images = "all"
    algo: Literal["ppo_mask", "ppo_lstm_mask"] = "ppo_mask"

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
    :raises UsageError: an output or TensorBoard folder that cannot be made, an output folder in use or holding
        files (without ``overwrite``), a trained agent that is not a file, or ``tensorboard_log`` without
        TensorBoard installed.
    """
    out = check_folder(config.output_dir(), "--out")
    if config.trained_agent is not None and not config.trained_agent.is_file():
        raise UsageError(f"-i {config.trained_agent}: no such file; pass a model saved by torchrl-mask train (.zip).")
    run_folder.check_out(out, config.overwrite, config.trained_agent)
    if config.tensorboard_log is not None:
        check_folder(config.tensorboard_log, "--tensorboard-log")
        if importlib.util.find_spec("tensorboard") is None:
            raise UsageError("--tensorboard-log needs TensorBoard: pip install 'torchrl-mask[tensorboard]'.")
    return out


def check_config(config: TrainConfig) -> Path:
    """Check what can be checked before torch is imported: the rollout's minibatches, then every path.

    :param config: the run's configuration.
    :return: the output folder (:meth:`TrainConfig.output_dir`).
    :raises UsageError: a minibatch of one row (:func:`check_minibatches`), or what :func:`check_paths` raises.
    """
    check_pool_size(config.pool_size)
    hyperparams = config.hyperparams  # MaskablePPO's defaults where the run gives none
    n_steps, batch_size = hyperparams.get("n_steps", 2048), hyperparams.get("batch_size", 64)
    check_minibatches(n_steps, config.n_envs, batch_size, hyperparams.get("normalize_advantage", True))
    return check_paths(config)
