"""A learned schedule read as the field reads it: makespan, gap to the best-known makespan, beside job-shop-lib's
dispatching rules and OR-Tools' CP-SAT on the same instance, with job-shop-lib's own checks of the schedule.

The gap is ``makespan / best_known - 1``, with the best-known makespan the instance's upper bound in job-shop-lib's
metadata (its optimum where that is proven), as Zhang et al. 2020 and Tassel et al. 2021 report it.

Example:
    >>> rules = rule_makespans("ft06")
    >>> sorted(rules)
    ['FCFS', 'LPT', 'MOPNR', 'MWKR', 'SPT']
"""

from __future__ import annotations

from typing import Any

from job_shop_lib import JobShopInstance, Schedule
from job_shop_lib.constraint_programming import ORToolsSolver
from job_shop_lib.dispatching.rules import DispatchingRuleSolver
from job_shop_lib.exceptions import NoSolutionFoundError, ValidationError

from torchrl_mask.scheduling.env import JobShopEnv
from torchrl_mask.scheduling.instances import check_instance, load_instance

__all__ = ["RULES", "CpSatSolver", "cp_sat_makespan", "evaluate", "rule_makespans", "schedule_is_valid"]

# job-shop-lib's deterministic dispatching rules (DispatchingRuleType values), by the names papers give them.
RULES = {
    "SPT": "shortest_processing_time",
    "LPT": "largest_processing_time",
    "FCFS": "first_come_first_served",
    "MWKR": "most_work_remaining",
    "MOPNR": "most_operations_remaining",
}


def schedule_is_valid(schedule: Schedule) -> bool:
    """Whether job-shop-lib accepts ``schedule`` as a complete, valid schedule of its instance.

    Three of its checks: every operation scheduled (``is_complete``); no two operations overlap on a machine
    (``Schedule.check_schedule``); and the machine sequences rebuilt by its ``Dispatcher``, which starts an
    operation only after its job's previous one (``Schedule.from_job_sequences``), give the same start times.

    :param schedule: a job-shop-lib ``Schedule``.
    """
    if not schedule.is_complete():
        return False
    try:
        Schedule.check_schedule(schedule.schedule)
        rebuilt = Schedule.from_job_sequences(schedule.instance, schedule.job_sequences())
    except ValidationError:
        return False
    return bool(rebuilt.schedule == schedule.schedule)


def evaluate(model: Any, instance: str, seed: int = 0, deterministic: bool = True) -> dict[str, Any]:
    """Schedule ``instance`` with a trained model and compare the makespan with the best-known one.

    :param model: a trained ``MaskablePPO`` (anything with sb3-contrib's ``predict(obs, action_masks=...)``) whose
        action space has one action per job of ``instance``.
    :param instance: a benchmark name, or a ``random:JxM`` spec (then ``seed`` draws the instance).
    :param seed: the seed of the random instance, and of the policy's draws when not ``deterministic``.
    :param deterministic: take the policy's most likely legal job at each step.
    :return: ``instance``, ``makespan``, ``best_known`` (upper bound; ``None`` for a random instance), ``lower_bound``,
        ``optimum_known``, ``gap`` (``makespan / best_known - 1``, or ``None``), ``all_legal`` (every action the
        model took was allowed by the mask; the episode stops at the first that was not, with ``makespan``
        ``None``), ``valid`` (:func:`schedule_is_valid`), ``steps`` and ``schedule`` (job-shop-lib's ``Schedule``).
    :raises ValueError: an unknown instance, or one with another number of jobs than the model has actions for.
    """
    spec = check_instance(instance, num_jobs=int(model.action_space.n))
    env = JobShopEnv(spec)
    obs, _ = env.reset(seed=seed)
    done, steps, all_legal = False, 0, True
    while not done:
        mask = env.action_masks()
        action, _ = model.predict(obs, action_masks=mask, deterministic=deterministic)
        if not mask[int(action)]:
            all_legal = False
            break
        obs, _, done, _, _ = env.step(int(action))
        steps += 1
    makespan = env.schedule.makespan() if done else None
    gap = None if makespan is None or spec.upper_bound is None else makespan / spec.upper_bound - 1
    return {
        "instance": instance,
        "makespan": makespan,
        "best_known": spec.upper_bound,
        "lower_bound": spec.lower_bound,
        "optimum_known": spec.optimum_known,
        "gap": gap,
        "all_legal": all_legal,
        "valid": done and schedule_is_valid(env.schedule),
        "steps": steps,
        "schedule": env.schedule,
    }


def _instance(instance: str, seed: int) -> JobShopInstance:
    return load_instance(check_instance(instance), seed=seed)


def rule_makespans(instance: str, seed: int = 0) -> dict[str, int]:
    """The makespans of job-shop-lib's dispatching rules on ``instance`` (its ``DispatchingRuleSolver``, with its
    default ready-operations filters: the same legal moves as :class:`~torchrl_mask.scheduling.env.JobShopEnv`'s).

    :param instance: a benchmark name or a ``random:JxM`` spec.
    :param seed: the seed of a random instance.
    :return: makespan by rule (``SPT``, ``LPT``, ``FCFS``, ``MWKR``, ``MOPNR``).
    """
    problem = _instance(instance, seed)
    return {name: DispatchingRuleSolver(rule).solve(problem).makespan() for name, rule in RULES.items()}


class CpSatSolver(ORToolsSolver):
    """job-shop-lib's ``ORToolsSolver`` with CP-SAT's number of search workers set: it makes a fresh ``CpSolver`` in
    ``_initialize_model`` (its one hook for solver parameters), which otherwise searches on every core.

    :param workers: CP-SAT's ``num_workers``.
    :param max_time_in_seconds: CP-SAT's time limit.
    """

    def __init__(self, workers: int, max_time_in_seconds: float | None = None) -> None:
        super().__init__(max_time_in_seconds=max_time_in_seconds)
        self.workers = workers

    def _initialize_model(self, *args: Any, **kwargs: Any) -> None:
        super()._initialize_model(*args, **kwargs)
        self.solver.parameters.num_workers = self.workers


def cp_sat_makespan(instance: str, seconds: float, seed: int = 0, workers: int = 1) -> tuple[int | None, str]:
    """The best makespan OR-Tools' CP-SAT finds on ``instance`` in ``seconds`` (job-shop-lib's ``ORToolsSolver``).

    :param instance: a benchmark name or a ``random:JxM`` spec.
    :param seconds: CP-SAT's time limit (wall-clock: the only budget CP-SAT takes).
    :param seed: the seed of a random instance.
    :param workers: CP-SAT's search workers (threads).
    :return: ``(makespan, status)``: status ``"optimal"`` (proven) or ``"feasible"``; ``(None, "unknown")`` when
        no schedule was found in time.
    """
    try:
        schedule = CpSatSolver(workers, max_time_in_seconds=seconds).solve(_instance(instance, seed))
    except NoSolutionFoundError:
        return None, "unknown"
    return int(schedule.metadata["makespan"]), str(schedule.metadata["status"])
