"""The arguments of ``torchrl-mask tune`` and their checks: :class:`TuneConfig`, built from the command line and
checked before torch is imported, before any trial runs and before ``--out`` is written.

rl-zoo3's ``-optimize`` options are kept by name: ``--n-trials``, ``--n-timesteps``, ``--sampler tpe|random``,
``--pruner median|none``, ``--n-startup-trials``, ``--n-evaluations``, ``--eval-episodes``, ``--storage``,
``--study-name``, ``--n-jobs``; ``--conf-file``/``--hyperparams`` give the fixed part, as ``train`` reads them. A
bad combination is one :class:`~torchrl_mask.app.config.UsageError` line (exit 2). The job is
:mod:`torchrl_mask.app.tune`.

Example:
    >>> storage_url(Path("runs/study"), None).startswith("sqlite:///") and storage_url(Path("x"), "j.log")
    'j.log'
"""

from __future__ import annotations

import argparse
import importlib.util
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

from torchrl_mask.app import run_folder, search_spaces
from torchrl_mask.app.arg_types import HelpFormatter, add_fixed_part, n_timesteps, positive_int, seed
from torchrl_mask.app.conf_file import load_conf_file
from torchrl_mask.app.config import ALGOS
from torchrl_mask.app.hyperparams import DEFAULT_HYPERPARAMS, UsageError, check_hyperparams, check_minibatches
from torchrl_mask.app.kinds import check_env_id, env_kind
from torchrl_mask.games.profile import game_profile

__all__ = ["PRUNERS", "SAMPLERS", "TuneConfig", "add_tune_parser", "check_tune_config", "storage_url", "tune_config"]

SAMPLERS = ("tpe", "random")
PRUNERS = ("median", "none")
STUDY_DB = "study.db"
JOURNAL_SUFFIX = ".log"  # rl-zoo3's habit: a --storage ending in .log is a journal file, not a database URL


@dataclass(frozen=True)
class TuneConfig:
    """Everything ``torchrl-mask tune`` needs.

    :param env_id: a gymnasium id of a masked env (``module:Id`` imports ``module`` first).
    :param algo: ``"ppo_mask"`` or ``"ppo_lstm_mask"``: the model and its search space.
    :param fixed: the checked fixed part (``n_envs`` included), searched for none of its names.
    :param n_timesteps: env steps of each trial, over all envs.
    :param n_trials: trials this process runs (each worker runs its own number).
    :param sampler: ``"tpe"`` (Optuna's ``TPESampler``) or ``"random"``.
    :param pruner: ``"median"`` (Optuna's ``MedianPruner``) or ``"none"``.
    :param n_startup_trials: trials drawn at random before TPE models, and completed before the median prunes.
    :param n_evaluations: masked evaluations during a trial, reported to Optuna for pruning.
    :param eval_episodes: episodes of each evaluation.
    :param storage: an Optuna RDB URL, or a path ending in ``.log`` (a journal file); None: ``<out>/study.db``.
    :param study_name: the study's name in the storage; None: ``<algo>-<env id>``.
    :param n_jobs: trials run side by side in this process (Optuna's threads).
    :param seed: trial ``n`` trains and evaluates with seed ``seed + n``; the sampler is seeded with ``seed``.
    :param out: output folder; None means ``runs/tune-<env>-<date>-<time>``.
    :param conf_file: the file the fixed part came from.
    :param progress_bar: show Optuna's progress bar.
    """

    env_id: str = "Taxi-v4"
    algo: str = "ppo_mask"
    fixed: dict[str, Any] = field(default_factory=lambda: {"n_envs": DEFAULT_HYPERPARAMS["n_envs"]})
    n_timesteps: int = 20_000
    n_trials: int = 10
    sampler: str = "tpe"
    pruner: str = "median"
    n_startup_trials: int = 5
    n_evaluations: int = 2
    eval_episodes: int = 5
    storage: str | None = None
    study_name: str | None = None
    n_jobs: int = 1
    seed: int = 0
    out: Path | None = None
    conf_file: Path | None = None
    progress_bar: bool = True

    @property
    def n_envs(self) -> int:
        """Envs stepped side by side in each trial."""
        return int(self.fixed.get("n_envs", 1))

    def output_dir(self) -> Path:
        """The output folder: :attr:`out`, or ``runs/tune-<env_id>-<date>-<time>`` (env id made file-safe)."""
        return run_folder.dated_folder(f"tune-{self.env_id}") if self.out is None else self.out

    def name(self) -> str:
        """The study's name: :attr:`study_name`, or ``<algo>-<env id>``."""
        return self.study_name or f"{self.algo}-{self.env_id}"

    def settings(self) -> dict[str, Any]:
        """What every trial of one study must share: the env, the model, the trial's steps, its evaluations and
        the fixed part (the search space's bounds depend on it). A study records its own; a worker that joins with
        others is refused, and each trial keeps them (``best_hyperparams.yml`` is written from its trial's).

        :return: a JSON-able dict.
        """
        return {
            "env_id": self.env_id,
            "algo": self.algo,
            "n_timesteps": self.n_timesteps,
            "n_evaluations": self.n_evaluations,
            "eval_episodes": self.eval_episodes,
            "fixed": self.fixed,
        }


