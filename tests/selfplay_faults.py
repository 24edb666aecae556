"""What the fault-injection tests of ``torchrl-mask train`` make raise, imported by the CLI's subprocess from this
folder (on its ``PYTHONPATH``): real parts a user could give, each raising at the stage ``FAULT_STAGE`` names.

- :class:`FaultyPolicy`: a MaskablePPO policy (saved in a model that self-play continues from with ``-i``) whose
  ``predict`` raises while a player is asked for a move in the evaluation during training (``"callback"``: the
  ``WinRates`` callback) or after it (``"evaluation"``), and whose ``evaluate_actions`` raises in the gradient step
  (``"training"``);
- ``selfplay_faults:FaultyMasked-v0``: a masked gymnasium env (sb3-contrib's ``InvalidActionEnvDiscrete``) that
  raises in ``step`` after ``FAULT_AFTER`` steps (``"training"``), or in ``reset`` when sb3-contrib's
  ``MaskableEvalCallback`` evaluates (``"callback"``).
"""

from __future__ import annotations

import inspect
import os
from typing import Any

import gymnasium as gym
from sb3_contrib.common.envs import InvalidActionEnvDiscrete
from sb3_contrib.common.maskable.policies import MaskableActorCriticPolicy


class InjectedFault(RuntimeError):
    """The error the tests inject."""


def _stage() -> str:
    return os.environ.get("FAULT_STAGE", "")


def _in(function: str) -> bool:
    return any(frame.function == function for frame in inspect.stack())


class FaultyPolicy(MaskableActorCriticPolicy):
    """MaskablePPO's policy, raising :class:`InjectedFault` at the stage ``FAULT_STAGE`` names."""

    def predict(self, *args: Any, **kwargs: Any) -> Any:
        in_callback = _in("_on_rollout_end")
        if (_stage() == "callback" and in_callback) or (_stage() == "evaluation" and not in_callback):
            raise InjectedFault(f"injected into a player ({_stage()})")
        return super().predict(*args, **kwargs)

    def evaluate_actions(self, *args: Any, **kwargs: Any) -> Any:
        if _stage() == "training":
            raise InjectedFault("injected into the gradient step")
        return super().evaluate_actions(*args, **kwargs)


class FaultyEnv(InvalidActionEnvDiscrete):
    """sb3-contrib's masked test env, raising :class:`InjectedFault` at the stage ``FAULT_STAGE`` names."""

    def __init__(self) -> None:
        super().__init__(dim=8, n_invalid_actions=3)
        self.steps = 0

    def step(self, action: Any) -> Any:
        self.steps += 1
        if _stage() == "training" and self.steps > int(os.environ.get("FAULT_AFTER", "100")):
            raise InjectedFault("injected into the env's step")
        return super().step(action)

    def reset(self, **kwargs: Any) -> Any:
        if _stage() == "callback" and _in("_on_step"):
            raise InjectedFault("injected into the evaluation callback's env")
        return super().reset(**kwargs)


gym.register("FaultyMasked-v0", entry_point=FaultyEnv, max_episode_steps=20)
