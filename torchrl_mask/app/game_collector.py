"""The TorchRL collector of a self-play run: the games, the policy that plays every seat, and the league it plays
against.

One shared policy plays every seat (or, with a league, the learner's seat against snapshots of its past weights,
the game's fixed players and itself): :class:`~torchrl_mask.SelfPlayPolicy`, or for an LSTM model
:class:`~torchrl_mask.games.recurrent_selfplay.RecurrentSelfPlayPolicy`, each seat with its own LSTM state. The
games are one :class:`~torchrl_mask.TurnBasedEnv` of ``n_envs`` games in this process (one policy forward for all
of them), or with ``collector="multisync"`` split over worker processes, one per core at most.
"""

from __future__ import annotations

import os
from functools import partial

from torchrl.collectors import BaseCollector, Collector, MultiSyncCollector
from torchrl.envs import EnvBase, TensorDictPrimer

from torchrl_mask.algorithms.recurrent_ppo import MaskableRecurrentPPO
from torchrl_mask.app.config import SelfPlay, TrainConfig
from torchrl_mask.app.models import Model
from torchrl_mask.games.env import TurnBasedEnv, make_game
from torchrl_mask.games.ladder import ladder
from torchrl_mask.games.recurrent_selfplay import RecurrentSelfPlayPolicy
from torchrl_mask.games.selfplay import SelfPlayPolicy
from torchrl_mask.games.symmetry import Symmetry, game_symmetries

__all__ = ["SNAPSHOTS", "build_collector", "run_symmetries", "worker_count"]

SNAPSHOTS = 30  # the snapshots a run with a pool takes, at most (one every 10 rollouts in a short run)


def run_symmetries(config: TrainConfig, game: str) -> tuple[Symmetry, ...]:
    """The symmetries a run trains on: the game's (:func:`~torchrl_mask.games.symmetry.game_symmetries`) unless
    ``--no-symmetries``, none for an LSTM policy (its states follow the moves played, not their images).

    :param config: the run (its self-play ``symmetries``, ``algo``).
    :param game: the game's name.
    :return: the symmetries, possibly none.
    """
    selfplay = config.selfplay or SelfPlay()
    if selfplay.symmetries is False or config.algo == "ppo_lstm_mask":
        return ()
    return game_symmetries(game)


def worker_count(n_games: int, cores: int | None = None) -> int:
    """The worker processes ``collector="multisync"`` splits ``n_games`` games over: the most, up to one per core,
    that hold the same number of games each (a divisor of ``n_games``).

    :param n_games: the games played side by side (``n_envs``).
    :param cores: the machine's cores; None: ``os.cpu_count()``.
    :return: the workers, each with ``n_games // workers`` games.
    """
    most = min(n_games, cores if cores is not None else os.cpu_count() or 1)
    return max(count for count in range(1, most + 1) if n_games % count == 0)


def _game_env(
    game: str, opponents: int, n_games: int | None, primer: TensorDictPrimer | None, engine: str = "auto"
) -> EnvBase:
    """One :class:`~torchrl_mask.TurnBasedEnv` (in a worker process with ``multisync``), with the LSTM policy's
    primer appended when there is one (every seat's states in its specs)."""
    env = TurnBasedEnv(game, opponents, n_games=n_games, engine=engine)
    return env if primer is None else env.append_transform(primer)


def _policy(config: TrainConfig, model: Model, game: str, snapshots: int) -> SelfPlayPolicy:
    """The policy that plays every seat, with the run's league: about ``snapshots`` snapshots a run, one every 10
    rollouts or fewer (each measured against the ladder as it is taken)."""
    selfplay = config.selfplay or SelfPlay()
    fixed = {name: ladder(game).opponents[name] for name in selfplay.league_players}
    self_share = selfplay.self_share if selfplay.has_league else 0.0
    # the learner makes about half the moves of a league's game, all of a game against itself
    rollouts = round(2 * config.n_timesteps / (1 + self_share)) // (config.n_envs * model.n_steps)
    league = {
        "pool_size": selfplay.pool_size,
        "fixed": fixed,
        "snapshot_every": max(10, rollouts // snapshots),
        "fixed_share": selfplay.fixed_share,
        "self_share": self_share,
    }
    if isinstance(model, MaskableRecurrentPPO):
        n_seats = len(make_game(game).possible_agents)
        return RecurrentSelfPlayPolicy(model.policy, n_seats, **league)  # type: ignore[arg-type]
    symmetries = run_symmetries(config, game)
    return SelfPlayPolicy(model.policy, **league, symmetries=symmetries, images=selfplay.images)  # type: ignore[arg-type]


def build_collector(
    config: TrainConfig, model: Model, game: str, engine: str = "auto", snapshots: int = SNAPSHOTS
) -> BaseCollector:
    """The run's TorchRL collector (see the module), never ending by itself.

    :param config: the run (``n_envs``, ``collector``, ``threads``, ``seed``, ``selfplay``).
    :param model: the model that learns (MaskablePPO, or MaskableRecurrentPPO).
    :param game: the game's name.
    :param engine: :class:`~torchrl_mask.TurnBasedEnv`'s ``engine`` (``"pettingzoo"``: the game's own env even where
        numpy boards play it; what ``bench selfplay`` compares).
    :param snapshots: the snapshots the run takes at most (:data:`SNAPSHOTS`).
    :return: a collector of ``n_envs * n_steps`` moves a batch.
    """
    policy = _policy(config, model, game, snapshots)
    primer = policy.make_tensordict_primer() if isinstance(policy, RecurrentSelfPlayPolicy) else None
    selfplay = config.selfplay or SelfPlay()
    league = selfplay.has_league
    opponents = selfplay.pool_size + len(selfplay.league_players) + (league and selfplay.self_share > 0)
    frames = config.n_envs * model.n_steps
    if config.collector == "multisync":  # a worker's share of the games in one env (the reader flattens them)
        workers = worker_count(config.n_envs)
        share = config.n_envs // workers
        makers = [partial(_game_env, game, opponents, share if share > 1 else None, primer, engine)] * workers
        collector: BaseCollector = MultiSyncCollector(
            makers,
            policy,
            frames_per_batch=frames,
            total_frames=-1,
            num_threads=config.threads,
            auto_register_policy_transforms=False,
        )
        collector.set_seed(config.seed)
        collector.reset()
        return collector
    games = _game_env(game, opponents, config.n_envs, primer, engine)  # one env, one policy forward for all games
    games.set_seed(config.seed)
    # the env carries what the policy reads already ("is_init"; the LSTM primer appended above): nothing to add
    return Collector(games, policy, frames_per_batch=frames, total_frames=-1, auto_register_policy_transforms=False)
