"""``torchrl-mask`` and ``python -m torchrl_mask``: ``bench ...`` goes to the benchmark harness
(:func:`torchrl_mask.bench.commands.main`), every other command to the app (:func:`torchrl_mask.app.cli.main`).

The one module that imports both: the app never imports the benchmark, which builds its runs through the app.
Whatever the command, Ctrl-C before it handles Ctrl-C itself (while torch is imported, say) ends in one line and
exit 130, and a reader that stops reading (``torchrl-mask play ... | head -n 1``) ends it quietly. A Ctrl-C that comes
while a module is being imported waits until the import is done (:func:`_interrupt`): raised inside an extension's
initialisation (torch's C++ calling back into Python), a ``KeyboardInterrupt`` cannot unwind and aborts the process.
"""

from __future__ import annotations

import os
import signal
import sys
import threading
from collections.abc import Sequence
from types import FrameType

__all__ = ["main"]


EXIT_INTERRUPTED = 130  # 128 + SIGINT, as a shell reports Ctrl-C
EXIT_BROKEN_PIPE = 141  # 128 + SIGPIPE, as a shell reports a writer whose reader went away
RETRY_SECONDS = 0.05  # how soon a Ctrl-C that came during an import is delivered again


def _importing(frame: FrameType | None) -> bool:
    """Whether ``frame`` runs inside an ``import`` (importlib's machinery is on its stack)."""
    while frame is not None:
        if frame.f_code.co_filename.startswith("<frozen importlib"):
            return True
        frame = frame.f_back
    return False


def _interrupt(signum: int, frame: FrameType | None) -> None:
    """Python's Ctrl-C (``KeyboardInterrupt``), except during an import: then the signal is sent again shortly,
    until the import is done.

    :param signum: SIGINT.
    :param frame: the frame the signal interrupted.
    """
    if _importing(frame):
        if not any(isinstance(thread, _Retry) for thread in threading.enumerate()):  # a second Ctrl-C: one is due
            _Retry(RETRY_SECONDS, os.kill, (os.getpid(), signum)).start()
        return
    raise KeyboardInterrupt


class _Retry(threading.Timer):
    """The timer that sends a Ctrl-C held during an import again; it never keeps the process from exiting."""

    daemon = True


def main(argv: Sequence[str] | None = None) -> int:
    """Run ``torchrl-mask`` with ``argv`` (default: the process's arguments) and return the exit status.

    :param argv: the arguments after the program name.
    :return: the command's exit status; 130 after a Ctrl-C the command did not handle; 141 when stdout's reader
        went away.
    """
    previous = signal.getsignal(signal.SIGINT)
    ours = threading.current_thread() is threading.main_thread() and previous is signal.default_int_handler
    if ours:
        signal.signal(signal.SIGINT, _interrupt)
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
    finally:
        if ours:
            signal.signal(signal.SIGINT, previous)


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
