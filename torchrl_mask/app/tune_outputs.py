"""What ``torchrl-mask tune`` writes from its study: ``best_hyperparams.yml`` (the YAML ``torchrl-mask train
--conf-file`` reads), ``trials.csv`` and Optuna's optimisation-history and parameter-importance plots (PNG).

Everything is read from the study itself (the storage), so a worker writes the trials of every worker, and a
study stopped by Ctrl-C is written from the trials it kept.

Example:
    >>> literal_text({"net_arch": {"pi": [64], "vf": [64]}, "activation_fn": "nn.Tanh"})
    'dict(net_arch=dict(pi=[64], vf=[64]), activation_fn=nn.Tanh)'
"""

from __future__ import annotations

import warnings
from functools import partial
from pathlib import Path
from typing import Any

import optuna
import pandas  # noqa: F401  (imported here, before any trial: see below)
import yaml

from torchrl_mask.app.files import write_file, write_text
from torchrl_mask.app.kinds import env_kind

__all__ = [
    "BEST_YAML",
    "PLOTS",
    "TRIALS_CSV",
    "best_trial",
    "conf_text",
    "literal_text",
    "value_name",
    "write_outputs",
    "write_plots",
]

BEST_YAML = "best_hyperparams.yml"
TRIALS_CSV = "trials.csv"
PLOTS = {
    "optimization_history.png": "plot_optimization_history",
    "param_importances.png": "plot_param_importances",
}
# The order a person reads a file in: the run's size first, then the rollout, then PPO's scalars.
_ORDER = ("n_timesteps", "n_envs", "policy", "n_steps", "batch_size", "n_epochs", "learning_rate", "gamma")


def literal_text(value: Any) -> str:
    """A value as ``--hyperparams`` and rl-zoo3's files write it: ``dict(k=v)``, lists, ``nn.Name`` bare.

    :param value: a checked hyperparameter value (``policy_kwargs`` and what it holds).
    :return: its text, which :func:`~torchrl_mask.app.hyperparams.parse_hyperparam` reads back.
    """
    if isinstance(value, dict):
        return "dict(" + ", ".join(f"{key}={literal_text(item)}" for key, item in value.items()) + ")"
    if isinstance(value, list | tuple):
        return "[" + ", ".join(literal_text(item) for item in value) + "]"
    if isinstance(value, str) and value.startswith("nn."):
        return value
    return repr(value)


def best_trial(study: optuna.Study) -> optuna.trial.FrozenTrial | None:
    """The completed trial of the highest value, or None before one completed.

    :param study: the study.
    """
    try:
        return study.best_trial
    except ValueError:
        return None


def value_name(env_id: str) -> str:
    """What a trial's value is: a game's ladder score (``pettingzoo:<game>``), else the masked mean return.

    :param env_id: the env tuned.
    :return: the name, for the outputs.
    """
    return "ladder score" if env_kind(env_id).is_game else "masked mean return"


def conf_text(
    env_id: str, n_timesteps: int, trial: optuna.trial.FrozenTrial, eval_episodes: int, algo: str = "ppo_mask"
) -> str:
    """``best_hyperparams.yml``: the trial's hyperparameters keyed by env id, with the command that retrains it.

    The trial's own settings (its ``settings`` attribute: the steps, algo and evaluation it ran with) come first;
    the arguments stand for a trial that has none.

    :param env_id: the env tuned.
    :param n_timesteps: env steps per trial.
    :param trial: a completed trial, with its ``hyperparams`` and ``seed`` attributes.
    :param eval_episodes: episodes of the trial's evaluation.
    :param algo: the ``--algo`` tuned (named in the command unless it is ``ppo_mask``, ``train``'s default).
    :return: the file's text.
    """
    settings = trial.user_attrs.get("settings", {})
    env_id = settings.get("env_id", env_id)
    n_timesteps = settings.get("n_timesteps", n_timesteps)
    eval_episodes = settings.get("eval_episodes", eval_episodes)
    algo = settings.get("algo", algo)
    hyperparams = {"n_timesteps": n_timesteps, **trial.user_attrs["hyperparams"]}
    ordered = {key: hyperparams[key] for key in _ORDER if key in hyperparams}
    ordered.update(sorted((key, value) for key, value in hyperparams.items() if key not in ordered))
    if "policy_kwargs" in ordered:
        ordered["policy_kwargs"] = literal_text(ordered["policy_kwargs"])
    seed = trial.user_attrs["seed"]
    header = (
        f"# Best trial {trial.number}: {value_name(env_id)} {trial.value:g} over {eval_episodes} episodes, "
        f"seed {seed}.\n"
        f"# Retrain it: torchrl-mask train --env {env_id}{'' if algo == 'ppo_mask' else ' --algo ' + algo} "
        f"--conf-file {BEST_YAML} --seed {seed} "
        f"--eval-episodes {eval_episodes}\n"
    )
    return header + yaml.safe_dump({env_id: ordered}, sort_keys=False, default_flow_style=False, width=10_000)


def write_outputs(
    study: optuna.Study, out: Path, env_id: str, n_timesteps: int, eval_episodes: int, algo: str = "ppo_mask"
) -> list[str]:
    """Write ``trials.csv`` and, once a trial completed, ``best_hyperparams.yml`` (each replaced whole).

    :param study: the study.
    :param out: the output folder.
    :param env_id: the env tuned.
    :param n_timesteps: env steps per trial.
    :param eval_episodes: episodes per evaluation.
    :param algo: the ``--algo`` tuned.
    :return: the names of the files written.
    """
    written = []
    # trials_dataframe imports pandas on first use; that first import used to happen after trial 0, where a Ctrl-C
    # could cut it halfway and leave pandas half-initialized for the outputs written on the way out (a CI run's
    # test_ctrl_c_stops_the_study... failed so). The module imports it up front instead.
    frame = study.trials_dataframe()
    write_text(out / TRIALS_CSV, frame.to_csv(index=False))
    written.append(TRIALS_CSV)
    best = best_trial(study)
    if best is not None:
        write_text(out / BEST_YAML, conf_text(env_id, n_timesteps, best, eval_episodes, algo))
        written.append(BEST_YAML)
    return written


def write_plots(study: optuna.Study, out: Path) -> tuple[list[str], list[str]]:
    """Optuna's optimisation history and parameter importances, as PNG files (``optuna.visualization.matplotlib``).

    :param study: the study.
    :param out: the output folder.
    :return: the names written, and one line for each plot that could not be drawn (too few completed trials).
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from optuna.visualization import matplotlib as optuna_plots

    written, skipped = [], []
    values = {trial.value for trial in study.get_trials(deepcopy=False, states=(optuna.trial.TrialState.COMPLETE,))}
    for name, function in PLOTS.items():
        if function == "plot_param_importances" and len(values) == 1:  # Optuna would warn and draw equal bars
            skipped.append(f"{name}: not drawn (every completed trial scored {values.pop():g}: no parameter mattered)")
            continue
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
                axes = getattr(optuna_plots, function)(study)
        except (ValueError, RuntimeError) as err:  # e.g. importances need two completed trials
            skipped.append(f"{name}: not drawn ({' '.join(str(err).split())})")
            continue
        figure = axes.figure
        figure.set_size_inches(8, 5)
        figure.tight_layout()
        try:
            write_file(out / name, partial(figure.savefig, format="png", dpi=100))
        finally:
            plt.close(figure)
        written.append(name)
    return written, skipped
