"""How a run writes a file into its folder: whole or not at all.

Each file is written to a temporary file beside it and moved over the name with ``os.replace``, with Ctrl-C and
SIGTERM held until the move is done (:func:`signals_held`): a reader, or a run stopped halfway, never sees half a
``model.zip``, and a full disk leaves the old file (or none) rather than a corrupt one. Nothing heavy is imported.

Example:
    >>> import tempfile
    >>> folder = Path(tempfile.mkdtemp())
    >>> write_text(folder / "a.txt", "whole\\n")  # the signals that came meanwhile: none
    []
    >>> (folder / "a.txt").read_text(), sorted(path.name for path in folder.iterdir())
    ('whole\\n', ['a.txt'])
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import tempfile
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

__all__ = ["NotWritten", "signals_held", "write_file", "write_json", "write_text"]


class NotWritten(OSError):
    """A file of the run could not be written (a full disk, a folder made read-only); nothing half-written is left.

    :param path: the file.
    :param error: what the write raised.
    """

    def __init__(self, path: Path, error: OSError) -> None:
        super().__init__(error.errno, f"could not write {path}: {error.strerror or error}")
        self.path = path


@contextlib.contextmanager
def signals_held() -> Iterator[list[int]]:
    """Hold SIGINT and SIGTERM while the block runs (in the main thread; elsewhere signals do not arrive).

    :return: a context whose value lists the signals that arrived while it ran: not delivered, the caller decides
        what they mean (the run ends, its files written).
    """
    received: list[int] = []
    if threading.current_thread() is not threading.main_thread():
        yield received
        return

    def hold(signum: int, frame: object) -> None:
        received.append(signum)

    previous = {number: signal.signal(number, hold) for number in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield received
    finally:
        for number, handler in previous.items():
            signal.signal(number, handler)


def write_file(path: Path, write: Callable[[Path], None]) -> list[int]:
    """Write ``path`` whole: ``write`` fills a temporary file beside it, which then replaces ``path``.

    :param path: the file to write.
    :param write: writes a file at the path it is given, whatever its name (a path ending in ``.part``: give
        matplotlib's ``savefig`` its ``format``).
    :return: the signals that arrived while writing (held until it was done).
    :raises NotWritten: the write or the move raised an ``OSError``; the temporary file is removed.
    """
    with signals_held() as received:
        descriptor, name = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".part", dir=path.parent)
        os.close(descriptor)
        partial = Path(name)
        try:
            write(partial)
            os.replace(partial, path)
        except OSError as error:
            partial.unlink(missing_ok=True)
            raise NotWritten(path, error) from error
        except BaseException:
            partial.unlink(missing_ok=True)
            raise
    return received


def write_text(path: Path, text: str) -> list[int]:
    """Write ``text`` to ``path`` whole, as UTF-8 (:func:`write_file`).

    :param path: the file.
    :param text: its text.
    :return: the signals that arrived while writing.
    """

    def write(partial: Path) -> None:
        partial.write_text(text, encoding="utf-8")

    return write_file(path, write)


def write_json(path: Path, record: dict[str, Any]) -> list[int]:
    """Write ``record`` to ``path`` whole, as indented JSON (paths and other objects as their text).

    :param path: the file (``evaluation.json``).
    :param record: a dict of JSON values, paths among them.
    :return: the signals that arrived while writing.
    """
    return write_text(path, json.dumps(record, indent=2, default=str) + "\n")
