"""How the tests run the ``torchrl-mask`` command: in a subprocess, as a user runs it, with the tests' folder on the
path (the fault modules and the tests' envs); and the one line it answers bad input with."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
TESTS = Path(__file__).resolve().parent


def run_cli(
    *args: str,
    cwd: Path = REPO,
    first: str = "",
    env: Mapping[str, str] | None = None,
    timeout: int = 600,
) -> subprocess.CompletedProcess[str]:
    """``torchrl-mask ARGS`` in a subprocess, its output captured as text.

    :param args: the command line after ``torchrl-mask`` (``"train", "--env", "Taxi-v4"``).
    :param cwd: the folder it runs in.
    :param first: Python run in the process before the command (installing a fault, taking a package away);
        empty: ``python -m torchrl_mask``, as the console script runs it.
    :param env: the process's environment (default: this one's); the tests' folder and the repository are put
        first on its ``PYTHONPATH``.
    :param timeout: seconds before the run is killed and the test fails.
    """
    environ = dict(os.environ if env is None else env)
    environ["PYTHONPATH"] = os.pathsep.join(filter(None, [str(TESTS), str(REPO), environ.get("PYTHONPATH")]))
    program = ["-m", "torchrl_mask"]
    if first:
        program = ["-c", f"import sys\n{first}\nfrom torchrl_mask.__main__ import main\nsys.exit(main(sys.argv[1:]))\n"]
    return subprocess.run(
        [sys.executable, *program, *args], cwd=cwd, env=environ, capture_output=True, text=True, timeout=timeout
    )


def one_line(proc: subprocess.CompletedProcess[str]) -> str:
    """The one line a refused command writes on stderr (asserted to be one line, with no traceback)."""
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in proc.stderr, proc.stderr[-3000:]
    return lines[0]
