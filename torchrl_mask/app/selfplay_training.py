"""``torchrl-mask train --env pettingzoo:<game>``: self-play MaskablePPO on a PettingZoo classic game.

One shared policy plays every seat (or, with ``pool_size``, the learner's seat against snapshots of its past
weights), collected by TorchRL (``Collector`` over one ``TurnBasedEnv`` of ``n_envs`` games, or ``MultiSyncCollector``
with ``collector="multisync"``) and trained by :meth:`torchrl_mask.MaskablePPO.learn` seat by seat
(:mod:`torchrl_mask.games.selfplay`). ``n_timesteps`` counts the moves trained on; ``n_steps`` is moves
per game env per rollout. It writes to the output folder:

- ``model.zip``: the trained model (the observation is the mover's own view of the board);
- ``win_rates.csv`` and ``learning_curve.png``: win, draw and loss rates against a uniformly random legal player
  and a one-ply heuristic (:mod:`torchrl_mask.games.evaluation`), evaluated ``eval_points`` times
  during training;
- ``evaluation.json``: ``{"vs_random": {"win", "draw", "loss"}, "vs_heuristic": {...}, "illegal_moves": N}``
  over ``eval_episodes`` games each, the trained policy taking the first seat in half of them, and the
  configuration.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from functools import partial
from pathlib import Path
from typing import Any

import torch
from stable_baselines3.common.vec_env import DummyVecEnv
from torchrl.collectors import BaseCollector, Collector, MultiSyncCollector

from torchrl_mask.algorithms.ppo import MaskablePPO
from torchrl_mask.app import run_folder
from torchrl_mask.app.config import TrainConfig, TrainingInterrupted, UsageError, check_config, check_device
from torchrl_mask.app.results import EVAL_SEED_OFFSET
from torchrl_mask.app.training import checkpoint_files, checkpoints, quiet_logger
from torchrl_mask.games.env import TurnBasedEnv, make_game
from torchrl_mask.games.evaluation import EVAL_POINT_GAMES, EVAL_POINTS, OPPONENTS, WinRates, evaluate_games
from torchrl_mask.games.seat_env import SeatEnv
from torchrl_mask.games.selfplay import SelfPlayPolicy

__all__ = ["SelfPlayResult", "check_game", "plot_win_rates", "train"]


@dataclass
class SelfPlayResult:
    """What :func:`train` produced.

    :param model: the trained model.
    :param out: the output folder.
    :param evaluation: ``{"vs_random": {...}, "vs_heuristic": {...}, "illegal_moves": N}``.
    :param curve: the win rates of the evaluations during training, one dict per evaluation.
    :param files: the names of the files written in ``out``.
    """

    model: MaskablePPO
    out: Path
    evaluation: dict[str, Any]
    curve: list[dict[str, Any]]
    files: list[str]


def _collector(config: TrainConfig, model: MaskablePPO, game: str, pool_size: int) -> BaseCollector:
    makers = [partial(TurnBasedEnv, game, pool_size)] * config.n_envs
    policy = SelfPlayPolicy(model.policy, pool_size=pool_size)
    frames = config.n_envs * model.n_steps
    if config.collector == "multisync":
        collector: BaseCollector = MultiSyncCollector(makers, policy, frames_per_batch=frames, total_frames=-1,
                                                      num_threads=config.threads)  # fmt: skip
        collector.set_seed(config.seed)
        collector.reset()
        return collector
    games = TurnBasedEnv(game, pool_size, n_games=config.n_envs)  # one env, one policy forward for all games
    games.set_seed(config.seed)
    return Collector(games, policy, frames_per_batch=frames, total_frames=-1)


def _model(config: TrainConfig, game: str, device: str) -> MaskablePPO:
    kwargs = {key: value for key, value in config.hyperparams.items() if key not in ("policy", "pool_size")}
    tensorboard_log = None if config.tensorboard_log is None else str(config.tensorboard_log)
    common: dict[str, Any] = {"device": device, "seed": config.seed, "verbose": config.verbose,
                              "tensorboard_log": tensorboard_log}  # fmt: skip
    if config.trained_agent is not None:
        model = MaskablePPO.load(config.trained_agent, env=DummyVecEnv([partial(SeatEnv, game)]), **common)
    else:
        model = MaskablePPO(config.hyperparams.get("policy", "MlpPolicy"), DummyVecEnv([partial(SeatEnv, game)]),
                            **common, **kwargs)  # fmt: skip
    if tensorboard_log is None:
        quiet_logger(model, config)
    return model


def _write_curve(out: Path, curve: list[dict[str, Any]]) -> None:
    if curve:
        columns = list(curve[0])
        lines = [",".join(columns), *(",".join(f"{point[c]:g}" for c in columns) for point in curve)]
        (out / "win_rates.csv").write_text("\n".join(lines) + "\n")


def _write(out: Path, config: TrainConfig, evaluation: dict[str, Any], curve: list[dict[str, Any]]) -> None:
    _write_curve(out, curve)
    record = {**evaluation, "games": config.eval_episodes, "config": {**asdict(config), "out": str(out)}}
    (out / "evaluation.json").write_text(json.dumps(record, indent=2, default=str) + "\n")
    plot_win_rates(curve, evaluation, config.env_id, out / "learning_curve.png")


def plot_win_rates(curve: list[dict[str, Any]], evaluation: dict[str, Any], title: str, path: Path) -> None:
    """Win and loss rates against each fixed player over training, and the final evaluation, as a PNG.

    :param curve: the measurements of :class:`WinRates`.
    :param evaluation: the final evaluation.
    :param title: the game, for the title.
    :param path: the PNG to write.
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(8, 4.2), layout="constrained")
    for opponent, color in zip(OPPONENTS, ("tab:green", "tab:orange"), strict=True):
        steps = [point["timestep"] for point in curve]
        ax.plot(steps, [p[f"vs_{opponent}_win"] for p in curve], color=color, marker="o", label=f"win vs {opponent}")
        ax.plot(steps, [p[f"vs_{opponent}_loss"] for p in curve], color=color, ls="--", label=f"loss vs {opponent}")
    final = ", ".join(f"{k.removeprefix('vs_')} {v['win']:.2f}/{v['draw']:.2f}/{v['loss']:.2f}"
                      for k, v in evaluation.items() if k.startswith("vs_"))  # fmt: skip
    ax.set(xlabel="moves trained on", ylabel="rate", ylim=(-0.02, 1.02),
           title=f"self-play MaskablePPO on {title}\nfinal win/draw/loss: {final}")  # fmt: skip
    ax.grid(alpha=0.3)
    ax.legend(loc="center right")
    fig.savefig(path, dpi=100)
    plt.close(fig)


