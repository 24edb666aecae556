"""Turn-based PettingZoo games as TorchRL envs: one row per move, the mover's view under the policy's keys.

:class:`TurnBasedEnv` wraps a PettingZoo AEC game (``connect_four_v3``, ``tictactoe_v3``, any classic game with an
``"action_mask"`` in its observations). ``TurnBasedEnv(game, n_games=N)`` holds ``N`` games side by side in one env
of batch ``[N]``: one policy forward for all of them, each game stepping on the host, a finished game dealt afresh
by TorchRL's partial reset (the ``"_reset"`` entry its collectors write where ``done``). Without ``n_games`` the
env holds one game and its batch is ``()``. Each step is one move in each game by the seat to move there, and
carries what a self-play rollout needs to split the games into one trajectory per seat
(:func:`torchrl_mask.games.seat_split.seat_transitions`); per game:

- ``"observation"``, ``"action_mask"`` (bool ``(n_actions,)``): the mover's own view and its legal moves, under the
  keys :class:`~torchrl_mask.MaskablePolicyModule` reads, so one shared policy plays every seat;
- ``"seat"`` (int64, ``()``): the index of the seat to move, in ``possible_agents`` order;
- ``("next", "seat_reward")`` (float32 ``(n_seats,)``): every seat's reward from this move (a win arrives on the
  winner's move for both seats, +1 and -1); ``("next", "reward")`` ``(1,)`` is the mover's own;
- ``("next", "done")``, ``("next", "terminated")``, ``("next", "truncated")`` ``(1,)``: the game ended (for every seat);
  ``"is_init"`` ``(1,)``: the step begins a game (as TorchRL's ``InitTracker`` writes it);
- ``"learner_seat"``, ``"opponent"`` (int64, ``()``) and ``"opponent_draw"`` (float32, ``()``), with
  ``opponents > 0``: drawn at every reset of the game, the seat the learning policy plays in this game, which of
  the opponents plays the others (uniformly) and a uniform number in ``[0, 1)`` that
  :class:`~torchrl_mask.games.selfplay.SelfPlayPolicy` maps through its league's probabilities to the opponent it
  plays instead (:mod:`torchrl_mask.games.league`); then ``"opponent_chosen"`` (bool, ``()``): False at a game's
  first move, after which the game keeps the ``"opponent"`` that move's tensordict held (the policy's choice),
  so a game straddling a change of the league's probabilities keeps one opponent to its end.

Each step's arrays are filled in numpy and wrapped in one TensorDict: game by game through PettingZoo's AEC env,
or, for Connect Four and tic-tac-toe, every game at once (:mod:`torchrl_mask.games.boards`, the same game's rules
on one array of boards; ``engine="pettingzoo"`` steps PettingZoo's own env instead).

Why not TorchRL's ``PettingZooWrapper(use_mask=True)``: it keeps one observation, mask and action per seat group
and needs an action for every group at every step, so the policy would need a transform to read the mover's group
and write every group's action; and it deep-copies every agent's observation and info on every move. This adapter
steps the AEC env itself, in its own few lines, with TorchRL's ``EnvBase`` doing specs, seeding and batching
(its own ``n_games``, or ``SerialEnv``, ``ParallelEnv``, ``MultiSyncCollector`` workers).

Example:
    >>> env = TurnBasedEnv("tictactoe_v3")
    >>> td = env.reset()
    >>> td["seat"].item(), td["action_mask"].tolist()[:3]
    (0, [True, True, True])
    >>> td["action"] = torch.tensor(4)
    >>> td = env.step(td)
    >>> td["next", "seat"].item(), td["next", "action_mask"][4].item()
    (1, False)
    >>> TurnBasedEnv("connect_four_v3", n_games=16).reset()["observation"].shape
    torch.Size([16, 6, 7, 2])
"""

from __future__ import annotations

import importlib
import importlib.util
import warnings
from collections.abc import Iterator
from typing import Any

