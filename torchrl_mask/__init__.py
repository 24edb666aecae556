"""torchrl_mask: sb3-contrib's maskable rollout buffers and MaskablePPO, with the rollout in a TensorDict."""

from torchrl_mask.buffers import (
    MaskableDictRolloutBuffer,
    MaskableDictRolloutBufferSamples,
    MaskableRolloutBuffer,
    MaskableRolloutBufferSamples,
)
from torchrl_mask.collectors import (
    ActionMaskInInfo,
    CollectorFailed,
    MaskablePolicyModule,
    learn_from_collector,
    masked_gym_env,
)
from torchrl_mask.ppo import MaskablePPO

__version__ = "0.1.0"

__all__ = [
    "ActionMaskInInfo",
    "CollectorFailed",
    "MaskableDictRolloutBuffer",
    "MaskableDictRolloutBufferSamples",
    "MaskablePPO",
    "MaskablePolicyModule",
    "MaskableRolloutBuffer",
    "MaskableRolloutBufferSamples",
    "__version__",
    "learn_from_collector",
    "masked_gym_env",
]
