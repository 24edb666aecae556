"""Side-by-side benchmark of sb3-contrib's maskable rollout buffers and ours, in one process.

One PPO iteration's buffer work is timed per phase: ``add`` over a whole rollout (``reset`` included, as
``collect_rollouts`` does), ``compute_returns_and_advantage``, and ``n_epochs`` passes of ``get(batch_size)``.
Both libraries get the very same pre-generated inputs; they run alternately, several rounds, and the table
reports medians and the ratio ``sb3-contrib / torchrl_mask`` (above 1: we are faster). These machines are
shared and noisy, so single times mean little.

Peak memory is measured in a fresh subprocess per library and workload: the peak resident set (``VmHWM``,
reset through ``/proc/self/clear_refs``) during a second iteration, minus the resident set before the buffer
existed, with glibc's dynamic mmap threshold pinned so that freed arrays go back to the system. On CUDA it is
``torch.cuda.max_memory_allocated``.

Run it as ``torchrl-mask bench`` or ``python benchmarks/bench_buffers.py``; ``--help`` lists the options.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import statistics
import subprocess
import sys
import time
from typing import Any

import numpy as np
import torch
from gymnasium import spaces
from sb3_contrib.common.maskable import buffers as sb3c_buffers

from torchrl_mask import buffers as ours_buffers
from torchrl_mask.masks import mask_spec

__all__ = ["WORKLOADS", "Workload", "main", "run_iteration", "time_workload"]

PHASES = ("add", "gae", "get")


@dataclasses.dataclass(frozen=True)
class Workload:
    """One benchmark case: spaces and the PPO settings that size the buffer work.

    :param name: short name shown in the table.
    :param description: one line for the table's legend.
    :param observation_space: observation space of each env.
    :param action_space: maskable action space.
    :param n_steps: steps per env in a rollout (``buffer_size``).
    :param n_envs: parallel envs.
    :param n_epochs: passes over the rollout per iteration.
    :param batch_size: minibatch rows.
    """

    name: str
    description: str
    observation_space: spaces.Space
    action_space: spaces.Space
    n_steps: int = 256
    n_envs: int = 8
    n_epochs: int = 10
    batch_size: int = 64


WORKLOADS: dict[str, Workload] = {
    w.name: w
    for w in (
        Workload(
            "image",
            "Dict(uint8 image 1x64x64, float vector 16), Discrete(128) masks, 256 steps x 8 envs",
            spaces.Dict(
                {"image": spaces.Box(0, 255, (1, 64, 64), np.uint8), "vector": spaces.Box(-1, 1, (16,), np.float32)}
            ),
            spaces.Discrete(128),
        ),
        Workload(
            "vector",
            "Dict(3 small float vectors), MultiDiscrete([5, 5, 5, 5]) masks, 256 steps x 8 envs",
            spaces.Dict({k: spaces.Box(-1, 1, (8,), np.float32) for k in ("position", "velocity", "goal")}),
            spaces.MultiDiscrete([5, 5, 5, 5]),
        ),
        Workload(
            "large-mask",
            "Box(32) observations, Discrete(4096) masks, 256 steps x 8 envs",
            spaces.Box(-1, 1, (32,), np.float32),
            spaces.Discrete(4096),
        ),
        Workload(
            "multibinary",
            "Box(32) observations, MultiBinary(384) masks, 256 steps x 8 envs",
            spaces.Box(-1, 1, (32,), np.float32),
            spaces.MultiBinary(384),
        ),
    )
}


def _make_inputs(workload: Workload, seed: int) -> tuple[list[tuple[Any, ...]], list[np.ndarray], Any]:
    """Pre-generate one rollout of SB3 ``add`` arguments (as MaskablePPO passes them) and masks."""
    rng = np.random.default_rng(seed)
    n = workload.n_envs
    groups = mask_spec(workload.action_space).groups

    def obs_of(space: spaces.Space) -> Any:
        if isinstance(space, spaces.Dict):
            return {key: obs_of(sub) for key, sub in space.spaces.items()}
        shape = (n, *(space.shape or ()))
        if np.issubdtype(space.dtype, np.integer):
            return rng.integers(0, 255, shape, dtype=space.dtype)
        return rng.standard_normal(shape, dtype=np.float32)

    if isinstance(workload.action_space, spaces.Discrete):
        action_shape: tuple[int, ...] = (n, 1)
    else:
        action_shape = (n, len(groups))
    steps, masks = [], []
    starts = np.cumsum((0, *groups[:-1]))
    for _ in range(workload.n_steps):
        action = rng.integers(0, 2, action_shape)
        steps.append(
            (
                obs_of(workload.observation_space),
                action,
                rng.standard_normal(n).astype(np.float32),
                (rng.random(n) < 0.01).astype(bool),
                torch.as_tensor(rng.standard_normal((n, 1)), dtype=torch.float32),
                torch.as_tensor(rng.standard_normal(n), dtype=torch.float32),
            )
        )
        mask = rng.random((n, sum(groups))) < 0.9
        mask[:, starts] = True  # every group keeps a valid choice
        np.put_along_axis(mask, starts + action, True, axis=1)  # and the action taken is allowed
        masks.append(mask)
    last = (torch.zeros(n, 1), np.zeros(n, dtype=bool))
    return steps, masks, last


def _make_buffer(library: str, workload: Workload, device: str, check_masks: bool = True) -> Any:
    module = sb3c_buffers if library == "sb3-contrib" else ours_buffers
    dict_obs = isinstance(workload.observation_space, spaces.Dict)
    cls = module.MaskableDictRolloutBuffer if dict_obs else module.MaskableRolloutBuffer
    extra = {} if library == "sb3-contrib" else {"check_masks": check_masks}
    return cls(
        workload.n_steps,
        workload.observation_space,
        workload.action_space,
        device,
        gae_lambda=0.95,
        gamma=0.99,
        n_envs=workload.n_envs,
        **extra,
    )


def _sync(device: str) -> None:
    if device.startswith("cuda"):
        torch.cuda.synchronize()


def run_iteration(buffer: Any, workload: Workload, inputs: Any, device: str) -> dict[str, float]:
    """Run one PPO iteration's buffer work and time each phase.

    :param buffer: a maskable rollout buffer of either library.
    :param workload: the case, for ``n_epochs`` and ``batch_size``.
    :param inputs: what :func:`_make_inputs` returned.
    :param device: the buffer's device, to synchronise before reading the clock.
    :return: seconds per phase, ``{"add": ..., "gae": ..., "get": ...}``.
    """
    steps, masks, (last_values, dones) = inputs
    times = {}
    start = time.perf_counter()
    buffer.reset()
    for args, mask in zip(steps, masks, strict=True):
        buffer.add(*args, action_masks=mask)
    _sync(device)
    times["add"] = time.perf_counter() - start
    start = time.perf_counter()
    buffer.compute_returns_and_advantage(last_values=last_values, dones=dones)
    _sync(device)
    times["gae"] = time.perf_counter() - start
    start = time.perf_counter()
    for _ in range(workload.n_epochs):
        for _batch in buffer.get(workload.batch_size):
            pass
    _sync(device)
    times["get"] = time.perf_counter() - start
    return times


def time_workload(
    workload: Workload, rounds: int, device: str, seed: int = 0, check_masks: bool = True
) -> dict[str, dict[str, float]]:
    """Time both libraries on one workload, alternating which goes first, and take medians.

    Each round runs one iteration of each library back to back, so the two see the same machine; the
    speed-up is the median over rounds of that round's ratio. On a shared machine whose speed drifts
    over seconds, this paired ratio is steadier than the ratio of the two medians.

    :param workload: the case.
    :param rounds: measured iterations per library (after one warm-up each).
    :param device: ``"cpu"`` or ``"cuda"``.
    :param seed: seed for the inputs and for ``np.random`` (minibatch order).
    :param check_masks: whether torchrl_mask checks each mask row in ``add`` (sb3-contrib never does).
    :return: ``{library: {phase: median seconds, ..., "total": median of per-round totals}}``, plus
        ``"speed-up"``: ``{phase: median over rounds of sb3-contrib's time / torchrl_mask's}``.
    """
    inputs = _make_inputs(workload, seed)
    libraries = ("sb3-contrib", "torchrl_mask")
    buffers = {lib: _make_buffer(lib, workload, device, check_masks) for lib in libraries}
    samples: dict[str, list[dict[str, float]]] = {lib: [] for lib in libraries}
    np.random.seed(seed)
    for lib in libraries:  # warm-up: first-touch page faults, lazy imports, allocator growth
        run_iteration(buffers[lib], workload, inputs, device)
    for round_ in range(rounds):
        order = libraries if round_ % 2 == 0 else libraries[::-1]
        for lib in order:
            times = run_iteration(buffers[lib], workload, inputs, device)
            times["total"] = sum(times.values())
            samples[lib].append(times)
    phases = (*PHASES, "total")
    result = {lib: {phase: statistics.median(t[phase] for t in samples[lib]) for phase in phases} for lib in libraries}
    ref, ours = samples["sb3-contrib"], samples["torchrl_mask"]
    result["speed-up"] = {
        phase: statistics.median(r[phase] / o[phase] for r, o in zip(ref, ours, strict=True)) for phase in phases
    }
    return result


def _peak_memory_child(library: str, workload_name: str, device: str) -> int:
    """In a fresh process: bytes of peak memory of one iteration above the memory before the buffer."""
    workload = WORKLOADS[workload_name]
    # Page in the code paths first (libtorch's kernels count in the resident set once touched), with a tiny
    # rollout of the same spaces, so that the baseline holds the code and the peak above it is data alone.
    tiny = dataclasses.replace(workload, n_steps=4, batch_size=8)
    run_iteration(_make_buffer(library, tiny, device), tiny, _make_inputs(tiny, seed=1), device)
    inputs = _make_inputs(workload, seed=0)
    if device.startswith("cuda"):
        torch.cuda.synchronize()
        base = torch.cuda.memory_allocated()
        buffer = _make_buffer(library, workload, device)
        run_iteration(buffer, workload, inputs, device)
        torch.cuda.reset_peak_memory_stats()
        run_iteration(buffer, workload, inputs, device)
        return int(torch.cuda.max_memory_allocated() - base)
    base = _status_kib("VmRSS")
    buffer = _make_buffer(library, workload, device)
    run_iteration(buffer, workload, inputs, device)
    with open("/proc/self/clear_refs", "w") as f:  # reset VmHWM to the current resident set
        f.write("5")
    run_iteration(buffer, workload, inputs, device)
    return (_status_kib("VmHWM") - base) * 1024


def _status_kib(field: str) -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    raise RuntimeError(f"/proc/self/status has no {field}")


def peak_memory(library: str, workload: str, device: str) -> int | None:
    """Peak memory of one iteration, measured in a fresh subprocess (see the module docstring).

    :param library: ``"sb3-contrib"`` or ``"torchrl_mask"``.
    :param workload: a key of :data:`WORKLOADS`.
    :param device: ``"cpu"`` or ``"cuda"``.
    :return: bytes, or None where the platform cannot measure it (no ``/proc``).
    """
    if not os.path.exists("/proc/self/clear_refs") and not device.startswith("cuda"):
        return None
    env = dict(os.environ, MALLOC_MMAP_THRESHOLD_=str(128 * 1024), MALLOC_TRIM_THRESHOLD_=str(128 * 1024))
    code = (
        "import json, torch; torch.set_num_threads(1); from torchrl_mask.benchmark import _peak_memory_child; "
        f"print(json.dumps(_peak_memory_child({library!r}, {workload!r}, {device!r})))"
    )
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
    return int(json.loads(out.stdout.strip().splitlines()[-1]))


def _mib(n: int | None) -> str:
    return "n/a" if n is None else f"{n / 2**20:.1f}"


def format_table(results: dict[str, dict[str, Any]], device: str) -> str:
    """Render the results as a Markdown table.

    :param results: ``{workload: {"times": time_workload(...), "memory": {library: bytes}}}``.
    :param device: shown in the header.
    :return: the table, one row per workload and phase.
    """
    lines = [
        f"| workload | phase | sb3-contrib ms | torchrl_mask ms | speed-up ({device}) |",
        "|---|---|---:|---:|---:|",
    ]
    for name, result in results.items():
        times = result["times"]
        for phase in (*PHASES, "total"):
            ref, ours, ratio = times["sb3-contrib"][phase], times["torchrl_mask"][phase], times["speed-up"][phase]
            label = f"**{phase}**" if phase == "total" else phase
            lines.append(f"| {name} | {label} | {ref * 1e3:.2f} | {ours * 1e3:.2f} | {ratio:.2f}x |")
        memory = result.get("memory")
        if memory:
            ref_m, ours_m = memory["sb3-contrib"], memory["torchrl_mask"]
            ratio = "n/a" if not ref_m or ours_m is None else f"{ours_m / ref_m:.2f}x of sb3-contrib"
            lines.append(f"| {name} | peak MiB | {_mib(ref_m)} | {_mib(ours_m)} | {ratio} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    """Run the benchmark and print the table.

    :param argv: command-line arguments (``--help`` lists them); None reads ``sys.argv``.
    :return: process exit code.
    """
    parser = argparse.ArgumentParser(
        prog="torchrl-mask bench",
        description="Time sb3-contrib's maskable rollout buffers against torchrl_mask's, side by side.",
    )
    parser.add_argument("--workloads", nargs="+", choices=sorted(WORKLOADS), default=list(WORKLOADS))
    parser.add_argument("--rounds", type=_positive_int, default=15, help="measured rounds per library (default 15)")
    parser.add_argument(
        "--device", default="all", help="cpu, cuda, or all: cpu, then cuda when a GPU is present (default all)"
    )
    parser.add_argument(
        "--threads",
        type=_positive_int,
        default=1,
        help="torch intra-op threads for both libraries (default 1: these buffer ops are memory-bound, and on a "
        "shared machine extra threads only add stalls)",
    )
    parser.add_argument("--no-memory", action="store_true", help="skip the peak-memory subprocesses")
    parser.add_argument(
        "--no-mask-check",
        action="store_true",
        help="time torchrl_mask with check_masks=False (sb3-contrib never checks that a mask allows an action)",
    )
    parser.add_argument("--json", metavar="PATH", help="also write the raw results as JSON")
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    devices = ["cpu", "cuda"] if args.device == "all" else [args.device]
    if "cuda" in devices and not torch.cuda.is_available():
        if args.device == "cuda":
            parser.error("--device cuda: no CUDA device is visible here; use --device cpu.")
        devices.remove("cuda")
        print("No CUDA device here: the GPU workloads are skipped.")
    report: dict[str, Any] = {"machine": _machine(), "devices": {}}
    for device in devices:
        results: dict[str, dict[str, Any]] = {}
        for name in args.workloads:
            workload = WORKLOADS[name]
            print(f"[{device}] {name}: {workload.description} ...", flush=True)
            results[name] = {"times": time_workload(workload, args.rounds, device, check_masks=not args.no_mask_check)}
            if not args.no_memory:
                results[name]["memory"] = {
                    lib: peak_memory(lib, name, device) for lib in ("sb3-contrib", "torchrl_mask")
                }
        print()
        print(
            f"Medians of {args.rounds} alternating rounds on {report['machine']}, device={device}, "
            f"{args.threads} torch thread(s), mask checks {'off' if args.no_mask_check else 'on'}; "
            "speed-up = median over rounds of sb3-contrib time / torchrl_mask time in the same round:"
        )
        print(format_table(results, device))
        print()
        report["devices"][device] = results
    if args.json:
        with open(args.json, "w") as f:
            json.dump(report, f, indent=2)
    return 0


def _positive_int(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {value}")
    return value


def _machine() -> str:
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