def storage_url(out: Path, storage: str | None) -> str:
    """The study's storage: ``storage`` as given, or a SQLite file in ``out``.

    :param out: the output folder.
    :param storage: ``--storage``, or None.
    :return: an Optuna storage URL, or a journal file's path.
    """
    if storage is not None:
        return storage
    from sqlalchemy.engine import URL  # a folder's "?", "#" or "%" escaped: the file lands in the folder

    return URL.create("sqlite", database=str((out / STUDY_DB).absolute())).render_as_string(hide_password=False)


def add_tune_parser(commands: Any) -> argparse.ArgumentParser:
    """Add ``tune`` to the ``torchrl-mask`` subcommands.

    :param commands: the parser's subparsers (``add_subparsers()``).
    :return: the ``tune`` parser.
    """
    defaults = TuneConfig()
    tune = commands.add_parser(
        "tune",
        help="search MaskablePPO's hyperparameters with Optuna, every trial judged with masks",
        description="Search MaskablePPO's hyperparameters with Optuna (rl-zoo3's PPO space, every trial scored by "
        "the masked evaluation) and write the study, best_hyperparams.yml for `train --conf-file`, trials.csv "
        "and the optimisation-history and parameter-importance plots.",
        formatter_class=HelpFormatter,
    )
    tune.add_argument("--env", default=defaults.env_id, help="gymnasium id of an env with masks (module:Id too)")
    tune.add_argument("--algo", choices=sorted(ALGOS), default=defaults.algo, help="the model and its search space")
    add_fixed_part(
        tune,
        "rl-zoo3 YAML file: the fixed part",
        "fix hyperparameters (not searched), over the file's: n_envs=4 gamma=0.99",
    )
    tune.add_argument(
        "-n",
        "--n-timesteps",
        type=n_timesteps,
        metavar="N",
        help=f"env steps per trial (default: the file's n_timesteps, or {defaults.n_timesteps})",
    )
    _add_study_options(tune, defaults)
    return tune


def _add_study_options(tune: argparse.ArgumentParser, defaults: TuneConfig) -> None:
    """The study's options: trials, sampler, pruner, evaluations, storage, workers, seed, output."""
    tune.add_argument("--n-trials", type=positive_int, default=defaults.n_trials, help="trials this process runs")
    tune.add_argument("--sampler", choices=SAMPLERS, default=defaults.sampler, help="Optuna's TPE or random sampler")
    tune.add_argument("--pruner", choices=PRUNERS, default=defaults.pruner, help="Optuna's median pruner, or none")
    tune.add_argument(
        "--n-startup-trials",
        type=positive_int,
        default=defaults.n_startup_trials,
        help="trials before TPE models and before the median prunes",
    )
    tune.add_argument(
        "--n-evaluations",
        type=positive_int,
        default=defaults.n_evaluations,
        help="masked evaluations per trial, reported to Optuna for pruning",
    )
    tune.add_argument(
        "--eval-episodes", type=positive_int, default=defaults.eval_episodes, help="episodes per evaluation"
    )
    tune.add_argument(
        "--storage",
        metavar="URL",
        help="Optuna storage: an RDB URL (sqlite:///f.db, postgresql://user:pw@host/db, mysql://...) or a .log "
        "journal file; several processes given the same --storage and --study-name work on one study "
        f"(default: sqlite:///<out>/{STUDY_DB})",
    )
    tune.add_argument("--study-name", metavar="NAME", help="the study's name (default: <algo>-<env>)")
    tune.add_argument("--n-jobs", type=positive_int, default=defaults.n_jobs, help="trials run side by side (threads)")
    tune.add_argument("--seed", type=seed, default=defaults.seed, help="trial n trains with seed + n")
    tune.add_argument(
        "--out",
        type=Path,
        metavar="DIR",
        help="folder for the outputs (default: runs/tune-<env>-<date>-<time>); new or empty",
    )
    tune.add_argument("--no-progress", action="store_true", help="hide the progress bar")


