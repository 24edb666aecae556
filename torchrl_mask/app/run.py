"""Running one ``torchrl-mask train`` once its options are resolved: check it (:mod:`torchrl_mask.app.prepare`),
say what it trains, run it (:mod:`torchrl_mask.app.pipeline`), report it; and how Ctrl-C and SIGTERM end it (the
model saved where training had started: exit 130 or 143, one line on stderr).
"""

from __future__ import annotations

import signal
import sys

from torchrl_mask.app.config import TrainConfig
from torchrl_mask.app.pipeline import (
    ModelNotSaved,
    Terminated,
    TrainingFailed,
    TrainingInterrupted,
    run,
    sigterm_as_interrupt,
)
from torchrl_mask.app.prepare import prepare

__all__ = ["EXIT_FAILED", "EXIT_INTERRUPTED", "EXIT_TERMINATED", "run_train", "terminating"]

EXIT_FAILED = 1  # something raised after training began: the model is saved, one line says where
EXIT_INTERRUPTED = 128 + signal.SIGINT  # 130, as a shell reports Ctrl-C
EXIT_TERMINATED = 128 + signal.SIGTERM  # 143


def terminating(interrupt: BaseException | None) -> bool:
    """Whether an interrupt was SIGTERM (:class:`~torchrl_mask.app.pipeline.Terminated`) rather than Ctrl-C.

    :param interrupt: the interrupt, or an exception it caused.
    """
    return isinstance(interrupt, Terminated) or isinstance(getattr(interrupt, "__cause__", None), Terminated)


def run_train(config: TrainConfig) -> int:
    """Check, run and report a train configuration: a gymnasium env, or a ``pettingzoo:<game>`` by self-play.

    SIGTERM is raised as an interrupt while it runs, so that training stops, saves and shuts its workers down as
    on Ctrl-C.

    :param config: the configuration (:func:`~torchrl_mask.app.config.train_config`).
    :return: 0; 130 after Ctrl-C and 143 after SIGTERM (one line on stderr says what was kept); 1 when something
        raised after training began (one line on stderr says what, and where the saved model is), or the model
        could not be written.
    :raises UsageError: a check failed, before anything was written.
    """
    try:
        with sigterm_as_interrupt():
            plan = prepare(config)  # fail here, with one clear line, before anything is written
            print(plan.task.first_line())
            result = run(plan)
            for line in plan.task.report(result.evaluation):
                print(line)
            print(f"\nSaved to {result.out}/: " + ", ".join(result.files))
            return 0
    except TrainingInterrupted as stop:  # while training or evaluating: the model was saved
        print(f"torchrl-mask: {stop}", file=sys.stderr)
        return EXIT_TERMINATED if terminating(stop) else EXIT_INTERRUPTED
    except (TrainingFailed, ModelNotSaved) as failure:  # the model is saved, or says why it could not be
        print(f"torchrl-mask: {failure}", file=sys.stderr)
        return EXIT_FAILED
    except KeyboardInterrupt as stop:  # before training started: no model to keep
        print("torchrl-mask: interrupted before a model was saved; nothing to keep.", file=sys.stderr)
        return EXIT_TERMINATED if terminating(stop) else EXIT_INTERRUPTED
