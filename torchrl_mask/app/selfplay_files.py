"""What a self-play run writes into its output folder, besides ``model.zip``: the curve, the evaluation, the plot.

- ``win_rates.csv``: one row per measurement during training (:class:`~torchrl_mask.games.evaluation.WinRates`):
  ``timestep``, ``seconds`` (training's wall time up to the point, the measurements left out), with a pool
  ``snapshot`` (the pool slot that took a copy of the weights measured at that point, -1 for the points between:
  every snapshot is measured as it is taken), and ``vs_<opponent>_<value>`` columns (``vs_random_win``,
  ``vs_random_chips``, ``vs_self_score``);
- ``evaluation.json``: the final evaluation against the game's ladder
  (:func:`~torchrl_mask.games.evaluation.evaluate_ladder`), the configuration given, and ``"used"``: the
  hyperparameters the model really trained with (read from the model, so a loaded ``-i`` model's own values show);
- ``learning_curve.png``: the curve against training's wall time (the moves trained on along the top) and the
  final evaluation.

Only the ``seconds`` column and the plot's time axis depend on the machine and its load: the same run gives the
same ``evaluation.json`` bytes (the output path aside) and the same ``win_rates.csv`` values otherwise.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from torchrl_mask.app.config import TrainConfig
from torchrl_mask.app.files import write_file, write_json, write_text

__all__ = ["hyperparams_used", "moves_at_seconds", "moves_axis", "plot_win_rates", "write_curve", "write_evaluation"]

_PLAIN = (int, float, str, bool, type(None))


def write_curve(out: Path, curve: list[dict[str, Any]]) -> None:
    """``win_rates.csv``: the measurements during training, if any.

    :param out: the output folder.
    :param curve: :class:`~torchrl_mask.games.evaluation.WinRates`' points.
    """
    if curve:
        columns = list(curve[0])
        lines = [",".join(columns), *(",".join(f"{point.get(c, float('nan')):g}" for c in columns) for point in curve)]
        write_text(out / "win_rates.csv", "\n".join(lines) + "\n")


def hyperparams_used(model: Any, given: dict[str, Any]) -> dict[str, Any]:
    """The value the model holds for each hyperparameter the run gave (a schedule by its name).

    :param model: the trained MaskablePPO.
    :param given: the configuration's hyperparameters.
    :return: name -> value, for the names the model has as attributes, plus ``policy_kwargs`` as built.
    """
    used: dict[str, Any] = {}
    for key in given:
        value = getattr(model, key, None)
        if key != "policy_kwargs" and value is not None:
            used[key] = value if isinstance(value, _PLAIN) else type(value).__name__
    policy = model.policy
    used["policy_kwargs"] = {"net_arch": policy.net_arch, "activation_fn": f"nn.{policy.activation_fn.__name__}"}
    return used


def write_evaluation(out: Path, config: TrainConfig, evaluation: dict[str, Any], used: dict[str, Any]) -> None:
    """``evaluation.json``: the evaluation, the games per opponent, the configuration and the values used.

    :param out: the output folder.
    :param config: the run.
    :param evaluation: :func:`~torchrl_mask.games.evaluation.evaluate_ladder`'s dict.
    :param used: :func:`hyperparams_used`.
    """
    record = {**evaluation, "games": config.eval_episodes, "config": config.record(out), "used": used}
    write_json(out / "evaluation.json", record)


def _final_text(evaluation: dict[str, Any]) -> str:
    """The final evaluation for the chart's title, a few words per opponent, on lines that fit its width.

    :param evaluation: :func:`~torchrl_mask.games.evaluation.evaluate_ladder`'s dict.
    :return: ``"final: random 1.00/0.00/0.00, ..."``, an opponent never split over two lines.
    """
    parts = []
    for key, result in evaluation.items():
        if not key.startswith("vs_") or "skipped" in result:
            continue
        if result["metric"] == "win_rate":
            parts.append(f"{key.removeprefix('vs_')} {result['win']:.2f}/{result['draw']:.2f}/{result['loss']:.2f}")
        else:
            parts.append(f"{key.removeprefix('vs_')} {result['mean']:+.2f}")
    lines = ["final:"]
    for part in parts:
        if len(lines[-1]) + len(part) > 76:
            lines[-1] += ","
            lines.append(part)
        else:
            lines[-1] += (" " if lines[-1] == "final:" else ", ") + part
    return "\n".join(lines)


def plot_win_rates(curve: list[dict[str, Any]], evaluation: dict[str, Any], title: str, path: Path) -> None:
    """The measurements over training (win and loss rates, or chips, or the score) and the final evaluation.

    :param curve: the measurements of :class:`~torchrl_mask.games.evaluation.WinRates`.
    :param evaluation: the final evaluation (:func:`~torchrl_mask.games.evaluation.evaluate_ladder`).
    :param title: the game, for the title.
    :param path: the PNG to write.
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    win_rate = evaluation.get("metric") == "win_rate"
    fig, ax = plt.subplots(figsize=(8, 4.6), layout="constrained")
    seconds = [point["seconds"] for point in curve]
    for column in curve[0] if curve else {}:
        if column in ("timestep", "seconds", "snapshot") or column.endswith("_draw"):
            continue
        style = "--" if column.endswith("_loss") else "-"
        ax.plot(seconds, [point[column] for point in curve], ls=style, marker="o", label=column.removeprefix("vs_"))
    moves_axis(ax, curve)
    ylabel = "rate" if win_rate else f"{evaluation.get('metric', '')} per game ({evaluation.get('unit', '')})"
    ax.set(
        xlabel="training's wall time (s), the measurements left out",
        ylabel=ylabel,
        title=f"self-play on {title}\n{_final_text(evaluation)}",
    )
    if win_rate:
        ax.set_ylim(-0.02, 1.02)
    ax.grid(alpha=0.3)
    if curve:
        ax.legend(loc="best")
    try:
        write_file(path, lambda partial: fig.savefig(partial, format="png", dpi=100))
    finally:
        plt.close(fig)


