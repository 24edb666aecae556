"""Watching a collector's worker processes: a dead worker or a raising env ends in an error within seconds.

TorchRL's multi-process and distributed collectors notice some failures themselves, but wait without a
timeout in others (a weight update waits for every worker's acknowledgement, a dead one's included). Here
each call into the collector runs in a daemon thread while the caller watches the workers; on a failure the
collector is shut down, workers still alive after a grace period are terminated, and :class:`CollectorFailed`
is raised with what happened.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from multiprocessing.process import BaseProcess
from typing import Any, TypeVar

from torchrl.collectors import BaseCollector

__all__ = ["CollectorFailed", "guarded", "shutdown"]

_T = TypeVar("_T")
_POLL_SECONDS = 0.2
_SHUTDOWN_SECONDS = 10.0


class CollectorFailed(RuntimeError):
    """Data collection failed (a worker process died, an env raised, a worker stopped answering).

    The collector has been shut down and its worker processes are gone; the original error is the cause.
    """


def _worker_processes(collector: BaseCollector) -> list[BaseProcess]:
    """The local worker processes of a collector: those of the multi-process collectors, and the jobs of a
    distributed collector launched with ``launcher="mp"``; none for ``Collector`` or remote workers."""
    procs = getattr(collector, "procs", None) or getattr(collector, "jobs", None) or []
    return [proc for proc in procs if isinstance(proc, BaseProcess)]


def guarded(call: Callable[[], _T], collector: BaseCollector, what: str) -> _T:
    """Run ``call`` (which talks to the collector's workers) and fail fast if a worker dies meanwhile.

    TorchRL waits on a dead worker in some places without a timeout (a weight update waits for every
    worker's acknowledgement); the call runs in a daemon thread while this one watches the worker processes.
    Any failure shuts the collector down and is raised as :class:`CollectorFailed`.
    """
    procs = _worker_processes(collector)
    outcome: dict[str, Any] = {}

    def run() -> None:
        try:
            outcome["value"] = call()
        except BaseException as error:  # handed to the caller below
            outcome["error"] = error

    started = time.monotonic()
    if not procs:  # nothing to watch: run it here
        run()
        thread = None
    else:
        thread = threading.Thread(target=run, name="torchrl_mask-collector", daemon=True)
        thread.start()
    while thread is not None and thread.is_alive():
        thread.join(_POLL_SECONDS)
        dead = [_death(i, proc) for i, proc in enumerate(procs) if _exitcode(proc) is not None]
        if dead and thread.is_alive():
            shutdown(collector)
            raise CollectorFailed(
                f"{type(collector).__name__} lost a worker process while {what} "
                f"({time.monotonic() - started:.1f} s in): {'; '.join(dead)}. "
                "The collector has been shut down and its other workers stopped."
            )
    error = outcome.get("error")
    if error is None:
        return outcome["value"]
    if isinstance(error, StopIteration):
        raise CollectorFailed(
            "The collector stopped before total_timesteps were collected: create it with total_frames=-1 "
            "(or at least total_timesteps)."
        ) from None
    shutdown(collector)
    if isinstance(error, Exception):
        raise CollectorFailed(
            f"Data collection failed while {what} from {type(collector).__name__}: "
            f"{type(error).__name__}: {error}. The collector has been shut down."
        ) from error
    raise error


def _exitcode(proc: BaseProcess) -> int | None:
    """The process's exit code; None while it runs, and for a process object TorchRL has already closed
    (it joined the process first, and reports that failure itself)."""
    try:
        return proc.exitcode
    except ValueError:  # "process object is closed"
        return None


def _death(index: int, proc: BaseProcess) -> str:
    code = _exitcode(proc)
    if code is not None and code < 0:
        return f"worker {index} (pid {proc.pid}) was killed by signal {-code}"
    return (
        f"worker {index} (pid {proc.pid}) exited with code {code}: its env or policy raised "
        "(the worker printed the traceback above)"
    )


def shutdown(collector: BaseCollector, timeout: float = _SHUTDOWN_SECONDS) -> None:
    """Shut the collector down; worker processes still alive ``timeout`` seconds later are terminated."""
    thread = threading.Thread(target=collector.shutdown, name="torchrl_mask-shutdown", daemon=True)
    thread.start()
    thread.join(timeout)
    for proc in _worker_processes(collector):
        try:
            if proc.is_alive():
                proc.terminate()
                proc.join(2.0)
            if proc.is_alive():
                proc.kill()
                proc.join(2.0)
        except ValueError:  # TorchRL's shutdown joined and closed this process object meanwhile: it is gone
            continue
