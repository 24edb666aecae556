"""A run on a job-shop scheduling instance (``--env jobshop:<instance>``: a benchmark such as ``ta01``, or
``random:15x15`` for a fresh random instance every episode): job-shop-lib's dispatcher as a masked env
(:mod:`torchrl_mask.scheduling`), MaskablePPO on it as on any gymnasium env
(:class:`~torchrl_mask.app.gym_task.GymTask`: the same VecEnv or collectors, callbacks, checks), judged as the field
reads a schedule.

What differs is the evaluation and its files: the learned schedule's makespan and its gap to the best-known
makespan, whether every dispatch was legal and job-shop-lib's own check of the schedule, beside job-shop-lib's
dispatching rules on the same instance. It writes, besides ``model.zip`` and ``learning_curve.csv``:

- ``evaluation.json``: the schedule's figures, the rules' makespans and gaps, and the configuration;
- ``gantt.png``: the learned schedule as job-shop-lib draws it.

A ``random:JxM`` run is judged on one instance of that size drawn with the run's evaluation seed.
"""

from __future__ import annotations

from functools import partial
from pathlib import Path
from typing import Any

from torchrl_mask.app.config import ALGOS, TrainConfig
from torchrl_mask.app.files import write_file, write_json
from torchrl_mask.app.gym_task import GymTask
from torchrl_mask.app.hyperparams import UsageError
from torchrl_mask.app.models import Model
from torchrl_mask.app.results import EVAL_SEED_OFFSET

__all__ = ["JobShopTask"]

#: The policies a job-shop run builds: one shared network scoring each job, or SB3's flat MLP over all rows.
POLICIES = ("JobScorerPolicy", "MlpPolicy")


def _scheduling() -> Any:
    """:mod:`torchrl_mask.scheduling`, whose entry points say how to install job-shop-lib where it is missing."""
    import torchrl_mask.scheduling as scheduling

    return scheduling


class JobShopTask(GymTask):
    """A job-shop run (see the module), checked when made: the instance (known, its extra installed), the policy,
    the ``-i`` model (one action per job of this instance).

    :param config: the run; ``env_id`` is ``jobshop:<instance>``.
    :raises UsageError: an unknown instance, the ``scheduling`` extra not installed, a policy that does not fit, or an
        ``-i`` model for another number of jobs.
    """

    files_text = "learning_curve.csv, evaluation.json or gantt.png"

    def __init__(self, config: TrainConfig) -> None:
        self.instance = config.kind.name
        try:
            self.spec = _scheduling().check_instance(self.instance)
        except (ImportError, ValueError) as err:
            raise UsageError(f"--env {config.env_id}: {' '.join(str(err).split())}") from None
        policy = config.hyperparams.get("policy", POLICIES[0])
        if policy not in POLICIES:
            raise UsageError(
                f"policy={policy} on {config.env_id}: a job-shop run builds JobScorerPolicy (one network scores each "
                "job, as a dispatching rule does) or MlpPolicy (SB3's flat MLP); use one of those."
            )
        if policy == "JobScorerPolicy" and config.collector is not None:
            raise UsageError(
                f"--collector {config.collector} with JobScorerPolicy: the collectors' policy module runs SB3's "
                "stock networks only; leave --collector out (SB3's VecEnv), or give --hyperparams policy=MlpPolicy."
            )
        super().__init__(config, partial(_scheduling().make_env, self.instance))

    def check_saved(self, path: Path, data: dict[str, Any]) -> None:
        """The ``-i`` model has one action per job of this instance: else the one line that says so.

        :param path: the ``-i`` file, for the message.
        :param data: the zip's saved data.
        """
        jobs = getattr(data.get("action_space"), "n", None)
        try:
            _scheduling().check_instance(self.instance, num_jobs=None if jobs is None else int(jobs))
        except ValueError as err:
            raise UsageError(f"-i {path}: {' '.join(str(err).split())}") from None

    def choose_policy(self, config: TrainConfig, observation_space: Any) -> Any:
        """The policy asked for (checked when the task was made): ``JobScorerPolicy`` as its class."""
        return _scheduling().defaults.policy_class(config.hyperparams.get("policy", POLICIES[0]))

    def first_line(self) -> str:
        config, spec = self.config, self.spec
        rollouts = "SB3's DummyVecEnv" if config.collector is None else "a TorchRL collector"
        size = f"{spec.num_jobs} jobs x {spec.num_machines} machines"
        return (
            f"Training {ALGOS[config.algo]} on {config.env_id} ({size}, masks from job-shop-lib's dispatcher) for "
            f"{config.n_timesteps:,} dispatches: {config.n_envs} envs ({rollouts}), seed {config.seed}, device "
            f"{config.device}."
        )

    def evaluate(self, model: Model) -> dict[str, Any]:
        scheduling, seed = _scheduling(), self.config.seed + EVAL_SEED_OFFSET
        result = scheduling.evaluate(model, self.instance, seed=seed)
        self.schedule = result.pop("schedule")
        rules = scheduling.rule_makespans(self.instance, seed=seed)
        best = result["best_known"]
        result["rules"] = {
            name: {"makespan": makespan, "gap": None if best is None else makespan / best - 1}
            for name, makespan in rules.items()
        }
        return result

    def write(self, model: Model, evaluation: dict[str, Any], out: Path) -> list[str]:
        config = self.config
        write_json(out / "evaluation.json", {"config": config.record(out), "evaluation": evaluation})
        title = f"{config.env_id}: makespan {evaluation['makespan']}"
        write_file(out / "gantt.png", partial(_scheduling().plot_gantt, self.schedule, title=title, format="png"))
        return ["evaluation.json", "gantt.png"]

    def report(self, evaluation: dict[str, Any]) -> list[str]:
        def gap(value: float | None) -> str:
            return "" if value is None else f" (gap {value:+.1%} to the best known)"

        legal = "every dispatch legal" if evaluation["all_legal"] else "an illegal dispatch ended it"
        valid = "valid by job-shop-lib's check" if evaluation["valid"] else "NOT valid by job-shop-lib's check"
        best = evaluation["best_known"]
        lines = [
            f"\nSchedule of {self.instance} by the trained policy (its most likely legal job at each step):",
            f"  makespan {evaluation['makespan']}{gap(evaluation['gap'])}; {legal}; {valid}",
            f"  best known makespan {best}" + ("" if evaluation["optimum_known"] else " (not proven optimal)"),
            "job-shop-lib's dispatching rules on the same instance:",
        ]
        for name, rule in evaluation["rules"].items():
            lines.append(f"  {name:<8}makespan {rule['makespan']}{gap(rule['gap'])}")
        return lines

    def score(self, model: Model, episodes: int, seed: int) -> float:
        """Minus the learned schedule's makespan: a shorter schedule scores higher."""
        result = _scheduling().evaluate(model, self.instance, seed=seed + EVAL_SEED_OFFSET)
        return -float(result["makespan"]) if result["makespan"] is not None else float("-inf")
