"""A script that starts worker processes at its top level, outside ``if __name__ == "__main__":``, is stopped with
one clear error before any worker starts: each worker that multiprocessing's spawn start method starts re-imports
the script and would start workers of its own, while TorchRL waits for them forever.
"""

from __future__ import annotations

import ast
import os
import sys
from collections.abc import Iterator
from pathlib import Path
from types import FrameType
from typing import Any

from torchrl.collectors import BaseCollector

from torchrl_mask.torchrl.weight_sync import shutdown_weight_sync

__all__ = ["outward_frames", "refuse_unguarded_spawn"]


def refuse_unguarded_spawn() -> None:
    """Raise if this process is starting a spawned worker from the top level of its main script, outside
    ``if __name__ == "__main__":``. Called while a worker's job is pickled; does nothing elsewhere.

    :raises RuntimeError: the line that starts the workers is not under the guard; the message names it.
    """
    frames = list(outward_frames(sys._getframe(1)))
    if not any(frame.f_globals.get("__name__", "").startswith("multiprocessing.popen_") for frame in frames):
        return
    main = sys.modules.get("__main__")
    path = getattr(main, "__file__", None)
    if not path or not _reimported_by_spawn(main):
        return
    for frame in frames:
        at_top_level = frame.f_code.co_name == "<module>" and frame.f_globals is getattr(main, "__dict__", None)
        if at_top_level and os.path.abspath(frame.f_code.co_filename) == os.path.abspath(path):
            if _under_main_guard(path, frame.f_lineno):
                return
            starting = [f.f_locals.get("self") for f in frames]  # the collector whose __init__ starts them
            for collector in [owner for owner in starting if isinstance(owner, BaseCollector)][:1]:
                shutdown_weight_sync(collector)
            raise RuntimeError(
                f"{path}, line {frame.f_lineno}, starts worker processes at the top level of the script. Each "
                "worker re-imports the script (multiprocessing's spawn start method) and would run this line "
                'again: put the code that creates the collector and trains under `if __name__ == "__main__":`.'
            )


def _reimported_by_spawn(main: Any) -> bool:
    """Whether spawned workers re-run the main module (as multiprocessing's spawn decides): a script given by
    path or a module run with ``-m``, but not a package's ``__main__`` nor an interactive session."""
    name = getattr(getattr(main, "__spec__", None), "name", None)
    if name is not None:
        return name != "__main__" and not name.endswith(".__main__")
    return getattr(main, "__file__", None) is not None


def outward_frames(frame: FrameType | None) -> Iterator[FrameType]:
    """``frame`` and its callers, innermost first.

    :param frame: a frame (``sys._getframe()``), or None.
    :return: the frames from ``frame`` out to the outermost.
    """
    while frame is not None:
        yield frame
        frame = frame.f_back


def _under_main_guard(path: str, line: int) -> bool:
    """Whether ``line`` of the script at ``path`` is inside a top-level ``if __name__ == "__main__":``."""
    try:
        tree = ast.parse(Path(path).read_text())
    except (OSError, SyntaxError, ValueError):
        return True  # cannot tell: let multiprocessing speak for itself
    for node in tree.body:
        guard = isinstance(node, ast.If) and _is_main_test(node.test)
        if guard and node.lineno <= line <= (node.end_lineno or node.lineno):
            return True
    return False


def _is_main_test(test: ast.expr) -> bool:
    if not (isinstance(test, ast.Compare) and len(test.ops) == 1 and isinstance(test.ops[0], ast.Eq)):
        return False
    sides = [test.left, *test.comparators]
    names = [side.id for side in sides if isinstance(side, ast.Name)]
    values = [side.value for side in sides if isinstance(side, ast.Constant)]
    return names == ["__name__"] and values == ["__main__"]