import numpy as np
import torch
from gymnasium import spaces
from tensordict import TensorDict, TensorDictBase
from torchrl.data import Binary, Bounded, Categorical, Composite, Unbounded
from torchrl.envs import EnvBase

from torchrl_mask.games.boards import BOARD_GAMES, BoardGames, check_openings
from torchrl_mask.games.profile import not_a_game

__all__ = ["TurnBasedEnv", "deal_seeds", "game_seed", "game_spaces", "make_game"]

SEAT = "seat"
SEAT_REWARD = "seat_reward"
LEARNER_SEAT = "learner_seat"
OPPONENT = "opponent"
OPPONENT_DRAW = "opponent_draw"
OPPONENT_CHOSEN = "opponent_chosen"
_DONE_KEYS = ("done", "terminated", "truncated")
SEED_RANGE = 2**31  # hanabi's reset(seed=) (OpenSpiel, a C++ int) takes 0 to 2**31 - 1


def game_seed(seed: int | None) -> int | None:
    """The seed a game's ``reset(seed=)`` is given for a seed TorchRL (or a user) hands out.

    Seeds in ``[0, 2**31)`` pass unchanged; any other integer (``SerialEnv.set_seed`` hands sub-envs seeds up to
    ``2**64``, and hanabi's OpenSpiel takes at most ``2**31 - 1``) is hashed into that range by numpy's
    ``SeedSequence``: deterministic, and distinct large seeds stay apart instead of wrapping onto small ones.

    :param seed: any integer, or None (the game draws its own).
    :return: a seed in ``[0, 2**31)``, or None.
    """
    if seed is None or 0 <= seed < SEED_RANGE:
        return seed
    return int(np.random.SeedSequence(abs(seed), spawn_key=(int(seed < 0),)).generate_state(1)[0] % SEED_RANGE)


def deal_seeds(seed: int) -> Iterator[int]:
    """The seeds of a seeded env's successive games: ``game_seed(seed)``, then draws of ``default_rng(seed)``.

    Every game is dealt with its own seed: hanabi (OpenSpiel) deals an unseeded reset afresh even after a seeded
    one, so a game's own generator does not make the next games reproducible.

    :param seed: the env's seed (``set_seed``).
    :return: an endless iterator of seeds in ``[0, 2**31)``.
    """
    yield int(game_seed(seed))  # type: ignore[arg-type]
    rng = np.random.default_rng(abs(seed))
    while True:
        yield int(rng.integers(SEED_RANGE))


def make_game(game: str | Any) -> Any:
    """A PettingZoo AEC env: ``game`` itself, or the classic game it names.

    :param game: an AEC env, or the name of a ``pettingzoo.classic`` game (``"connect_four_v3"``,
        ``"tictactoe_v3"``).
    :return: the AEC env (``<module>.env()``, with PettingZoo's own wrappers: an illegal move ends the game).
    :raises ImportError: PettingZoo is not installed (``pip install 'torchrl-mask[games]'``).
    :raises ValueError: no classic game of that name.
    """
    if not isinstance(game, str):
        if not hasattr(game, "agent_iter"):
            raise ValueError(
                f"{type(game).__name__} is not a PettingZoo AEC env (agent_iter, last, step): TurnBasedEnv plays games "
                "of turns; a simultaneous-move (parallel) game has none. Use a turn-based game with action masks "
                "(tictactoe_v3, connect_four_v3, leduc_holdem_v4, chess_v6, ...)."
            )
        return game
    if importlib.util.find_spec("pettingzoo") is None:
        raise ImportError("Turn-based games need PettingZoo: pip install 'torchrl-mask[games]'.")
    try:
        with warnings.catch_warnings():  # PettingZoo 1.27 prefers its registry; the game modules work in every 1.x
            warnings.simplefilter("ignore", DeprecationWarning)
            module = importlib.import_module(f"pettingzoo.classic.{game}")
    except ModuleNotFoundError as err:
        if not (err.name or "").startswith("pettingzoo.classic"):
            raise ImportError(f"PettingZoo's {game} needs {err.name}: pip install 'torchrl-mask[games]'.") from err
        module = None
    if module is None or not hasattr(module, "env"):
        raise ValueError(not_a_game(game))
    return module.env()


