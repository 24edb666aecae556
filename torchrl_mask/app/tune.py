"""The job behind ``torchrl-mask tune``: an Optuna study of masked PPO, every trial judged with masks.

Each trial draws its hyperparameters from :mod:`torchrl_mask.app.search_spaces` (the fixed part kept), trains
:class:`~torchrl_mask.MaskablePPO` (or :class:`~torchrl_mask.MaskableRecurrentPPO`) exactly as ``torchrl-mask
train`` would with them and the seed ``--seed + trial number``, and scores it by the masked evaluation of
:func:`torchrl_mask.app.results.mean_return` (sb3-contrib's ``evaluate_policy`` with ``use_masking=True``; for a
recurrent model the one that keeps the LSTM state): ``--n-evaluations`` times during training, each reported to
Optuna (``trial.report``) for its pruner, and once at the end, the trial's value. rl-zoo3's ``TrialEvalCallback``
scores without masks; a masked model is then judged on illegal moves.

A trial that raises or whose value is not finite (diverged parameters) is marked failed, its message kept as the
trial's ``fail_reason`` attribute, and the study goes on. Ctrl-C stops the study: the trials so far stay in the
storage and the outputs are written from them. The outputs, in ``--out``, rewritten after every trial:

- ``study.db``: the study (SQLite), unless ``--storage`` names another;
- ``best_hyperparams.yml``: the best trial's hyperparameters in the YAML ``torchrl-mask train --conf-file``
  reads, with the command that retrains it (same seed: the same model and value);
- ``trials.csv``: every trial (Optuna's ``trials_dataframe()``);
- ``optimization_history.png`` and ``param_importances.png``: Optuna's matplotlib plots, at the end.
"""

from __future__ import annotations

import math
import os
import socket
import sys
import threading
import time
import warnings
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

import optuna
import torch
from optuna.storages.journal import JournalFileBackend
from sqlalchemy.exc import DBAPIError
from stable_baselines3.common.callbacks import BaseCallback
from stable_baselines3.common.env_util import make_vec_env

from torchrl_mask.app import results, run_folder, search_spaces, selfplay_training, tune_args, tune_outputs
from torchrl_mask.app.config import (
    GAME_PREFIX,
    TrainConfig,
    UsageError,
    check_minibatches,
    game_fixed_share,
    game_images,
    game_league,
    game_self_share,
)
from torchrl_mask.app.masked_env import make_masked_env, one_line
from torchrl_mask.app.results import EVAL_SEED_OFFSET
from torchrl_mask.app.training import ALGORITHMS, _policy, model_kwargs, quiet_logger
from torchrl_mask.app.tune_args import JOURNAL_SUFFIX, TuneConfig, check_tune_config, storage_url
from torchrl_mask.games.evaluation import evaluate_ladder, ladder_score

__all__ = [
    "TrialDiverged",
    "TrialEvalCallback",
    "TuneResult",
    "make_study",
    "run_trial",
    "run_tune",
    "trial_value",
    "tune",
]


_WRITING = threading.Lock()  # --n-jobs: trials end in threads, each rewriting the same files


class TrialDiverged(RuntimeError):
    """A trial whose masked evaluation is not a finite number (its parameters diverged)."""


class TrialEvalCallback(BaseCallback):
    """rl-zoo3's ``TrialEvalCallback``, scored with masks: every ``eval_freq`` calls (env steps per env), the
    masked evaluation is reported to the trial; training stops when Optuna's pruner says so.

    :param trial: the Optuna trial.
    :param evaluate: the masked evaluation of a model.
    :param eval_freq: calls between evaluations.
    """

    def __init__(self, trial: optuna.Trial, evaluate: Any, eval_freq: int) -> None:
        super().__init__()
        self.trial, self.evaluate, self.eval_freq = trial, evaluate, eval_freq
        self.evaluations = 0
        self.pruned = False

    def _on_step(self) -> bool:
        if self.n_calls % self.eval_freq != 0:
            return True
        value = self.evaluate(self.model)
        if not math.isfinite(value):
            raise TrialDiverged(f"masked evaluation {value} at {self.num_timesteps} steps: the parameters diverged")
        self.evaluations += 1
        self.trial.report(value, self.evaluations)
        self.pruned = self.trial.should_prune()
        return not self.pruned


