"""Memory in self-play: the LSTM model against the feed-forward one, trained for the same wall time.

``torchrl-mask bench memory`` trains, for each seed, two models by the train job's self-play (the game's defaults,
:mod:`torchrl_mask.app.game_task`): ``MaskablePPO`` (feed-forward) and ``MaskableRecurrentPPO``
(``--algo ppo_lstm_mask``, each seat with its own LSTM state), each for ``--minutes`` of wall time, one after the
other, so that machine load falls on both alike. Then it plays ``--games`` games (each seat half of them, seeded)
of each model against the game's ladder (a random legal player; for Leduc hold'em, rlcard's rule agent) and the
two models against each other, and reports chips won per game (per seed, and the median over seeds with the worst
beside it) and each model's illegal moves.

In Leduc hold'em a seat's view holds its card, the public card and both seats' chips in the pot, not the order of
the bets that put them there; an LSTM can keep that order, the feed-forward policy cannot.
"""

from __future__ import annotations

import argparse
import statistics
import time
from dataclasses import dataclass, field
from typing import Any

import torch
from stable_baselines3.common.callbacks import BaseCallback

GAME = "leduc_holdem_v4"
ALGOS = ("ppo_mask", "ppo_lstm_mask")
NAMES = {"ppo_mask": "feed-forward", "ppo_lstm_mask": "LSTM"}


class StopAfter(BaseCallback):
    """Stops training at the first rollout that starts past ``seconds`` of wall time from the start of ``learn``:
    every rollout collected before it is trained on in full, and that one is dropped at its first step.

    :param seconds: the time budget.
    """

    def __init__(self, seconds: float) -> None:
        super().__init__()
        self.seconds = seconds
        self.start = 0.0
        self.stopped = False
        self.trained = 0  # moves trained on when the budget ran out

    def _on_training_start(self) -> None:
        self.start = time.perf_counter()

    def _on_rollout_start(self) -> None:
        if not self.stopped and time.perf_counter() - self.start >= self.seconds:
            self.stopped, self.trained = True, self.num_timesteps

    def _on_step(self) -> bool:
        return not self.stopped


@dataclass
class SeedResult:
    """One seed's two models: moves trained and chips won per game, by model and opponent.

    :param seed: the seed of both runs and of the evaluation games.
    :param moves: moves each model trained on in its time, by algo.
    :param chips: ``{algo: {opponent: (mean, std)}}``; the opponent ``"other"`` is the other model.
    :param illegal: each model's illegal moves over all its evaluation games, by algo.
    """

    seed: int
    moves: dict[str, int] = field(default_factory=dict)
    chips: dict[str, dict[str, tuple[float, float]]] = field(default_factory=dict)
    illegal: dict[str, int] = field(default_factory=dict)


def train_for(algo: str, game: str, seconds: float, seed: int) -> tuple[Any, int]:
    """The train job's self-play model of ``algo``, trained at the game's defaults for ``seconds`` of wall time.

    :param algo: ``"ppo_mask"`` or ``"ppo_lstm_mask"``.
    :param game: a PettingZoo classic game.
    :param seconds: the wall-time budget (no rollout starts past it; the last one before it is trained on).
    :param seed: the run's seed.
    :return: the trained model and the moves it trained on.
    """
    from torchrl_mask.app.config import train_config
    from torchrl_mask.app.game_task import GameTask
    from torchrl_mask.app.kinds import game_env_id

    config = train_config(
        game_env_id(game),
        algo=algo,  # type: ignore[arg-type]
        n_timesteps=10**12,
        pool_size=0,
        seed=seed,
        verbose=0,
        progress_bar=False,
    )
    task = GameTask(config)
    model = task.build_model("cpu", None)
    stop = StopAfter(seconds)
    model.learn(10**12, callback=stop, collector=task.collector)
    return model, stop.trained


