"""The benchmark's report: Markdown tables of the grid, the worst cell beside the best, and regenerated docs.

:func:`render` turns :class:`torchrl_mask.bench.buffers.CellResult` objects into a Markdown section: the command,
date and machine; one row per cell with both libraries' times per phase and the paired speed-ups; a summary of
the lowest speed-up over the cells per phase (the worst cell, named) beside the highest; and ``add``'s cost per
step, on a reused buffer and on the first rollout of a fresh one. :func:`update_markdown` writes the section
between the :data:`BEGIN` and :data:`END` lines of a file (``docs/benchmarks.md``), so that the page is
regenerated from a run rather than edited by hand.
"""

from __future__ import annotations

import dataclasses
import datetime
import os
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch

from torchrl_mask.bench.grid import LIBRARY, Variant

if TYPE_CHECKING:
    from torchrl_mask.bench.buffers import CellResult

__all__ = [
    "BEGIN",
    "CUDA_PARAMETER_ATOL",
    "END",
    "as_json",
    "cell_line",
    "check_markers",
    "machine",
    "parameter_gap",
    "parameter_tolerance",
    "render",
    "update_markdown",
]

BEGIN = "<!-- bench-grid -->"
END = "<!-- /bench-grid -->"
PHASES = ("add", "gae", "get", "total")
LABELS = {"add": "add", "gae": "GAE", "get": "get", "total": "iteration"}
# The end-to-end benchmarks check that both libraries learned the same parameters, so that they never time different
# work: bit for bit on the CPU; on a CUDA device to this absolute difference, room for kernels that round a float32
# sum in another order (atomics), and far below what one learning step with a different action would move.
CUDA_PARAMETER_ATOL = 1e-3


def machine() -> str:
    """The machine a benchmark ran on, for its report: its cores, CPU model and torch version, and its GPU where it
    has one."""
    cpu = "unknown CPU"
    try:
        with open("/proc/cpuinfo") as f:
            cpu = next(line.split(":", 1)[1].strip() for line in f if line.startswith("model name"))
    except (OSError, StopIteration):
        pass
    text = f"{os.cpu_count()} cores, {cpu}, torch {torch.__version__}"
    if torch.cuda.is_available():
        text += f", GPU {torch.cuda.get_device_name()}"
    return text


def parameter_tolerance(device: str) -> float:
    """The largest parameter gap (:func:`parameter_gap`) accepted between the two libraries on ``device``.

    :param device: where both learned: ``"cpu"`` asks for equal bits, a CUDA device for :data:`CUDA_PARAMETER_ATOL`.
    :return: 0.0 or :data:`CUDA_PARAMETER_ATOL`.
    """
    return 0.0 if device == "cpu" else CUDA_PARAMETER_ATOL


def parameter_gap(ours: dict[str, torch.Tensor], ref: dict[str, torch.Tensor]) -> float:
    """The largest absolute difference between two learned state dicts of the same names and shapes (0.0: equal).

    :param ours: torchrl_mask's ``state_dict()``.
    :param ref: sb3-contrib's ``state_dict()``.
    :return: the largest ``|ours - ref|`` over every entry; inf for other names or shapes.
    """
    if list(ours) != list(ref) or any(ours[k].shape != v.shape for k, v in ref.items()):
        return float("inf")
    return max((float((ours[k].double() - v.double()).abs().max()) for k, v in ref.items() if v.numel()), default=0.0)


def _x(ratio: float) -> str:
    return f"{ratio:.2f}x"


def _cell_columns(result: CellResult) -> str:
    cell = result.cell
    return f"{cell.n_steps} x {cell.n_envs} | {cell.dones} | {cell.obs} | {cell.mask} | {cell.batch_size}"


def _ms(times: dict[str, float]) -> str:
    return " / ".join(f"{times[phase] * 1e3:.1f}" for phase in PHASES[:3])


def _memory(result: CellResult, name: str) -> str:
    ours, ref = result.memory.get(name), result.memory.get(LIBRARY)
    if ours is None or not ref:
        return "n/a" if result.memory else ""
    return f"{ours / 2**20:.1f} / {ref / 2**20:.1f} ({ours / ref:.2f}x)"


def cell_line(result: CellResult) -> str:
    """One line of progress for a finished cell: each variant's speed-ups.

    :param result: the cell's result.
    :return: the line.
    """
    parts = []
    for name, ratios in result.speedup.items():
        phases = ", ".join(f"{LABELS[p]} {_x(ratios[p])}" for p in PHASES[:3])
        parts.append(f"{name}: iteration {_x(ratios['total'])} ({phases})")
    return "    " + "; ".join(parts)


def _main_table(results: Sequence[CellResult], variants: Sequence[Variant]) -> list[str]:
    first, others = variants[0].name, [v.name for v in variants[1:]]
    memory = any(r.memory for r in results)
    header = (
        f"| rollout | dones | obs | mask | batch | {LIBRARY} ms add / GAE / get | torchrl_mask ms add / GAE / get "
        "| add | GAE | get | **iteration** |"
    )
    header += "".join(f" {name}: add / GAE / get / iteration |" for name in others)
    header += " peak MiB, ours / sb3-contrib |" if memory else ""
    lines = [header, "|" + "---|" * 5 + "---:|" * (header.count("|") - 6)]
    for result in results:
        ratios = result.speedup[first]
        row = f"| {_cell_columns(result)} | {_ms(result.times[LIBRARY])} | {_ms(result.times[first])} | "
        row += " | ".join(_x(ratios[p]) for p in PHASES[:3]) + f" | **{_x(ratios['total'])}** |"
        for name in others:
            row += " " + " / ".join(_x(result.speedup[name][p]) for p in PHASES) + " |"
        row += f" {_memory(result, first)} |" if memory else ""
        lines.append(row)
    return lines


