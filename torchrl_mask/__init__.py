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
    from torchrl_mask.algorithms.collectors import CollectorFailed, learn_from_collector
    from torchrl_mask.algorithms.ppo import MaskablePPO
    from torchrl_mask.algorithms.recurrent_ppo import MaskableRecurrentPPO
    from torchrl_mask.games.env import TurnBasedEnv
    from torchrl_mask.games.network import BoardCNN
    from torchrl_mask.games.recurrent_selfplay import RecurrentSelfPlayPolicy
    from torchrl_mask.games.seat_env import SeatEnv
    from torchrl_mask.games.selfplay import SelfPlayPolicy
    from torchrl_mask.rollout.buffers import (
        MaskableDictRolloutBuffer,
        MaskableDictRolloutBufferSamples,
        MaskableRolloutBuffer,
        MaskableRolloutBufferSamples,
    )
    from torchrl_mask.torchrl.envs import ActionMaskInInfo, ActionMaskInObservation, masked_gym_env
    from torchrl_mask.torchrl.nested import FlattenNestedDict
    from torchrl_mask.torchrl.policy import MaskablePolicyModule
    from torchrl_mask.torchrl.recurrent_policy import MaskableRecurrentPolicyModule

__version__ = "0.1.0"

_HOMES = {
    "MaskableDictRolloutBuffer": "torchrl_mask.rollout.buffers",
    "MaskableDictRolloutBufferSamples": "torchrl_mask.rollout.buffers",
    "MaskableRolloutBuffer": "torchrl_mask.rollout.buffers",
    "MaskableRolloutBufferSamples": "torchrl_mask.rollout.buffers",
    "MaskablePPO": "torchrl_mask.algorithms.ppo",
    "MaskableRecurrentPPO": "torchrl_mask.algorithms.recurrent_ppo",
    "BoardCNN": "torchrl_mask.games.network",
    "SeatEnv": "torchrl_mask.games.seat_env",
    "SelfPlayPolicy": "torchrl_mask.games.selfplay",
    "RecurrentSelfPlayPolicy": "torchrl_mask.games.recurrent_selfplay",
    "TurnBasedEnv": "torchrl_mask.games.env",
    "ActionMaskInInfo": "torchrl_mask.torchrl.envs",
    "ActionMaskInObservation": "torchrl_mask.torchrl.envs",
    "CollectorFailed": "torchrl_mask.algorithms.collectors",
    "FlattenNestedDict": "torchrl_mask.torchrl.nested",
    "MaskablePolicyModule": "torchrl_mask.torchrl.policy",
    "MaskableRecurrentPolicyModule": "torchrl_mask.torchrl.recurrent_policy",
    "learn_from_collector": "torchrl_mask.algorithms.collectors",
    "masked_gym_env": "torchrl_mask.torchrl.envs",
}

__all__ = [
    "ActionMaskInInfo",
    "ActionMaskInObservation",
    "BoardCNN",
    "CollectorFailed",
    "FlattenNestedDict",
    "MaskableDictRolloutBuffer",
    "MaskableDictRolloutBufferSamples",
    "MaskablePPO",
    "MaskablePolicyModule",
    "MaskableRecurrentPPO",
    "MaskableRecurrentPolicyModule",
    "MaskableRolloutBuffer",
    "MaskableRolloutBufferSamples",
    "RecurrentSelfPlayPolicy",
    "SeatEnv",
    "SelfPlayPolicy",
    "TurnBasedEnv",
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
