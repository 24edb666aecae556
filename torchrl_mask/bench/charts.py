"""The benchmark page's charts, drawn from the figures each benchmark recorded.

Each chart's figures live in a small JSON file under ``docs/data/``: the command that measured them, its date and
machine, and one row per cell, as the benchmark printed them. This module draws each file into a PNG under
``docs/img/`` for ``docs/benchmarks.md``, so that a later run that writes the same file redraws its chart:

- ``masking_cost.json`` (``torchrl-mask bench learn --action-spaces``) -> ``masking_cost.png``: per action space,
  ``learn()``'s time over SB3's unmasked ``PPO``'s beside the floor that masking with sb3-contrib's bits forces,
  and the speed-up over sb3-contrib;
- ``buffer_grid.json`` (``torchrl-mask bench``) and ``learn.json`` (``torchrl-mask bench learn``) ->
  ``speedups.png``: the buffer work of one PPO iteration per cell of the grid, and end-to-end ``learn()``;
- ``selfplay_speed.json`` (``torchrl-mask bench selfplay``) -> ``selfplay_speed.png``: self-play's speed as a
  ratio to the game's own random play, and where a move trained on spends its time.

``python -m torchrl_mask.bench.charts docs/data docs/img`` redraws every chart. A file that lacks a field the
chart reads is refused with a ``ValueError`` naming the file and the field.
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
from matplotlib.artist import Artist
from matplotlib.axes import Axes
from matplotlib.figure import Figure
from matplotlib.lines import Line2D
from matplotlib.patches import Patch
from matplotlib.ticker import NullFormatter

__all__ = ["CHARTS", "FIELDS", "draw_all", "draw_masking_cost", "draw_selfplay_speed", "draw_speedups", "load", "main"]

Data = Mapping[str, Any]

# The fields each data file must hold: at the top level, and in each row of its list.
FIELDS: dict[str, tuple[tuple[str, ...], str, tuple[str, ...]]] = {
    "masking_cost.json": (
        ("command", "date"),
        "cells",
        ("action_space", "obs", "batch", "ours_over_ppo", "floor_over_ppo", "sb3_contrib_over_ours"),
    ),
    "buffer_grid.json": (("command", "date"), "cells", ("rollout", "obs", "mask", "add", "gae", "get", "iteration")),
    "learn.json": (("command",), "runs", ("label", "command", "date", "workloads")),
    "selfplay_speed.json": (
        ("command", "date"),
        "games",
        ("game", "collection_ratio", "pettingzoo_collection_ratio", "whole_run_ratio", "us_per_move"),
    ),
}
# learn.json holds one entry of "runs" per command, each with its list of workloads.
WORKLOAD_FIELDS = ("workload", "speedup", "speedup_min", "speedup_max")
OURS, SB3, FLOOR = "#d9480f", "#868e96", "#212529"  # torchrl_mask (the site's deep orange), sb3-contrib, floors
# The docs' content column is about 700 pixels wide: charts 8 inches wide keep their text readable there, and 150
# dots an inch keep it sharp on a dense screen.
WIDTH, DPI = 8.0, 150


def load(path: str | Path) -> dict[str, Any]:
    """A benchmark's data file, checked for the fields its chart reads.

    :param path: a JSON file named as in :data:`FIELDS` (``masking_cost.json``, ...).
    :return: the file's content.
    :raises ValueError: the file's name is not one of :data:`FIELDS`, or it lacks a field its chart reads.
    """
    path = Path(path)
    if path.name not in FIELDS:
        raise ValueError(f"{path}: no chart reads this file; the data files are {', '.join(sorted(FIELDS))}.")
    data = json.loads(path.read_text())
    top, rows, row_fields = FIELDS[path.name]
    for field in (*top, rows):
        if field not in data:
            raise ValueError(f"{path}: missing the field {field!r}; write it as the benchmark's command does.")
    for index, row in enumerate(data[rows]):
        _require(path, f"{rows}[{index}]", row, row_fields)
        for inner, workload in enumerate(row.get("workloads", [])):
            _require(path, f"{rows}[{index}].workloads[{inner}]", workload, WORKLOAD_FIELDS)
    return data


def _require(path: Path, where: str, row: Mapping[str, Any], fields: Sequence[str]) -> None:
    """Refuse ``row`` (``where`` in ``path``) if it lacks one of ``fields``, naming them."""
    missing = [field for field in fields if field not in row]
    if missing:
        raise ValueError(f"{path}: {where} lacks {', '.join(map(repr, missing))}.")


def _save(figure: Figure, path: str | Path) -> None:
    """Write ``figure`` as a PNG with no timestamp or version in it, so that the same data gives the same file."""
    figure.savefig(path, dpi=DPI, metadata={"Software": None})


def _source(figure: Figure, *files: Data) -> None:
    """The command and date of each data file, under the chart."""
    lines = [f"{data['command']}, {data['date']}" for data in files if "date" in data]
    figure.supxlabel("\n".join(lines), x=0.01, ha="left", fontsize=7.5, color="#495057")


def draw_masking_cost(data: Data, path: str | Path) -> None:
    """The cost of masking, per action space: two panels over the same cells.

    Top: ``learn()``'s time over unmasked PPO's (``ours_over_ppo``), with the floor that sb3-contrib's bits force
    (``floor_over_ppo``) as a tick on each bar. Bottom: the speed-up over sb3-contrib (``sb3_contrib_over_ours``),
    on a log scale. Each action space holds its cells in the file's order (observation, then batch size).

    :param data: ``masking_cost.json``'s content (:func:`load`).
    :param path: where the PNG goes.
    """
    cells = data["cells"]
    spaces = list(dict.fromkeys(cell["action_space"] for cell in cells))
    kinds = list(dict.fromkeys((cell["obs"], cell["batch"]) for cell in cells))
    width = 0.8 / len(kinds)
    shades = [OURS, "#f76707", "#ffa94d", "#ffd8a8"][: len(kinds)]
    figure = Figure(figsize=(WIDTH, 5.8), layout="constrained")
    top, bottom = figure.subplots(2, 1, sharex=True, height_ratios=(1.25, 1))
    for cell in cells:
        x = (
            spaces.index(cell["action_space"])
            + (kinds.index((cell["obs"], cell["batch"])) - (len(kinds) - 1) / 2) * width
        )
        shade = shades[kinds.index((cell["obs"], cell["batch"]))]
        top.bar(x, cell["ours_over_ppo"], width * 0.9, color=shade)
        top.hlines(cell["floor_over_ppo"], x - width * 0.5, x + width * 0.5, color=FLOOR, linewidth=2)
        bottom.bar(x, cell["sb3_contrib_over_ours"], width * 0.9, color=shade)
    handles: list[Artist] = [
        Patch(color=shade, label=f"{obs} observation, batch {batch}")
        for shade, (obs, batch) in zip(shades, kinds, strict=True)
    ]
    handles.append(
        Line2D([], [], color=FLOOR, linewidth=2, label="floor: the work masking with sb3-contrib's bits forces")
    )
    top.axhline(1, color=SB3, linestyle="--", linewidth=1)
    handles.append(Line2D([], [], color=SB3, linestyle="--", linewidth=1, label="unmasked PPO"))
    top.set_ylabel("learn() time / unmasked PPO's")
    top.set_title("The cost of masking, per action space")
    top.legend(handles=handles, fontsize=8.5, loc="upper left")
    bottom.set_yscale("log")
    bottom.axhline(1, color=SB3, linestyle="--", linewidth=1)
    bottom.set_ylabel("speed-up over sb3-contrib")
    bottom.set_yticks([1, 2, 5, 10, 20], ["1x", "2x", "5x", "10x", "20x"])
    bottom.set_xticks(range(len(spaces)), [space.replace("(", "\n(", 1) for space in spaces], fontsize=9)
    for axes in (top, bottom):
        axes.grid(axis="y", alpha=0.3)
    _source(figure, data)
    _save(figure, path)


def _grid_panel(axes: Axes, grid: Data) -> None:
    """The buffer grid: each cell's iteration speed-up as a bar, its phases as markers, worst cell at the bottom."""
    cells = sorted(grid["cells"], key=lambda cell: cell["iteration"])
    y = np.arange(len(cells))
    iteration = np.array([cell["iteration"] for cell in cells])
    axes.barh(y, iteration - 1, left=1, color=OURS, height=0.6, label="whole iteration")  # from 1x: sb3-contrib's
    for phase, marker in (("get", ">"), ("add", "s"), ("gae", "x")):
        label = "GAE" if phase == "gae" else phase
        axes.scatter([cell[phase] for cell in cells], y, marker=marker, color=FLOOR, s=22, label=label, zorder=3)
    axes.set_yticks(y, [f"{c['rollout']} {c['obs']} {c['mask']}" for c in cells], fontsize=8.5)
    axes.set_xscale("log")
    axes.set_xticks([0.5, 1, 2, 4], ["0.5x", "1x", "2x", "4x"])
    axes.xaxis.set_minor_formatter(NullFormatter())
    axes.axvline(1, color=SB3, linestyle="--", linewidth=1)
    axes.set_xlabel("speed-up over sb3-contrib")
    axes.set_title("Buffer work of one PPO iteration (steps x envs, observation, mask)", fontsize=10, pad=22)
    axes.legend(fontsize=8, loc="lower center", bbox_to_anchor=(0.5, 1.0), ncol=4, frameon=False)
    axes.grid(axis="x", alpha=0.3)


