"""A collector's weight-sync schemes, shut down now rather than at interpreter exit: left to their ``__del__``
then, they put a "stop" on a multiprocessing queue whose feeder thread can no longer start, and the exit hangs.
Both the workers' shutdown (:mod:`torchrl_mask.torchrl.workers`) and the spawn guard
(:mod:`torchrl_mask.torchrl.spawn_guard`) call it.
"""

from __future__ import annotations

import contextlib

from torchrl.collectors import BaseCollector

__all__ = ["shutdown_weight_sync"]


def shutdown_weight_sync(collector: BaseCollector) -> None:
    """Shut the collector's weight-sync schemes down (TorchRL's private ``_weight_sync_schemes``), each whatever
    the others raise.

    :param collector: a TorchRL collector.
    """
    for scheme in list((getattr(collector, "_weight_sync_schemes", None) or {}).values()):
        with contextlib.suppress(Exception):
            scheme.shutdown()
