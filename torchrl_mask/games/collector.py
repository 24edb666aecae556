"""The TorchRL collector of self-play: ``n_games`` games of one PettingZoo classic game played side by side by a
self-play policy, one policy forward for all of them, in this process or split over worker processes.

The policy is :class:`~torchrl_mask.SelfPlayPolicy` (one shared policy for every seat, or the learner against its
league), or :class:`~torchrl_mask.games.recurrent_selfplay.RecurrentSelfPlayPolicy` for an LSTM model, each seat with
its own state (the env then carries the policy's primer). ``MaskablePPO.learn(collector=...)`` reads the batches
seat by seat (:mod:`torchrl_mask.games.selfplay`).

Example:
    >>> from torchrl_mask import MaskablePPO, SeatEnv, SelfPlayPolicy
    >>> model = MaskablePPO("MlpPolicy", SeatEnv("tictactoe_v3"), n_steps=8, batch_size=32, seed=0)
    >>> collector = selfplay_collector(SelfPlayPolicy(model.policy), "tictactoe_v3", n_games=4, frames=32)
    >>> model = model.learn(64, collector=collector)
"""

from __future__ import annotations

import os
from functools import partial

from torchrl.collectors import BaseCollector, Collector, MultiSyncCollector
from torchrl.envs import EnvBase, TensorDictPrimer

from torchrl_mask.games.env import TurnBasedEnv
from torchrl_mask.games.recurrent_selfplay import RecurrentSelfPlayPolicy
from torchrl_mask.games.selfplay import SelfPlayPolicy

__all__ = ["selfplay_collector", "worker_count"]


def worker_count(n_games: int, cores: int | None = None) -> int:
    """The worker processes ``n_games`` games are split over: the most, up to one per core, that hold the same
    number of games each (a divisor of ``n_games``).

    :param n_games: the games played side by side.
    :param cores: the machine's cores; None: ``os.cpu_count()``.
    :return: the workers, each with ``n_games // workers`` games.
    """
    most = min(n_games, cores if cores is not None else os.cpu_count() or 1)
    return max(count for count in range(1, most + 1) if n_games % count == 0)


def _game_env(
    game: str,
    opponents: int,
    n_games: int | None,
    primer: TensorDictPrimer | None,
    engine: str = "auto",
    openings: int = 0,
) -> EnvBase:
    """One :class:`~torchrl_mask.TurnBasedEnv` (in a worker process with ``multisync``), with the LSTM policy's
    primer appended when there is one (every seat's states in its specs)."""
    env = TurnBasedEnv(game, opponents, n_games=n_games, engine=engine, openings=openings)
    return env if primer is None else env.append_transform(primer)


def selfplay_collector(
    policy: SelfPlayPolicy,
    game: str,
    n_games: int,
    frames: int,
    opponents: int = 0,
    multisync: bool = False,
    threads: int = 1,
    seed: int = 0,
    engine: str = "auto",
    openings: int = 0,
) -> BaseCollector:
    """A collector of ``frames`` moves a batch (every seat's), never ending by itself.

    :param policy: the self-play policy over the model that learns.
    :param game: a PettingZoo classic game's name.
    :param n_games: the games played side by side.
    :param frames: moves a batch, ``n_games * n_steps``.
    :param opponents: the opponents of the policy's league (its snapshots, fixed players and itself), 0 without one.
    :param multisync: split the games over worker processes (:func:`worker_count`), each a ``TurnBasedEnv`` of its
        share, with TorchRL's ``MultiSyncCollector``; else one ``TurnBasedEnv`` of them all in this process.
    :param threads: torch threads of each worker process.
    :param seed: seeds the games.
    :param engine: :class:`~torchrl_mask.TurnBasedEnv`'s ``engine`` (``"pettingzoo"``: the game's own env even where
        numpy boards play it).
    :param openings: :class:`~torchrl_mask.TurnBasedEnv`'s ``openings``: each game opens with up to that many
        random legal moves.
    :return: the collector.
    """
    primer = policy.make_tensordict_primer() if isinstance(policy, RecurrentSelfPlayPolicy) else None
    if multisync:  # a worker's share of the games in one env (the reader flattens them)
        workers = worker_count(n_games)
        share = n_games // workers
        makers = [partial(_game_env, game, opponents, share if share > 1 else None, primer, engine, openings)] * workers
        collector: BaseCollector = MultiSyncCollector(
            makers,
            policy,
            frames_per_batch=frames,
            total_frames=-1,
            num_threads=threads,
            auto_register_policy_transforms=False,
        )
        collector.set_seed(seed)
        collector.reset()
        return collector
    games = _game_env(game, opponents, n_games, primer, engine, openings)  # one env, one policy forward for all games
    games.set_seed(seed)
    # the env carries what the policy reads already ("is_init"; the LSTM primer appended above): nothing to add
    return Collector(games, policy, frames_per_batch=frames, total_frames=-1, auto_register_policy_transforms=False)
