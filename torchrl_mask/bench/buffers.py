"""Side-by-side benchmark of sb3-contrib's maskable rollout buffers and ours, over a grid of rollouts.

Each cell of the grid (:mod:`torchrl_mask.bench.grid`) is timed as one PPO iteration's buffer work, per
phase: ``add`` over the whole rollout (``reset`` first, as ``collect_rollouts`` does), then
``compute_returns_and_advantage``, then 10 epochs of ``get(batch_size)``. Each library's buffer is made once
and reused, as MaskablePPO reuses its buffer; the first rollout of a fresh buffer (a warm-up, not counted) is
reported apart, as its ``add`` pays the first touch of the storage's pages. Both libraries get the very same
inputs, in one process. Every round runs sb3-contrib and each variant of ours back to back, in an order that
rotates from round to round; a speed-up is the median over rounds of that round's ratio ``sb3-contrib time /
our time`` (above 1: ours is faster). These machines are shared and drift, so a paired ratio says more than
any single time.

Peak memory is measured in a fresh subprocess per library and cell: the peak resident set (``VmHWM``, reset
through ``/proc/self/clear_refs``) during a second iteration, minus the resident set before the buffer
existed, with glibc's dynamic mmap threshold pinned so that freed arrays go back to the system. On CUDA it is
``torch.cuda.max_memory_allocated``.

Run it as ``torchrl-mask bench`` or ``python benchmarks/bench_buffers.py``; ``--help`` lists the options.
``torchrl-mask bench learn`` times whole ``MaskablePPO.learn`` calls instead (:mod:`torchrl_mask.bench.learn`);
``torchrl-mask bench selfplay`` self-play's speeds against the game's own (:mod:`torchrl_mask.bench.selfplay`);
``torchrl-mask bench memory`` self-play with an LSTM against without (:mod:`torchrl_mask.bench.memory`).
"""

from __future__ import annotations

import argparse
import dataclasses
import gc
import json
import os
import statistics
import subprocess
import sys
import time
from collections.abc import Iterable, Sequence
from typing import Any

import numpy as np
import torch

from torchrl_mask.bench import report as report
from torchrl_mask.bench.grid import (
    AXES,
    GRIDS,
    LIBRARY,
    N_EPOCHS,
    VARIANTS,
    Cell,
    Inputs,
    Variant,
    grid,
    make_buffer,
    make_inputs,
)

__all__ = ["PHASES", "CellResult", "main", "peak_memory", "resolve_variants", "run_iteration", "time_cell"]

PHASES = ("add", "gae", "get")


@dataclasses.dataclass
class CellResult:
    """What one cell measured.

    :param cell: the cell.
    :param times: ``{library or variant: {phase or "total": median seconds}}``.
    :param speedup: ``{variant: {phase or "total": median over rounds of sb3-contrib's time / the variant's}}``.
    :param first_add: ``{library or variant: seconds}``: ``add`` over the first rollout of a fresh buffer.
    :param memory: ``{library or variant: peak bytes}`` where measured (None: not measurable here).
    :param max_difference: ``{variant: largest |difference| of advantages and returns from sb3-contrib's}``.
    """

    cell: Cell
    times: dict[str, dict[str, float]]
    speedup: dict[str, dict[str, float]]
    first_add: dict[str, float]
    memory: dict[str, int | None] = dataclasses.field(default_factory=dict)
    max_difference: dict[str, float] = dataclasses.field(default_factory=dict)


def _sync(device: str) -> None:
    if device.startswith("cuda"):
        torch.cuda.synchronize()


