"""Watching a collector's worker processes: a dead, raising or silent worker ends in an error, and no worker
outlives the learner.

TorchRL's multi-process and distributed collectors notice some failures themselves, but wait without a
timeout in others (a weight update waits for every worker's acknowledgement, a dead one's included, and a
worker stuck in its env is waited for as long as it takes). Here each call into the collector runs in a daemon
thread while the caller watches the workers and the clock; on a failure the collector is shut down, workers
still alive after a grace period are terminated, and :class:`CollectorFailed` is raised with what happened:
which worker, and the exception its env or policy raised.

Three more guards:

- :func:`orphan_guard`: a small watcher process kills the workers if the learner dies without shutting the
  collector down (``SIGKILL``, out of memory), so that a worker stuck in its env is not left behind.
- A spawned worker that receives a :class:`~torchrl_mask.MaskablePolicyModule` records the exception that ends
  it (:func:`worker_job_unpickled`), so that the learner can carry its type and message in
  :class:`CollectorFailed` (a forked worker prints it), or say that none ended it (``os._exit``). Nothing is
  done at import.
- A spawned worker ignores ``SIGINT``: Ctrl-C in a terminal reaches every process of the foreground group, and
  the learner alone handles it (it saves what was trained and shuts the collector down, which ends the workers);
  a worker interrupted mid-step or inside a finalizer would only print noise on its way out.
- :func:`~torchrl_mask.torchrl.spawn_guard.refuse_unguarded_spawn` (re-exported here): a script that starts
  worker processes at its top level, outside ``if __name__ == "__main__":``, is stopped with one clear error
  before any worker starts.
"""

from __future__ import annotations

import atexit
import contextlib
import multiprocessing
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from multiprocessing.process import BaseProcess
from pathlib import Path
from typing import Any, TypeVar

from torchrl.collectors import BaseCollector

from torchrl_mask.torchrl.spawn_guard import outward_frames, refuse_unguarded_spawn
from torchrl_mask.torchrl.weight_sync import shutdown_weight_sync

__all__ = [
    "CollectorFailed",
    "guarded",
    "orphan_guard",
    "refuse_unguarded_spawn",
    "shutdown",
    "worker_job_pickled",
    "worker_job_unpickled",
]

_T = TypeVar("_T")
_POLL_SECONDS = 0.2
_SHUTDOWN_SECONDS = 10.0
_SILENT_GRACE_SECONDS = 2.0


class CollectorFailed(RuntimeError):
    """Data collection failed (a worker process died, an env raised, a worker stopped answering).

    The collector has been shut down and its worker processes are gone. The message names the worker and,
    when the worker could report it, the type and message of the exception that ended it. ``__cause__`` is
    the exception raised in this process: the env's own for an in-process collector, TorchRL's error when
    TorchRL noticed the failure first, None when the watcher here noticed it (a dead or silent worker).
    """


def _worker_processes(collector: BaseCollector) -> list[BaseProcess]:
    """The local worker processes of a collector: those of the multi-process collectors, and the jobs of a
    distributed collector launched with ``launcher="mp"``; none for ``Collector`` or remote workers."""
    procs = getattr(collector, "procs", None) or getattr(collector, "jobs", None) or []
    return [proc for proc in procs if isinstance(proc, BaseProcess)]