def _summary(results: Sequence[CellResult], variants: Sequence[Variant]) -> list[str]:
    lines = []
    for variant in variants:
        worst = []
        for phase in PHASES:
            low = min(results, key=lambda r: r.speedup[variant.name][phase])
            worst.append(f"{LABELS[phase]} **{_x(low.speedup[variant.name][phase])}** ({low.cell.key})")
        best = max(results, key=lambda r: r.speedup[variant.name]["total"])
        lines.append(
            f"- `{variant.name}`: lowest speed-up over the {len(results)} cells, per phase: {'; '.join(worst)}. "
            f"Highest iteration speed-up: {_x(best.speedup[variant.name]['total'])} ({best.cell.key}). "
            f"Largest difference of its advantages and returns from {LIBRARY}'s: "
            f"{max(r.max_difference[variant.name] for r in results):.1e}."
        )
    return lines


def _add_table(results: Sequence[CellResult], name: str) -> list[str]:
    lines = [
        f"| rollout | dones | obs | mask | batch | {LIBRARY} us/step | torchrl_mask us/step "
        f"| first rollout, {LIBRARY} / torchrl_mask us/step |",
        "|---|---|---|---|---|---:|---:|---:|",
    ]
    for result in results:
        steps = result.cell.n_steps
        ref, ours = result.times[LIBRARY]["add"] / steps, result.times[name]["add"] / steps
        first = f"{result.first_add[LIBRARY] / steps * 1e6:.1f} / {result.first_add[name] / steps * 1e6:.1f}"
        lines.append(f"| {_cell_columns(result)} | {ref * 1e6:.1f} | {ours * 1e6:.1f} | {first} |")
    return lines


def render(
    results: Sequence[CellResult],
    variants: Sequence[Variant],
    skipped: dict[str, str],
    *,
    command: str,
    machine: str,
    rounds: int,
    device: str,
    threads: int,
) -> str:
    """The report as Markdown: how it was run, the grid table, the worst and best cells, ``add`` per step.

    :param results: one per cell, in grid order.
    :param variants: the variants timed; the first gets the per-phase columns, the others one column each.
    :param skipped: ``{variant: why}`` for the variants skipped.
    :param command: the command that ran it.
    :param machine: the machine, in words.
    :param rounds: measured rounds per cell.
    :param device: ``"cpu"`` or ``"cuda"``.
    :param threads: torch intra-op threads.
    :return: the Markdown text.
    """
    today = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    first = variants[0].name
    lines = [
        f"### Buffer grid, one PPO iteration ({device})",
        "",
        f"`{command}` on {machine}, device={device}, {threads} torch thread(s), {today}. Per cell: the buffer made "
        f"once and reset per rollout, `add` over the rollout, GAE, 10 epochs of `get(batch)`. Times are medians "
        f"of {rounds} rounds in ms; a speed-up is the median over rounds of {LIBRARY}'s time over ours in the "
        "same round (both run back to back in every round, in rotating order). Peak memory: resident set above "
        "the baseline during one iteration, fresh subprocess per library.",
        "",
        *_main_table(results, variants),
        "",
        "Lowest speed-up over the cells (the worst cell, named) beside the highest:",
        "",
        *_summary(results, variants),
    ]
    if skipped:
        lines += ["", "Skipped variants (the installed buffers reject them):"]
        lines += [f"- `{name}`: {why}" for name, why in skipped.items()]
    lines += [
        "",
        f"`add()` per step (`{first}`), on the reused buffer (medians) and on the first rollout of a fresh one "
        "(one sample: it pays the first touch of the storage's pages; sb3-contrib allocates new arrays at every "
        "reset, so it pays that at every rollout):",
        "",
        *_add_table(results, first),
    ]
    return "\n".join(lines) + "\n"


def check_markers(path: str | Path) -> None:
    """Check that a file has the report's markers, before a long run writes there.

    :param path: the Markdown file.
    :raises ValueError: the file is missing, or lacks a :data:`BEGIN` line followed by an :data:`END` line.
    """
    try:
        text = Path(path).read_text()
    except OSError as err:
        raise ValueError(f"--update {path}: cannot read it ({err.strerror}).") from None
    begin, end = text.find(BEGIN), text.find(END)
    if begin < 0 or end < begin:
        raise ValueError(f"--update {path}: add a {BEGIN} line and, below it, a {END} line where the report goes.")


def update_markdown(path: str | Path, section: str) -> None:
    """Replace what is between the :data:`BEGIN` and :data:`END` lines of a file with ``section``.

    :param path: the Markdown file.
    :param section: the new text.
    :raises ValueError: the markers are missing (see :func:`check_markers`).
    """
    check_markers(path)
    text = Path(path).read_text()
    head, rest = text.split(BEGIN, 1)
    _, tail = rest.split(END, 1)
    Path(path).write_text(f"{head}{BEGIN}\n\n{section.strip()}\n\n{END}{tail}")


def as_json(results: Sequence[CellResult], skipped: dict[str, str], machine: str) -> dict[str, Any]:
    """The raw results, for ``--json``.

    :param results: one per cell.
    :param skipped: ``{variant: why}``.
    :param machine: the machine, in words.
    :return: a JSON-ready dict.
    """
    cells = []
    for result in results:
        entry = dataclasses.asdict(result)
        entry["cell"] = result.cell.key
        cells.append(entry)
    return {"machine": machine, "skipped": skipped, "cells": cells}