def _train_config(config: TuneConfig, hyperparams: dict[str, Any], seed: int) -> TrainConfig:
    """The ``train`` configuration a trial is: what ``train --conf-file best_hyperparams.yml`` would run (a game
    trains against its default league, as ``train`` gives it with no league option)."""
    rest = {key: value for key, value in hyperparams.items() if key != "n_envs"}
    pool_size, league_players = game_league(config.env_id, None, None)
    return TrainConfig(
        env_id=config.env_id, n_timesteps=config.n_timesteps, n_envs=config.n_envs, hyperparams=rest, seed=seed,
        eval_episodes=config.eval_episodes, verbose=0, progress_bar=False, algo=config.algo,  # type: ignore[arg-type]
        pool_size=pool_size, league_players=league_players,
        fixed_share=game_fixed_share(config.env_id, None, bool(pool_size or league_players)),
        self_share=game_self_share(config.env_id, None, bool(pool_size or league_players)),
        images=game_images(config.env_id, None, config.algo == "ppo_mask"),
    )  # fmt: skip


def _model(train_config: TrainConfig, env: Any) -> Any:
    """A new model as ``train`` builds it (same policy, arguments and seed)."""
    env_space = env.observation_space
    policy = _policy(train_config, env_space)
    kwargs = model_kwargs(train_config.hyperparams, policy, train_config.algo)
    model = ALGORITHMS[train_config.algo](
        policy, env, device="cpu", tensorboard_log=None, verbose=0, seed=train_config.seed, **kwargs
    )
    quiet_logger(model, train_config)
    return model


def trial_value(model: Any, env_id: str, episodes: int, seed: int, use_masking: bool = True) -> float:
    """A trial's score: the mean return of the masked evaluation, as ``train`` reports it.

    :param model: the trained model.
    :param env_id: the env.
    :param episodes: episodes to play.
    :param seed: the trial's seed.
    :param use_masking: False scores without masks (what rl-zoo3 does), for comparison.
    :return: the mean episode return.
    """
    return results.mean_return(model, partial(make_masked_env, env_id), episodes, seed, use_masking)