def guarded(call: Callable[[], _T], collector: BaseCollector, what: str, timeout: float | None = None) -> _T:
    """Run ``call`` (which talks to the collector's workers) and fail fast if a worker dies or goes silent.

    :param call: the call into the collector, e.g. ``lambda: next(batches)``.
    :param collector: the collector whose workers are watched.
    :param what: what the call does, for the error message ("collecting a batch").
    :param timeout: seconds after which a call still waiting on its workers fails; None waits as long as it
        takes. Only worker processes are timed: an in-process collector runs ``call`` in this thread.
    :return: what ``call`` returned.
    :raises CollectorFailed: a worker died, went silent past ``timeout``, or ``call`` raised; the collector
        has been shut down.
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
        elapsed = time.monotonic() - started
        dead = [_death(i, proc) for i, proc in enumerate(procs) if _exitcode(proc) is not None]
        if dead and thread.is_alive():
            shutdown(collector)
            raise CollectorFailed(
                f"{type(collector).__name__} lost a worker process while {what} ({elapsed:.1f} s in): "
                f"{'; '.join(dead)}. The collector has been shut down and its other workers stopped."
            )
        if timeout is not None and elapsed > timeout and thread.is_alive():
            silent = _silent_workers(procs, thread, collector)
            shutdown(collector, _SILENT_GRACE_SECONDS)
            raise CollectorFailed(
                f"{type(collector).__name__} did not answer within batch_timeout={timeout:g} s while {what}: "
                f"{silent} sent nothing (stuck in its env or policy?). The collector has been shut down and its "
                "workers stopped; raise batch_timeout if a batch can take longer."
            )
    error = outcome.get("error")
    if error is None:
        return outcome["value"]
    if isinstance(error, StopIteration):
        raise CollectorFailed(
            "The collector stopped before total_timesteps were collected: create it with total_frames=-1 "
            "(or at least total_timesteps)."
        ) from None
    dead = [_death(i, proc) for i, proc in enumerate(procs) if _exitcode(proc) not in (None, 0)]
    shutdown(collector)
    if isinstance(error, Exception):
        workers = f" ({'; '.join(dead)})" if dead else ""
        raise CollectorFailed(
            f"Data collection failed while {what} from {type(collector).__name__}{workers}: "
            f"{type(error).__name__}: {_first_line(error)}. The collector has been shut down."
        ) from error
    raise error


def _first_line(error: BaseException) -> str:
    text = str(error).strip()
    return text.splitlines()[0] if text else ""


def _silent_workers(procs: list[BaseProcess], thread: threading.Thread, collector: BaseCollector) -> str:
    """ "worker 1 (pid N)": the workers that have not delivered their part of the batch, read from the gathering
    loop the waiting thread is in (``MultiSyncCollector``'s ``recv``); else every worker."""
    delivered: set[int] = set()
    frame = sys._current_frames().get(thread.ident or -1)
    for waiting in outward_frames(frame):
        received = waiting.f_locals.get("recv") if waiting.f_locals.get("self") is collector else None
        if received is not None:  # (data, iteration): data is (batch, worker) on a worker's first batch, else worker
            delivered = {data[1] if isinstance(data, tuple) else data for data, _ in list(received)}
            break
    silent = [f"worker {i} (pid {proc.pid})" for i, proc in enumerate(procs) if i not in delivered]
    return ", ".join(silent) if silent else "its workers"


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
    recorded = _recorded_error(proc.pid)
    if recorded:
        cause = f"it raised {recorded}"
    elif recorded == "":  # recording from its start, and no exception ended it
        cause = "it raised no exception and printed no traceback (os._exit or sys.exit in its env or policy?)"
    else:  # a forked worker, or one without a MaskablePolicyModule, records nothing
        cause = "it could not report why (an exception in its env or policy prints its traceback above)"
    return f"worker {index} (pid {proc.pid}) exited with code {code}: {cause}"


# A killed process is gone within milliseconds; on a loaded machine its exit can still take seconds.
_KILL_SECONDS = 30.0


def shutdown(collector: BaseCollector, timeout: float = _SHUTDOWN_SECONDS) -> None:
    """Shut the collector and its weight-sync schemes down; worker processes still alive ``timeout`` seconds
    later are terminated.

    :param collector: the collector.
    :param timeout: seconds the collector's own shutdown may take before its workers are terminated.
    """

    def close() -> None:
        collector.shutdown()
        shutdown_weight_sync(collector)

    thread = threading.Thread(target=close, name="torchrl_mask-shutdown", daemon=True)
    thread.start()
    thread.join(timeout)
    for proc in _worker_processes(collector):
        try:
            if proc.is_alive():
                proc.terminate()
                proc.join(2.0)
            if proc.is_alive():
                proc.kill()
                proc.join(_KILL_SECONDS)  # SIGKILL cannot be ignored: wait until it is reaped, not a guess
        except ValueError:  # TorchRL's shutdown joined and closed this process object meanwhile: it is gone
            continue


# ------------------------------------------------------------------------------- the learner dies


_WATCHER = """
import os, signal, sys
if sys.stdin.buffer.read() != b"done":  # end of input without "done": the learner is gone
    for pid in map(int, sys.argv[1:]):
        try:
            os.kill(pid, signal.SIGKILL)
        except OSError:
            pass
"""


@contextlib.contextmanager
def orphan_guard(collector: BaseCollector) -> Iterator[None]:
    """Kill the collector's local worker processes if this process dies inside the block.

    A watcher process holds a pipe from this one; the block's normal or exceptional end tells it "done" (and
    :func:`shutdown` stops the workers as usual); if this process is killed the pipe closes without it, and
    the watcher kills the workers. Nothing is started for a collector without local worker processes.

    :param collector: the collector whose workers must not outlive this process.
    """
    pids = [str(proc.pid) for proc in _worker_processes(collector) if proc.pid is not None]
    if not pids:
        yield
        return
    watcher = subprocess.Popen([sys.executable, "-c", _WATCHER, *pids], stdin=subprocess.PIPE, start_new_session=True)
    try:
        yield
    finally:
        assert watcher.stdin is not None
        with contextlib.suppress(OSError):
            watcher.stdin.write(b"done")
            watcher.stdin.close()
        watcher.wait()


# ------------------------------------------------------------------------- a worker's own error


def _errors_dir(parent_pid: int) -> Path:
    return Path(tempfile.gettempdir()) / f"torchrl_mask_worker_errors_{parent_pid}"


def _recorded_error(pid: int | None) -> str | None:
    """``"ValueError: ..."``: the exception that ended worker ``pid``; ``""`` for a worker that recorded from its
    start (:func:`worker_job_unpickled`) and was ended by no exception; None for one that recorded nothing."""
    if pid is None:
        return None
    try:
        return (_errors_dir(os.getpid()) / f"{pid}.txt").read_text().strip()
    except OSError:
        return None


_CLEANUP_REGISTERED: set[int] = set()


def worker_job_pickled() -> int:
    """Called while this process pickles a worker's job (the policy module): refuse an unguarded script, and
    make sure the folder the worker may record its error in is removed when this process exits.

    :return: this process's pid, which the job carries to the worker (see :func:`worker_job_unpickled`).
    :raises RuntimeError: from :func:`refuse_unguarded_spawn`.
    """
    refuse_unguarded_spawn()
    pid = os.getpid()
    if pid not in _CLEANUP_REGISTERED:
        _CLEANUP_REGISTERED.add(pid)
        atexit.register(shutil.rmtree, _errors_dir(pid), ignore_errors=True)
    return pid


def worker_job_unpickled(parent_pid: int | None) -> None:
    """Called while a spawned worker unpickles its job: from then on, the exception that ends this worker is
    recorded where ``parent_pid`` reads it (:func:`_recorded_error`). The record is made empty at once, so that
    a worker that exits without an exception (``os._exit``, ``sys.exit``) is told apart from one never recorded.

    The worker then ignores ``SIGINT`` (the learner handles Ctrl-C and shuts the workers down). The worker's own
    ``BaseProcess.run`` is wrapped: this changes nothing in the learner's process, and only a process spawned for
    this job (multiprocessing's ``_inheriting`` flag is set while it unpickles its job),
    which ends with the job. Elsewhere (the learner unpickling a copy of a policy module) it does nothing.

    :param parent_pid: the pid of the process that pickled the job; None does nothing.
    """
    if parent_pid is None or not getattr(multiprocessing.current_process(), "_inheriting", False):
        return
    if getattr(BaseProcess.run, "_records_errors_for", None) is not None:
        return
    # Ctrl-C is the learner's to handle: it reaches the whole foreground process group, and a worker that raised
    # KeyboardInterrupt wherever it was (inside an env's finalizer, say) would print noise while the learner
    # saves the model; the learner's shutdown of the collector ends this worker.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    original = BaseProcess.run
    record = _errors_dir(parent_pid) / f"{os.getpid()}.txt"
    with contextlib.suppress(OSError):  # empty: recording, nothing raised (yet); an exit without one leaves it so
        record.parent.mkdir(exist_ok=True)
        record.write_text("")

    def run(self: BaseProcess) -> None:
        try:
            original(self)
        except Exception as error:
            with contextlib.suppress(OSError):
                record.parent.mkdir(exist_ok=True)
                record.write_text(f"{type(error).__name__}: {_first_line(error)}")
            raise

    run._records_errors_for = parent_pid  # type: ignore[attr-defined]
    BaseProcess.run = run  # type: ignore[method-assign]  # this worker's own class, in its own interpreter