def _fixed_part(args: argparse.Namespace) -> tuple[dict[str, Any], int]:
    """The file's entry (n_envs 1 if it gives none, as ``train``), or the built-in n_envs; ``--hyperparams`` over
    it; and the env steps per trial."""
    check_env_id(args.env)
    kind = env_kind(args.env)
    if args.conf_file is None:  # a game's trials play as many games side by side as its train defaults
        defaults = game_profile(kind.name).hyperparams if kind.is_game else DEFAULT_HYPERPARAMS
        fixed: dict[str, Any] = {"n_envs": defaults["n_envs"]}
    else:
        fixed = {"n_envs": 1, **load_conf_file(args.conf_file, args.env)[0]}
    fixed.update(check_hyperparams(dict(args.hyperparams), "--hyperparams"))
    steps = args.n_timesteps or fixed.pop("n_timesteps", None) or TuneConfig.n_timesteps
    fixed.pop("n_timesteps", None)
    return fixed, steps


# TuneConfig's fields that the parser gives under the same name, as they are.
_AS_GIVEN = {item.name for item in fields(TuneConfig)} - {"env_id", "fixed", "n_timesteps", "progress_bar"}


def tune_config(args: argparse.Namespace) -> TuneConfig:
    """The :class:`TuneConfig` of parsed ``tune`` arguments, checked (:func:`check_tune_config`).

    :param args: what the ``tune`` parser returned.
    :return: the checked configuration.
    :raises UsageError: a bad file, hyperparameter or combination.
    """
    fixed, steps = _fixed_part(args)
    given = {name: value for name, value in vars(args).items() if name in _AS_GIVEN}
    config = TuneConfig(env_id=args.env, fixed=fixed, n_timesteps=steps, progress_bar=not args.no_progress, **given)
    check_tune_config(config)
    return config


def _check_storage(storage: str) -> None:
    """A journal file whose folder exists, or a URL SQLAlchemy parses, of a database it has a dialect for."""
    if storage.endswith(JOURNAL_SUFFIX) and "://" not in storage:
        parent = Path(storage).parent
        if not parent.is_dir():
            raise UsageError(f"--storage {storage}: no folder {parent} for the journal file; create it first.")
        return
    from sqlalchemy.engine import make_url
    from sqlalchemy.exc import ArgumentError, NoSuchModuleError

    try:
        url = make_url(storage)
        url.get_dialect()
    except NoSuchModuleError:
        raise UsageError(
            f"--storage {storage}: SQLAlchemy has no dialect {url.drivername!r}; use sqlite, "
            "postgresql or mysql (with its driver installed)."
        ) from None
    except (ArgumentError, ValueError):
        raise UsageError(
            f"--storage {storage!r} is not a storage URL; pass e.g. sqlite:///study.db, "
            "postgresql://user:password@host/db, or a journal file ending in .log."
        ) from None
    if url.drivername.startswith("sqlite") and url.database and not Path(url.database).parent.is_dir():
        raise UsageError(f"--storage {storage}: no folder {Path(url.database).parent}; create it first.")


def check_tune_config(config: TuneConfig) -> Path:
    """Every check before a trial runs, in the order a user fixes them; nothing is written.

    :param config: the configuration.
    :return: the output folder.
    :raises UsageError: Optuna is not installed, a fixed rollout that leaves a one-row minibatch, more evaluations
        than a trial has rollouts' worth of steps, a bad storage, or an output folder that is in use or not empty.
    """
    if importlib.util.find_spec("optuna") is None:
        raise UsageError("torchrl-mask tune needs Optuna: pip install 'torchrl-mask[tune]'.")
    fixed = config.fixed
    if "n_steps" in fixed and fixed["n_steps"] * config.n_envs < 2:
        raise UsageError(
            f"n_steps={fixed['n_steps']} with n_envs={config.n_envs}: a rollout of one row trains on minibatches of "
            "one row (NaN parameters) whatever batch_size a trial draws; fix n_steps * n_envs to 2 or more."
        )
    smallest = search_spaces.N_STEPS[0] * config.n_envs
    if "n_steps" not in fixed and smallest > config.n_timesteps:
        raise UsageError(
            f"--n-timesteps {config.n_timesteps} with n_envs={config.n_envs}: the smallest rollout a trial draws "
            f"(n_steps={search_spaces.N_STEPS[0]}) is {smallest:,} steps, past the trial's budget; raise "
            f"--n-timesteps to {smallest} or more, or give n_envs or n_steps with --hyperparams."
        )
    if "n_steps" in fixed and "batch_size" in fixed:
        check_minibatches(fixed["n_steps"], config.n_envs, fixed["batch_size"], fixed.get("normalize_advantage", True))
    if config.n_evaluations > config.n_timesteps // config.n_envs:
        raise UsageError(
            f"--n-evaluations {config.n_evaluations} with --n-timesteps {config.n_timesteps} and n_envs="
            f"{config.n_envs}: more evaluations than steps per env; lower --n-evaluations."
        )
    if config.storage is not None:
        _check_storage(config.storage)
    out = run_folder.check_folder(config.output_dir(), "--out")
    run_folder.check_out(out, overwrite=False)
    return out
