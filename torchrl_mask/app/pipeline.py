"""One run, whatever it trains: claim the output folder, build the model, learn, save the model however learning
ends, evaluate, write the files.

What differs between a gymnasium env and a game played by self-play is a :class:`Task`
(:mod:`torchrl_mask.app.gym_task`, :mod:`torchrl_mask.app.game_task`): how the model and its envs are built, how
it learns, how it is evaluated, what it writes. :func:`run` is the rest, written once:

1. the folder is claimed (:mod:`torchrl_mask.app.run_folder`: created, locked, an earlier run's files removed with
   ``--overwrite``);
2. the model is built and learns, with the task's callbacks and rl-zoo3's checkpoints;
3. however learning ends (done, Ctrl-C, SIGTERM, or an error from an env, the collector or a callback), the model
   is saved (:mod:`torchrl_mask.app.files`: whole or not at all, signals held) and so is the learning curve so
   far; an interrupt then ends the run in :class:`TrainingInterrupted`, an error in :class:`TrainingFailed`
   (its traceback in :data:`CRASH_FILE`);
4. the model is evaluated and the files written; an error there also ends in :class:`TrainingFailed`, the model
   kept.

A tuning trial is the same task without the folder: :func:`train_model` builds and trains it with the trial's
callback, and :meth:`Task.score` is its value. The checks all ran before, in :func:`torchrl_mask.app.prepare.prepare`,
which hands :func:`run` a :class:`Plan` it does not check again.
"""

from __future__ import annotations

import contextlib
import signal
import traceback
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from stable_baselines3.common.callbacks import CheckpointCallback

from torchrl_mask.app import run_folder
from torchrl_mask.app.config import TrainConfig
from torchrl_mask.app.files import NotWritten, write_file, write_text

if TYPE_CHECKING:
    from stable_baselines3.common.callbacks import BaseCallback

__all__ = [
    "CRASH_FILE",
    "MODEL_FILE",
    "ModelNotSaved",
    "Plan",
    "RunResult",
    "Task",
    "Terminated",
    "TrainingFailed",
    "TrainingInterrupted",
    "callback_files",
    "checkpoints",
    "failed",
    "interrupt_for",
    "run",
    "sigterm_as_interrupt",
    "train_model",
]

MODEL_FILE = "model.zip"
CRASH_FILE = "crash.txt"  # the traceback of a TrainingFailed, in the output folder


class Terminated(KeyboardInterrupt):
    """SIGTERM, raised as an interrupt so that training stops, saves and shuts its workers down as on Ctrl-C."""


@contextlib.contextmanager
def sigterm_as_interrupt() -> Iterator[None]:
    """Raise SIGTERM as :class:`Terminated` while the block runs (the main thread's handler, restored after), so
    that a run or a study stops, saves and shuts its workers down as on Ctrl-C."""

    def raise_terminated(signum: int, frame: object) -> None:
        raise Terminated

    previous = signal.signal(signal.SIGTERM, raise_terminated)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


class TrainingInterrupted(Exception):
    """Training stopped by a ``KeyboardInterrupt`` (Ctrl-C, or SIGTERM as :class:`Terminated`); the model and the
    learning curve were saved first. The interrupt is the ``__cause__``.

    :param out: the output folder.
    :param steps: the env steps taken when it stopped (``model.num_timesteps``).
    """

    def __init__(self, out: Path, steps: int) -> None:
        super().__init__(f"interrupted at {steps:,} steps; saved to {out / MODEL_FILE}")
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
        text = " ".join(str(error).split()).rstrip(".") or "(no message)"
        super().__init__(
            f"{stage} raised {type(error).__name__}: {text[:300]}; the model trained so far is saved in "
            f"{out / MODEL_FILE} (traceback in {out / CRASH_FILE})."
        )
        self.out = out
        self.stage = stage


class ModelNotSaved(Exception):
    """The trained model could not be written (a full disk); no partial ``model.zip`` is left.

    :param error: the write's error.
    :param steps: the steps the model had trained.
    """

    def __init__(self, error: NotWritten, steps: int) -> None:
        super().__init__(
            f"the model trained for {steps:,} steps could not be saved: {error.strerror}; free space in "
            f"{error.path.parent} or pass another --out, and train again."
        )


