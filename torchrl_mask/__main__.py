"""``python -m torchrl_mask``: the same as the ``torchrl-mask`` command."""

import sys

from torchrl_mask.app.cli import main

sys.exit(main())
