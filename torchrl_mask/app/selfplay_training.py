"""``torchrl-mask train --env pettingzoo:<game>``: self-play MaskablePPO (or, with ``--algo ppo_lstm_mask``,
MaskableRecurrentPPO, each seat with its own LSTM state: :mod:`torchrl_mask.games.recurrent_selfplay`) on a
PettingZoo classic game.

One shared policy plays every seat (or, with ``pool_size``, the learner's seat against snapshots of its past
weights), collected by TorchRL (``Collector`` over one ``TurnBasedEnv`` of ``n_envs`` games, or ``MultiSyncCollector``
with ``collector="multisync"``: the games split over one worker process per core at most) and trained by
:meth:`torchrl_mask.MaskablePPO.learn` seat by seat (:mod:`torchrl_mask.games.selfplay`). ``n_timesteps``
counts the moves trained on; ``n_steps`` is moves per game per rollout. It writes ``model.zip`` and
(:mod:`torchrl_mask.app.selfplay_files`) ``win_rates.csv``, ``evaluation.json`` and ``learning_curve.png``: the
model against its game's ladder of fixed players (:mod:`torchrl_mask.games.ladder`: win rates, chips per game or
the shared score), during training and after.

Whatever raises once training has begun (the games, a callback, an evaluation, a player, a file) leaves the model
trained so far in ``model.zip`` and the traceback in ``crash.txt``, and ends in
:class:`~torchrl_mask.app.config.TrainingFailed`.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

import torch
from stable_baselines3.common.vec_env import DummyVecEnv
from torchrl.collectors import BaseCollector, Collector, MultiSyncCollector
from torchrl.envs import EnvBase, TensorDictPrimer

from torchrl_mask.algorithms.ppo import MaskablePPO
from torchrl_mask.algorithms.recurrent_ppo import MaskableRecurrentPPO
from torchrl_mask.app import run_folder
from torchrl_mask.app.config import TrainConfig, TrainingInterrupted, UsageError, check_config, check_device, failed
from torchrl_mask.app.results import EVAL_SEED_OFFSET
from torchrl_mask.app.selfplay_files import hyperparams_used, plot_win_rates, write_curve, write_evaluation
from torchrl_mask.app.trained_agent import check_trained_agent
from torchrl_mask.app.training import ALGORITHMS, checkpoint_files, checkpoints, model_kwargs, quiet_logger
from torchrl_mask.games.env import TurnBasedEnv, game_spaces, make_game
from torchrl_mask.games.evaluation import EVAL_POINT_GAMES, EVAL_POINTS, WinRates, evaluate_ladder
from torchrl_mask.games.ladder import ladder
from torchrl_mask.games.network import with_extractor_classes
from torchrl_mask.games.recurrent_selfplay import RecurrentSelfPlayPolicy
from torchrl_mask.games.seat_env import SeatEnv
from torchrl_mask.games.selfplay import SelfPlayPolicy
from torchrl_mask.games.symmetry import GAME_SYMMETRIES, Symmetry, game_symmetries

Model = MaskablePPO | MaskableRecurrentPPO

__all__ = [
    "SelfPlayResult",
    "build_collector",
    "build_model",
    "check_game",
    "check_league",
    "check_policy",
    "plot_win_rates",
    "train",
    "worker_count",
]


@dataclass
class SelfPlayResult:
    """What :func:`train` produced.

    :param model: the trained model.
    :param out: the output folder.
    :param evaluation: :func:`~torchrl_mask.games.evaluation.evaluate_ladder`'s dict: ``"metric"``, ``"unit"``,
        ``"vs_<opponent>"`` per opponent of the game's ladder, ``"illegal_moves"``.
    :param curve: the measurements during training, one dict per measurement.
    :param files: the names of the files written in ``out``.
    """

    model: Model
    out: Path
    evaluation: dict[str, Any]
    curve: list[dict[str, Any]]
    files: list[str]


def _game_env(
    game: str, opponents: int, n_games: int | None, primer: TensorDictPrimer | None, engine: str = "auto"
) -> EnvBase:
    """One :class:`~torchrl_mask.TurnBasedEnv` (in a worker process with ``multisync``), with the LSTM policy's
    primer appended when there is one (every seat's states in its specs)."""
    env = TurnBasedEnv(game, opponents, n_games=n_games, engine=engine)
    return env if primer is None else env.append_transform(primer)


SNAPSHOTS = 30  # the snapshots a run with a pool takes, at most (one every 10 rollouts in a short run)


def worker_count(n_games: int, cores: int | None = None) -> int:
    """The worker processes ``collector="multisync"`` splits ``n_games`` games over: the most, up to one per core,
    that hold the same number of games each (a divisor of ``n_games``).

    :param n_games: the games played side by side (``n_envs``).
    :param cores: the machine's cores; None: ``os.cpu_count()``.
    :return: the workers, each with ``n_games // workers`` games.
    """
    most = min(n_games, cores if cores is not None else os.cpu_count() or 1)
    return max(count for count in range(1, most + 1) if n_games % count == 0)


def build_collector(
    config: TrainConfig, model: Model, game: str, pool_size: int, engine: str = "auto"
) -> BaseCollector:
    """The run's TorchRL collector: one :class:`~torchrl_mask.TurnBasedEnv` of ``n_envs`` games in this process,
    or (``collector="multisync"``) the games split over worker processes, one per core at most
    (:func:`worker_count`), each a ``TurnBasedEnv`` of its share; running :class:`~torchrl_mask.SelfPlayPolicy`.

    :param config: the run (``n_envs``, ``collector``, ``threads``, ``seed``).
    :param model: the model that learns (MaskablePPO, or MaskableRecurrentPPO: :class:`RecurrentSelfPlayPolicy`).
    :param game: the game's name.
    :param pool_size: snapshots of past weights the learner plays against (0: pure self-play).
    :param engine: :class:`~torchrl_mask.TurnBasedEnv`'s ``engine`` (``"pettingzoo"``: the game's own env even where
        numpy boards play it; what ``bench selfplay`` compares).
    :return: a collector of ``n_envs * n_steps`` moves a batch, never ending by itself.
    """
    policy: SelfPlayPolicy
    primer = None
    fixed = {name: ladder(game).opponents[name] for name in config.league_players}
    # about SNAPSHOTS snapshots a run (each measured against the ladder as it is taken), one per 10 rollouts or fewer
    league_games = bool(pool_size or fixed)
    self_share = config.self_share if league_games else 0.0
    # the learner makes about half the moves of a league's game, all of a game against itself
    rollouts = round(2 * config.n_timesteps / (1 + self_share)) // (config.n_envs * model.n_steps)
    league = {"pool_size": pool_size, "fixed": fixed, "snapshot_every": max(10, rollouts // SNAPSHOTS),
              "fixed_share": config.fixed_share, "self_share": self_share}  # fmt: skip
    if isinstance(model, MaskableRecurrentPPO):
        n_seats = len(make_game(game).possible_agents)
        policy = RecurrentSelfPlayPolicy(model.policy, n_seats, **league)  # type: ignore[arg-type]
        primer = policy.make_tensordict_primer()
    else:
        policy = SelfPlayPolicy(model.policy, **league, symmetries=run_symmetries(config, game),  # type: ignore[arg-type]
                                images=config.images)  # fmt: skip
    opponents = pool_size + len(fixed) + (self_share > 0)
    frames = config.n_envs * model.n_steps
    if config.collector == "multisync":  # a worker's share of the games in one env (the reader flattens them)
        workers = worker_count(config.n_envs)
        share = config.n_envs // workers
        makers = [partial(_game_env, game, opponents, share if share > 1 else None, primer, engine)] * workers
        collector: BaseCollector = MultiSyncCollector(makers, policy, frames_per_batch=frames, total_frames=-1,
                                                      num_threads=config.threads,
                                                      auto_register_policy_transforms=False)  # fmt: skip
        collector.set_seed(config.seed)
        collector.reset()
        return collector
    games = _game_env(game, opponents, config.n_envs, primer, engine)  # one env, one policy forward for all games
    games.set_seed(config.seed)
    # the env carries what the policy reads already ("is_init"; the LSTM primer appended above): nothing to add
    return Collector(games, policy, frames_per_batch=frames, total_frames=-1, auto_register_policy_transforms=False)


def build_model(config: TrainConfig, game: str, device: str) -> Model:
    """A new model of ``config.algo``, or the ``-i`` model with the run's hyperparameters applied (its policy
    kept), built on one seat of the game (:class:`~torchrl_mask.SeatEnv`) for its spaces.

    :param config: the run (``algo``, ``hyperparams``, ``seed``, ``trained_agent``, ...).
    :param game: the game's name.
    :param device: the torch device.
    :return: the model.
    """
    algorithm = ALGORITHMS[config.algo]
    policy = check_policy(config)
    hyperparams = {key: value for key, value in config.hyperparams.items() if key not in ("policy", "pool_size")}
    kwargs = model_kwargs(hyperparams, policy, config.algo)
    if "policy_kwargs" in kwargs:  # the defaults name the board network as text (config imports no torch)
        kwargs["policy_kwargs"] = with_extractor_classes(kwargs["policy_kwargs"])
    tensorboard_log = None if config.tensorboard_log is None else str(config.tensorboard_log)
    common: dict[str, Any] = {"device": device, "seed": config.seed, "verbose": config.verbose,
                              "tensorboard_log": tensorboard_log}  # fmt: skip
    env = DummyVecEnv([partial(SeatEnv, game)])
    if config.trained_agent is not None:  # SB3's load sets the keyword arguments, then rebuilds schedules
        kwargs.pop("policy_kwargs", None)
        model = algorithm.load(config.trained_agent, env=env, **common, **kwargs)
    else:
        model = algorithm(policy, env, **common, **kwargs)
    if tensorboard_log is None:
        quiet_logger(model, config)
    return model


def check_game(env_id: str) -> str:
    """The game a ``pettingzoo:<game>`` env id names, if PettingZoo has it and self-play can train it.

    :param env_id: ``"pettingzoo:tictactoe_v3"``.
    :return: the game's name, ``"tictactoe_v3"``.
    :raises UsageError: PettingZoo is not installed, it has no classic game of that name, or the game has no
        masked Dict observations (``rps_v2``).
    """
    try:
        game_spaces(make_game(env_id))
    except (ImportError, ValueError) as err:
        raise UsageError(f"--env {env_id}: {' '.join(str(err).split())}") from None
    return env_id.removeprefix("pettingzoo:")


def check_policy(config: TrainConfig) -> str:
    """The SB3 policy self-play builds: ``MlpPolicy`` (an LSTM's with ``--algo ppo_lstm_mask``), the board games
    reading their board through the features extractor of their defaults.

    :param config: the run (``algo``, ``hyperparams``' ``policy``).
    :return: the policy's name.
    :raises UsageError: another policy was asked for.
    """
    fits = "MlpLstmPolicy" if config.algo == "ppo_lstm_mask" else "MlpPolicy"
    policy = config.hyperparams.get("policy", fits)
    if policy != fits:
        raise UsageError(
            f"policy={policy} with --algo {config.algo} on {config.env_id}: self-play builds {fits} (a board game's "
            f"board goes through policy_kwargs' features_extractor_class); use policy={fits}, or leave it out."
        )
    return str(policy)


def check_league(config: TrainConfig, game: str) -> None:
    """Refuse ``--league-players`` that are not fixed players of the game's ladder, a ``--fixed-share``
    outside ``[0, 1]``, and a ``--self-share`` without a league.

    :param config: the run (``league_players``, ``fixed_share``, ``self_share``, ``pool_size``).
    :param game: the game's name.
    :raises UsageError: an unknown name, one named twice, a share that is no share, or games against itself with
        no league.
    """
    if config.fixed_share is not None and not 0 <= config.fixed_share <= 1:
        raise UsageError(f"--fixed-share {config.fixed_share}: give the fixed players' share of the league's games, "
                         "from 0 to 1 (0.5: half the games against them).")  # fmt: skip
    if config.self_share and not (config.pool_size or config.league_players):
        raise UsageError(f"--self-share {config.self_share} without a league: pure self-play (--pool-size 0 and no "
                         "--league-players) plays every game against itself already; leave --self-share out, or "
                         "give --pool-size.")  # fmt: skip
    known = sorted(name for name, player in ladder(game).opponents.items() if player is not None)
    unknown = [name for name in config.league_players if name not in known]
    if unknown or len(set(config.league_players)) != len(config.league_players):
        problem = f"{', '.join(unknown)} not in {game}'s ladder" if unknown else "a player named twice"
        raise UsageError(f"--league-players {' '.join(config.league_players)}: {problem}; name each at most once, "
                         f"from {' '.join(known)}.")  # fmt: skip


def run_symmetries(config: TrainConfig, game: str) -> tuple[Symmetry, ...]:
    """The symmetries a run trains on: the game's (:data:`~torchrl_mask.games.symmetry.GAME_SYMMETRIES`) unless
    ``--no-symmetries``, none for an LSTM policy (its states follow the moves played, not their images).

    :param config: the run (``symmetries``, ``algo``).
    :param game: the game's name.
    :return: the symmetries, possibly none.
    :raises UsageError: ``--symmetries`` for a game without any listed, or with ``--algo ppo_lstm_mask``;
        ``--images random`` for a run without symmetries.
    """
    listed = game_symmetries(game)
    if config.symmetries and (not listed or config.algo == "ppo_lstm_mask"):
        why = f"{game} has none listed" if not listed else "an LSTM's states follow the moves played, not their images"
        raise UsageError(f"--symmetries: {why}; leave the option out (the game's own: "
                         f"{', '.join(GAME_SYMMETRIES)} with ppo_mask).")  # fmt: skip
    symmetries = () if config.symmetries is False or config.algo == "ppo_lstm_mask" else listed
    if config.images == "random" and not symmetries:
        why = "--no-symmetries" if config.symmetries is False else f"{game} with {config.algo} trains on no images"
        raise UsageError(f"--images random draws among a move's images, but {why}; leave --images out, or train "
                         f"{', '.join(GAME_SYMMETRIES)} with ppo_mask and their symmetries.")  # fmt: skip
    return symmetries


def _check(config: TrainConfig) -> tuple[Path, str, str]:
    """Every check before anything is written: the configuration, the policy, the device, the game, the league,
    the symmetries, the ``-i`` model."""
    check_policy(config)
    out = check_config(config)
    device = check_device(config.device)
    game = check_game(config.env_id)
    check_league(config, game)
    run_symmetries(config, game)
    if config.trained_agent is not None:
        seat_env = SeatEnv(game)
        check_trained_agent(config.trained_agent, seat_env, ALGORITHMS[config.algo])
        seat_env.close()
    return out, device, game


def _pool_note(model: Model, pool_size: int) -> None:
    """Say what building the pool of snapshots costs, before it is built."""
    if pool_size:
        weights = sum(parameter.numel() for parameter in model.policy.parameters())
        megabytes = pool_size * weights * 4 / 2**20
        print(f"Building {pool_size} snapshots of the policy ({weights:,} weights each, {megabytes:.1f} MB in all).")


def _learn(config: TrainConfig, model: Model, out: Path, collector: BaseCollector, rates: WinRates
           ) -> dict[str, float] | None:  # fmt: skip
    """Train; save the model however training ends (an interrupt, or anything that raises), then say so. Returns
    the learner's final score against each opponent of its league, if it has one."""
    league = collector.policy.league
    try:  # learn() shuts the collector and its workers down, also on an interrupt or an error
        model.learn(config.n_timesteps, [rates, *checkpoints(config, out)], progress_bar=config.progress_bar,
                    collector=collector, reset_num_timesteps=config.trained_agent is None)  # fmt: skip
    except KeyboardInterrupt as stop:  # Ctrl-C or SIGTERM: keep what was trained, then say so
        model.save(out / "model.zip")
        write_curve(out, rates.points)
        raise TrainingInterrupted(out, model.num_timesteps) from stop
    except Exception as err:  # the games, the collector, a callback or a player
        model.save(out / "model.zip")
        write_curve(out, rates.points)
        raise failed(out, f"training (at move {model.num_timesteps:,})", err) from err
    model.save(out / "model.zip")
    return None if league is None else league.summary()


def _evaluate_and_write(
    config: TrainConfig, model: Model, out: Path, game: str, rates: WinRates, league: dict[str, float] | None
) -> dict:
    """The final evaluation against the game's ladder, then the files; the model is saved already."""
    try:
        evaluation = evaluate_ladder(model, game, config.eval_episodes, config.seed + EVAL_SEED_OFFSET)
        if league is not None:  # the learner's running score (1 a win, 0 a loss) against each opponent it met
            evaluation["league_scores"] = league
    except KeyboardInterrupt as stop:
        write_curve(out, rates.points)
        raise TrainingInterrupted(out, model.num_timesteps) from stop
    except Exception as err:
        write_curve(out, rates.points)
        raise failed(out, "the final evaluation", err) from err
    try:
        write_curve(out, rates.points)
        write_evaluation(out, config, evaluation, hyperparams_used(model, config.hyperparams))
        plot_win_rates(rates.points, evaluation, config.env_id, out / "learning_curve.png")
    except Exception as err:
        raise failed(out, "writing win_rates.csv, evaluation.json or learning_curve.png", err) from err
    return evaluation


def train(config: TrainConfig) -> SelfPlayResult:
    """Train by self-play, evaluate against the game's ladder, and write the files (see the module).

    :param config: the run; ``env_id`` is ``"pettingzoo:<classic game>"``; ``pool_size`` 0 is pure self-play,
        ``n`` plays the learner against ``n`` snapshots of its past weights.
    :return: the model, the folder, the evaluation, the curve and the files written.
    :raises UsageError: an unknown game or one without masks, a bad device or output folder, an ``-i`` model that
        does not load or was saved for another game, all before anything is written.
    :raises TrainingInterrupted: a ``KeyboardInterrupt`` while training or evaluating; the model (and the curve
        so far) were saved.
    :raises TrainingFailed: anything else raised after training began; the model was saved.
    """
    out, device, game = _check(config)
    torch.set_num_threads(config.threads)
    with run_folder.claim(out, config.overwrite):
        model = build_model(config, game, device)
        _pool_note(model, config.pool_size)
        collector = build_collector(config, model, game, config.pool_size)
        # with a pool, each snapshot is measured as it is taken, besides the points every `every` moves
        every = config.eval_freq or config.n_timesteps // EVAL_POINTS
        games = min(EVAL_POINT_GAMES, config.eval_episodes)
        players = collector.policy if config.pool_size else None
        rates = WinRates(game, every, games, config.seed + EVAL_SEED_OFFSET, players)
        league = _learn(config, model, out, collector, rates)
        evaluation = _evaluate_and_write(config, model, out, game, rates, league)
    files = ["model.zip", "evaluation.json", "learning_curve.png"] + (["win_rates.csv"] if rates.points else [])
    files += checkpoint_files(out)
    return SelfPlayResult(model, out, evaluation, rates.points, files)
