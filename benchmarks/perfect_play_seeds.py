"""Connect Four's runs graded by perfect play, gathered: one JSON and one chart for docs/perfect-play.md.

    python benchmarks/perfect_play_seeds.py defaults=runs/c4-s0,runs/c4-s1,runs/c4-s2 openings=runs/c4-o6-s0 \
        --out docs/data/perfect_play_seeds

Each argument is a group of runs (``name=RUN,RUN,...``), each run a ``torchrl-mask train`` folder whose
``evaluation.json`` holds the ladder and the mistake rates on Pons' sets, with ``search.json`` beside it when
``benchmarks/bench_search.py RUN/model.zip --out RUN/search`` graded it searching. Writes ``OUT.json`` (per group:
each run's figures, and per set the median and the worst over the runs) and ``OUT.png`` (per set, each group's
median mistake rate, the worst as a whisker, the network alone and searching, beside the references).
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

import numpy as np

from torchrl_mask.games.perfect_play import REFERENCES
from torchrl_mask.games.pons_sets import SET_NAMES

KEYS = (*SET_NAMES, "mean")


def _run(folder: Path) -> dict[str, Any]:
    """A run's configuration, ladder, mistake rates and (if graded searching) its search figures."""
    record = json.loads((folder / "evaluation.json").read_text())
    config = record["config"]
    out: dict[str, Any] = {
        "seed": config["seed"],
        "n_timesteps": config["n_timesteps"],
        "openings": config.get("openings", 0),
        "threads": config["threads"],
        "network_alone": record["perfect_play"],
        "ladder": {key: value for key, value in record.items() if key.startswith("vs_")},
    }
    search = folder / "search.json"
    if search.is_file():
        graded = json.loads(search.read_text())
        out["search"] = graded["by_simulations"]
        out.update({key: value for key, value in graded.items() if key.startswith("network_vs_negamax")})
    return out


def _spread(rates: list[dict[str, float]]) -> dict[str, dict[str, float]]:
    return {
        "median": {key: float(np.median([rate[key] for rate in rates])) for key in KEYS},
        "worst": {key: float(np.max([rate[key] for rate in rates])) for key in KEYS},
    }


def gather(groups: dict[str, list[Path]]) -> dict[str, Any]:
    """Every group's runs, and the median and worst of the network alone and of its most simulations."""
    out: dict[str, Any] = {"references": REFERENCES, "groups": {}}
    for name, folders in groups.items():
        runs = {folder.name: _run(folder) for folder in folders}
        group: dict[str, Any] = {
            "runs": runs,
            "network_alone": _spread([run["network_alone"] for run in runs.values()]),
        }
        searches = [run["search"] for run in runs.values() if "search" in run]
        if searches:  # the most simulations any run searched with, over the runs that searched with as many
            most = max(int(count) for search in searches for count in search)
            searched = [search[str(most)] for search in searches if str(most) in search]
            group["simulations"], group["searched_runs"] = most, len(searched)
            group["searching"] = _spread(searched)
        out["groups"][name] = group
    return out


def plot(result: dict[str, Any], path: Path) -> None:
    """Per set: each group's median mistake rate (whisker: its worst run), alone and searching, and the references."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    bars: list[tuple[str, dict[str, float], dict[str, float] | None]] = []
    for name, group in result["groups"].items():
        bars.append((f"{name}, network alone", group["network_alone"]["median"], group["network_alone"]["worst"]))
        if "searching" in group:
            label = f"{name}, {group['simulations']} simulations"
            bars.append((label, group["searching"]["median"], group["searching"]["worst"]))
    for name, rates in result["references"].items():
        bars.append((name, {key: rate / 100 for key, rate in zip(SET_NAMES, rates, strict=True)}, None))
    fig, ax = plt.subplots(figsize=(11, 4.4), layout="constrained")
    width = 0.8 / len(bars)
    xs = np.arange(len(SET_NAMES))
    for index, (label, median, worst) in enumerate(bars):
        heights = np.array([100 * median[key] for key in SET_NAMES])
        whiskers = None
        if worst is not None:  # from the median up to the worst run
            whiskers = [np.zeros(len(xs)), np.array([100 * worst[key] for key in SET_NAMES]) - heights]
        hatch = "//" if worst is None else None
        ax.bar(xs + (index - (len(bars) - 1) / 2) * width, heights, width, yerr=whiskers, label=label, hatch=hatch)
    ax.set_xticks(xs, [name.replace("_", "\n") for name in SET_NAMES])
    ax.set(ylabel="mistakes (%)", title="Connect Four on Pons' test sets: median of the runs, whisker the worst run")
    ax.grid(axis="y", alpha=0.3)
    ax.legend(fontsize=8)
    fig.savefig(path, dpi=100)
    plt.close(fig)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("groups", nargs="+", metavar="NAME=RUN,RUN", help="a group of run folders")
    parser.add_argument("--out", type=Path, default=Path("perfect_play_seeds"))
    args = parser.parse_args(argv)
    groups = {}
    for group in args.groups:
        name, _, runs = group.partition("=")
        groups[name] = [Path(run) for run in runs.split(",")]
    result = gather(groups)
    args.out.with_suffix(".json").write_text(json.dumps(result, indent=1) + "\n")
    plot(result, args.out.with_suffix(".png"))
    print(f"wrote {args.out.with_suffix('.json')} and {args.out.with_suffix('.png')}")


if __name__ == "__main__":
    main()
