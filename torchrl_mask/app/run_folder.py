"""The output folder of ``torchrl-mask train``: one run per folder, and a run's files its own.

A folder that holds anything is refused (:func:`check_out`) unless ``--overwrite`` is given, in which case the
files an earlier run wrote there (:data:`OWNED`) are removed before training (:func:`claim`); other files are
left alone. While a run trains, a lock file (:data:`LOCK`, holding its process id) refuses a second run into the
same folder, with or without ``--overwrite``; it is removed when the run ends, also on an error or an interrupt.
A lock left by a process that no longer runs (killed with SIGKILL) does not count. A folder the run created
(the output folder, its ``monitor/``) and left empty, as a run interrupted before it wrote anything leaves it, is
removed again (:func:`remove_if_empty`). Without ``--out`` a run gets a new folder under ``runs/`` named after its env
and the time (:func:`dated_folder`). Nothing heavy is imported.

Example:
    >>> import tempfile
    >>> folder = Path(tempfile.mkdtemp())
    >>> with claim(folder, overwrite=False):
    ...     (folder / LOCK).exists()
    True
    >>> (folder / LOCK).exists()
    False
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

from torchrl_mask.app.hyperparams import UsageError

__all__ = ["LOCK", "OWNED", "check_folder", "check_out", "claim", "dated_folder", "remove_if_empty"]

LOCK = ".torchrl-mask.lock"
# What a run writes into its folder (glob patterns), removed by --overwrite.
OWNED = (
    "model.zip",
    "learning_curve.png",
    "learning_curve.csv",
    "evaluation.json",
    "monitor",
    "rl_model_*_steps.zip",
    "best_model.zip",
    "evaluations.npz",
    "win_rates.csv",
    "crash.txt",
    LOCK,
)


def dated_folder(name: str) -> Path:
    """The folder of a run given no ``--out``: ``runs/<name>-<date>-<time>``, the name made file-safe.

    :param name: what the run is of (``"Taxi-v4"``, ``"tune-Taxi-v4"``); other characters than letters, digits,
        ``.``, ``_`` and ``-`` become ``_`` (``pettingzoo:tictactoe_v3`` is ``pettingzoo_tictactoe_v3``).
    """
    return Path("runs") / f"{re.sub(r'[^A-Za-z0-9._-]+', '_', name)}-{time.strftime('%Y%m%d-%H%M%S')}"


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


def _running_owner(folder: Path) -> int | None:
    """The process id in ``folder``'s lock file, if that process still runs."""
    try:
        pid = int((folder / LOCK).read_text().strip())
    except (OSError, ValueError):
        return None
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return None
    except PermissionError:  # another user's process: it runs
        return pid
    return pid


def check_out(folder: Path, overwrite: bool, trained_agent: Path | None = None) -> None:
    """Refuse an output folder another run is writing to, or (without ``overwrite``) one that is not empty.

    :param folder: the output folder (may not exist yet).
    :param overwrite: whether the files of an earlier run there may be removed.
    :param trained_agent: the model a run continues from, which ``overwrite`` must not remove.
    :raises UsageError: the folder is in use, holds files without ``overwrite``, or holds ``trained_agent``
        with ``overwrite``.
    """
    if not folder.is_dir():
        return
    owner = _running_owner(folder)
    if owner is not None:
        raise UsageError(
            f"--out {folder}: another torchrl-mask train (pid {owner}) is writing to it; wait for it to end, "
            "or pass another --out."
        )
    if not overwrite:
        if any(path.name != LOCK for path in folder.iterdir()):  # a lock whose run is gone does not count
            raise UsageError(
                f"--out {folder} is not empty (an earlier run's files?); pass an empty or new folder, or add "
                "--overwrite to replace the earlier run."
            )
        return
    if trained_agent is not None and trained_agent.resolve().parent == folder.resolve():
        raise UsageError(
            f"-i {trained_agent} is in --out {folder}, which --overwrite empties; copy it elsewhere first, or "
            "pass another --out."
        )


@contextlib.contextmanager
def claim(folder: Path, overwrite: bool) -> Iterator[Path]:
    """Take ``folder`` for this run: create it, lock it, and with ``overwrite`` remove an earlier run's files.

    :param folder: the output folder, as :func:`check_out` accepted it.
    :param overwrite: remove the files of :data:`OWNED` first.
    :return: a context whose value is ``folder``; the lock is removed when it exits, however it exits.
    :raises UsageError: another run took the folder, or (without ``overwrite``) wrote into it, since
        :func:`check_out` looked.
    """
    made = not folder.exists()
    folder.mkdir(parents=True, exist_ok=True)
    lock = folder / LOCK
    if lock.exists() and _running_owner(folder) is None:
        lock.unlink()  # left by a process that is gone
    try:
        descriptor = os.open(lock, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
    except FileExistsError:
        raise UsageError(
            f"--out {folder}: another torchrl-mask train is writing to it; wait for it to end, or pass another --out."
        ) from None
    with os.fdopen(descriptor, "w") as file:
        file.write(f"{os.getpid()}\n")
    try:
        if not overwrite and any(path.name != LOCK for path in folder.iterdir()):  # another run came and went
            raise UsageError(
                f"--out {folder} is not empty (an earlier run's files?); pass an empty or new folder, or add "
                "--overwrite to replace the earlier run."
            )
        for pattern in OWNED if overwrite else ():
            if pattern != LOCK:
                _remove_owned_pattern(folder, pattern)
        yield folder
    finally:
        lock.unlink(missing_ok=True)
        if made:  # a run that ended before writing anything leaves no folder behind
            remove_if_empty(folder)


def remove_if_empty(folder: Path) -> None:
    """Remove ``folder`` if it is empty (a folder a run made and wrote nothing into); else keep it.

    :param folder: the folder.
    """
    with contextlib.suppress(OSError):  # not empty (or gone): kept
        folder.rmdir()


def _remove_owned_pattern(folder: Path, pattern: str) -> None:
    for path in folder.glob(pattern):
        if path.is_dir() and not path.is_symlink():
            shutil.rmtree(path)
        else:
            path.unlink()
