"""What the file-writing tests of ``torchrl-mask train`` make happen in the CLI's subprocess, which imports this
module from the tests' folder (on its ``PYTHONPATH``) and calls :func:`install` before the CLI's ``main``.

``RUN_FAULT`` names it, each a real event of the process, not a stand-in for one:

- ``"sigterm-at-save"`` / ``"sigint-at-save"``: the process sends itself SIGTERM or SIGINT while ``model.zip`` is
  being written (from inside ``torch.save``, which SB3's ``save`` calls halfway through the zip);
- ``"sigint-in-training-and-at-save"``: a Ctrl-C in PPO's first update, then a second one while the model is
  written;
- ``"enospc-at-save"``: the write of ``model.zip`` fails as a full disk fails it (``OSError(ENOSPC)`` from
  ``torch.save``), for machines where a small tmpfs cannot be mounted.
"""

from __future__ import annotations

import errno
import os
import signal
from typing import Any


def install() -> None:
    """Install the fault ``RUN_FAULT`` names (nothing if unset)."""
    fault = os.environ.get("RUN_FAULT", "")
    if not fault:
        return
    import torch

    from torchrl_mask import MaskablePPO

    save, train = torch.save, MaskablePPO.train

    def faulty_save(*args: Any, **kwargs: Any) -> Any:
        if fault == "enospc-at-save":
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        if fault in ("sigint-at-save", "sigint-in-training-and-at-save"):
            os.kill(os.getpid(), signal.SIGINT)
        if fault == "sigterm-at-save":
            os.kill(os.getpid(), signal.SIGTERM)
        return save(*args, **kwargs)

    def faulty_train(self: Any) -> None:
        if fault == "sigint-in-training-and-at-save":
            os.kill(os.getpid(), signal.SIGINT)
        train(self)

    torch.save = faulty_save
    MaskablePPO.train = faulty_train  # type: ignore[method-assign]
