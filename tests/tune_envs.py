"""A masked env that punishes illegal moves, registered for ``torchrl-mask tune --env tune_envs:PickLegal-v0``:
the command's tests import it by that name (the tests folder on ``PYTHONPATH``)."""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium import spaces

ACTIONS = 6


class PickLegal(gym.Env):
    """Pick the target the observation names; about half the actions are illegal at each step (the mask, in
    ``info["action_mask"]``, is not in the observation), the target among them as often as not.

    The target, when legal, pays 1 and another legal action 0; an illegal action pays -1 and ends the episode, as a
    game ends on an illegal move. A policy scored without its masks plays the target when it is illegal: the
    rl-zoo3 trap. Episodes last 10 steps.
    """

    observation_space = spaces.Discrete(ACTIONS)
    action_space = spaces.Discrete(ACTIONS)

    def _draw(self) -> tuple[int, dict[str, Any]]:
        self.target = int(self.np_random.integers(ACTIONS))
        self.mask = self.np_random.random(ACTIONS) < 0.5
        if not self.mask.any():
            self.mask[int(self.np_random.integers(ACTIONS))] = True
        return self.target, {"action_mask": self.mask.copy()}

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[int, dict[str, Any]]:
        super().reset(seed=seed)
        self.t = 0
        return self._draw()

    def step(self, action: Any) -> tuple[int, float, bool, bool, dict[str, Any]]:
        action = int(np.asarray(action))
        if not self.mask[action]:
            return self.target, -1.0, True, False, {"action_mask": self.mask.copy()}
        reward = 1.0 if action == self.target else 0.0
        self.t += 1
        observation, info = self._draw()
        return observation, reward, False, self.t >= 10, info


gym.register("PickLegal-v0", entry_point=PickLegal)


class BreaksAfter(PickLegal):
    """:class:`PickLegal` whose 40th step raises, as an env with a bug does: every trial on it fails."""

    steps = 0

    def step(self, action: Any) -> tuple[int, float, bool, bool, dict[str, Any]]:
        self.steps += 1
        if self.steps == 40:
            raise ValueError("the env broke on step 40")
        return super().step(action)


gym.register("BreaksAfter-v0", entry_point=BreaksAfter)
