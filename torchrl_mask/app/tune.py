"""The job behind ``torchrl-mask tune``: an Optuna study of masked PPO, every trial judged with masks.

Each trial draws its hyperparameters from :mod:`torchrl_mask.app.search_spaces` (the fixed part kept), trains
:class:`~torchrl_mask.MaskablePPO` (or :class:`~torchrl_mask.MaskableRecurrentPPO`) exactly as ``torchrl-mask
train`` would with them and the seed ``--seed + trial number``, and scores it by the masked evaluation of
:func:`torchrl_mask.app.results.mean_return` (sb3-contrib's ``evaluate_policy`` with ``use_masking=True``; for a
recurrent model the one that keeps the LSTM state): ``--n-evaluations`` times during training, each reported to
Optuna (``trial.report``) for its pruner, and once at the end, the trial's value. rl-zoo3's ``TrialEvalCallback``
scores without masks; a masked model is then judged on illegal moves.

A trial that raises or whose value is not finite (diverged parameters) is marked failed, its message kept as the
trial's ``fail_reason`` attribute, and the study goes on. Ctrl-C (or SIGTERM) stops the study: the trials so far
stay in the storage and the outputs are written from them. The signal is held while the study runs and acted on
between a trial's training steps (the trial is then marked failed) or after a trial (no other starts), never inside
a write to the storage: an interrupted SQLite commit leaves the file locked, and Optuna can then neither mark the
trial nor go on. The outputs, in ``--out``, rewritten after every trial:

- ``study.db``: the study (SQLite), unless ``--storage`` names another;
- ``best_hyperparams.yml``: the best trial's hyperparameters in the YAML ``torchrl-mask train --conf-file``
  reads, with the command that retrains it (same seed: the same model and value);
- ``trials.csv``: every trial (Optuna's ``trials_dataframe()``);
- ``optimization_history.png`` and ``param_importances.png``: Optuna's matplotlib plots, at the end.
"""

from __future__ import annotations

import logging
import math
import os
import signal
import socket
import sys
import threading
import time
import warnings
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

import optuna
import torch
from optuna.storages.journal import JournalFileBackend
from sqlalchemy.exc import DBAPIError
from stable_baselines3.common.callbacks import BaseCallback

from torchrl_mask.app import run_folder, search_spaces, tune_args, tune_outputs
from torchrl_mask.app.config import TrainConfig, check_rollout, default_selfplay
from torchrl_mask.app.files import signals_held
from torchrl_mask.app.hyperparams import UsageError
from torchrl_mask.app.masked_env import one_line
from torchrl_mask.app.models import ALGORITHMS
from torchrl_mask.app.pipeline import Terminated, interrupt_for, sigterm_as_interrupt, train_model
from torchrl_mask.app.prepare import make_task
from torchrl_mask.app.run import EXIT_INTERRUPTED, EXIT_TERMINATED
from torchrl_mask.app.tune_args import JOURNAL_SUFFIX, TuneConfig, check_tune_config, storage_url
from torchrl_mask.app.tune_outputs import value_name

__all__ = [
    "StopOnSignal",
    "TrialDiverged",
    "TrialEvalCallback",
    "TuneResult",
    "make_study",
    "run_trial",
    "run_tune",
    "tune",
]


_WRITING = threading.Lock()  # --n-jobs: trials end in threads, each rewriting the same files
SETTINGS = "torchrl_mask_settings"  # the study's user attribute holding what its trials share


class TrialDiverged(RuntimeError):
    """A trial whose masked evaluation is not a finite number (its parameters diverged)."""


