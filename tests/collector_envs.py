"""Real masked envs and checks shared by the collector tests (test_envs, test_policy, test_collectors,
test_workers). Worker processes import the env factories from here, so they live in a module, not a test file.
"""

from __future__ import annotations

import os
from typing import Any

import gymnasium as gym
import numpy as np
import psutil
import torch
from gymnasium import spaces
from sb3_contrib.common.envs import InvalidActionEnvDiscrete
from stable_baselines3.common.callbacks import BaseCallback
from torchrl.envs import Compose, InitTracker, RenameTransform, SerialEnv, TransformedEnv
from torchrl.envs.custom import TicTacToeEnv

from torchrl_mask import MaskablePPO, masked_gym_env
from torchrl_mask.rollout.masks import mask_spec

TAXI = "Taxi-v4"  # gymnasium 1.4 retired Taxi-v3; v4 keeps info["action_mask"]
SMALL = {"net_arch": [16]}


def allowed(action: torch.Tensor, mask: torch.Tensor, action_space: spaces.Space) -> torch.Tensor:
    """Whether each action is allowed by its mask row: ``(*B,)`` bool, for any maskable action space."""
    groups = mask_spec(action_space).groups
    offsets = torch.tensor(np.cumsum((0, *groups[:-1])))
    index = action.reshape(*mask.shape[:-1], len(groups)).long() + offsets
    return mask.gather(-1, index).all(-1)


class StrictMask(gym.Wrapper):
    """Raises in ``step`` if the action is one the env's own mask forbids: the env checks, not the test."""

    def __init__(self, env: gym.Env, source: str) -> None:
        super().__init__(env)
        self.source = source
        self.mask: np.ndarray | None = None

    def _read(self, info: dict[str, Any]) -> None:
        mask = self.env.get_wrapper_attr("action_masks")() if self.source == "method" else info["action_mask"]
        self.mask = np.asarray(mask, dtype=bool).ravel()

    def reset(self, **kwargs: Any) -> Any:
        obs, info = self.env.reset(**kwargs)
        self._read(info)
        return obs, info

    def step(self, action: Any) -> Any:
        assert self.mask is not None
        ok = allowed(torch.as_tensor(np.asarray(action)), torch.from_numpy(self.mask), self.action_space)
        if not bool(ok):
            raise AssertionError(f"invalid action {action} taken under mask {self.mask.astype(int)}")
        obs, reward, terminated, truncated, info = self.env.step(action)
        self._read(info)
        return obs, reward, terminated, truncated, info


class MaskInObservation(gym.ObservationWrapper):
    """PettingZoo's convention: ``{"observation": obs, "action_mask": mask}``."""

    def __init__(self, env: gym.Env) -> None:
        super().__init__(env)
        size = mask_spec(env.action_space).size
        self.observation_space = spaces.Dict(
            {"observation": env.observation_space, "action_mask": spaces.MultiBinary(size)}
        )

    def observation(self, observation: Any) -> dict[str, Any]:
        mask = np.asarray(self.env.get_wrapper_attr("action_masks")(), dtype=np.int8)
        return {"observation": observation, "action_mask": mask}


def taxi_env() -> Any:
    torch.set_num_threads(1)
    return masked_gym_env(StrictMask(gym.make(TAXI), "info"))


def invalid_discrete_env() -> Any:
    torch.set_num_threads(1)
    return masked_gym_env(StrictMask(InvalidActionEnvDiscrete(dim=8, n_invalid_actions=5), "method"))


def seeded_invalid_discrete_env(seed: int) -> Any:
    """``invalid_discrete_env`` with every random number it and its worker draw seeded: the env's state and
    invalid actions (numpy's global generator and the space's), and the policy's samples (torch's global
    generator of the worker process, which the policy copy there draws from)."""
    torch.set_num_threads(1)
    np.random.seed(seed)
    torch.manual_seed(seed)
    env = InvalidActionEnvDiscrete(dim=8, n_invalid_actions=5)
    env.action_space.seed(seed)
    return masked_gym_env(StrictMask(env, "method"))


def two_invalid_discrete_envs() -> Any:
    """A worker's batched env: two masked envs in one TorchRL SerialEnv, one policy call for both."""
    torch.set_num_threads(1)
    return SerialEnv(2, invalid_discrete_env)


def exploding_env() -> Any:
    torch.set_num_threads(1)
    return masked_gym_env(Explodes(gym.make(TAXI)))


class Explodes(gym.Wrapper):
    def __init__(self, env: gym.Env) -> None:
        super().__init__(env)
        self.steps = 0

    def step(self, action: Any) -> Any:
        self.steps += 1
        if self.steps == 40:
            raise ValueError("the env broke on its 40th step")
        return self.env.step(action)


def exiting_env() -> Any:
    torch.set_num_threads(1)
    return masked_gym_env(ExitsOnStep(gym.make(TAXI)))


class ExitsOnStep(gym.Wrapper):
    """Ends its process on the third step with ``os._exit(3)``: no exception, no traceback."""

    def __init__(self, env: gym.Env) -> None:
        super().__init__(env)
        self.steps = 0

    def step(self, action: Any) -> Any:
        self.steps += 1
        if self.steps == 3:
            os._exit(3)
        return self.env.step(action)


def tictactoe_env() -> TransformedEnv:
    """TorchRL's own masked env: its "mask" renamed to "action_mask", player 0's reward as "reward"."""
    rename = RenameTransform(["mask", ("player0", "reward")], ["action_mask", "reward"], create_copy=True)
    return TransformedEnv(TicTacToeEnv(single_player=True), Compose(rename, InitTracker()))