def moves_axis(ax: Any, curve: list[dict[str, Any]]) -> Any:
    """The moves trained on at each wall time, along the top of ``ax`` (its x axis: training's seconds), labelled
    500k, 1.5M rather than with a ``1e6`` offset over the last tick.

    :param ax: a matplotlib ``Axes`` whose x axis is the curve's ``"seconds"``.
    :param curve: the measurements, each with ``"timestep"`` and ``"seconds"``, both rising.
    :return: the secondary axis, or None when the curve has fewer than two distinct points.
    """
    from matplotlib.ticker import EngFormatter

    functions = moves_at_seconds(curve)
    if functions is None:
        return None
    top = ax.secondary_xaxis("top", functions=functions)
    top.set_xlabel("moves trained on")
    top.xaxis.set_major_formatter(EngFormatter(sep=""))
    return top


def moves_at_seconds(curve: list[dict[str, Any]]) -> tuple[Callable[[Any], Any], Callable[[Any], Any]] | None:
    """The moves trained on at a wall time and back, interpolated between the curve's points and going on at the
    run's mean rate past both ends (``np.interp`` alone would clamp, piling the margins' ticks onto the last point).

    :param curve: the measurements, each with ``"timestep"`` and ``"seconds"``, both rising.
    :return: ``(to_moves, to_seconds)``, each mapping an array (or a number) to one of the same shape; None when the
        curve has fewer than two distinct points.
    """
    moves = np.array([float(point["timestep"]) for point in curve])
    times = np.array([float(point["seconds"]) for point in curve])
    if len(curve) < 2 or moves[-1] <= moves[0] or times[-1] <= times[0]:
        return None
    rate, far = (moves[-1] - moves[0]) / (times[-1] - times[0]), 1e9
    times = np.concatenate([[times[0] - far], times, [times[-1] + far]])
    moves = np.concatenate([[moves[0] - far * rate], moves, [moves[-1] + far * rate]])

    def to_moves(x: Any) -> Any:
        return np.interp(x, times, moves)

    def to_seconds(m: Any) -> Any:
        return np.interp(m, moves, times)

    return to_moves, to_seconds