def run_iteration(buffer: Any, cell: Cell, inputs: Inputs, device: str) -> dict[str, float]:
    """Run one PPO iteration's buffer work and time each phase.

    :param buffer: a maskable Dict rollout buffer of either library, sized for the cell.
    :param cell: the cell, for the batch size.
    :param inputs: what :func:`torchrl_mask.bench.grid.make_inputs` made for the cell.
    :param device: the buffer's device, to synchronise before reading the clock.
    :return: seconds per phase, ``{"add": ..., "gae": ..., "get": ...}``.
    """
    times = {}
    start = time.perf_counter()
    buffer.reset()
    for args, masks in inputs.steps:
        buffer.add(*args, action_masks=masks)
    _sync(device)
    times["add"] = time.perf_counter() - start
    start = time.perf_counter()
    buffer.compute_returns_and_advantage(last_values=inputs.last_values, dones=inputs.dones)
    _sync(device)
    times["gae"] = time.perf_counter() - start
    start = time.perf_counter()
    for _ in range(N_EPOCHS):
        for _batch in buffer.get(cell.batch_size):
            pass
    _sync(device)
    times["get"] = time.perf_counter() - start
    return times


def time_cell(cell: Cell, variants: list[Variant], rounds: int, device: str, seed: int = 0) -> CellResult:
    """Time sb3-contrib and each variant of ours on one cell, in paired rounds.

    :param cell: the cell.
    :param variants: our configurations to time.
    :param rounds: measured rounds (after one warm-up iteration each, the first rollout of a fresh buffer).
    :param device: ``"cpu"`` or ``"cuda"``.
    :param seed: seed of the inputs and of ``np.random`` (the minibatch order).
    :return: the medians, paired speed-ups, first-rollout ``add`` times and the largest difference of each
        variant's advantages and returns from sb3-contrib's.
    """
    inputs = make_inputs(cell, device, seed)
    names = [LIBRARY, *(v.name for v in variants)]
    buffers = {LIBRARY: make_buffer(LIBRARY, cell, device)}
    buffers.update({v.name: make_buffer(v.name, cell, device, v.kwargs) for v in variants})
    np.random.seed(seed)
    first_add = {name: run_iteration(buffers[name], cell, inputs, device)["add"] for name in names}
    samples: dict[str, list[dict[str, float]]] = {name: [] for name in names}
    for round_ in range(rounds):
        shift = round_ % len(names)
        for name in names[shift:] + names[:shift]:
            gc.collect()
            times = run_iteration(buffers[name], cell, inputs, device)
            times["total"] = sum(times.values())
            samples[name].append(times)
    phases = (*PHASES, "total")
    medians = {name: {p: statistics.median(t[p] for t in samples[name]) for p in phases} for name in names}
    ref = samples[LIBRARY]
    speedup = {
        v.name: {p: statistics.median(r[p] / o[p] for r, o in zip(ref, samples[v.name], strict=True)) for p in phases}
        for v in variants
    }
    difference = {v.name: _max_difference(buffers[LIBRARY], buffers[v.name]) for v in variants}
    return CellResult(cell, medians, speedup, first_add, max_difference=difference)


def resolve_variants(names: Sequence[str], skip: Iterable[str] = ()) -> tuple[list[Variant], dict[str, str]]:
    """The variants to time, each checked against the installed buffers' constructor.

    :param names: keys of :data:`VARIANTS`, in table order.
    :param skip: variants that may be dropped if the installed buffers reject them (an explicit list: nothing
        is dropped silently).
    :return: the variants to time, and ``{name: why}`` for those skipped.
    :raises ValueError: an unknown name, or a variant the buffers reject that ``skip`` does not list.
    """
    skip = set(skip)
    unknown = [name for name in (*names, *skip) if name not in VARIANTS]
    if unknown:
        raise ValueError(f"unknown variants {unknown}; choose from {sorted(VARIANTS)}.")
    runnable, skipped = [], {}
    probe = Cell(4, 1, "uniform", "vector", "discrete")
    for name in names:
        variant = VARIANTS[name]
        try:  # a whole iteration: some arguments are only read when their phase runs
            run_iteration(make_buffer(name, probe, "cpu", variant.kwargs), probe, make_inputs(probe, "cpu"), "cpu")
        except (TypeError, ValueError) as err:
            if name not in skip:
                raise ValueError(
                    f"variant {name!r}: the installed buffers reject {dict(variant.kwargs)} ({err}). Leave the "
                    f"variant out, or pass --skip {name} to report it as skipped."
                ) from err
            skipped[name] = f"{type(err).__name__}: {err}"
        else:
            runnable.append(variant)
    return runnable, skipped


