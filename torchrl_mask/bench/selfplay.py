"""Self-play speed: collection and whole training runs, against the game's own random play, in moves a second.

``torchrl-mask bench selfplay`` measures, for each game (``--games``, by default Connect Four and tic-tac-toe):

- **PettingZoo's own random play**: the game's AEC loop (``agent_iter``, ``last``, a uniformly random legal move,
  ``step``), the bound a self-play collector that plays the game itself cannot beat;
- **collection**: the train job's collector (:func:`~torchrl_mask.app.game_collector.build_collector`: one
  :class:`~torchrl_mask.TurnBasedEnv` of the game's ``n_envs`` games (``--n-envs`` another number), running
  :class:`~torchrl_mask.SelfPlayPolicy` over an untrained model of the game's default network, against the
  game's default league where it has one: tic-tac-toe's snapshots and fixed players), ``--batches`` batches of
  ``n_envs * n_steps`` moves (every seat's) after one batch of warm-up;
- **collection through PettingZoo's env**: the same collector with ``TurnBasedEnv(engine="pettingzoo")``, each
  game stepped through its own AEC env rather than on numpy boards (:mod:`torchrl_mask.games.boards`, Connect Four
  and tic-tac-toe): the boards' gain, paired in the same round;
- **whole run**: the CLI's ``train --env pettingzoo:<game>`` with the game's defaults, in this process, for
  ``--timesteps`` moves (a tenth of the game's default run unless given), evaluated as densely as the default run
  is (an evaluation point every tenth of the default run's moves, final games in proportion, and the league's
  snapshots taken and measured on the default run's schedule, not the shorter run's own): moves trained on
  divided by the wall time of the whole job (model, collection, training, evaluation, files).

Any ``train`` options after ``--`` (``bench selfplay -- --self-share 0.5 --hyperparams n_epochs=1``) apply to the
collection and the whole run alike: the configuration measured is the one ``train`` would run with them (``--threads``
included; the random play is the same).

Each round measures all four, one after the other, and divides the two speeds by that round's random play;
the report gives the median of the per-round ratios with the worst and best beside it, so that machine load
hits a ratio's two sides alike. Goals of issue 33: collection at least 0.7x the game's own random play, a whole
run at least 0.4x.

``--json docs/data/selfplay_speed.json`` also writes the figures as the benchmarks page's chart reads them
(:func:`chart_data`); ``python -m torchrl_mask.bench.charts`` then redraws the chart from them.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import datetime
import functools
import io
import json
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch

GAMES = ("connect_four_v3", "tictactoe_v3")
GOALS = {"collection": 0.7, "run": 0.4}
PHASES = ("collecting", "updating", "measuring", "final", "other")  # a whole run's time, per move trained on


@contextlib.contextmanager
def timed(methods: dict[str, tuple[Any, str]]) -> Iterator[dict[str, float]]:
    """Seconds spent in each of ``methods`` while the block runs: each is wrapped where it is defined (a class or a
    module) for the block's duration, then restored.

    :param methods: a label -> ``(owner, attribute name)``, the attribute defined on the owner itself.
    :return: (as the ``with`` target) label -> seconds so far, nested calls counted in each.
    """
    totals = dict.fromkeys(methods, 0.0)
    kept = [(owner, name, vars(owner)[name]) for owner, name in methods.values()]

    def wrap(label: str, original: Callable[..., Any]) -> Callable[..., Any]:
        @functools.wraps(original)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            start = time.perf_counter()
            try:
                return original(*args, **kwargs)
            finally:
                totals[label] += time.perf_counter() - start

        return wrapper

    for (label, (owner, name)), (_, _, original) in zip(methods.items(), kept, strict=True):
        setattr(owner, name, wrap(label, original))
    try:
        yield totals
    finally:
        for owner, name, original in kept:
            setattr(owner, name, original)


@dataclass
class GameSpeeds:
    """One game's measurements, a value per round.

    :param game: the PettingZoo classic game.
    :param random_play: PettingZoo's own random play, moves a second.
    :param collection: the self-play collector, moves a second.
    :param run: the whole train job, moves trained on a second.
    :param pettingzoo: the collector stepping PettingZoo's own env (``engine="pettingzoo"``), moves a second.
    :param costs: each round's microseconds per move of the collection's parts (``"policy"``: the self-play
        policy's forward, networks and fixed players; ``"game"``: the games' steps, PettingZoo's and the env's)
        and, per move trained on, of the whole run's phases (``"collecting"``, ``"updating"``: PPO's epochs,
        ``"measuring"``: the ladder during training, ``"final"``: the final evaluation, ``"other"``).
    """

    game: str
    random_play: list[float] = field(default_factory=list)
    collection: list[float] = field(default_factory=list)
    run: list[float] = field(default_factory=list)
    pettingzoo: list[float] = field(default_factory=list)
    costs: list[dict[str, float]] = field(default_factory=list)

    def ratios(self, what: str) -> list[float]:
        """Per-round ratios of ``what`` (``"collection"``, ``"run"`` or ``"pettingzoo"``) to that round's random
        play."""
        return [value / base for value, base in zip(getattr(self, what), self.random_play, strict=True)]


def random_play(game: str, moves: int, seed: int) -> float:
    """PettingZoo's own random play: moves a second over at least ``moves`` moves (whole games).

    :param game: a PettingZoo classic game.
    :param moves: moves to play.
    :param seed: seeds the deals and the moves.
    :return: moves a second.
    """
    from torchrl_mask.games.env import make_game

    env, rng, played = make_game(game), np.random.default_rng(seed), 0
    start = time.perf_counter()
    while played < moves:
        env.reset(seed=int(rng.integers(2**31)))
        for _ in env.agent_iter():
            observation, _, terminated, truncated, _ = env.last()
            if terminated or truncated:
                env.step(None)
                continue
            env.step(int(rng.choice(np.flatnonzero(observation["action_mask"]))))
            played += 1
    return played / (time.perf_counter() - start)


def train_config(game: str, seed: int, train_args: Sequence[str] = ()) -> Any:
    """The configuration ``torchrl-mask train --env pettingzoo:<game> --seed <seed> <train_args>`` runs.

    :param game: a PettingZoo classic game.
    :param seed: the run's ``--seed``.
    :param train_args: more ``train`` options (``--self-share 0.5``, ``--hyperparams n_epochs=1``).
    :return: its :class:`~torchrl_mask.app.config.TrainConfig`.
    """
    from torchrl_mask.app.kinds import game_env_id
    from torchrl_mask.app.train_args import parse_train_config

    return parse_train_config(["--env", game_env_id(game), "--seed", str(seed), *train_args])


def collection(
    game: str,
    batches: int,
    seed: int,
    n_envs: int | None = None,
    engine: str = "auto",
    train_args: Sequence[str] = (),
) -> tuple[float, dict[str, float]]:
    """The train job's self-play collector: moves a second over ``batches`` batches after one of warm-up.

    :param game: a PettingZoo classic game.
    :param batches: batches timed.
    :param seed: seeds the games and the policy.
    :param n_envs: games played side by side (one policy forward for all of them); None: the run's.
    :param engine: what plays the moves (:class:`~torchrl_mask.TurnBasedEnv`'s ``engine``): ``"auto"`` as the
        train job does, ``"pettingzoo"`` the game's own env.
    :param train_args: more ``train`` options: the collector is the one that run would build.
    :return: moves a second, and microseconds per move in the policy (``"policy"``) and the games' steps
        (``"game"``); the rest is TorchRL's collector.
    """
    from torchrl_mask.app.game_task import GameTask
    from torchrl_mask.games.env import TurnBasedEnv
    from torchrl_mask.games.selfplay import SelfPlayPolicy

    config = train_config(game, seed, train_args)
    if n_envs is not None:
        config = dataclasses.replace(config, n_envs=n_envs)
    task = GameTask(config, engine=engine)
    model = task.build_model("cpu", None)
    collector = task.collector
    assert collector is not None  # build_model made it
    frames = config.n_envs * model.n_steps
    threads = torch.get_num_threads()
    torch.set_num_threads(config.threads)  # as the run would (the bench's own default is the run's default, 1)
    try:
        stream = iter(collector)
        next(stream)
        with timed({"policy": (SelfPlayPolicy, "forward"), "game": (TurnBasedEnv, "_step")}) as spent:
            start = time.perf_counter()
            for _ in range(batches):
                next(stream)
            seconds = time.perf_counter() - start
        return batches * frames / seconds, {key: 1e6 * value / (batches * frames) for key, value in spent.items()}
    finally:
        task.close()
        torch.set_num_threads(threads)


def whole_run(
    game: str, timesteps: int | None, seed: int, train_args: Sequence[str] = ()
) -> tuple[float, dict[str, float]]:
    """The CLI's train job at the game's defaults, in this process: moves trained on a second of its wall time.

    :param game: a PettingZoo classic game.
    :param timesteps: moves to train on; None: a tenth of the game's default run.
    :param seed: the run's ``--seed``.
    :param train_args: more ``train`` options, after the bench's own.
    :return: moves trained on a second, and microseconds per move trained on in each of :data:`PHASES`.
    """
    # the job's modules and the learning curve's matplotlib are imported before the clock: a default run pays its
    # imports once, and this run is a tenth of one
    import matplotlib.pyplot  # noqa: F401

    from torchrl_mask import MaskablePPO
    from torchrl_mask.app import pipeline
    from torchrl_mask.app.config import GAME_EVAL_GAMES
    from torchrl_mask.app.game_collector import SNAPSHOTS
    from torchrl_mask.app.game_task import GameTask
    from torchrl_mask.app.prepare import prepare
    from torchrl_mask.games.evaluation import EVAL_POINTS, WinRates

    default = int(train_config(game, seed, train_args).n_timesteps)  # the run measured, whole
    moves = timesteps or default // 10
    episodes = max(1, round(GAME_EVAL_GAMES * moves / default))  # the default run's final games, in proportion
    threads = torch.get_num_threads()
    with tempfile.TemporaryDirectory() as folder:
        options = [
            "-n",
            str(moves),
            "--eval-freq",
            str(default // EVAL_POINTS),
            "--eval-episodes",
            str(episodes),
            "--out",
            str(Path(folder) / "run"),
            "--no-progress",
            "--verbose",
            "0",
            *train_args,
        ]
        config = train_config(game, seed, options)
        phases: dict[str, tuple[Any, str]] = {
            "rollouts": (MaskablePPO, "collect_rollouts"),
            "updating": (MaskablePPO, "train"),
            "measuring": (WinRates, "_on_rollout_end"),
            "final": (GameTask, "evaluate"),
        }
        try:
            with timed(phases) as spent, contextlib.redirect_stdout(io.StringIO()):
                start = time.perf_counter()
                # a run takes about SNAPSHOTS snapshots whatever its length, each measured against the ladder: the
                # default run's share of them, so that this run snapshots (and measures) as the default run does
                plan = prepare(config, snapshots=max(1, round(SNAPSHOTS * moves / default)))
                trained = pipeline.run(plan).model.num_timesteps
                seconds = time.perf_counter() - start
        finally:
            torch.set_num_threads(threads)  # the run set its --threads
    costs = {
        "collecting": spent["rollouts"] - spent["measuring"],
        "updating": spent["updating"],
        "measuring": spent["measuring"],
        "final": spent["final"],
    }
    costs["other"] = seconds - sum(costs.values())
    return trained / seconds, {key: 1e6 * value / trained for key, value in costs.items()}


def render(results: list[GameSpeeds], command: str, rounds: int) -> str:
    """The report: one row per game, moves a second and the median ratio (worst, best) of each speed."""

    def cell(speeds: GameSpeeds, what: str) -> str:
        ratios = speeds.ratios(what)
        if all(np.isnan(ratios)):  # --no-run
            return "not run | not run"
        return (
            f"{statistics.median(getattr(speeds, what)):,.0f} | {statistics.median(ratios):.2f}x "
            f"({min(ratios):.2f}x-{max(ratios):.2f}x)"
        )

    lines = [
        f"`{command}`, {rounds} round(s); ratios to the same round's random play: median (worst-best); goals "
        f"collection >= {GOALS['collection']}x, whole run >= {GOALS['run']}x.",
        "",
        "| game | random play, moves/s | collection, moves/s | collection ratio | whole run, moves trained/s "
        "| whole-run ratio | collection through PettingZoo's env, moves/s | its ratio |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for speeds in results:
        random_moves = statistics.median(speeds.random_play)
        cells = " | ".join(cell(speeds, what) for what in ("collection", "run", "pettingzoo"))
        lines.append(f"| {speeds.game} | {random_moves:,.0f} | {cells} |")
    lines += [
        "",
        "Where the time goes, microseconds per move (medians over the rounds): a move of random play; a move "
        "collected, and of it the self-play policy's forward and the games' steps; a move trained on in the whole "
        "run, and of it collecting, PPO's updates, the ladder measured during training, the final evaluation and "
        "the rest.",
        "",
        "| game | random play | collection | policy | games' steps | whole run | " + " | ".join(PHASES) + " |",
        "|---|---|---|---|---|---|" + "---|" * len(PHASES),
    ]
    for speeds in results:

        def cost(key: str, speeds: GameSpeeds = speeds) -> str:
            values = [costs[key] for costs in speeds.costs if key in costs]
            return f"{statistics.median(values):,.0f}" if values else "not run"

        per_move = [
            f"{1e6 / statistics.median(speeds.random_play):,.0f}",
            f"{1e6 / statistics.median(speeds.collection):,.0f}",
            cost("policy"),
            cost("game"),
            "not run" if all(np.isnan(speeds.run)) else f"{1e6 / statistics.median(speeds.run):,.0f}",
            *(cost(phase) for phase in PHASES),
        ]
        lines.append(f"| {speeds.game} | " + " | ".join(per_move) + " |")
    return "\n".join(lines)


def chart_data(results: list[GameSpeeds], command: str, rounds: int, date: str, machine: str) -> dict[str, Any]:
    """The figures of :func:`render`'s two tables as ``docs/data/selfplay_speed.json`` holds them for its chart
    (:func:`~torchrl_mask.bench.charts.draw_selfplay_speed`): per game, each speed's median over the rounds in
    moves a second, its ratio to random play (median, worst and best, to two decimals), and the microseconds a
    move of each part.

    :param results: every game's measurements, whole runs included.
    :param command: the command that measured them.
    :param rounds: rounds run.
    :param date: when they ran (``"2026-12-05 23:20-23:28 UTC"``).
    :param machine: what they ran on (:func:`~torchrl_mask.bench.report.machine`).
    :return: a JSON-able dict.
    """
    games = []
    for speeds in results:
        row: dict[str, Any] = {"game": speeds.game, "random_play_moves_s": round(statistics.median(speeds.random_play))}
        for what, name in (("collection", "collection"), ("run", "whole_run"), ("pettingzoo", "pettingzoo_collection")):
            ratios = speeds.ratios(what)
            row[f"{name}_moves_s"] = round(statistics.median(getattr(speeds, what)))
            row[f"{name}_ratio"] = round(statistics.median(ratios), 2)
            row[f"{name}_ratio_min"], row[f"{name}_ratio_max"] = round(min(ratios), 2), round(max(ratios), 2)
        per_move = {
            "random_play": 1e6 / statistics.median(speeds.random_play),
            "collection": 1e6 / statistics.median(speeds.collection),
            "policy": statistics.median(costs["policy"] for costs in speeds.costs),
            "games_steps": statistics.median(costs["game"] for costs in speeds.costs),
            "whole_run": 1e6 / statistics.median(speeds.run),
            **{phase: statistics.median(costs[phase] for costs in speeds.costs) for phase in PHASES},
        }
        row["us_per_move"] = {key: round(value) for key, value in per_move.items()}
        games.append(row)
    return {
        "command": command,
        "date": date,
        "machine": machine,
        "measures": f"moves a second, and each as a ratio to the same round's PettingZoo random play of the game "
        f"(median of {rounds} rounds, min-max): collection, collection through PettingZoo's own env, a whole "
        "default train run (a tenth of its moves); microseconds a move",
        "games": games,
    }


def _when(start: datetime.datetime, end: datetime.datetime) -> str:
    """``"2026-12-05 23:20-23:28 UTC"``: a span of minutes in UTC, the end's date given where it differs."""
    same_day = start.date() == end.date()
    return f"{start:%Y-%m-%d %H:%M}-{end:%H:%M}" if same_day else f"{start:%Y-%m-%d %H:%M}-{end:%Y-%m-%d %H:%M}"


def _without_json(argv: Sequence[str]) -> list[str]:
    """The command's arguments without ``--json PATH`` (``--json=PATH``), which says where the figures go, not what
    was measured: the chart names the command that measured them."""
    kept: list[str] = []
    skip = False
    for index, item in enumerate(argv):
        if skip:
            skip = False
        elif item == "--":
            return kept + list(argv[index:])
        elif item == "--json":
            skip = True
        elif not item.startswith("--json="):
            kept.append(item)
    return kept


def _parse(argv: list[str] | None) -> argparse.Namespace:
    from torchrl_mask.app.game_task import check_game
    from torchrl_mask.app.kinds import game_env_id

    parser = argparse.ArgumentParser(
        prog="torchrl-mask bench selfplay",
        usage="%(prog)s [options] [-- train options]",
        epilog="Any train options after -- (--self-share 0.5 --hyperparams n_epochs=1 --threads 2) apply to the "
        "collection and the whole run alike.",
        description="Self-play collection and whole train runs, in moves a second, against PettingZoo's own "
        "random play of the same game (paired rounds).",
    )
    parser.add_argument("--games", nargs="+", default=list(GAMES), help="PettingZoo classic games")
    parser.add_argument("--rounds", type=int, default=3, help="rounds; ratios are medians over them")
    parser.add_argument("--random-moves", type=int, default=20_000, help="moves of random play per round")
    parser.add_argument("--batches", type=int, default=8, help="collector batches timed per round")
    parser.add_argument(
        "--timesteps", type=int, default=None, help="moves of each whole run (default: a tenth of the game's)"
    )
    parser.add_argument(
        "--n-envs", type=int, default=None, help="games side by side in the collection (default: the game's n_envs)"
    )
    parser.add_argument("--no-run", action="store_true", help="skip the whole runs (collection only)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--json",
        type=Path,
        metavar="PATH",
        help="also write the figures as the chart reads them (docs/data/selfplay_speed.json)",
    )
    given = list(sys.argv[1:] if argv is None else argv)
    cut = given.index("--") if "--" in given else len(given)
    args = parser.parse_args(given[:cut])
    args.train_args = given[cut + 1 :]
    for game in args.games:  # what train refuses is refused before anything is timed, in train's words (exit 2)
        train_config(game, args.seed, args.train_args)
        check_game(game_env_id(game), game)
    if (
        min(
            args.rounds,
            args.random_moves,
            args.batches,
            1 if args.timesteps is None else args.timesteps,
            1 if args.n_envs is None else args.n_envs,
        )
        < 1
    ):
        parser.error("--rounds, --random-moves, --batches, --timesteps and --n-envs must be at least 1.")
    if args.json is not None and args.no_run:
        parser.error("--json writes the chart's figures, whole runs among them; leave out --no-run, or --json.")
    if args.json is not None and not args.json.parent.is_dir():
        parser.error(f"--json {args.json}: no folder {args.json.parent}; make it, or give a path in a folder.")
    return args


def main(argv: list[str] | None = None) -> int:
    """Measure and print the report (see the module).

    :param argv: the arguments after ``bench selfplay`` (``--help`` lists them); None reads ``sys.argv``.
    :return: process exit code.
    """
    args = _parse(argv)
    started = datetime.datetime.now(datetime.UTC)
    torch.set_num_threads(1)  # the train job's default --threads
    results = [GameSpeeds(game) for game in args.games]
    for round_index in range(args.rounds):
        seed = args.seed + round_index
        for speeds in results:
            speeds.random_play.append(random_play(speeds.game, args.random_moves, seed))
            extra = args.train_args
            collected, costs = collection(speeds.game, args.batches, seed, args.n_envs, train_args=extra)
            run_speed, phases = (
                (float("nan"), {}) if args.no_run else whole_run(speeds.game, args.timesteps, seed, extra)
            )
            speeds.pettingzoo.append(
                collection(speeds.game, args.batches, seed, args.n_envs, "pettingzoo", train_args=extra)[0]
            )
            speeds.collection.append(collected)
            speeds.run.append(run_speed)
            speeds.costs.append({**costs, **phases})
            print(
                f"[{round_index + 1}/{args.rounds}] {speeds.game}: random play {speeds.random_play[-1]:,.0f}, "
                f"collection {speeds.collection[-1]:,.0f}, whole run {speeds.run[-1]:,.0f}, collection through "
                f"PettingZoo's env {speeds.pettingzoo[-1]:,.0f} moves/s",
                flush=True,
            )
    command = "torchrl-mask bench selfplay " + " ".join(argv if argv is not None else [])
    print()
    print(render(results, command.strip(), args.rounds))
    if args.json is not None:
        from torchrl_mask.bench.report import machine

        date = _when(started, datetime.datetime.now(datetime.UTC)) + " UTC"
        measured = "torchrl-mask bench selfplay " + " ".join(_without_json(argv if argv is not None else []))
        data = chart_data(results, measured.strip(), args.rounds, date, machine())
        args.json.write_text(json.dumps(data, indent=2) + "\n")
        print(f"\nWrote {args.json}")
    return 0