class Task(Protocol):
    """One kind of run, as :func:`run` drives it. A task is made for one run, checked (its ``prepare``), and
    holds what it builds between the steps."""

    #: What ``num_timesteps`` counts, for the messages: ``"step"`` or ``"move"``.
    unit: str
    #: The files the task writes besides the model, for a message when writing them fails.
    files_text: str

    def first_line(self) -> str:
        """The line printed before training: what is trained on what, how."""

    def build_model(self, device: str, out: Path | None) -> Any:
        """A new model (or the ``-i`` one), with the envs it learns from (closed by :meth:`close`); ``out`` None
        for a tuning trial, which writes nothing."""

    def callbacks(self, model: Any, out: Path) -> list[BaseCallback]:
        """The task's own callbacks (periodic evaluation)."""

    def learn(self, model: Any, callbacks: list[BaseCallback]) -> None:
        """Train ``model`` for the run's steps."""

    def close(self) -> None:
        """Close the envs and collectors the task made (also when building or learning raised)."""

    def write_progress(self, model: Any, out: Path) -> list[str]:
        """Write the learning curve so far (right after learning, however it ended); the names written."""

    def evaluate(self, model: Any) -> dict[str, Any]:
        """The final evaluation."""

    def write(self, model: Any, evaluation: dict[str, Any], out: Path) -> list[str]:
        """Write the evaluation's files; the names written (the model, the curve and the callbacks' files are
        :func:`run`'s to list)."""

    def report(self, evaluation: dict[str, Any]) -> list[str]:
        """The lines that show the evaluation."""

    def score(self, model: Any, episodes: int, seed: int) -> float:
        """A tuning trial's value: one number, higher is better."""


@dataclass(frozen=True)
class Plan:
    """A run, checked: what :func:`~torchrl_mask.app.prepare.prepare` hands :func:`run`.

    :param config: the configuration.
    :param out: the output folder.
    :param device: the torch device, as checked.
    :param task: the task, checked and ready.
    """

    config: TrainConfig
    out: Path
    device: str
    task: Task


@dataclass
class RunResult:
    """What :func:`run` produced.

    :param model: the trained model.
    :param out: the output folder.
    :param evaluation: the task's evaluation.
    :param files: the names of the files written in ``out``, in the order they were written.
    """

    model: Any
    out: Path
    evaluation: dict[str, Any]
    files: list[str]