def _learn_panel(axes: Axes, learn: Data) -> None:
    """End-to-end ``learn()``: a bar per workload and run, its spread over rounds as an error bar."""
    runs = learn["runs"]
    workloads = list(dict.fromkeys(row["workload"] for run in runs for row in run["workloads"]))
    width = 0.8 / len(runs)
    for index, run in enumerate(runs):
        rows = {row["workload"]: row for row in run["workloads"]}
        x = np.array([workloads.index(name) for name in rows]) + (index - (len(runs) - 1) / 2) * width
        values = np.array([row["speedup"] for row in rows.values()])
        low = np.array([row["speedup_min"] for row in rows.values()])
        high = np.array([row["speedup_max"] for row in rows.values()])
        axes.bar(
            x,
            values,
            width * 0.9,
            yerr=[values - low, high - values],
            capsize=3,
            color=[OURS, "#ffa94d"][index % 2],
            label=run["label"],
        )
    axes.axhline(1, color=SB3, linestyle="--", linewidth=1)
    axes.set_xticks(range(len(workloads)), [name.replace(", ", "\n", 1) for name in workloads], fontsize=8.5)
    axes.set_ylabel("speed-up over sb3-contrib")
    axes.set_title("learn(), the same parameters bit for bit", fontsize=10)
    axes.legend(fontsize=8, loc="upper left")
    axes.set_ylim(0, 2.1)
    axes.grid(axis="y", alpha=0.3)