class BoardSpaces(gym.Env):
    """TicTacToe's spaces for the SB3 model, which needs an env to read them from (it is never stepped)."""

    observation_space = spaces.Box(-1, 1, (3, 3), np.int32)
    action_space = spaces.Discrete(9)

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> Any:
        return np.zeros((3, 3), np.int32), {}


def worker_children() -> list[psutil.Process]:
    """Running child processes, less multiprocessing's resource tracker and forkserver (SubprocVecEnv starts one):
    they live as long as this process."""
    lifelong = ("multiprocessing.resource_tracker", "multiprocessing.forkserver")
    alive = []
    for child in psutil.Process().children(recursive=True):
        try:  # a child that exits meanwhile, or a zombie (exited, not yet reaped: Ray leaves some), runs no code
            if child.status() != psutil.STATUS_ZOMBIE and not any(n in " ".join(child.cmdline()) for n in lifelong):
                alive.append(child)
        except (psutil.NoSuchProcess, psutil.ZombieProcess):
            continue
    return alive


class DictWithMask(gym.ObservationWrapper):
    """A two-entry Dict observation with the mask inside it: ``{"position", "clock", "action_mask"}``."""

    def __init__(self, env: gym.Env) -> None:
        super().__init__(env)
        size = mask_spec(env.action_space).size
        self.observation_space = spaces.Dict(
            {
                "position": env.observation_space,
                "clock": spaces.Box(0.0, 1.0, (1,), np.float32),
                "action_mask": spaces.MultiBinary(size),
            }
        )

    def observation(self, observation: Any) -> dict[str, Any]:
        mask = np.asarray(self.env.get_wrapper_attr("action_masks")(), dtype=np.int8)
        clock = np.array([self.env.unwrapped.current_step / 100], np.float32)
        return {"position": observation, "clock": clock, "action_mask": mask}


def invalid_discrete_env_gym() -> gym.Env:
    return InvalidActionEnvDiscrete(dim=8, n_invalid_actions=5)


def small_model(n_steps: int = 32) -> MaskablePPO:
    """The collector tests' model: a small MLP on :func:`invalid_discrete_env_gym`, minibatches of 64, two epochs.

    :param n_steps: steps per env in a rollout.
    """
    return MaskablePPO(
        "MlpPolicy",
        invalid_discrete_env_gym(),
        n_steps=n_steps,
        batch_size=64,
        n_epochs=2,
        learning_rate=3e-3,
        policy_kwargs=SMALL,
        seed=0,
    )


class CueRecall(gym.Env):
    """A memory task gated by masks: step 0 shows one of two cues, the next ``delay - 1`` steps show nothing and
    allow only "wait" (action 0), the last one shows "answer now" and allows only the answers (1, 2): reward 1 for
    the one matching the cue. Without memory, the answer is a coin flip."""

    def __init__(self, delay: int = 2) -> None:
        self.delay, self.cue, self.t = delay, 0, 0
        self.observation_space = spaces.Box(0, 1, (3,), np.float32)
        self.action_space = spaces.Discrete(3)

    def _obs(self) -> np.ndarray:
        obs = np.zeros(3, np.float32)
        obs[self.cue if self.t == 0 else 2] = float(self.t == 0 or self.t == self.delay)
        return obs

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> Any:
        super().reset(seed=seed)
        self.cue, self.t = int(self.np_random.integers(2)), 0
        return self._obs(), {}

    def action_masks(self) -> np.ndarray:
        return np.array([True, False, False]) if self.t < self.delay else np.array([False, True, True])

    def step(self, action: Any) -> Any:
        if self.t == self.delay:
            return self._obs(), float(action == 1 + self.cue), True, False, {}
        self.t += 1
        return self._obs(), 0.0, False, False, {}


gym.register("CueRecall-v0", entry_point=CueRecall)  # for the CLI: --env collector_envs:CueRecall-v0


def recurrent_cue_recall_env(primer: Any, n_envs: int, delay: int = 2) -> Any:
    """A worker's batched env for an LSTM policy: ``n_envs`` ``CueRecall(delay)`` envs in one SerialEnv, each
    carrying the states (``primer``, the policy module's ``make_tensordict_primer()``) and ``"is_init"``."""
    torch.set_num_threads(1)
    return SerialEnv(n_envs, lambda: masked_gym_env(CueRecall(delay)).append_transform(primer.clone()))


class CollectedByTheLearnersLSTM(BaseCallback):
    """At each rollout's end: every stored log-prob is the learner's LSTM policy's, evaluated over the rollout's
    sequences from the stored states (the weights just trained reached the workers, and the workers carried the
    states); and the policy changed since the last rollout (there was something to send)."""

    def __init__(self) -> None:
        super().__init__()
        self.max_error: list[float] = []
        self.params: list[torch.Tensor] = []

    def _on_step(self) -> bool:
        return True

    def _on_rollout_end(self) -> None:
        samples = next(self.model.rollout_buffer.get(batch_size=None))
        with torch.no_grad():
            _, log_prob, _ = self.model.policy.evaluate_actions(
                samples.observations,
                samples.actions.long().flatten(),
                samples.lstm_states,
                samples.episode_starts,
                action_masks=samples.action_masks.bool(),
            )
        valid = samples.mask.bool()
        self.max_error.append(float((log_prob - samples.old_log_prob)[valid].abs().max()))
        self.params.append(torch.nn.utils.parameters_to_vector(self.model.policy.parameters()).detach().clone())

    def check(self, rollouts: int) -> None:
        assert len(self.max_error) >= rollouts
        assert max(self.max_error) < 1e-4, f"collected with stale weights or states: log-prob errors {self.max_error}"
        assert all(not torch.equal(a, b) for a, b in zip(self.params, self.params[1:], strict=False))
