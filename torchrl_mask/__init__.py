"""torchrl_mask: sb3-contrib's maskable rollout buffers and MaskablePPO, with the rollout in a TensorDict.

The public names load on first use (PEP 562), so that ``torchrl-mask --help`` does not wait for torch,
tensordict and TorchRL to import. Importing the package checks, from version strings alone, that the installed
torch, TorchRL, tensordict, SB3, sb3-contrib and gymnasium lie in the supported ranges (see ``_compat``).
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from torchrl_mask._compat import check_versions

check_versions()

if TYPE_CHECKING:
    from torchrl_mask.buffers import (
        MaskableDictRolloutBuffer,
        MaskableDictRolloutBufferSamples,
        MaskableRolloutBuffer,
        MaskableRolloutBufferSamples,
    )
    from torchrl_mask.collectors import CollectorFailed, learn_from_collector
    from torchrl_mask.envs import ActionMaskInInfo, ActionMaskInObservation, masked_gym_env
    from torchrl_mask.nested import FlattenNestedDict
    from torchrl_mask.policy import MaskablePolicyModule
    from torchrl_mask.ppo import MaskablePPO
    from torchrl_mask.recurrent_ppo import MaskableRecurrentPPO

__version__ = "0.1.0"

_HOMES = {
    "MaskableDictRolloutBuffer": "torchrl_mask.buffers",
    "MaskableDictRolloutBufferSamples": "torchrl_mask.buffers",
    "MaskableRolloutBuffer": "torchrl_mask.buffers",
    "MaskableRolloutBufferSamples": "torchrl_mask.buffers",
    "MaskablePPO": "torchrl_mask.ppo",
    "MaskableRecurrentPPO": "torchrl_mask.recurrent_ppo",
    "ActionMaskInInfo": "torchrl_mask.envs",
    "ActionMaskInObservation": "torchrl_mask.envs",
    "CollectorFailed": "torchrl_mask.collectors",
    "FlattenNestedDict": "torchrl_mask.nested",
    "MaskablePolicyModule": "torchrl_mask.policy",
    "learn_from_collector": "torchrl_mask.collectors",
    "masked_gym_env": "torchrl_mask.envs",
}

__all__ = [
    "ActionMaskInInfo",
    "ActionMaskInObservation",
    "CollectorFailed",
    "FlattenNestedDict",
    "MaskableDictRolloutBuffer",
    "MaskableDictRolloutBufferSamples",
    "MaskablePPO",
    "MaskablePolicyModule",
    "MaskableRecurrentPPO",
    "MaskableRolloutBuffer",
    "MaskableRolloutBufferSamples",
    "__version__",
    "learn_from_collector",
    "masked_gym_env",
]


def __getattr__(name: str) -> Any:
    if name not in _HOMES:
        raise AttributeError(f"module 'torchrl_mask' has no attribute {name!r}")
    value = getattr(importlib.import_module(_HOMES[name]), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(__all__)