def checkpoints(config: TrainConfig, model: Any, out: Path) -> list[BaseCallback]:
    """rl-zoo3's checkpoints (SB3's ``CheckpointCallback``): ``rl_model_<steps>_steps.zip`` in ``out`` every
    ``save_freq`` of the model's steps; none for ``save_freq`` 0. A callback is called once per step of the
    model's ``n_envs`` envs (once per move of a self-play run, whose model has one), so the frequency is divided
    by that.

    :param config: the run.
    :param model: the model, built.
    :param out: the output folder.
    """
    if config.save_freq <= 0:
        return []
    every = max(config.save_freq // model.n_envs, 1)
    return [WholeCheckpoints(every, str(out), name_prefix="rl_model", verbose=config.verbose)]


class WholeCheckpoints(CheckpointCallback):
    """SB3's ``CheckpointCallback`` writing each checkpoint whole (:func:`~torchrl_mask.app.files.write_file`); a
    signal that came while one was written then stops training, as it would have stopped it."""

    def _on_step(self) -> bool:
        if self.n_calls % self.save_freq == 0:
            held = write_file(Path(self._checkpoint_path(extension="zip")), self.model.save)
            if held:
                raise interrupt_for(held)
        return True


def callback_files(out: Path) -> list[str]:
    """What rl-zoo3's callbacks wrote into ``out``, by name: the checkpoints of :func:`checkpoints`, and the best
    model and the evaluations of sb3-contrib's periodic evaluation."""
    checkpoints = sorted(path.name for path in out.glob("rl_model_*_steps.zip"))
    return checkpoints + [name for name in ("best_model.zip", "evaluations.npz") if (out / name).exists()]


def failed(out: Path, stage: str, error: BaseException) -> TrainingFailed:
    """The :class:`TrainingFailed` to raise for ``error``, its traceback written to ``out``'s :data:`CRASH_FILE`.

    :param out: the output folder, where the model was saved.
    :param stage: what was running (``"the final evaluation"``).
    :param error: what it raised.
    :return: the exception; its message names the stage, the error, where it was raised and the saved model.
    """
    write_text(out / CRASH_FILE, "".join(traceback.format_exception(error)))
    frames = traceback.extract_tb(error.__traceback__)
    where = f" in {Path(frames[-1].filename).name}:{frames[-1].lineno} ({frames[-1].name})" if frames else ""
    return TrainingFailed(out, stage + where, error)


def train_model(task: Task, device: str, callbacks: list[BaseCallback], out: Path | None = None) -> Any:
    """Build the task's model and train it, the envs closed however it ends; nothing is saved (a tuning trial).

    :param task: the task, prepared.
    :param device: the torch device.
    :param callbacks: callbacks besides the task's own (which need ``out``).
    :param out: the output folder; None: the task's own callbacks are left out.
    :return: the trained model.
    """
    try:
        model = task.build_model(device, out)
        task.learn(model, [*(task.callbacks(model, out) if out is not None else []), *callbacks])
    finally:
        task.close()
    return model


def _save(model: Any, out: Path) -> list[int]:
    """Save the model whole (or not at all); the signals that arrived meanwhile."""
    try:
        return write_file(out / MODEL_FILE, model.save)
    except NotWritten as error:
        raise ModelNotSaved(error, model.num_timesteps) from None


def interrupt_for(signals: list[int]) -> KeyboardInterrupt:
    """The interrupt that held signals stand for: :class:`Terminated` if SIGTERM is among them, else Ctrl-C's.

    :param signals: the signal numbers that arrived while held (:func:`~torchrl_mask.app.files.signals_held`).
    """
    return Terminated() if signal.SIGTERM in signals else KeyboardInterrupt()


def _learn_and_save(plan: Plan) -> tuple[Any, list[str]]:
    """Build and train; save the model and the curve however training ends, then say how it ended; the model, and
    the curve's files."""
    task, out = plan.task, plan.out
    stop: BaseException | None = None
    try:
        model = task.build_model(plan.device, out)
        callbacks = [*task.callbacks(model, out), *checkpoints(plan.config, model, out)]
        try:
            task.learn(model, callbacks)
        except KeyboardInterrupt as interrupt:  # Ctrl-C or SIGTERM: keep what was trained, then say so
            stop = interrupt
        except Exception as error:  # an env, the collector or a callback: keep what was trained, then say so
            stop = error
    finally:
        task.close()
    held = _save(model, out)
    progress: list[str] = []
    try:
        progress = task.write_progress(model, out)
    except Exception as error:  # the curve: after an earlier error or interrupt, that one is what the run says
        if stop is None:
            raise failed(out, f"writing {task.files_text}", error) from error
    if isinstance(stop, KeyboardInterrupt):
        raise TrainingInterrupted(out, model.num_timesteps) from stop
    if stop is not None:
        raise failed(out, f"training (at {task.unit} {model.num_timesteps:,})", stop) from stop
    if held:  # a signal came while the model was written: the run stops here, its model whole
        raise TrainingInterrupted(out, model.num_timesteps) from interrupt_for(held)
    return model, progress


def _evaluate_and_write(plan: Plan, model: Any) -> tuple[dict[str, Any], list[str]]:
    """The final evaluation, then the task's files; the model is saved already."""
    task, out = plan.task, plan.out
    try:
        evaluation = task.evaluate(model)
    except KeyboardInterrupt as stop:
        raise TrainingInterrupted(out, model.num_timesteps) from stop
    except Exception as error:
        raise failed(out, "the final evaluation", error) from error
    try:
        files = task.write(model, evaluation, out)
    except KeyboardInterrupt as stop:
        raise TrainingInterrupted(out, model.num_timesteps) from stop
    except Exception as error:
        raise failed(out, f"writing {task.files_text}", error) from error
    return evaluation, files


def run(plan: Plan) -> RunResult:
    """Run a checked plan: claim the folder, train, save, evaluate, write (see the module).

    Sets torch's CPU thread count to the run's ``threads`` for the process.

    :param plan: what :func:`~torchrl_mask.app.prepare.prepare` returned.
    :return: the model, the folder, the evaluation and the files written.
    :raises TrainingInterrupted: a ``KeyboardInterrupt`` once training began; the model and curve were saved.
    :raises TrainingFailed: anything else raised once training began; the model was saved.
    :raises ModelNotSaved: the model could not be written.
    """
    import torch

    torch.set_num_threads(plan.config.threads)
    with run_folder.claim(plan.out, plan.config.overwrite):
        model, progress = _learn_and_save(plan)
        evaluation, written = _evaluate_and_write(plan, model)
    return RunResult(model, plan.out, evaluation, [MODEL_FILE, *progress, *written, *callback_files(plan.out)])