def _max_difference(ref: Any, ours: Any) -> float:
    """Largest absolute difference of advantages and returns: both sides must have done the same work."""

    def flat(buffer: Any, name: str) -> np.ndarray:  # env-major; sb3-contrib's get() flattens in place
        array = getattr(buffer, name)
        flattened = array.ndim == 2 and array.shape[1] == 1 and buffer.n_envs > 1
        return (array if flattened or buffer.n_envs == 1 else buffer.swap_and_flatten(array)).reshape(-1)

    names = ("advantages", "returns")
    return max(float(np.abs(flat(ours, name) - flat(ref, name)).max()) for name in names)


def _peak_memory_child(name: str, cell_key: str, kwargs: dict[str, Any], device: str) -> int:
    """In a fresh process: bytes of peak memory of one iteration above the memory before the buffer."""
    cell = Cell.from_key(cell_key)
    inputs = make_inputs(cell, device, seed=0)
    # Page in the code paths first (libtorch's kernels count in the resident set once touched; which ones run
    # depends on the shape) with one iteration on a buffer thrown away, so that the baseline holds the code
    # and the peak above it is data alone.
    run_iteration(make_buffer(name, cell, device, kwargs), cell, inputs, device)
    gc.collect()
    if device.startswith("cuda"):
        torch.cuda.synchronize()
        base = torch.cuda.memory_allocated()
        buffer = make_buffer(name, cell, device, kwargs)
        run_iteration(buffer, cell, inputs, device)
        torch.cuda.reset_peak_memory_stats()
        run_iteration(buffer, cell, inputs, device)
        return int(torch.cuda.max_memory_allocated() - base)
    base = _status_kib("VmRSS")
    buffer = make_buffer(name, cell, device, kwargs)
    run_iteration(buffer, cell, inputs, device)
    with open("/proc/self/clear_refs", "w") as f:  # reset VmHWM to the current resident set
        f.write("5")
    run_iteration(buffer, cell, inputs, device)
    return (_status_kib("VmHWM") - base) * 1024


def _status_kib(field: str) -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    raise RuntimeError(f"/proc/self/status has no {field}")


def peak_memory(name: str, cell: Cell, device: str, kwargs: dict[str, Any] | None = None) -> int | None:
    """Peak memory of one iteration, measured in a fresh subprocess (see the module docstring).

    :param name: :data:`torchrl_mask.bench.grid.LIBRARY` for sb3-contrib, else a variant of ours.
    :param cell: the cell.
    :param device: ``"cpu"`` or ``"cuda"``.
    :param kwargs: our constructor's keyword arguments for the variant.
    :return: bytes, or None where the platform cannot measure it (no ``/proc``).
    """
    if not os.path.exists("/proc/self/clear_refs") and not device.startswith("cuda"):
        return None
    env = dict(os.environ, MALLOC_MMAP_THRESHOLD_=str(128 * 1024), MALLOC_TRIM_THRESHOLD_=str(128 * 1024))
    code = (
        "import json, torch; torch.set_num_threads(1); from torchrl_mask.bench.buffers import _peak_memory_child; "
        f"print(json.dumps(_peak_memory_child({name!r}, {cell.key!r}, {dict(kwargs or {})!r}, {device!r})))"
    )
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
    return int(json.loads(out.stdout.strip().splitlines()[-1]))


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="torchrl-mask bench",
        description="Time sb3-contrib's maskable rollout buffers against torchrl_mask's, side by side, over a "
        "grid of rollout shapes, episode-end patterns, observations and masks.",
        epilog="End to end instead: `torchrl-mask bench learn` times MaskablePPO.learn() of both libraries on "
        "masked envs (DummyVecEnv, SubprocVecEnv; see `torchrl-mask bench learn --help`).",
    )
    parser.add_argument(
        "--grid",
        choices=list(GRIDS),
        default="default",
        help="quick: 2 small cells; default: every axis value at least once, SB3's default shape and the worst "
        "cases (11 cells, minutes); full: all 108 cells (an hour or more, several GiB)",
    )
    for axis, values in AXES.items():
        parser.add_argument(
            f"--{axis.replace('_', '-')}",
            nargs="+",
            type=type(values[0]),
            choices=values,
            help=f"keep only the grid's cells with these {axis} values",
        )
    parser.add_argument(
        "--variants",
        nargs="+",
        choices=list(VARIANTS),
        default=["default"],
        help="configurations of our buffers, each timed against sb3-contrib: "
        + "; ".join(f"{v.name}: {v.about}" for v in VARIANTS.values()),
    )
    parser.add_argument(
        "--skip",
        nargs="+",
        default=[],
        metavar="VARIANT",
        help="variants to report as skipped if the installed buffers reject their arguments (else an error)",
    )
    _add_how_to_run(parser)
    return parser


