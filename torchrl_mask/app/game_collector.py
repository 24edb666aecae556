"""The TorchRL collector of a self-play run: the games, the policy that plays every seat, and the league it plays
against.

One shared policy plays every seat (or, with a league, the learner's seat against snapshots of its past weights,
the game's fixed players and itself): :class:`~torchrl_mask.SelfPlayPolicy`, or for an LSTM model
:class:`~torchrl_mask.games.recurrent_selfplay.RecurrentSelfPlayPolicy`, each seat with its own LSTM state. The
games are one :class:`~torchrl_mask.TurnBasedEnv` of ``n_envs`` games in this process (one policy forward for all
of them), or with ``collector="multisync"`` split over worker processes, one per core at most.
"""

from __future__ import annotations

from torchrl.collectors import BaseCollector

from torchrl_mask.algorithms.recurrent_ppo import MaskableRecurrentPPO
from torchrl_mask.app.config import SelfPlay, TrainConfig
from torchrl_mask.app.models import Model
from torchrl_mask.games.collector import selfplay_collector, worker_count
from torchrl_mask.games.env import make_game
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
    """The run's TorchRL collector (:func:`~torchrl_mask.games.collector.selfplay_collector`), never ending by itself.

    :param config: the run (``n_envs``, ``collector``, ``threads``, ``seed``, ``selfplay``).
    :param model: the model that learns (MaskablePPO, or MaskableRecurrentPPO).
    :param game: the game's name.
    :param engine: :class:`~torchrl_mask.TurnBasedEnv`'s ``engine`` (``"pettingzoo"``: the game's own env even where
        numpy boards play it; what ``bench selfplay`` compares).
    :param snapshots: the snapshots the run takes at most (:data:`SNAPSHOTS`).
    :return: a collector of ``n_envs * n_steps`` moves a batch.
    """
    selfplay = config.selfplay or SelfPlay()
    opponents = selfplay.pool_size + len(selfplay.league_players) + (selfplay.has_league and selfplay.self_share > 0)
    return selfplay_collector(
        _policy(config, model, game, snapshots),
        game,
        config.n_envs,
        config.n_envs * model.n_steps,
        opponents,
        multisync=config.collector == "multisync",
        threads=config.threads,
        seed=config.seed,
        engine=engine,
        openings=selfplay.openings,
    )
