"""Running one ``torchrl-mask train`` once its arguments are parsed and checked: the job, its report, and how
Ctrl-C and SIGTERM end it (the model saved where training had started: exit 130 or 143, one line on stderr).

The job is :mod:`torchrl_mask.app.training` (a gymnasium env) or :mod:`torchrl_mask.app.selfplay_training` (a
PettingZoo game by self-play), imported only here, when there is something to train.
"""

from __future__ import annotations

import signal
import sys
from typing import TYPE_CHECKING

from torchrl_mask.app.config import ALGOS, GAME_PREFIX, TrainConfig, TrainingFailed, TrainingInterrupted

if TYPE_CHECKING:
    from torchrl_mask.app.training import TrainResult

__all__ = ["EXIT_FAILED", "EXIT_INTERRUPTED", "EXIT_TERMINATED", "report", "run_train"]

EXIT_FAILED = 1  # something raised after training began: the model is saved, one line says where

EXIT_INTERRUPTED = 128 + signal.SIGINT  # 130, as a shell reports Ctrl-C
EXIT_TERMINATED = 128 + signal.SIGTERM  # 143


def report(config: TrainConfig, result: TrainResult) -> None:
    """Print a gymnasium run's evaluation (with masks, without, random legal actions) and the files it wrote.

    :param config: the run's configuration.
    :param result: what :func:`torchrl_mask.app.training.train` returned.
    """
    rows = {
        "trained policy, with masks": result.evaluation["masked"],
        "trained policy, without masks": result.evaluation["unmasked"],
        "random legal actions": result.evaluation["random"],
    }
    print(f"\nEvaluation on {config.env_id}, {config.eval_episodes} episodes each (mean ± std episode return):")
    for label, stats in rows.items():
        if "error" in stats:  # the env raised (e.g. on an illegal move without masks): the model is saved
            print(f"  {label:<31}raised {stats['error']}")
        else:
            print(f"  {label:<31}{stats['mean']:>10.2f} ± {stats['std']:.2f}")
    print(f"\nSaved to {result.out}/: " + ", ".join(result.files))


class _Terminated(KeyboardInterrupt):
    """SIGTERM, raised as an interrupt so that training stops, saves and shuts its workers down as on Ctrl-C."""


def _raise_terminated(signum: int, frame: object) -> None:
    raise _Terminated


def run_train(config: TrainConfig, collector_text: dict[str, str]) -> int:
    """Run a checked train configuration, and report it: a gymnasium env, or a ``pettingzoo:<game>`` by self-play.

    SIGTERM is raised as an interrupt while it runs, so that training stops, saves and shuts its workers down as
    on Ctrl-C.

    :param config: the configuration, checked (:func:`~torchrl_mask.app.config.check_config`).
    :param collector_text: how each ``--collector`` choice is named in the first line printed.
    :return: 0; 130 after Ctrl-C and 143 after SIGTERM (one line on stderr says what was kept); 1 when something
        raised after training began (one line on stderr says what, and where the saved model is).
    """
    previous = signal.signal(signal.SIGTERM, _raise_terminated)
    try:
        if config.env_id.startswith(GAME_PREFIX):
            return _train_game(config)
        return _train(config, collector_text)
    except TrainingInterrupted as stop:  # while training or evaluating: the model was saved
        print(f"torchrl-mask: {stop}", file=sys.stderr)
        return EXIT_TERMINATED if isinstance(stop.__cause__, _Terminated) else EXIT_INTERRUPTED
    except TrainingFailed as failure:  # the model was saved; the traceback is in the output folder
        print(f"torchrl-mask: {failure}", file=sys.stderr)
        return EXIT_FAILED
    except KeyboardInterrupt as stop:  # before training started (or while saving): no model to keep
        print("torchrl-mask: interrupted before a model was saved; nothing to keep.", file=sys.stderr)
        return EXIT_TERMINATED if isinstance(stop, _Terminated) else EXIT_INTERRUPTED
    finally:
        signal.signal(signal.SIGTERM, previous)


def _train(config: TrainConfig, collector_text: dict[str, str]) -> int:
    from torchrl_mask.app import training  # the heavy imports, only now that there is something to train

    source = training.describe_masks(config)
    rollouts = "SB3's DummyVecEnv" if config.collector is None else collector_text[config.collector]
    print(
        f"Training {ALGOS[config.algo]} on {config.env_id} (masks from {source}) for {config.n_timesteps:,} steps: "
        f"{config.n_envs} envs ({rollouts}), seed {config.seed}, device {config.device}."
    )
    result = training.train(config)
    report(config, result)
    return 0


def _train_game(config: TrainConfig) -> int:
    from torchrl_mask.app import selfplay_training  # the heavy imports, only now that there is something to train

    selfplay_training.check_game(config.env_id)
    selfplay_training.check_policy(config)
    game = config.env_id.removeprefix(GAME_PREFIX)
    selfplay_training.check_league(config, game)
    images = [symmetry.name for symmetry in selfplay_training.run_symmetries(config, game)]
    opponents = "pure self-play"
    if config.pool_size or config.league_players:
        players = "".join(f", {name}" for name in config.league_players)
        opponents = f"against a league of {config.pool_size} past snapshots{players}"
        if config.fixed_share is not None and config.pool_size and config.league_players:
            # of all the games: the fixed share is of those the learner does not play against itself
            opponents += f", the fixed players {config.fixed_share * (1 - config.self_share):.0%} of the games"
        if config.self_share:
            opponents += f", itself {config.self_share:.0%} of the games (every seat learning)"
    if images and config.images == "random":
        opponents += (
            f"; each move trained on as one of its images drawn at random, itself among them: {', '.join(images)}"
        )
    elif images:
        opponents += f"; each move also trained on in its images: {', '.join(images)}"
    workers = selfplay_training.worker_count(config.n_envs) if config.collector == "multisync" else 0
    where = f" in {workers} worker process{'es' if workers > 1 else ''}" if workers else ""
    threads = f", {config.threads} torch threads" if config.threads > 1 else ""
    print(
        f"Training {ALGOS[config.algo]} on {config.env_id} by self-play ({opponents}) for {config.n_timesteps:,} "
        f"moves: {config.n_envs} games side by side{where}, seed {config.seed}, device {config.device}{threads}."
    )
    result = selfplay_training.train(config)
    evaluation = result.evaluation
    print(f"\nEvaluation on {config.env_id}, {config.eval_episodes} games per opponent ({evaluation['metric']}, "
          f"{evaluation['unit']}):")  # fmt: skip
    for key, rates in evaluation.items():
        if not key.startswith("vs_"):
            continue
        if "skipped" in rates:
            print(f"  {key:<15}skipped: {rates['skipped']}")
        elif rates["metric"] == "win_rate":
            print(f"  {key:<15}win {rates['win']:.3f} / draw {rates['draw']:.3f} / loss {rates['loss']:.3f}")
        else:
            print(f"  {key:<15}{rates['mean']:+.3f} ± {rates['std']:.3f} per game")
    print(f"  illegal moves: {evaluation['illegal_moves']}")
    print(f"\nSaved to {result.out}/: " + ", ".join(result.files))
    return 0