def check_game(env_id: str) -> str:
    """The game a ``pettingzoo:<game>`` env id names, if PettingZoo has it.

    :param env_id: ``"pettingzoo:tictactoe_v3"``.
    :return: the game's name, ``"tictactoe_v3"``.
    :raises UsageError: PettingZoo is not installed, or has no classic game of that name.
    """
    try:
        make_game(env_id)
    except (ImportError, ValueError) as err:
        raise UsageError(f"--env {env_id}: {err}") from None
    return env_id.removeprefix("pettingzoo:")


def train(config: TrainConfig) -> SelfPlayResult:
    """Train by self-play, evaluate against the fixed players, and write the files (see the module).

    :param config: the run; ``env_id`` is ``"pettingzoo:<classic game>"``; ``pool_size`` 0 is pure self-play,
        ``n`` plays the learner against ``n`` snapshots of its past weights.
    :return: the model, the folder, the evaluation, the win-rate curve and the files written.
    :raises UsageError: an unknown game, a bad device or output folder, all before anything is written.
    :raises TrainingInterrupted: a ``KeyboardInterrupt`` while training or evaluating; the model (and the win
        rates so far) were saved.
    """
    out = check_config(config)
    device = check_device(config.device)
    game = check_game(config.env_id)
    torch.set_num_threads(config.threads)
    with run_folder.claim(out, config.overwrite):
        model = _model(config, game, device)
        every = config.eval_freq or config.n_timesteps // EVAL_POINTS
        rates = WinRates(game, every, EVAL_POINT_GAMES, config.seed + EVAL_SEED_OFFSET)
        collector = _collector(config, model, game, config.pool_size)
        try:  # learn() shuts the collector and its workers down, also on an interrupt
            model.learn(config.n_timesteps, [rates, *checkpoints(config, out)], progress_bar=config.progress_bar,
                        collector=collector, reset_num_timesteps=config.trained_agent is None)  # fmt: skip
        except KeyboardInterrupt as stop:  # Ctrl-C or SIGTERM: keep what was trained, then say so
            model.save(out / "model.zip")
            _write_curve(out, rates.points)
            raise TrainingInterrupted(out, model.num_timesteps) from stop
        model.save(out / "model.zip")
        evaluation: dict[str, Any] = {}
        try:
            for opponent in OPPONENTS:
                seed = config.seed + EVAL_SEED_OFFSET
                rates_now = evaluate_games(model, game, opponent, config.eval_episodes, seed)
                evaluation["illegal_moves"] = evaluation.get("illegal_moves", 0) + rates_now.pop("illegal_moves")
                evaluation[f"vs_{opponent}"] = {key: rates_now[key] for key in ("win", "draw", "loss")}
        except KeyboardInterrupt as stop:  # while evaluating: the model is saved already
            _write_curve(out, rates.points)
            raise TrainingInterrupted(out, model.num_timesteps) from stop
        evaluation = {"vs_random": evaluation["vs_random"], "vs_heuristic": evaluation["vs_heuristic"],
                      "illegal_moves": evaluation["illegal_moves"]}  # fmt: skip
        _write(out, config, evaluation, rates.points)
    files = ["model.zip", "evaluation.json", "learning_curve.png"] + (["win_rates.csv"] if rates.points else [])
    files += checkpoint_files(out)
    return SelfPlayResult(model, out, evaluation, rates.points, files)
