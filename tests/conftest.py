import signal
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
import torch

sys.path.insert(0, str(Path(__file__).parent))


@pytest.fixture(autouse=True)
def one_torch_thread() -> Iterator[None]:
    """Tiny networks on a shared CPU: intra-op threads only add contention (several times slower)."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.fixture(autouse=True, scope="session")
def sb3_log_folder(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    """SB3 makes a ``/tmp/SB3-<date>`` folder at every ``learn()`` without a custom logger, even with nothing to
    write; the suite's go to one folder of pytest's temporary tree instead of thousands left in /tmp."""
    folder = tmp_path_factory.mktemp("sb3-logs")
    mp = pytest.MonkeyPatch()
    mp.setenv("SB3_LOGDIR", str(folder))
    yield
    mp.undo()


def pytest_configure(config: pytest.Config) -> None:
    """Let the processes the tests start receive Ctrl-C as a terminal's foreground job does.

    A suite started in the background (``make test &``, a non-interactive shell's ``&``) inherits SIGINT ignored,
    every process it starts inherits that too, and Python then installs no ``KeyboardInterrupt`` handler: the
    CLI's Ctrl-C tests would wait for a run that never hears the signal. A handler set here (unlike an ignored
    signal) is reset to the default at ``exec``, so each child Python installs its own.
    """
    if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Deselect the ``gpu`` tests unless the ``-m`` expression names that marker (``pytest -m gpu``).

    Deselected, not skipped: a run on a machine without CUDA reports no skipped test, and ``-m gpu`` there fails
    loudly instead. A hook rather than ``-m "not gpu"`` in ``addopts``: a later ``-m "not slow"`` (``make
    test-fast``) would replace that expression and collect the gpu tests again.
    """
    if "gpu" in (config.option.markexpr or ""):
        return
    kept = [item for item in items if item.get_closest_marker("gpu") is None]
    if len(kept) < len(items):
        config.hook.pytest_deselected(items=[item for item in items if item.get_closest_marker("gpu") is not None])
        items[:] = kept