ENGINES = ("auto", "numpy", "pettingzoo")


def _engine(game: str | Any, engine: str) -> str:
    """The engine a :class:`TurnBasedEnv` steps ``game`` with: ``"auto"`` is numpy boards where the game has them."""
    if engine not in ENGINES:
        raise ValueError(f"engine={engine!r}: use one of {ENGINES}.")
    has_boards = isinstance(game, str) and game in BOARD_GAMES
    if engine == "numpy" and not has_boards:
        raise ValueError(
            f"engine='numpy' plays {sorted(BOARD_GAMES)} by name; {game!r} steps through PettingZoo's own env: "
            "use engine='auto' or 'pettingzoo'."
        )
    return "numpy" if engine != "pettingzoo" and has_boards else "pettingzoo"


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
            f"The game's observations are {observation_space!r}, without an action mask: TurnBasedEnv needs "
            "PettingZoo's masked Dict observations ({'observation': Box, 'action_mask': ...}). Use a game that has "
            "them (tictactoe_v3, connect_four_v3, leduc_holdem_v4, texas_holdem_v4, texas_holdem_no_limit_v6, "
            "chess_v6, go_v5, hanabi_v5), or a gymnasium env for a single-agent task."
        )
    action_space = game.action_space(agent)
    if not isinstance(action_space, spaces.Discrete):
        raise ValueError(f"TurnBasedEnv needs a Discrete action space; the game has {action_space!r}.")
    view = observation_space["observation"]
    if not isinstance(view, spaces.Box):
        raise ValueError(f"TurnBasedEnv needs a Box 'observation' entry; the game has {view!r}.")
    return view, action_space