def draw_speedups(grid: Data, learn: Data, path: str | Path) -> None:
    """The buffer grid's speed-ups per cell (top) above end-to-end ``learn()``'s per workload (bottom).

    :param grid: ``buffer_grid.json``'s content (:func:`load`).
    :param learn: ``learn.json``'s content: one entry of ``runs`` per command, each with its ``workloads``.
    :param path: where the PNG goes.
    """
    figure = Figure(figsize=(WIDTH, 8.6), layout="constrained")
    top, bottom = figure.subplots(2, 1, height_ratios=(1.5, 1))
    _grid_panel(top, grid)
    _learn_panel(bottom, learn)
    _source(figure, grid, *learn["runs"])
    _save(figure, path)


def _speed_panel(axes: Axes, games: Sequence[Data]) -> None:
    """Moves a second over the game's own, per game: collection, through PettingZoo's env, a whole run."""
    measures = (
        ("collection", "collection", OURS),
        ("pettingzoo_collection", "collection, PettingZoo's env", "#ffa94d"),
        ("whole_run", "whole run, moves trained on", SB3),
    )
    width = 0.8 / len(measures)
    for index, (key, label, colour) in enumerate(measures):
        x = np.arange(len(games)) + (index - (len(measures) - 1) / 2) * width
        values = np.array([game[f"{key}_ratio"] for game in games])
        low = np.array([game.get(f"{key}_ratio_min", game[f"{key}_ratio"]) for game in games])
        high = np.array([game.get(f"{key}_ratio_max", game[f"{key}_ratio"]) for game in games])
        axes.bar(x, values, width * 0.9, yerr=[values - low, high - values], capsize=3, color=colour, label=label)
    axes.axhline(1, color=FLOOR, linestyle="--", linewidth=1, label="the game's own speed")
    axes.set_xticks(range(len(games)), [game["game"] for game in games])
    axes.set_ylabel("moves a second / the game's own")
    axes.set_title("Self-play's speed against the game's own", fontsize=10)
    axes.set_ylim(0, 1.4 * max(game.get("collection_ratio_max", game["collection_ratio"]) for game in games))
    axes.legend(fontsize=8, loc="upper center", ncol=2)
    axes.grid(axis="y", alpha=0.3)


