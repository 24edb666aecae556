"""torchrl_mask: sb3-contrib's maskable rollout buffers and MaskablePPO, with the rollout in a TensorDict."""

from torchrl_mask.buffers import (
    MaskableDictRolloutBuffer,
    MaskableDictRolloutBufferSamples,
    MaskableRolloutBuffer,
    MaskableRolloutBufferSamples,
)
from torchrl_mask.ppo import MaskablePPO

__version__ = "0.1.0"

__all__ = [
    "MaskableDictRolloutBuffer",
    "MaskableDictRolloutBufferSamples",
    "MaskablePPO",
    "MaskableRolloutBuffer",
    "MaskableRolloutBufferSamples",
    "__version__",
]
