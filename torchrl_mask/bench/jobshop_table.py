"""The job-shop table: MaskablePPO trained on each instance of a set, over seeds, beside job-shop-lib's dispatching
rules and OR-Tools' CP-SAT, as gaps to the best-known makespans.

``python -m torchrl_mask.bench.jobshop_table`` trains the instance's default ``MaskablePPO``
(:func:`~torchrl_mask.scheduling.build_model`, ``--timesteps`` dispatches) on each instance (``--instances``,
Taillard's 15x15 set ta01-ta10 by default) for each seed (``--seeds``, 0-2), ``--jobs`` runs at a time, one torch
thread each; or, with ``--train-on random:15x15``, one policy per seed on fresh random instances of that size
(Zhang et al. 2020's setting), judged on every instance of the set without training on it. Each trained policy is
judged twice on an instance:

- **greedy**: the most likely legal job at every step (:func:`~torchrl_mask.scheduling.evaluate`), one schedule;
- **best of K**: the shortest of the greedy schedule and ``--samples`` schedules drawn from the policy
  (K = ``--samples`` + 1; ``--samples`` x the instance's operations more dispatches, no training).

Every schedule is checked legal move by move and by job-shop-lib's validity checks. Beside them: each rule's
makespan (:func:`~torchrl_mask.scheduling.rule_makespans`) and CP-SAT's in ``--cp-sat-seconds`` on one worker
(:func:`~torchrl_mask.scheduling.cp_sat_makespan`). The report is a markdown table per instance (the median and
worst seed) and the mean gap over the set; ``--json`` writes every number.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import statistics
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any

import torch

__all__ = ["main", "train_and_judge"]

TAILLARD_15X15 = [f"ta{index:02d}" for index in range(1, 11)]


def train_and_judge(
    train_on: str, seed: int, timesteps: int, samples: int, judged_on: list[str] | None = None
) -> list[dict[str, Any]]:
    """Train ``train_on``'s default MaskablePPO for ``timesteps`` dispatches and judge it on instances.

    :param train_on: the instance (or ``random:JxM`` spec) trained on.
    :param seed: the model's seed (and the sampled schedules').
    :param timesteps: dispatches to learn.
    :param samples: schedules drawn from the trained policy for the best-of-K figure.
    :param judged_on: the benchmark instances to judge it on; ``None``: ``[train_on]``.
    :return: one dict per instance judged: ``instance``, ``seed``, ``trained_on``, ``greedy`` and ``best_of_k``
        makespans, ``all_legal`` and ``valid`` (every schedule judged), ``seconds`` (of learn()), ``timesteps``.
    """
    from torchrl_mask.scheduling import build_model

    torch.set_num_threads(1)
    model, _ = build_model(train_on, seed=seed)
    start = time.perf_counter()
    model.learn(timesteps)
    seconds = time.perf_counter() - start
    return [
        {
            **_judge(model, instance, seed, samples),
            "trained_on": train_on,
            "seconds": seconds,
            "timesteps": int(model.num_timesteps),
        }
        for instance in judged_on or [train_on]
    ]


def _judge(model: Any, instance: str, seed: int, samples: int) -> dict[str, Any]:
    from torchrl_mask.scheduling import evaluate

    greedy = evaluate(model, instance)
    torch.manual_seed(seed)
    judged = [greedy, *(evaluate(model, instance, deterministic=False) for _ in range(samples))]
    return {
        "instance": instance,
        "seed": seed,
        "greedy": greedy["makespan"],
        "best_of_k": min(result["makespan"] for result in judged),
        "all_legal": all(result["all_legal"] for result in judged),
        "valid": all(result["valid"] for result in judged),
    }


def _baselines(instance: str, cp_sat_seconds: float) -> dict[str, Any]:
    from torchrl_mask.scheduling import check_instance, cp_sat_makespan, rule_makespans

    makespan, status = cp_sat_makespan(instance, cp_sat_seconds)
    return {
        "best_known": check_instance(instance).upper_bound,
        "rules": rule_makespans(instance),
        "cp_sat": makespan,
        "cp_sat_status": status,
    }


def _gap(makespan: float, best_known: int) -> float:
    return 100.0 * (makespan / best_known - 1)


def _report(runs: list[dict[str, Any]], baselines: dict[str, dict[str, Any]], args: argparse.Namespace) -> str:
    rules = list(next(iter(baselines.values()))["rules"])
    head = [
        "instance",
        "best known",
        *rules,
        f"CP-SAT {args.cp_sat_seconds:g} s",
        "greedy median (worst)",
        f"best of {args.samples + 1} median (worst)",
    ]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    columns: dict[str, list[float]] = {
        name: [] for name in [*rules, "cp_sat", "greedy", "greedy_worst", "best", "best_worst"]
    }
    for instance, base in baselines.items():
        mine = [run for run in runs if run["instance"] == instance]
        bk = base["best_known"]
        row = [instance, str(bk)]
        for rule in rules:
            columns[rule].append(_gap(base["rules"][rule], bk))
            row.append(f"{base['rules'][rule]} ({columns[rule][-1]:.1f}%)")
        columns["cp_sat"].append(_gap(base["cp_sat"], bk))
        row.append(f"{base['cp_sat']} ({columns['cp_sat'][-1]:.1f}%)")
        for key, name in (("greedy", "greedy"), ("best_of_k", "best")):
            values = [run[key] for run in mine]
            median, worst = statistics.median(values), max(values)
            columns[name].append(_gap(median, bk))
            columns[f"{name}_worst"].append(_gap(worst, bk))
            row.append(f"{median:g} ({columns[name][-1]:.1f}%) ({worst} {columns[f'{name}_worst'][-1]:.1f}%)")
        lines.append("| " + " | ".join(row) + " |")
    means = [f"{statistics.mean(columns[rule]):.1f}%" for rule in rules]
    lines.append(
        "| mean gap | | " + " | ".join(means) + f" | {statistics.mean(columns['cp_sat']):.1f}% | "
        f"{statistics.mean(columns['greedy']):.1f}% ({statistics.mean(columns['greedy_worst']):.1f}%) | "
        f"{statistics.mean(columns['best']):.1f}% ({statistics.mean(columns['best_worst']):.1f}%) |"
    )
    return "\n".join(lines)


def _parse(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m torchrl_mask.bench.jobshop_table",
        description="MaskablePPO per instance over seeds, beside job-shop-lib's dispatching rules and CP-SAT.",
    )
    parser.add_argument("--instances", nargs="+", default=TAILLARD_15X15)
    parser.add_argument(
        "--train-on", default=None, help="one policy per seed trained on this (random:JxM), judged on every instance"
    )
    parser.add_argument("--seeds", nargs="+", type=int, default=[0, 1, 2])
    parser.add_argument("--timesteps", type=int, default=None, help="dispatches per run (default: the defaults')")
    parser.add_argument(
        "--samples", type=int, default=32, help="schedules drawn for the best-of-K figure (K = this + the greedy one)"
    )
    parser.add_argument("--cp-sat-seconds", type=float, default=30.0)
    parser.add_argument("--jobs", type=int, default=2, help="runs at a time (processes)")
    parser.add_argument("--json", type=Path, default=None, help="write every number to this file")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    """Train, judge and print the table (see the module).

    :param argv: the arguments (``--help`` lists them); None reads ``sys.argv``.
    :return: process exit code.
    """
    args = _parse(sys.argv[1:] if argv is None else argv)
    from torchrl_mask.scheduling import check_instance, train_defaults

    jobs = check_instance(args.train_on).num_jobs if args.train_on else None
    for instance in args.instances:  # a policy trained on random:JxM is judged on instances of J jobs only
        check_instance(instance, num_jobs=jobs)
    timesteps = args.timesteps or int(train_defaults(args.train_on or args.instances[0])["n_timesteps"])
    if args.train_on:
        work = [(args.train_on, seed, args.instances) for seed in args.seeds]
    else:
        work = [(instance, seed, [instance]) for instance in args.instances for seed in args.seeds]
    context = multiprocessing.get_context("spawn")
    with ProcessPoolExecutor(max_workers=args.jobs, mp_context=context) as pool:
        futures = [pool.submit(train_and_judge, i, s, timesteps, args.samples, judged) for i, s, judged in work]
        baselines = {instance: _baselines(instance, args.cp_sat_seconds) for instance in args.instances}
        runs = []
        for future in futures:
            runs += future.result()
            print("\n".join(json.dumps(run) for run in future.result()), flush=True)
    if args.json is not None:
        args.json.write_text(
            json.dumps({"args": vars(args) | {"json": str(args.json)}, "runs": runs, "baselines": baselines}, indent=1)
        )
    trained = f"trained on {args.train_on}, " if args.train_on else ""
    print(f"\n{trained}{runs[0]['timesteps']:,} dispatches per run, {len(args.seeds)} seeds\n")
    print(_report(runs, baselines, args))
    return 0 if all(run["all_legal"] and run["valid"] for run in runs) else 1


if __name__ == "__main__":
    raise SystemExit(main())