def run_trial(config: TuneConfig, trial: optuna.Trial) -> float:
    """Train one trial's model and return its masked evaluation.

    :param config: the study's configuration.
    :param trial: the Optuna trial.
    :return: the mean return of the masked evaluation at the end of training.
    :raises optuna.TrialPruned: the pruner stopped it.
    :raises TrialDiverged: its evaluation is not finite.
    """
    seed = config.seed + trial.number
    hyperparams = search_spaces.sample(config.algo, trial, config.fixed, config.n_timesteps)
    for key, value in {
        "seed": seed,
        "hyperparams": hyperparams,
        "worker": f"{socket.gethostname()}:{os.getpid()}",
    }.items():
        trial.set_user_attr(key, value)
    train_config = _train_config(config, hyperparams, seed)
    rest = train_config.hyperparams
    check_minibatches(rest.get("n_steps", 2048), config.n_envs, rest.get("batch_size", 64),
                      rest.get("normalize_advantage", True))  # fmt: skip
    eval_freq = max(config.n_timesteps // config.n_evaluations // config.n_envs, 1)
    if config.env_id.startswith(GAME_PREFIX):
        evaluate = partial(_evaluate_game, config.env_id, config.eval_episodes, seed)
        callback = TrialEvalCallback(trial, evaluate, eval_freq)
        model = _learn_game(train_config, callback)
    else:
        evaluate = partial(_evaluate, config.env_id, config.eval_episodes, seed)
        callback = TrialEvalCallback(trial, evaluate, eval_freq)
        model = _learn(train_config, callback)
    if callback.pruned:
        raise optuna.TrialPruned(f"pruned after {callback.evaluations} evaluation(s)")
    return evaluate(model)


def _learn(train_config: TrainConfig, callback: BaseCallback) -> Any:
    """A gymnasium trial's training: ``n_envs`` masked envs, as ``train`` makes them."""
    env_id, n_envs, seed = train_config.env_id, train_config.n_envs, train_config.seed
    env = make_vec_env(make_masked_env, n_envs=n_envs, seed=seed, env_kwargs={"env_id": env_id})
    try:
        model = _model(train_config, env)
        model.learn(train_config.n_timesteps, callback)
    finally:
        env.close()
    return model


def _learn_game(train_config: TrainConfig, callback: BaseCallback) -> Any:
    """A ``pettingzoo:<game>`` trial's training: self-play, as ``train`` runs it (the collector in this process,
    the game's default league)."""
    game = train_config.env_id.removeprefix(GAME_PREFIX)
    model = selfplay_training.build_model(train_config, game, "cpu")
    collector = selfplay_training.build_collector(train_config, model, game, train_config.pool_size)
    return model.learn(train_config.n_timesteps, callback, collector=collector)


def game_value(env_id: str, episodes: int, seed: int, model: Any) -> float:
    """A game trial's score: the model against its game's whole ladder, as one number
    (:func:`~torchrl_mask.games.evaluation.ladder_score`: mean ``win - loss`` over the opponents, or chips, or
    the shared score), from the same evaluation ``train`` writes to ``evaluation.json``.

    :param env_id: ``"pettingzoo:<game>"``.
    :param episodes: games per opponent.
    :param seed: the trial's seed.
    :param model: the trained model.
    :return: the score.
    """
    return ladder_score(evaluate_ladder(model, env_id.removeprefix(GAME_PREFIX), episodes, seed + EVAL_SEED_OFFSET))


def _evaluate_game(env_id: str, episodes: int, seed: int, model: Any) -> float:
    value = game_value(env_id, episodes, seed, model)
    if not math.isfinite(value):
        raise TrialDiverged(f"ladder score {value}: the parameters diverged")
    return value


def _evaluate(env_id: str, episodes: int, seed: int, model: Any) -> float:
    value = trial_value(model, env_id, episodes, seed)
    if not math.isfinite(value):
        raise TrialDiverged(f"masked evaluation {value}: the parameters diverged")
    return value


def _objective(config: TuneConfig) -> Any:
    """The study's objective: :func:`run_trial`, one torch thread, an error's message kept on the trial."""

    def objective(trial: optuna.Trial) -> float:
        torch.set_num_threads(1)
        try:
            return run_trial(config, trial)
        except (optuna.TrialPruned, KeyboardInterrupt):
            raise
        except Exception as err:
            trial.set_user_attr("fail_reason", f"{type(err).__name__}: {one_line(err)}")
            raise

    return objective


def make_study(config: TuneConfig, out: Path) -> optuna.Study:
    """Create the study, or load it if the storage has one of that name (another worker's, or an earlier run's).

    :param config: the configuration (sampler, pruner, storage, name).
    :param out: the output folder, home of the default SQLite file.
    :return: the study, maximising the masked evaluation.
    :raises UsageError: the storage cannot be opened.
    """
    sampler: optuna.samplers.BaseSampler = (
        optuna.samplers.TPESampler(n_startup_trials=config.n_startup_trials, seed=config.seed)
        if config.sampler == "tpe"
        else optuna.samplers.RandomSampler(seed=config.seed)
    )
    pruner: optuna.pruners.BasePruner = (
        optuna.pruners.MedianPruner(n_startup_trials=config.n_startup_trials, n_warmup_steps=config.n_evaluations // 3)
        if config.pruner == "median"
        else optuna.pruners.NopPruner()
    )
    url = storage_url(out, config.storage)
    for attempt in range(5):  # workers that start together may race to create the tables of one SQLite file
        try:
            storage: Any = url
            if url.endswith(JOURNAL_SUFFIX) and "://" not in url:
                storage = optuna.storages.JournalStorage(JournalFileBackend(url))
            return optuna.create_study(storage=storage, sampler=sampler, pruner=pruner, study_name=config.name(),
                                       direction="maximize", load_if_exists=True)  # fmt: skip
        except DBAPIError as err:  # OperationalError (locked), IntegrityError (both stamped the schema)
            if attempt == 4:
                raise UsageError(f"--storage {url}: cannot open it ({one_line(err.orig or err)})") from None
            time.sleep(0.5 + attempt)
        except ValueError as err:  # e.g. an existing study that minimises
            raise UsageError(f"--study-name {config.name()}: {one_line(err)}") from None
    raise AssertionError("unreachable")


@dataclass
class TuneResult:
    """What :func:`tune` produced.

    :param study: the study (every worker's trials).
    :param out: the output folder.
    :param files: the files written in ``out``.
    :param notes: a line for each plot that could not be drawn.
    :param interrupted: Ctrl-C stopped the study.
    """

    study: optuna.Study
    out: Path
    files: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    interrupted: bool = False


def _prepare(config: TuneConfig) -> Path:
    """Every check, in the order a user fixes them: the configuration, the env and the fixed part's policy."""
    out = check_tune_config(config)
    if config.env_id.startswith(GAME_PREFIX):  # the game was checked; its trials build their model as train does
        return out
    env = make_masked_env(config.env_id)  # an unknown id or an env without masks: refused here
    try:
        train_config = _train_config(config, config.fixed, config.seed)
        model_kwargs(train_config.hyperparams, _policy(train_config, env.observation_space), config.algo)
    finally:
        env.close()
    return out


def _report_trial(config: TuneConfig, out: Path, study: optuna.Study, trial: optuna.trial.FrozenTrial) -> None:
    """After each trial: one line, and the CSV and the best YAML rewritten."""
    state = trial.state.name.lower()
    value = f" value {trial.value:g}" if trial.value is not None else ""
    reason = trial.user_attrs.get("fail_reason", "")
    with _WRITING:
        print(f"trial {trial.number}: {state}{value}{': ' + reason if reason else ''}", flush=True)
        tune_outputs.write_outputs(study, out, config.env_id, config.n_timesteps, config.eval_episodes, config.algo)


def tune(config: TuneConfig) -> TuneResult:
    """Run ``config.n_trials`` trials of the study (joining it if the storage has it), then write the outputs.

    :param config: the configuration.
    :return: the study, the folder and the files written; ``interrupted`` after Ctrl-C (the trials so far kept).
    :raises UsageError: a check failed, before anything was written.
    """
    out = _prepare(config)
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    optuna.logging.disable_default_handler()  # a failed trial is one line of ours, not Optuna's traceback
    interrupted = False
    with run_folder.claim(out, overwrite=False):
        study = make_study(config, out)
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
                study.optimize(
                    _objective(config), n_trials=config.n_trials, n_jobs=config.n_jobs, catch=(Exception,),
                    callbacks=[partial(_report_trial, config, out)], show_progress_bar=config.progress_bar,
                    gc_after_trial=True,
                )  # fmt: skip
        except KeyboardInterrupt:
            interrupted = True
        files = tune_outputs.write_outputs(
            study, out, config.env_id, config.n_timesteps, config.eval_episodes, config.algo
        )
        plots, notes = tune_outputs.write_plots(study, out)
    if config.storage is None:
        files.insert(0, tune_args.STUDY_DB)
    return TuneResult(study, out, files + plots, notes, interrupted)


def run_tune(config: TuneConfig) -> int:
    """Run ``torchrl-mask tune`` and report it.

    :param config: the checked configuration.
    :return: 0; 130 after Ctrl-C (the trials so far kept, the outputs written from them).
    """
    n_jobs = f", {config.n_jobs} at a time" if config.n_jobs > 1 else ""
    print(
        f"Tuning {ALGORITHMS[config.algo].__name__} on {config.env_id}: {config.n_trials} trials of "
        f"{config.n_timesteps:,} steps{n_jobs}, {config.sampler} sampler, pruner {config.pruner}, "
        f"study {config.name()!r}.",
        flush=True,
    )
    result = tune(config)
    finished = [trial for trial in result.study.trials if trial.state.is_finished()]
    counts = {
        state: sum(trial.state.name.lower() == state for trial in finished) for state in ("complete", "pruned", "fail")
    }
    print(f"\nStudy {config.name()!r}: {len(finished)} trials ({', '.join(f'{n} {s}' for s, n in counts.items())}).")
    best = tune_outputs.best_trial(result.study)
    if best is not None:
        value = f"{tune_outputs.value_name(config.env_id)} {best.value:g}"
        print(f"Best: trial {best.number}, {value}, seed {best.user_attrs['seed']}.")
    for note in result.notes:
        print(f"  {note}")
    print(f"Saved to {result.out}/: " + ", ".join(result.files))
    if result.interrupted:
        print(
            "torchrl-mask: interrupted; the trials so far are kept and the outputs written from them.", file=sys.stderr
        )
        return 130
    return 0
