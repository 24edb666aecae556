"""Strength for time: a Connect Four model's mistake rates on Pons' sets, alone and searching, and its seconds a move.

    python benchmarks/bench_search.py RUN/model.zip --simulations 0 50 200 800 --positions 100 --out docs/img/search

on one torch thread. For the network alone (``mcts_player(model, 0)`` is ``predict``'s move) it grades all 6,000
positions in one batch a set and times that against ``negamax(2)`` on the same positions (positions a second,
and the ratio). For each simulation count it plays each set's first ``--positions`` positions one move at a time
(:func:`~torchrl_mask.games.perfect_play.mistake_rates` with ``limit``), and gives the seconds a move and the
ratio to the network's own move played the same way (the network alone on the same sample is in the table too).
With ``--solver-games N`` and bitbully installed it plays ``2N`` games against the perfect solver at each count
(``N`` as first player). With ``--negamax-games N`` the network alone plays ``N`` games against a depth-``D``
negamax (``--negamax-depth``, 4 by default; each seat half the games, seed 0). It also times TorchRL's
``MCTSForest.add`` of one Connect Four move against one network call (``mcts.py`` says why the search keeps its own
nodes).

Writes ``OUT.json`` (every figure) and ``OUT.png`` (simulations against mistake rate, per set and mean, and
against seconds a move). Timings on a shared machine are noisy; the ratios are paired within one run.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch
from tensordict import TensorDict

from torchrl_mask import MaskablePPO
from torchrl_mask.games.arena import play_games
from torchrl_mask.games.evaluation import model_player, summarise
from torchrl_mask.games.mcts import mcts_player
from torchrl_mask.games.perfect_play import REFERENCES, mistake_rates
from torchrl_mask.games.pons_sets import SET_NAMES, load_sets
from torchrl_mask.games.search import negamax
from torchrl_mask.games.solver import solver_available, solver_player


def timed(measure: Any, *args: Any, **kwargs: Any) -> tuple[Any, float]:
    """``measure(*args, **kwargs)`` and its wall seconds."""
    began = time.perf_counter()
    result = measure(*args, **kwargs)
    return result, time.perf_counter() - began


def forest_add_ratio(model: MaskablePPO, count: int = 300) -> dict[str, float]:
    """Seconds of ``MCTSForest.add`` of one Connect Four move, of one network call, and their ratio."""
    from torchrl.data import MCTSForest

    test = load_sets()["middle_medium"]
    player = mcts_player(model, 1)
    _, guess = timed(lambda: [player.guess(test.views[i : i + 1], test.masks[i : i + 1]) for i in range(count)])
    forest = MCTSForest(max_size=2 * count)
    flags = {key: torch.tensor([False]) for key in ("done", "terminated", "truncated")}

    def move(i: int) -> TensorDict:
        action = torch.tensor(int(np.argmax(test.masks[i])))
        after = {"observation": torch.as_tensor(test.views[i + 1]), "reward": torch.zeros(1), **flags}
        return TensorDict({"observation": torch.as_tensor(test.views[i]), "action": action, **flags, "next": after})

    steps = [move(i) for i in range(count)]
    _, add = timed(lambda: [forest.add(step) for step in steps])
    return {"add_s": add / count, "network_call_s": guess / count, "add_over_network_call": add / guess}


def run(
    model: MaskablePPO,
    simulations: list[int],
    positions: int,
    solver_games: int,
    negamax_games: int = 0,
    negamax_depth: int = 4,
) -> dict[str, Any]:
    """Every figure of the module, as a JSON-able dict."""
    alone, alone_s = timed(mistake_rates, model_player(model))
    _, negamax_s = timed(mistake_rates, negamax(2))
    out: dict[str, Any] = {
        "network_all_6000": alone,
        "network_positions_per_s": 6000 / alone_s,
        "negamax_2_positions_per_s": 6000 / negamax_s,
        "network_over_negamax_2_speed": negamax_s / alone_s,
        "positions_per_set": positions,
        "by_simulations": {},
    }
    if negamax_games:
        records = play_games("connect_four_v3", model_player(model), negamax(negamax_depth), negamax_games, 0)
        out[f"network_vs_negamax_{negamax_depth}"] = summarise(records, ["player_0", "player_1"], "win_rate")
        print(f"negamax-{negamax_depth}", out[f"network_vs_negamax_{negamax_depth}"])
    base_s = None
    for count in simulations:
        rates, seconds = timed(mistake_rates, mcts_player(model, count), limit=positions)
        per_move = seconds / rates["positions"]
        base_s = per_move if count == 0 else base_s
        entry = {**rates, "seconds_per_move": per_move}
        if base_s:
            entry["over_network_move"] = per_move / base_s
        if solver_games and solver_available() and count > 0:
            records = play_games("connect_four_v3", mcts_player(model, count), solver_player(), 2 * solver_games, 0)
            entry["vs_solver"] = summarise(records, ["player_0", "player_1"], "win_rate")
        out["by_simulations"][str(count)] = entry
        print(count, {key: round(value, 4) if isinstance(value, float) else value for key, value in entry.items()})
    out["mcts_forest"] = forest_add_ratio(model)
    return out


def plot(result: dict[str, Any], path: Path) -> None:
    """Mistake rate (per set and mean) and seconds a move against simulations, the references as dashed lines."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    counts = [int(key) for key in result["by_simulations"]]
    entries = list(result["by_simulations"].values())
    xs = [max(count, 1) for count in counts]  # 0 simulations drawn at 1 on the log axis
    fig, (left, right) = plt.subplots(1, 2, figsize=(11, 4))
    for index, name in enumerate(SET_NAMES):
        line = left.plot(xs, [100 * entry[name] for entry in entries], marker="o", label=name)[0]
        left.axhline(REFERENCES["AlphaZero.jl with MCTS"][index], color=line.get_color(), ls="--", lw=0.8)
    left.plot(xs, [100 * entry["mean"] for entry in entries], "k-o", lw=2, label="mean")
    title = f"Pons' sets, first {result['positions_per_set']} positions each (dashed: AlphaZero.jl)"
    left.set(xscale="log", xlabel="simulations a move (0 drawn at 1)", ylabel="mistakes (%)", title=title)
    left.legend(fontsize=7)
    right.plot(xs, [entry["seconds_per_move"] for entry in entries], "k-o")
    right.set(xscale="log", yscale="log", xlabel="simulations a move (0 drawn at 1)", ylabel="seconds a move")
    right.set_title("one torch thread")
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("model", type=Path)
    parser.add_argument("--simulations", type=int, nargs="+", default=[0, 50, 200, 800])
    parser.add_argument("--positions", type=int, default=100, help="positions of each set searched")
    parser.add_argument("--solver-games", type=int, default=0, help="games as first player against the solver")
    parser.add_argument("--negamax-games", type=int, default=0, help="network alone vs negamax, seats halved")
    parser.add_argument("--negamax-depth", type=int, default=4)
    parser.add_argument("--out", type=Path, default=Path("search"))
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    model = MaskablePPO.load(args.model, device="cpu")
    result = run(model, args.simulations, args.positions, args.solver_games, args.negamax_games, args.negamax_depth)
    args.out.with_suffix(".json").write_text(json.dumps(result, indent=2) + "\n")
    plot(result, args.out.with_suffix(".png"))
    print(f"wrote {args.out.with_suffix('.json')} and {args.out.with_suffix('.png')}")


if __name__ == "__main__":
    main()
