"""Job-shop scheduling: job-shop-lib's instances and rules as masked envs, evaluated as the field reads them.

- ``instances``: instance names (job-shop-lib's benchmarks with their best-known makespans, ``random:JxM``), checked
  with one-line errors;
- ``observation``: what the policy sees, one row of features per job, and the makespan's lower bound (the reward);
- ``env``: ``JobShopEnv``, one dispatch per step through job-shop-lib's ``Dispatcher``, its legality as the mask;
  ``make_env``;
- ``network``: ``JobScorerPolicy``, MaskablePPO's policy that scores every job with one shared network, as a
  dispatching rule does;
- ``evaluation``: a model's schedule against the best-known makespan, job-shop-lib's dispatching rules and OR-Tools'
  CP-SAT, with job-shop-lib's validity checks;
- ``gantt``: job-shop-lib's Gantt chart of a schedule;
- ``defaults``: ``train`` defaults per instance (``hyperparams.yml``, rl-zoo3's form), and the ``MaskablePPO`` they
  describe.

The rules of scheduling (which move is legal, when an operation starts) are job-shop-lib's; nothing here re-states
them. Needs the ``scheduling`` extra (``pip install 'torchrl-mask[scheduling]'``): each entry point raises an
``ImportError`` that says so.

May import: :mod:`torchrl_mask.rollout`, :mod:`torchrl_mask.torchrl`, :mod:`torchrl_mask.algorithms`; never
:mod:`torchrl_mask.app` or :mod:`torchrl_mask.bench`.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from torchrl_mask.scheduling.defaults import build_model, train_defaults
    from torchrl_mask.scheduling.env import JobShopEnv, make_env
    from torchrl_mask.scheduling.evaluation import cp_sat_makespan, evaluate, rule_makespans, schedule_is_valid
    from torchrl_mask.scheduling.gantt import plot_gantt
    from torchrl_mask.scheduling.instances import InstanceSpec, benchmark_names, check_instance
    from torchrl_mask.scheduling.network import JobScorerPolicy

# Public names load on first use: job-shop-lib is imported only then, after require_job_shop_lib() has said how to
# install it if it is missing.
_HOMES = {
    "InstanceSpec": "instances",
    "benchmark_names": "instances",
    "check_instance": "instances",
    "train_defaults": "defaults",
    "build_model": "defaults",
    "JobShopEnv": "env",
    "make_env": "env",
    "JobScorerPolicy": "network",
    "evaluate": "evaluation",
    "rule_makespans": "evaluation",
    "cp_sat_makespan": "evaluation",
    "schedule_is_valid": "evaluation",
    "plot_gantt": "gantt",
}

__all__ = [
    "InstanceSpec",
    "JobScorerPolicy",
    "JobShopEnv",
    "benchmark_names",
    "build_model",
    "check_instance",
    "cp_sat_makespan",
    "evaluate",
    "make_env",
    "plot_gantt",
    "rule_makespans",
    "schedule_is_valid",
    "train_defaults",
]


def __getattr__(name: str) -> Any:
    if name not in _HOMES:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    if name not in ("InstanceSpec", "benchmark_names", "check_instance", "train_defaults"):
        importlib.import_module(f"{__name__}.instances").require_job_shop_lib()
    return getattr(importlib.import_module(f"{__name__}.{_HOMES[name]}"), name)
