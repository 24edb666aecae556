"""What the policy sees of a partial schedule: one row of features per job, a fixed ``(jobs, features)`` shape, and
the lower bound on the makespan whose rise is the reward.

The state is job-shop-lib's ``Dispatcher`` (which operation of each job is next, when each job and machine is free);
this module only reads it. Every row describes the job's next operation and what stands in its way, in the terms
the dispatching rules use (SPT's duration, MWKR's work remaining, MOPNR's operations remaining), so that a learned
rule can weigh them; times are relative to the dispatcher's current time.

===  ==========================================================================================================
col  feature of job ``j`` (0 for a finished job)
===  ==========================================================================================================
0    1 if the dispatcher allows ``j``'s next operation now (the action mask), else 0
1    duration of ``j``'s next operation / the instance's longest operation
2    work remaining in ``j`` / the initial lower bound
3    operations remaining in ``j`` / machines
4    time until ``j`` is free / the longest operation
5    time until the machine of ``j``'s next operation is free / the longest operation
6    work still to do on that machine / the initial lower bound
7    current time / the initial lower bound (the same in every row)
8    share of all operations scheduled (the same in every row)
===  ==========================================================================================================

The lower bound is the larger of every job's free time plus its remaining work and every machine's free time plus
the work still to do on it: it never falls, and it equals the makespan once all is scheduled (Zhang et al. 2020's
L2D rewards the rise of such a bound).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    from job_shop_lib import JobShopInstance
    from job_shop_lib.dispatching import Dispatcher

__all__ = ["NUM_FEATURES", "JobFeatures"]

NUM_FEATURES = 9


class JobFeatures:
    """The per-job features and the makespan's lower bound of one instance, read from its dispatcher.

    :param instance: a classic (not flexible) job-shop-lib instance.
    """

    def __init__(self, instance: JobShopInstance) -> None:
        jobs = instance.jobs
        self.num_jobs = len(jobs)
        self.num_machines = instance.num_machines
        width = max(len(job) for job in jobs)
        durations = np.zeros((self.num_jobs, width + 1))
        self._machines = np.zeros((self.num_jobs, width + 1), dtype=np.int64)
        for j, job in enumerate(jobs):
            durations[j, : len(job)] = [op.duration for op in job]
            self._machines[j, : len(job)] = [op.machine_id for op in job]
        self._durations = durations
        # work remaining from each position on: _suffix[j, k] = sum of durations[j, k:]
        self._suffix = np.cumsum(durations[:, ::-1], axis=1)[:, ::-1]
        self._lengths = np.array([len(job) for job in jobs])
        self._machine_work = np.bincount(
            self._machines[durations > 0], weights=durations[durations > 0], minlength=self.num_machines
        )
        self._rows = np.arange(self.num_jobs)
        self.longest = float(durations.max())
        self.initial_bound = float(max(self._suffix[:, 0].max(), self._machine_work.max()))
        self._total_ops = int(self._lengths.sum())

    def lower_bound(self, dispatcher: Dispatcher, work_left: np.ndarray) -> float:
        """The makespan's lower bound in the dispatcher's state.

        :param dispatcher: the instance's dispatcher.
        :param work_left: ``(machines,)`` the work not yet scheduled on each machine (see :meth:`work_left`).
        :return: the bound, in time units.
        """
        positions = np.asarray(dispatcher.job_next_operation_index)
        job_free = np.asarray(dispatcher.job_next_available_time, dtype=float)
        machine_free = np.asarray(dispatcher.machine_next_available_time, dtype=float)
        return float(max((job_free + self._suffix[self._rows, positions]).max(), (machine_free + work_left).max()))

    def work_left(self, dispatcher: Dispatcher) -> np.ndarray:
        """``(machines,)`` the work not yet scheduled on each machine."""
        positions = np.asarray(dispatcher.job_next_operation_index)
        done = np.arange(self._durations.shape[1])[None, :] < positions[:, None]
        scheduled = np.bincount(self._machines[done], weights=self._durations[done], minlength=self.num_machines)
        return self._machine_work - scheduled

    def __call__(self, dispatcher: Dispatcher, mask: np.ndarray, work_left: np.ndarray) -> np.ndarray:
        """The features, ``(jobs, NUM_FEATURES)`` float32, of the dispatcher's state.

        :param dispatcher: the instance's dispatcher.
        :param mask: ``(jobs,)`` bool, the jobs whose next operation the dispatcher allows now.
        :param work_left: ``(machines,)`` from :meth:`work_left`.
        """
        positions = np.asarray(dispatcher.job_next_operation_index)
        finished = positions >= self._lengths
        now = float(dispatcher.current_time()) if not finished.all() else 0.0
        machines = self._machines[self._rows, positions]
        job_free = np.asarray(dispatcher.job_next_available_time, dtype=float)
        machine_free = np.asarray(dispatcher.machine_next_available_time, dtype=float)[machines]
        features = np.stack(
            [
                mask.astype(float),
                self._durations[self._rows, positions] / self.longest,
                self._suffix[self._rows, positions] / self.initial_bound,
                (self._lengths - positions) / self.num_machines,
                np.maximum(job_free - now, 0.0) / self.longest,
                np.maximum(machine_free - now, 0.0) / self.longest,
                work_left[machines] / self.initial_bound,
                np.full(self.num_jobs, now / self.initial_bound),
                np.full(self.num_jobs, positions.sum() / self._total_ops),
            ],
            axis=1,
        )
        features[finished, 1:7] = 0.0
        return features.astype(np.float32)