def _add_how_to_run(parser: argparse.ArgumentParser) -> None:
    """The arguments of how the cells run and where the results go."""
    parser.add_argument("--rounds", type=_positive_int, default=7, help="measured rounds per cell (default 7)")
    parser.add_argument("--device", default="cpu", help="cpu or cuda (default cpu)")
    parser.add_argument(
        "--threads",
        type=_positive_int,
        default=1,
        help="torch intra-op threads for both libraries (default 1: these buffer ops are memory-bound, and on a "
        "shared machine extra threads only add stalls)",
    )
    parser.add_argument(
        "--memory",
        choices=("image", "all", "none"),
        default="image",
        help="cells whose peak memory is measured, one subprocess per library (default: the image cells)",
    )
    parser.add_argument("--json", metavar="PATH", help="also write the raw results as JSON")
    parser.add_argument(
        "--update",
        nargs="+",
        default=[],
        metavar="MARKDOWN",
        help=f"also write the report between the {report.BEGIN} and {report.END} lines of these files",
    )


def main(argv: list[str] | None = None) -> int:
    """Run the benchmark and print the tables (``torchrl-mask bench``: :mod:`torchrl_mask.bench.commands` runs the
    others).

    :param argv: command-line arguments (``--help`` lists them); None reads ``sys.argv``.
    :return: process exit code.
    """
    argv = sys.argv[1:] if argv is None else list(argv)
    parser = _parser()
    args = parser.parse_args(argv)
    if args.device.startswith("cuda") and not torch.cuda.is_available():
        parser.error(f"--device {args.device}: no CUDA device is visible here; use --device cpu.")
    try:
        cells = grid(args.grid, **{axis: getattr(args, axis) for axis in AXES})
        variants, skipped = resolve_variants(args.variants, args.skip)
        for path in args.update:
            report.check_markers(path)
    except ValueError as err:
        parser.error(str(err))
    torch.set_num_threads(args.threads)
    results = []
    for i, cell in enumerate(cells, 1):
        print(f"[{i}/{len(cells)}] {cell.key} ...", flush=True)
        result = time_cell(cell, variants, args.rounds, args.device)
        if args.memory == "all" or (args.memory == "image" and cell.obs == "image"):
            result.memory[LIBRARY] = peak_memory(LIBRARY, cell, args.device)
            for v in variants:
                result.memory[v.name] = peak_memory(v.name, cell, args.device, dict(v.kwargs))
        results.append(result)
        print(report.cell_line(result), flush=True)
    command = "torchrl-mask bench " + " ".join(argv)
    text = report.render(
        results,
        variants,
        skipped,
        command=command.strip(),
        machine=report.machine(),
        rounds=args.rounds,
        device=args.device,
        threads=args.threads,
    )
    print()
    print(text)
    for path in args.update:
        report.update_markdown(path, text)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(report.as_json(results, skipped, report.machine()), f, indent=2)
    return 0


def _positive_int(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {value}")
    return value
