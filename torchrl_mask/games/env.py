"""Turn-based PettingZoo games as TorchRL envs: one row per move, the mover's view under the policy's keys.

:class:`TurnBasedEnv` wraps a PettingZoo AEC game (``connect_four_v3``, ``tictactoe_v3``, any classic game with an
``"action_mask"`` in its observations). Each step is one move by the seat to move, and carries what a self-play
rollout needs to split the game into one trajectory per seat
(:func:`torchrl_mask.games.selfplay.seat_transitions`):

- ``"observation"``, ``"action_mask"`` (bool ``(n_actions,)``): the mover's own view and its legal moves, under the
  keys :class:`~torchrl_mask.MaskablePolicyModule` reads, so one shared policy plays every seat;
- ``"seat"`` (int64, ``()``): the index of the seat to move, in ``possible_agents`` order;
- ``("next", "seat_reward")`` (float32 ``(n_seats,)``): every seat's reward from this move (a win arrives on the
  winner's move for both seats, +1 and -1); ``("next", "reward")`` ``(1,)`` is the mover's own;
- ``("next", "done")``, ``("next", "terminated")``, ``("next", "truncated")`` ``(1,)``: the game ended (for every seat);
  ``"is_init"`` ``(1,)``: the step begins a game (as TorchRL's ``InitTracker`` writes it);
- ``"learner_seat"``, ``"opponent"`` (int64, ``()``), with ``opponents > 0``: drawn at every reset, the seat the
  learning policy plays in this game and which snapshot of the pool plays the others
  (:class:`~torchrl_mask.games.selfplay.SelfPlayPolicy` reads them).

Why not TorchRL's ``PettingZooWrapper(use_mask=True)``: it keeps one observation, mask and action per seat group
and needs an action for every group at every step, so the policy would need a transform to read the mover's group
and write every group's action; and it deep-copies every agent's observation and info on every move. This adapter
steps the AEC env itself, in its own few lines, with TorchRL's ``EnvBase`` doing specs, seeding and batching
(``SerialEnv``, ``ParallelEnv``, ``MultiSyncCollector`` workers).

Example:
    >>> env = TurnBasedEnv("tictactoe_v3")
    >>> td = env.reset()
    >>> td["seat"].item(), td["action_mask"].tolist()[:3]
    (0, [True, True, True])
    >>> td["action"] = torch.tensor(4)
    >>> td = env.step(td)
    >>> td["next", "seat"].item(), td["next", "action_mask"][4].item()
    (1, False)
"""

from __future__ import annotations

import importlib
import importlib.util
import warnings
from typing import Any

import numpy as np
import torch
from gymnasium import spaces
from tensordict import TensorDict, TensorDictBase
from torchrl.data import Binary, Bounded, Categorical, Composite, Unbounded
from torchrl.envs import EnvBase

__all__ = ["TurnBasedEnv", "game_spaces", "make_game"]

SEAT = "seat"
SEAT_REWARD = "seat_reward"
LEARNER_SEAT = "learner_seat"
OPPONENT = "opponent"
_DONE_KEYS = ("done", "terminated", "truncated")


def make_game(game: str | Any) -> Any:
    """A PettingZoo AEC env: ``game`` itself, or the classic game it names.

    :param game: an AEC env, or the name of a ``pettingzoo.classic`` game (``"connect_four_v3"``,
        ``"tictactoe_v3"``), optionally prefixed ``"pettingzoo:"``.
    :return: the AEC env (``<module>.env()``, with PettingZoo's own wrappers: an illegal move ends the game).
    :raises ImportError: PettingZoo is not installed (``pip install 'torchrl-mask[games]'``).
    :raises ValueError: no classic game of that name.
    """
    if not isinstance(game, str):
        return game
    name = game.removeprefix("pettingzoo:")
    if importlib.util.find_spec("pettingzoo") is None:
        raise ImportError("Turn-based games need PettingZoo: pip install 'torchrl-mask[games]'.")
    try:
        with warnings.catch_warnings():  # PettingZoo 1.27 prefers its registry; the game modules work in every 1.x
            warnings.simplefilter("ignore", DeprecationWarning)
            module = importlib.import_module(f"pettingzoo.classic.{name}")
    except ModuleNotFoundError as err:
        if not (err.name or "").startswith("pettingzoo.classic"):
            raise ImportError(f"PettingZoo's {name} needs {err.name}: pip install 'torchrl-mask[games]'.") from err
        module = None
    if module is None or not hasattr(module, "env"):
        raise ValueError(
            f"{name!r} is not a PettingZoo classic game; use e.g. 'connect_four_v3' or 'tictactoe_v3' "
            "(pettingzoo.classic lists them)."
        )
    return module.env()


def game_spaces(game: Any) -> tuple[spaces.Box, spaces.Discrete]:
    """The mover's observation (the Dict's ``"observation"`` entry) and action space, the same for every seat.

    :param game: a PettingZoo AEC env.
    :return: the ``"observation"`` Box and the Discrete action space of its first seat.
    :raises ValueError: observations without PettingZoo's masked Dict, or actions that are not Discrete.
    """
    agent = game.possible_agents[0]
    observation_space = game.observation_space(agent)
    if not isinstance(observation_space, spaces.Dict) or "action_mask" not in observation_space.spaces:
        raise ValueError(
            f"The game's observations are {observation_space!r}; TurnBasedEnv needs PettingZoo's masked Dict "
            "observations ({'observation': Box, 'action_mask': ...}), as the classic games have."
        )
    action_space = game.action_space(agent)
    if not isinstance(action_space, spaces.Discrete):
        raise ValueError(f"TurnBasedEnv needs a Discrete action space; the game has {action_space!r}.")
    view = observation_space["observation"]
    if not isinstance(view, spaces.Box):
        raise ValueError(f"TurnBasedEnv needs a Box 'observation' entry; the game has {view!r}.")
    return view, action_space