def evaluate(models: dict[str, Any], game: str, games: int, seed: int, result: SeedResult) -> None:
    """Each model against the game's ladder and against the other model: chips won per game (mean, std) and
    illegal moves, into ``result``.

    :param models: ``{algo: model}`` for the two algos.
    :param game: the game.
    :param games: games per pairing, each seat half of them.
    :param seed: seeds the games and the players.
    :param result: the seed's result, whose ``chips`` and ``illegal`` are filled.
    """
    import numpy as np

    from torchrl_mask.games.evaluation import evaluate_games, model_player, play_games
    from torchrl_mask.games.ladder import ladder

    chips, illegal = result.chips, result.illegal
    for algo, model in models.items():
        chips[algo], illegal[algo] = {}, 0
        for opponent in ladder(game).opponents:
            measured = evaluate_games(model, game, opponent, games, seed)
            chips[algo][opponent] = (measured["mean"], measured["std"])
            illegal[algo] += measured["illegal_moves"]
    lstm, feedforward = (model_player(models[algo]) for algo in ("ppo_lstm_mask", "ppo_mask"))
    records = play_games(game, lstm, feedforward, games, seed)
    won = np.array([record.returns[record.seat] for record in records])
    chips["ppo_lstm_mask"]["other"] = (float(won.mean()), float(won.std()))
    chips["ppo_mask"]["other"] = (float(-won.mean()), float(won.std()))  # two seats: one's chips are the other's loss
    illegal["ppo_lstm_mask"] += sum(int(record.illegal[record.seat]) for record in records)
    illegal["ppo_mask"] += sum(int(record.illegal.sum() - record.illegal[record.seat]) for record in records)


def render(results: list[SeedResult], command: str, minutes: float, games: int) -> str:
    """The report: per model and opponent, chips won per game, the median over seeds with the worst beside it."""
    opponents = list(results[0].chips["ppo_mask"])
    header = " | ".join(f"vs {'the other model' if name == 'other' else name}" for name in opponents)
    lines = [
        f"`{command}`: {len(results)} seed(s), {minutes:g} min of training each, {games} games per pairing (each "
        "seat half); chips won per game (big blinds), median over seeds (worst seed).",
        "",
        f"| model | moves trained (median) | {header} |",
        "|---|---|" + "---|" * len(opponents),
    ]
    for algo in ALGOS:
        moves = statistics.median(result.moves[algo] for result in results)
        cells = []
        for name in opponents:
            means = [result.chips[algo][name][0] for result in results]
            cells.append(f"{statistics.median(means):+.3f} ({min(means):+.3f})")
        lines.append(f"| {NAMES[algo]} | {moves:,.0f} | {' | '.join(cells)} |")
    lines += [
        "",
        f"| seed | model | moves trained | {header} | illegal moves |",
        "|---|---|---|" + "---|" * (len(opponents) + 1),
    ]
    for result in results:
        for algo in ALGOS:
            cells = [f"{mean:+.3f} ± {std:.3f}" for mean, std in result.chips[algo].values()]
            lines.append(
                f"| {result.seed} | {NAMES[algo]} | {result.moves[algo]:,} | {' | '.join(cells)} | "
                f"{result.illegal[algo]} |"
            )
    return "\n".join(lines)


def _parse(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="torchrl-mask bench memory",
        description="Self-play with an LSTM against self-play without one, trained for the same wall time: chips "
        "won per game against the game's ladder and against each other.",
    )
    parser.add_argument("--game", default=GAME, help="a PettingZoo card game (chips per game)")
    parser.add_argument("--minutes", type=float, default=5.0, help="wall time of each model's training")
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--games", type=int, default=2000, help="games per pairing, each seat half of them")
    args = parser.parse_args(argv)
    if args.minutes <= 0 or args.games < 2:
        parser.error("--minutes must be above 0 and --games at least 2.")
    from torchrl_mask.games.ladder import ladder

    if ladder(args.game).metric != "chips":
        parser.error(f"--game {args.game}: this benchmark counts chips; use a hold'em game (leduc_holdem_v4).")
    return args


def main(argv: list[str] | None = None) -> int:
    """Train, evaluate and print the report (see the module).

    :param argv: the arguments after ``bench memory`` (``--help`` lists them); None reads ``sys.argv``.
    :return: process exit code.
    """
    args = _parse(argv)
    torch.set_num_threads(1)  # the train job's default --threads
    results = []
    for seed in args.seeds:
        result = SeedResult(seed)
        models = {}
        for algo in ALGOS:
            models[algo], result.moves[algo] = train_for(algo, args.game, args.minutes * 60, seed)
            print(f"seed {seed}: {NAMES[algo]} trained on {result.moves[algo]:,} moves", flush=True)
        evaluate(models, args.game, args.games, seed, result)
        print(f"seed {seed}: {result.chips}, illegal moves {result.illegal}", flush=True)
        results.append(result)
    command = "torchrl-mask bench memory " + " ".join(argv if argv is not None else [])
    print()
    print(render(results, command.strip(), args.minutes, args.games))
    return 0