class TurnBasedEnv(EnvBase):
    """PettingZoo AEC games as a TorchRL env, one move per game and step, the mover's view as ``"observation"``.

    The keys of each step are in the module's docstring. A game's end is ``done`` and ``terminated`` for the
    step that ends it; TorchRL's collectors then reset that game (``"_reset"``), the others play on.

    :param game: an AEC env (then ``n_games`` must be None or 1), or the name of a ``pettingzoo.classic`` game
        (see :func:`make_game`).
    :param opponents: 0 for self-play (every seat is the learning policy); ``n > 0`` draws at every reset of a game
        which seat the learner plays (``"learner_seat"``) and which of ``n`` pool snapshots plays the others
        (``"opponent"``).
    :param device: the device of the TensorDicts (the games themselves step on the host).
    :param n_games: None: one game, batch ``()``; ``N``: ``N`` games, batch ``[N]``. Seeded with ``seed``, game
        ``i`` deals as a one-game env seeded ``seed + i`` (:func:`deal_seeds`).
    :param engine: what plays the moves: ``"pettingzoo"`` the game's own AEC env, one per game; ``"numpy"`` all
        the games at once in arrays (:class:`~torchrl_mask.games.boards.BoardGames`, Connect Four and tic-tac-toe
        by name: the same game, entry for entry); ``"auto"`` numpy where the game has it.
    :param openings: each game dealt opens with a number of random legal moves drawn uniformly from 0 to
        ``openings`` (the learner's games then start from varied positions); 0 starts every game at its first
        move. For Connect Four and tic-tac-toe by name, at most 6 and 4 moves: none of those can end a game.
    :raises ValueError: a game without masked Dict observations, or whose actions are not Discrete; ``n_games``
        below 1, or above 1 with an env instance.
    :raises ValueError: an illegal move at :meth:`step` (no game's move is played).
    :raises ValueError: an unknown ``engine``, or ``"numpy"`` for a game without arrays; ``openings`` for another
        game, or longer than the game allows.
    """

    def __init__(
        self,
        game: str | Any,
        opponents: int = 0,
        device: Any = "cpu",
        n_games: int | None = None,
        engine: str = "auto",
        openings: int = 0,
    ) -> None:
        if n_games is not None and (n_games < 1 or (n_games > 1 and not isinstance(game, str))):
            raise ValueError(
                f"n_games={n_games} with {type(game).__name__}: give n_games >= 1, and the game's name (e.g. "
                "'connect_four_v3') for more than one game, so that each game gets its own env."
            )
        self.engine = _engine(game, engine)
        self.openings = check_openings(game, openings)
        super().__init__(device=device, batch_size=() if n_games is None else (n_games,))
        # with numpy boards, one PettingZoo env (never stepped) still gives the seats and the spaces
        self.games = [make_game(game) for _ in range(1 if self.engine == "numpy" else n_games or 1)]
        self.boards = BoardGames(game, n_games or 1) if self.engine == "numpy" else None
        self.game = self.games[0]
        self._states = [game.unwrapped for game in self.games]  # the games' own state, read past the wrappers
        self.seats: list[str] = list(self.game.possible_agents)
        self.opponents = opponents
        observation_space, action_space = game_spaces(self.game)
        self.observation_space, self.action_space = observation_space, action_space
        self._specs(observation_space, len(self.seats), int(action_space.n))
        self._deals: list[Iterator[int]] | None = None
        self._rng = np.random.default_rng()
        n = n_games or 1
        self._masks = np.zeros((n, int(action_space.n)), dtype=bool)  # each game's legal moves now
        self._draws = np.zeros((n, 2), dtype=np.int64)  # each game's (learner seat, opponent)
        self._uniform = np.zeros(n, dtype=np.float32)  # each game's draw for a league's opponent
        self._chosen = np.zeros(n, dtype=bool)  # each game's opponent fixed by its first move
        self._seat_index = {seat: index for index, seat in enumerate(self.seats)}

    def _specs(self, observation_space: spaces.Box, n_seats: int, n_actions: int) -> None:
        """The observation, action, reward and done specs of one game, expanded to the env's batch."""
        low, high = (torch.as_tensor(bound) for bound in (observation_space.low, observation_space.high))
        dtype = torch.as_tensor(np.zeros((), observation_space.dtype)).dtype
        bounded = bool(torch.isfinite(low.double()).all() and torch.isfinite(high.double()).all())  # hanabi: ±inf
        view = (
            Bounded(low, high, observation_space.shape, dtype=dtype) if bounded else Unbounded(low.shape, dtype=dtype)
        )
        entries: dict[str, Any] = {
            "observation": view,
            "action_mask": Binary(n_actions, dtype=torch.bool),
            SEAT: Categorical(n_seats, shape=(), dtype=torch.int64),
            SEAT_REWARD: Unbounded((n_seats,), dtype=torch.float32),
            "is_init": Categorical(2, (1,), dtype=torch.bool),  # what TorchRL's InitTracker writes
        }
        if self.opponents > 0:
            entries[LEARNER_SEAT] = Categorical(n_seats, shape=(), dtype=torch.int64)
            entries[OPPONENT] = Categorical(self.opponents, shape=(), dtype=torch.int64)
            entries[OPPONENT_DRAW] = Bounded(0.0, 1.0, shape=(), dtype=torch.float32)
            entries[OPPONENT_CHOSEN] = Categorical(2, shape=(), dtype=torch.bool)
        batch = self.batch_size
        self.observation_spec = Composite(entries).expand(batch)
        self.action_spec = Categorical(n_actions, shape=batch, dtype=torch.int64)
        self.reward_spec = Unbounded((*batch, 1), dtype=torch.float32)
        self.done_spec = Composite(
            {key: Categorical(2, (*batch, 1), dtype=torch.bool) for key in _DONE_KEYS}, shape=batch
        )

    def _set_seed(self, seed: int | None) -> None:
        self._deals = None if seed is None else [deal_seeds(seed + index) for index in range(len(self.games))]
        self._rng = np.random.default_rng(seed)

    def _arrays(self, n: int) -> dict[str, np.ndarray]:
        """Fresh arrays for ``n`` games' step entries (fresh: a rollout may keep the step before)."""
        view, n_seats = self.observation_space, len(self.seats)
        arrays = {
            "observation": np.empty((n, *view.shape), dtype=view.dtype),
            "action_mask": np.empty((n, self._masks.shape[1]), dtype=bool),
            SEAT: np.empty(n, dtype=np.int64),
            SEAT_REWARD: np.zeros((n, n_seats), dtype=np.float32),
            "is_init": np.zeros((n, 1), dtype=bool),
        }
        return arrays

    def _observe(self, index: int, arrays: dict[str, np.ndarray]) -> None:
        """Write game ``index``'s mover, view and legal moves into row ``index`` of ``arrays`` (and its legal moves
        into those :meth:`_step` checks)."""
        mover = self._states[index].agent_selection
        observation = self.games[index].observe(mover)
        arrays["observation"][index] = observation["observation"]  # a copy: chess flips black's view (np.flip)
        arrays["action_mask"][index] = observation["action_mask"]
        arrays[SEAT][index] = self._seat_index[mover]
        self._masks[index] = arrays["action_mask"][index]

    def _wrap(self, arrays: dict[str, np.ndarray], draws: np.ndarray) -> TensorDict:
        """The arrays as one TensorDict of the env's batch (rows beyond one game's are reshaped away)."""
        if self.opponents > 0:
            arrays[LEARNER_SEAT], arrays[OPPONENT] = draws[:, 0].copy(), draws[:, 1].copy()
            arrays[OPPONENT_DRAW] = self._uniform.copy()
            arrays[OPPONENT_CHOSEN] = self._chosen.copy()
        batch = self.batch_size
        tensors = {key: torch.from_numpy(array).reshape((*batch, *array.shape[1:])) for key, array in arrays.items()}
        return TensorDict(tensors, batch_size=batch, device=self.device)

    def _reset(self, tensordict: TensorDictBase | None = None, **kwargs: Any) -> TensorDictBase:
        reset = None if tensordict is None else tensordict.get("_reset", None)
        n = len(self._masks)
        chosen = range(n) if reset is None else np.flatnonzero(reset.reshape(n).cpu().numpy()).tolist()
        arrays = self._arrays(n)
        arrays["is_init"][:] = True
        if self.boards is not None:
            self.boards.reset(np.asarray(chosen, dtype=np.int64))
        for index in chosen:
            if self.opponents > 0:
                self._draws[index] = (self._rng.integers(len(self.seats)), self._rng.integers(self.opponents))
                self._uniform[index] = self._rng.random()
                self._chosen[index] = False
            if self.boards is None:  # each game dealt with its own seed (the deals' generators are the games' own)
                self.games[index].reset(seed=None if self._deals is None else next(self._deals[index]))
            self._open(index)
            if self.boards is None:
                self._observe(index, arrays)
        if self.boards is not None:  # every board's view: the games not reset keep theirs (see below)
            self._board_views(arrays)
        # games not reset: rows left as they are (TorchRL keeps those games' entries from the tensordict)
        arrays.update({key: np.zeros((n, 1), dtype=bool) for key in _DONE_KEYS})
        return self._wrap(arrays, self._draws)

    def _open(self, index: int) -> None:
        """Play game ``index``'s opening: a number of moves drawn uniformly from 0 to :attr:`openings`, each a
        legal move drawn uniformly, from the env's seeded generator (the same draws on either engine)."""
        for _ in range(int(self._rng.integers(self.openings + 1)) if self.openings else 0):
            if self.boards is not None:
                move = int(self._rng.choice(np.flatnonzero(self.boards.legal()[index])))
                self.boards.play(index, move)
            else:
                game = self.games[index]
                move = int(self._rng.choice(np.flatnonzero(game.observe(game.agent_selection)["action_mask"])))
                game.step(move)

    def _step(self, tensordict: TensorDictBase) -> TensorDictBase:
        moves = tensordict.get("action").reshape(-1).cpu().numpy().astype(np.int64)
        n, width = self._masks.shape
        inside = (moves >= 0) & (moves < width)
        legal = inside & self._masks[np.arange(n), np.where(inside, moves, 0)]
        if not legal.all():  # all checked before any game moves; the first illegal one is named
            index, mask = int(np.flatnonzero(~legal)[0]), self._masks[~legal][0]
            mover = self.games[index].agent_selection if self.boards is None else self.seats[self.boards.mover[index]]
            raise ValueError(
                f"Illegal move {moves[index]} by {mover} (legal: {np.flatnonzero(mask).tolist()}) in game {index}: "
                "the policy must draw under the step's 'action_mask' (MaskablePolicyModule or SelfPlayPolicy does)."
            )
        actions = moves.tolist()
        if self.opponents > 0:  # each game keeps the opponent its first move had (a league's choice)
            self._draws[:, 1] = tensordict.get(OPPONENT).reshape(n).cpu().numpy()
            self._chosen[:] = True
        arrays = self._arrays(n)
        if self.boards is not None:
            movers = self.boards.mover.copy()
            arrays[SEAT_REWARD], ended = self.boards.step(moves)
            self._board_views(arrays)
            return self._ended(arrays, movers, ended.reshape(n, 1), np.zeros((n, 1), dtype=bool))
        return self._step_games(actions, arrays)

    def _step_games(self, actions: list[int], arrays: dict[str, np.ndarray]) -> TensorDict:
        """Play ``actions`` through the PettingZoo envs, game by game, and fill ``arrays`` with what follows."""
        n, seats, index_of = len(self.games), self.seats, self._seat_index
        observations, masks = arrays["observation"], self._masks
        # per game: the seat that moved, every seat's reward, (terminated, truncated)
        movers: list[int] = []
        rewards: list[list[float]] = []
        finished: list[tuple[bool, bool]] = []
        for index, (game, state, action) in enumerate(zip(self.games, self._states, actions, strict=True)):
            movers.append(index_of[state.agent_selection])
            game.step(action)
            rewards.append([state.rewards[seat] for seat in seats])
            finished.append((all(state.terminations.values()), all(state.truncations.values())))
            mover = state.agent_selection
            observation = game.observe(mover)
            observations[index] = observation["observation"]  # a copy: chess flips black's view (np.flip)
            masks[index] = observation["action_mask"]
            arrays[SEAT][index] = index_of[mover]
        arrays["action_mask"] = masks.copy()
        arrays[SEAT_REWARD] = np.asarray(rewards, dtype=np.float32).reshape(n, len(seats))
        ends = np.asarray(finished, dtype=bool).reshape(n, 2)
        return self._ended(arrays, np.asarray(movers), ends[:, :1].copy(), ends[:, 1:])

    def _ended(
        self, arrays: dict[str, np.ndarray], movers: np.ndarray, terminated: np.ndarray, truncated: np.ndarray
    ) -> TensorDict:
        """A step's TensorDict: ``arrays`` with the mover's reward and the done entries (``(n, 1)`` each)."""
        n = len(movers)
        reward = np.take_along_axis(arrays[SEAT_REWARD], movers.reshape(n, 1), axis=1)
        truncated = truncated & ~terminated
        arrays.update(
            {"reward": reward, "terminated": terminated, "truncated": truncated, "done": terminated | truncated}
        )
        return self._wrap(arrays, self._draws)

    def _board_views(self, arrays: dict[str, np.ndarray]) -> None:
        """Every board's view, legal moves and seat to move into ``arrays`` (and the legal moves :meth:`_step`
        checks)."""
        assert self.boards is not None
        arrays["observation"], self._masks = self.boards.views()  # fresh arrays every call, never written into
        arrays["action_mask"], arrays[SEAT] = self._masks, self.boards.mover.copy()  # reset writes the movers
