"""``torchrl-mask bench [learn | selfplay | memory] ...``: which benchmark runs, by its first argument.

- none of those: the rollout-buffer grid against sb3-contrib (:func:`torchrl_mask.bench.buffers.main`);
- ``learn``: whole ``learn()`` calls against sb3-contrib (:func:`torchrl_mask.bench.learn.main`); with
  ``--recurrent``, ``--action-spaces`` or ``--fast-paths``, RecurrentPPO against MaskableRecurrentPPO
  (:mod:`torchrl_mask.bench.recurrent`), the cost of masking per action space (:mod:`torchrl_mask.bench.spaces`)
  or what each fast path buys (:mod:`torchrl_mask.bench.fastpaths`);
- ``selfplay``: self-play's speed against the game's own (:func:`torchrl_mask.bench.selfplay.main`);
- ``memory``: self-play with an LSTM against without (:func:`torchrl_mask.bench.memory.main`);
- ``jobshop``: MaskablePPO's training rate on a job-shop instance against the env's own random play
  (:func:`torchrl_mask.bench.jobshop.main`).

Each is imported only when it runs: they need sb3-contrib's test envs, PettingZoo's games or the train job.
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Sequence

from torchrl_mask.app.hyperparams import UsageError

__all__ = ["COMMANDS", "LEARN_FLAGS", "main"]

EXIT_USAGE = 2

#: ``bench learn``'s flags that run another benchmark, and its module.
LEARN_FLAGS = {
    "--recurrent": "torchrl_mask.bench.recurrent",
    "--action-spaces": "torchrl_mask.bench.spaces",
    "--fast-paths": "torchrl_mask.bench.fastpaths",
}
#: The subcommands and the module each runs.
COMMANDS = {
    "learn": "torchrl_mask.bench.learn",
    "selfplay": "torchrl_mask.bench.selfplay",
    "memory": "torchrl_mask.bench.memory",
    "jobshop": "torchrl_mask.bench.jobshop",
}


def main(argv: Sequence[str] | None = None) -> int:
    """Run the benchmark ``argv`` names (see the module) with the arguments after its name.

    :param argv: the arguments after ``bench``; None reads ``sys.argv``.
    :return: the benchmark's exit status.
    """
    args = list(sys.argv[1:] if argv is None else argv)
    try:
        return _run(args)
    except UsageError as err:  # an option a run refuses (bench selfplay's games, train's options after --)
        print(f"torchrl-mask bench: error: {err}", file=sys.stderr)
        return EXIT_USAGE


def _run(args: list[str]) -> int:
    if args[:1] == ["learn"]:
        for flag, module in LEARN_FLAGS.items():
            if flag in args:
                return int(importlib.import_module(module).main([arg for arg in args[1:] if arg != flag]))
    if args[:1] and args[0] in COMMANDS:
        return int(importlib.import_module(COMMANDS[args[0]]).main(args[1:]))
    return int(importlib.import_module("torchrl_mask.bench.buffers").main(args))