class TurnBasedEnv(EnvBase):
    """A PettingZoo AEC game as a TorchRL env, one move per step, the mover's view as ``"observation"``.

    The keys of each step are in the module's docstring. The game's end is ``done`` and ``terminated`` for the
    step that ends it; TorchRL's collectors then reset it.

    :param game: an AEC env, or the name of a ``pettingzoo.classic`` game (see :func:`make_game`).
    :param opponents: 0 for self-play (every seat is the learning policy); ``n > 0`` draws at every reset which
        seat the learner plays (``"learner_seat"``) and which of ``n`` pool snapshots plays the others
        (``"opponent"``).
    :param device: the device of the TensorDicts (the game itself steps on the host).
    :raises ValueError: a game without masked Dict observations, or whose actions are not Discrete.
    :raises ValueError: an illegal move at :meth:`step` (the move is not played).
    """

    batch_locked = False

    def __init__(self, game: str | Any, opponents: int = 0, device: Any = "cpu") -> None:
        super().__init__(device=device)
        self.game = make_game(game)
        self.seats: list[str] = list(self.game.possible_agents)
        self.opponents = opponents
        observation_space, action_space = game_spaces(self.game)
        self.observation_space, self.action_space = observation_space, action_space
        n_seats, n_actions = len(self.seats), int(action_space.n)
        low, high = (torch.as_tensor(bound) for bound in (observation_space.low, observation_space.high))
        dtype = torch.as_tensor(np.zeros((), observation_space.dtype)).dtype
        entries: dict[str, Any] = {
            "observation": Bounded(low, high, shape=observation_space.shape, dtype=dtype),
            "action_mask": Binary(n_actions, dtype=torch.bool),
            SEAT: Categorical(n_seats, shape=(), dtype=torch.int64),
            SEAT_REWARD: Unbounded((n_seats,), dtype=torch.float32),
            "is_init": Categorical(2, (1,), dtype=torch.bool),  # what TorchRL's InitTracker writes
        }
        if opponents > 0:
            entries[LEARNER_SEAT] = Categorical(n_seats, shape=(), dtype=torch.int64)
            entries[OPPONENT] = Categorical(opponents, shape=(), dtype=torch.int64)
        self.observation_spec = Composite(entries)
        self.action_spec = Categorical(n_actions, shape=(), dtype=torch.int64)
        self.reward_spec = Unbounded((1,), dtype=torch.float32)
        self.done_spec = Composite({key: Categorical(2, (1,), dtype=torch.bool) for key in _DONE_KEYS})
        self._seed: int | None = None
        self._rng = np.random.default_rng()
        self._draw = torch.zeros(2, dtype=torch.int64)

    def _set_seed(self, seed: int | None) -> None:
        self._seed = seed
        self._rng = np.random.default_rng(seed)

    def _view(self, rewards: list[float] | None = None) -> TensorDict:
        """The step's entries for the seat to move now (and, after a move, every seat's reward)."""
        game = self.game
        mover = game.agent_selection
        observation = game.observe(mover)
        td = TensorDict(
            {
                "observation": torch.as_tensor(np.asarray(observation["observation"])),
                "action_mask": torch.as_tensor(np.asarray(observation["action_mask"]), dtype=torch.bool),
                SEAT: torch.tensor(self.seats.index(mover)),
                SEAT_REWARD: torch.tensor(rewards or [0.0] * len(self.seats), dtype=torch.float32),
                "is_init": torch.tensor([rewards is None]),
            },
            device=self.device,
        )
        if self.opponents > 0:
            td.set(LEARNER_SEAT, self._draw[0].clone())
            td.set(OPPONENT, self._draw[1].clone())
        return td

    def _reset(self, tensordict: TensorDictBase | None = None, **kwargs: Any) -> TensorDictBase:
        self.game.reset(seed=self._seed)
        self._seed = None  # seeded once; later games follow the game's own generator
        if self.opponents > 0:
            self._draw = torch.tensor([self._rng.integers(len(self.seats)), self._rng.integers(self.opponents)])
        td = self._view()
        done = torch.zeros(1, dtype=torch.bool, device=self.device)
        td.update({"done": done, "terminated": done.clone(), "truncated": done.clone()})
        return td

    def _step(self, tensordict: TensorDictBase) -> TensorDictBase:
        game = self.game
        mover = game.agent_selection
        action = int(tensordict.get("action").reshape(()))
        mask = np.asarray(game.observe(mover)["action_mask"], dtype=bool)
        if not 0 <= action < len(mask) or not mask[action]:
            raise ValueError(
                f"Illegal move {action} by {mover} (legal: {np.flatnonzero(mask).tolist()}): the policy must draw "
                "under the step's 'action_mask' (MaskablePolicyModule or SelfPlayPolicy does)."
            )
        game.step(action)
        rewards = [float(game.rewards[seat]) for seat in self.seats]
        terminated = all(game.terminations[seat] for seat in self.seats)
        truncated = not terminated and all(game.truncations[seat] for seat in self.seats)
        td = self._view(rewards)
        td.set("reward", torch.tensor([rewards[self.seats.index(mover)]], dtype=torch.float32))
        td.set("terminated", torch.tensor([terminated]))
        td.set("truncated", torch.tensor([truncated]))
        td.set("done", torch.tensor([terminated or truncated]))
        return td