class TrialEvalCallback(BaseCallback):
    """rl-zoo3's ``TrialEvalCallback``, scored with masks: ``evaluations`` times a trial, every
    ``n_timesteps / evaluations`` of the model's steps (a self-play model's moves), the score is reported to the
    trial; training stops when Optuna's pruner says so.

    :param trial: the Optuna trial.
    :param evaluate: the score of a model.
    :param n_timesteps: the trial's steps.
    :param evaluations: the scores to report, at most (``--n-evaluations``).
    """

    def __init__(self, trial: optuna.Trial, evaluate: Any, n_timesteps: int, evaluations: int) -> None:
        super().__init__()
        self.trial, self.evaluate = trial, evaluate
        self.every = max(n_timesteps // evaluations, 1)
        self.most = evaluations
        self.evaluations = 0
        self.pruned = False

    def _on_step(self) -> bool:
        if self.evaluations >= self.most or self.num_timesteps < self.every * (self.evaluations + 1):
            return True
        value = self.evaluate(self.model)
        self.evaluations += 1
        self.trial.report(value, self.evaluations)
        self.pruned = self.trial.should_prune()
        return not self.pruned


class StopOnSignal(BaseCallback):
    """Stop training at its next step once a held signal has come: raise the interrupt it stands for (Ctrl-C's, or
    SIGTERM's :class:`~torchrl_mask.app.pipeline.Terminated`), from a step and not from a storage write.

    :param received: the signals held so far (:func:`~torchrl_mask.app.files.signals_held`'s list, appended to by
        the main thread's handler).
    """

    def __init__(self, received: list[int]) -> None:
        super().__init__()
        self.received = received

    def _on_step(self) -> bool:
        if self.received:
            raise interrupt_for(self.received)
        return True


def _train_config(config: TuneConfig, hyperparams: dict[str, Any], seed: int) -> TrainConfig:
    """The ``train`` configuration a trial is: what ``train --conf-file best_hyperparams.yml`` would run (a game
    trains against its default league, as ``train`` gives it with no league option)."""
    rest = {key: value for key, value in hyperparams.items() if key != "n_envs"}
    return TrainConfig(
        env_id=config.env_id,
        n_timesteps=config.n_timesteps,
        n_envs=config.n_envs,
        hyperparams=rest,
        seed=seed,
        eval_episodes=config.eval_episodes,
        verbose=0,
        progress_bar=False,
        algo=config.algo,  # type: ignore[arg-type]
        selfplay=default_selfplay(config.env_id, config.algo),
    )


def run_trial(config: TuneConfig, trial: optuna.Trial, received: list[int] | None = None) -> float:
    """Train one trial's model (the run's task, :mod:`torchrl_mask.app.pipeline`) and return its score.

    :param config: the study's configuration.
    :param trial: the Optuna trial.
    :param received: the signals held while the study runs; training stops at its next step once one came. None:
        signals are not held (Ctrl-C raises where it lands).
    :return: the task's score at the end of training (the masked mean return, or a game's ladder score).
    :raises optuna.TrialPruned: the pruner stopped it.
    :raises TrialDiverged: its evaluation is not finite.
    :raises KeyboardInterrupt: a held signal came (:class:`~torchrl_mask.app.pipeline.Terminated` for SIGTERM).
    """
    seed = config.seed + trial.number
    hyperparams = search_spaces.sample(config.algo, trial, config.fixed, config.n_timesteps)
    for key, value in {
        "seed": seed,
        "hyperparams": hyperparams,
        "worker": f"{socket.gethostname()}:{os.getpid()}",
        "settings": config.settings(),
    }.items():
        trial.set_user_attr(key, value)
    train_config = _train_config(config, hyperparams, seed)
    check_rollout(train_config)
    task = make_task(train_config)

    def evaluate(model: Any) -> float:
        value = task.score(model, config.eval_episodes, seed)
        if not math.isfinite(value):
            raise TrialDiverged(f"{value_name(config.env_id)} {value}: the parameters diverged")
        return value

    callback = TrialEvalCallback(trial, evaluate, config.n_timesteps, config.n_evaluations)
    stop = [] if received is None else [StopOnSignal(received)]
    model = train_model(task, "cpu", [*stop, callback])
    trial.set_user_attr("timesteps", model.num_timesteps)  # the steps trained, whole rollouts past n_timesteps
    if callback.pruned:
        raise optuna.TrialPruned(f"pruned after {callback.evaluations} evaluation(s)")
    return evaluate(model)


def _objective(config: TuneConfig, received: list[int]) -> Any:
    """The study's objective: :func:`run_trial`, one torch thread, an error's message kept on the trial; a trial
    that starts after a held signal came is interrupted at once."""

    def objective(trial: optuna.Trial) -> float:
        torch.set_num_threads(1)
        try:
            if received:
                raise interrupt_for(received)
            return run_trial(config, trial, received)
        except (optuna.TrialPruned, KeyboardInterrupt):
            raise
        except Exception as err:
            trial.set_user_attr("fail_reason", f"{type(err).__name__}: {one_line(err)}")
            raise

    return objective


def make_study(config: TuneConfig, out: Path) -> optuna.Study:
    """Create the study, or load it if the storage has one of that name (another worker's, or an earlier run's).

    :param config: the configuration (sampler, pruner, storage, name).
    :param out: the output folder, home of the default SQLite file.
    :return: the study, maximising the masked evaluation.
    :raises UsageError: the storage cannot be opened.
    """
    sampler: optuna.samplers.BaseSampler = (
        optuna.samplers.TPESampler(n_startup_trials=config.n_startup_trials, seed=config.seed)
        if config.sampler == "tpe"
        else optuna.samplers.RandomSampler(seed=config.seed)
    )
    pruner: optuna.pruners.BasePruner = (
        optuna.pruners.MedianPruner(n_startup_trials=config.n_startup_trials, n_warmup_steps=config.n_evaluations // 3)
        if config.pruner == "median"
        else optuna.pruners.NopPruner()
    )
    url = storage_url(out, config.storage)
    for attempt in range(5):  # workers that start together may race to create the tables of one SQLite file
        try:
            storage: Any = url
            if url.endswith(JOURNAL_SUFFIX) and "://" not in url:
                storage = optuna.storages.JournalStorage(JournalFileBackend(url))
            study = optuna.create_study(
                storage=storage,
                sampler=sampler,
                pruner=pruner,
                study_name=config.name(),
                direction="maximize",
                load_if_exists=True,
            )
            return _joined(study, config)
        except DBAPIError as err:  # OperationalError (locked), IntegrityError (both stamped the schema)
            if attempt == 4:
                raise UsageError(f"--storage {url}: cannot open it ({one_line(err.orig or err)})") from None
            time.sleep(0.5 + attempt)
        except ValueError as err:  # e.g. an existing study that minimises
            raise UsageError(f"--study-name {config.name()}: {one_line(err)}") from None
    raise AssertionError("unreachable")


def _joined(study: optuna.Study, config: TuneConfig) -> optuna.Study:
    """``study``, once its settings are this worker's: recorded on a new study, compared on an existing one."""
    settings = config.settings()
    recorded = study.user_attrs.get(SETTINGS)
    if recorded is None:
        if study.get_trials(deepcopy=False):  # trials, but not ours: rl-zoo3's or plain Optuna's
            raise UsageError(
                f"--study-name {config.name()}: the study in {storage_name(config)} was not written by torchrl-mask "
                "tune (its trials have no torchrl-mask settings); pass another --study-name or --storage."
            )
        study.set_user_attr(SETTINGS, settings)
        return study
    differ = [key for key in settings if recorded.get(key) != settings[key]]
    if differ:
        theirs = ", ".join(f"{key}={recorded.get(key)!r}" for key in differ)
        raise UsageError(
            f"--study-name {config.name()}: the study was started with {theirs}; a worker that joins it must run the "
            "same trials: give the same options, or another --study-name."
        )
    return study


def storage_name(config: TuneConfig) -> str:
    """The storage as a person named it: ``--storage``, or the default file in ``--out``."""
    return config.storage or str(config.output_dir() / tune_args.STUDY_DB)


@dataclass
class TuneResult:
    """What :func:`tune` produced.

    :param study: the study (every worker's trials).
    :param out: the output folder.
    :param files: the files written in ``out``.
    :param notes: a line for each plot that could not be drawn.
    :param interrupted: Ctrl-C or SIGTERM stopped the study.
    :param terminated: it was SIGTERM.
    """

    study: optuna.Study
    out: Path
    files: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    interrupted: bool = False
    terminated: bool = False


def _prepare(config: TuneConfig) -> Path:
    """Every check, in the order a user fixes them: the configuration, then the env and the fixed part's policy, as
    a trial's task checks them."""
    out = check_tune_config(config)
    make_task(_train_config(config, config.fixed, config.seed))
    return out


def _report_trial(
    config: TuneConfig, out: Path, received: list[int], study: optuna.Study, trial: optuna.trial.FrozenTrial
) -> None:
    """After each trial: one line, and the CSV and the best YAML rewritten; the study stops if a signal came."""
    state = trial.state.name.lower()
    value = f" value {trial.value:g}" if trial.value is not None else ""
    reason = trial.user_attrs.get("fail_reason", "")
    with _WRITING:
        print(f"trial {trial.number}: {state}{value}{': ' + reason if reason else ''}", flush=True)
        tune_outputs.write_outputs(study, out, config.env_id, config.n_timesteps, config.eval_episodes, config.algo)
    if received:
        study.stop()


def tune(config: TuneConfig) -> TuneResult:
    """Run ``config.n_trials`` trials of the study (joining it if the storage has it), then write the outputs.

    :param config: the configuration.
    :return: the study, the folder and the files written; ``interrupted`` after Ctrl-C (the trials so far kept).
    :raises UsageError: a check failed, before anything was written.
    """
    out = _prepare(config)
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    optuna.logging.disable_default_handler()  # a failed trial is one line of ours, not Optuna's traceback
    optuna_logger = logging.getLogger("optuna")
    if not any(isinstance(handler, logging.NullHandler) for handler in optuna_logger.handlers):
        optuna_logger.addHandler(logging.NullHandler())  # else logging's last resort prints Optuna's warnings
    interrupted = terminated = False
    with run_folder.claim(out, overwrite=False):
        study = make_study(config, out)
        with warnings.catch_warnings(), signals_held() as received:
            warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
            try:
                study.optimize(
                    _objective(config, received),
                    n_trials=config.n_trials,
                    n_jobs=config.n_jobs,
                    catch=(Exception,),
                    callbacks=[partial(_report_trial, config, out, received)],
                    show_progress_bar=config.progress_bar,
                    gc_after_trial=True,
                )
            except KeyboardInterrupt as stop:  # a trial stopped for a held signal
                interrupted, terminated = True, isinstance(stop, Terminated)
        interrupted, terminated = interrupted or bool(received), terminated or signal.SIGTERM in received
        files = tune_outputs.write_outputs(
            study, out, config.env_id, config.n_timesteps, config.eval_episodes, config.algo
        )
        plots: list[str] = []
        notes: list[str] = []
        if tune_outputs.best_trial(study) is not None:  # with no trial complete, there is nothing to plot
            plots, notes = tune_outputs.write_plots(study, out)
    if config.storage is None:
        files.insert(0, tune_args.STUDY_DB)
    return TuneResult(study, out, files + plots, notes, interrupted, terminated)


def run_tune(config: TuneConfig) -> int:
    """Run ``torchrl-mask tune`` and report it. SIGTERM stops the study as Ctrl-C does (the running trial marked
    failed, the outputs written from the trials so far, the folder's lock removed).

    :param config: the checked configuration.
    :return: 0; 1 when no trial completed (each one's failure was printed); 130 after Ctrl-C and 143 after SIGTERM
        (the trials so far kept, the outputs written from them).
    """
    n_jobs = f", {config.n_jobs} at a time" if config.n_jobs > 1 else ""
    print(
        f"Tuning {ALGORITHMS[config.algo].__name__} on {config.env_id}: {config.n_trials} trials of "
        f"{config.n_timesteps:,} steps{n_jobs}, {config.sampler} sampler, pruner {config.pruner}, "
        f"study {config.name()!r}.",
        flush=True,
    )
    with sigterm_as_interrupt():
        result = tune(config)
    finished = [trial for trial in result.study.trials if trial.state.is_finished()]
    counts = {
        state: sum(trial.state.name.lower() == state for trial in finished) for state in ("complete", "pruned", "fail")
    }
    print(f"\nStudy {config.name()!r}: {len(finished)} trials ({', '.join(f'{n} {s}' for s, n in counts.items())}).")
    best = tune_outputs.best_trial(result.study)
    if best is not None:
        value = f"{tune_outputs.value_name(config.env_id)} {best.value:g}"
        print(f"Best: trial {best.number}, {value}, seed {best.user_attrs['seed']}.")
    for note in result.notes:
        print(f"  {note}")
    print(f"Saved to {result.out}/: " + ", ".join(result.files))
    if result.interrupted:
        print(
            "torchrl-mask: interrupted; the trials so far are kept and the outputs written from them.", file=sys.stderr
        )
        return EXIT_TERMINATED if result.terminated else EXIT_INTERRUPTED
    if best is None:
        print(
            "torchrl-mask: no trial completed (each failure is printed above); fix what they say, then tune again.",
            file=sys.stderr,
        )
        return 1
    return 0
