"""``torchrl-mask`` and ``python -m torchrl_mask``: ``bench ...`` goes to the benchmark harness
(:func:`torchrl_mask.bench.commands.main`), every other command to the app (:func:`torchrl_mask.app.cli.main`).

The one module that imports both: the app never imports the benchmark, which builds its runs through the app.
Whatever the command, Ctrl-C before it handles Ctrl-C itself (while torch is imported, say) ends in one line and
exit 130, and a reader that stops reading (``torchrl-mask play ... | head -n 1``) ends it quietly.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Sequence

__all__ = ["main"]


EXIT_INTERRUPTED = 130  # 128 + SIGINT, as a shell reports Ctrl-C
EXIT_BROKEN_PIPE = 141  # 128 + SIGPIPE, as a shell reports a writer whose reader went away


def main(argv: Sequence[str] | None = None) -> int:
    """Run ``torchrl-mask`` with ``argv`` (default: the process's arguments) and return the exit status.

    :param argv: the arguments after the program name.
    :return: the command's exit status; 130 after a Ctrl-C the command did not handle; 141 when stdout's reader
        went away.
    """
    try:
        status = _run(list(sys.argv[1:] if argv is None else argv))
        sys.stdout.flush()  # here, where a reader gone away is caught, not at the interpreter's exit
        return status
    except KeyboardInterrupt:
        print("torchrl-mask: interrupted.", file=sys.stderr)
        return EXIT_INTERRUPTED
    except BrokenPipeError:  # stdout's reader is gone: say nothing more, and let Python's exit flush nothing there
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return EXIT_BROKEN_PIPE


def _run(args: list[str]) -> int:
    if args[:1] == ["bench"]:
        try:
            from torchrl_mask.bench.commands import main as bench
        except ModuleNotFoundError as err:
            if not (err.name or "").startswith("torchrl_mask.bench"):
                raise
            print(
                f"torchrl-mask bench: this install has no benchmark (module {err.name} is missing); update "
                "torchrl_mask, or run the scripts in benchmarks/ from a clone of the repository.",
                file=sys.stderr,
            )
            return 1
        return bench(args[1:])
    from torchrl_mask.app.cli import main as app

    return app(args)


if __name__ == "__main__":
    sys.exit(main())