def _time_panel(axes: Axes, games: Sequence[Data]) -> None:
    """Microseconds per move trained on, per game, split into its parts, above a move of random play."""
    y = np.arange(len(games))
    left = np.zeros(len(games))
    for part, colour in (("collecting", OURS), ("updating", "#ffa94d"), ("rest", "#ced4da")):
        values = np.array([_part(game["us_per_move"], part) for game in games])
        axes.barh(y - 0.18, values, left=left, height=0.32, color=colour, label=part)
        left += values
    random_play = [game["us_per_move"]["random_play"] for game in games]
    axes.barh(y + 0.18, random_play, height=0.32, color=SB3, label="a move of random play")
    axes.set_yticks(y, [game["game"] for game in games])
    axes.invert_yaxis()  # the games in the top panel's order, top to bottom
    axes.set_xlabel("microseconds per move trained on, whole run")
    axes.set_title("Where a move trained on spends its time", fontsize=10)
    axes.set_xlim(0, 1.6 * max(left.max(), *random_play))  # room for the legend on the right
    axes.legend(fontsize=8, loc="center right")
    axes.grid(axis="x", alpha=0.3)


def draw_selfplay_speed(data: Data, path: str | Path) -> None:
    """Self-play's speed against the game's own (top) and where a move trained on spends its time (bottom).

    Top: moves a second as a ratio to PettingZoo's random play of the same game, in the same round (1: the
    game's own speed), for collection, for collection through PettingZoo's env, and for a whole default run (moves
    trained on a second), each with its spread over rounds (``*_ratio_min``, ``*_ratio_max`` where given). Bottom:
    microseconds per move trained on (``us_per_move``), split into collecting, updating and the rest, beside a move
    of random play.

    :param data: ``selfplay_speed.json``'s content (:func:`load`).
    :param path: where the PNG goes.
    """
    figure = Figure(figsize=(WIDTH, 7.2), layout="constrained")
    top, bottom = figure.subplots(2, 1, height_ratios=(1.3, 1))
    _speed_panel(top, data["games"])
    _time_panel(bottom, data["games"])
    _source(figure, data)
    _save(figure, path)


def _part(us_per_move: Mapping[str, float], part: str) -> float:
    """One part of a move trained on: ``collecting``, ``updating``, or ``rest`` (measuring, final, other)."""
    if part == "rest":
        return sum(us_per_move.get(key, 0.0) for key in ("measuring", "final", "other"))
    return us_per_move[part]


# Each chart: its PNG's name, the data files it reads (in the drawing function's order), and that function.
CHARTS: dict[str, tuple[tuple[str, ...], Callable[..., None]]] = {
    "masking_cost.png": (("masking_cost.json",), draw_masking_cost),
    "speedups.png": (("buffer_grid.json", "learn.json"), draw_speedups),
    "selfplay_speed.png": (("selfplay_speed.json",), draw_selfplay_speed),
}


def draw_all(data_dir: str | Path, img_dir: str | Path) -> list[Path]:
    """Every chart of :data:`CHARTS`, from the data files in ``data_dir`` into ``img_dir``.

    :param data_dir: the folder of the data files (``docs/data``).
    :param img_dir: the folder the PNGs go into (``docs/img``), made if missing.
    :return: the PNGs written.
    :raises ValueError: a data file is missing, or lacks a field its chart reads.
    """
    data_dir, img_dir = Path(data_dir), Path(img_dir)
    missing = [name for files, _ in CHARTS.values() for name in files if not (data_dir / name).is_file()]
    if missing:
        raise ValueError(f"{data_dir}: missing {', '.join(missing)}; give the folder that holds the data files.")
    img_dir.mkdir(parents=True, exist_ok=True)
    written = []
    for name, (files, draw) in CHARTS.items():
        draw(*(load(data_dir / file) for file in files), img_dir / name)
        written.append(img_dir / name)
    return written


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m torchrl_mask.bench.charts DATA IMG``: redraw every chart.

    :param argv: the arguments (``sys.argv[1:]`` when None).
    :return: the exit status: 0, or 2 with one line on standard error for a missing or incomplete data file.
    """
    parser = argparse.ArgumentParser(
        prog="python -m torchrl_mask.bench.charts", description="Redraw the benchmark page's charts."
    )
    parser.add_argument("data", nargs="?", default="docs/data", help="the data files' folder (default docs/data)")
    parser.add_argument("img", nargs="?", default="docs/img", help="where the PNGs go (default docs/img)")
    args = parser.parse_args(argv)
    try:
        for path in draw_all(args.data, args.img):
            print(path)
    except ValueError as error:
        parser.exit(2, f"error: {error}\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
