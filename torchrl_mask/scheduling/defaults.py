"""``torchrl-mask train --env jobshop:<instance>``'s defaults, read from ``hyperparams.yml`` beside this module
(rl-zoo3's per-env hyperparameter file: one entry per instance or family, MaskablePPO's arguments as keys).

:func:`build_model` makes the ``MaskablePPO`` an entry describes, for scripts, the tutorial and the benchmark; the
``torchrl-mask train`` pipeline reads :func:`train_defaults` itself.

Example:
    >>> train_defaults("ta01")["n_envs"]
    8
    >>> train_defaults("random:15x15") == load_hyperparams()["random"]
    True
    >>> model, n_timesteps = build_model("ft06", seed=0)
    >>> model.n_envs, n_timesteps
    (8, 150000)
"""

from __future__ import annotations

import copy
import functools
from pathlib import Path
from typing import TYPE_CHECKING, Any

import yaml

if TYPE_CHECKING:
    from torchrl_mask.algorithms.ppo import MaskablePPO

__all__ = ["HYPERPARAMS_FILE", "build_model", "learning_rate", "load_hyperparams", "policy_class", "train_defaults"]

HYPERPARAMS_FILE = Path(__file__).with_name("hyperparams.yml")


@functools.cache
def load_hyperparams() -> dict[str, dict[str, Any]]:
    """Every entry of ``hyperparams.yml``, by name (``"default"``, ``"random"``, instance names)."""
    return yaml.safe_load(HYPERPARAMS_FILE.read_text())


def train_defaults(instance: str) -> dict[str, Any]:
    """The training defaults of one instance: its own entry, else its family's (``"random"`` for ``random:JxM``),
    else ``"default"``.

    :param instance: an instance name or ``random:JxM`` spec (not checked here: see ``check_instance``).
    :return: a fresh copy (``policy`` (``"JobScorerPolicy"``, :mod:`torchrl_mask.scheduling.network`'s, or SB3's
        ``"MlpPolicy"``), ``n_timesteps``, ``n_envs``, ``n_steps``, ``batch_size``, ``n_epochs``, ``learning_rate``
        (a number or rl-zoo3's ``"lin_<start>"``), ``gamma``, ``gae_lambda``, ``ent_coef``, ``policy_kwargs``),
        to change freely.
    """
    entries = load_hyperparams()
    family = instance.split(":", 1)[0]
    return copy.deepcopy(entries.get(instance) or entries.get(family) or entries["default"])


def learning_rate(value: float | str) -> Any:
    """A learning rate as MaskablePPO takes it: a number as it is, rl-zoo3's ``"lin_<start>"`` as the schedule that
    falls linearly from ``start`` to 0 over the run (SB3 calls it with the progress remaining, 1 to 0).

    :param value: a number or ``"lin_<start>"``.
    """
    if isinstance(value, str):
        start = float(value.removeprefix("lin_"))
        return lambda progress_remaining: start * progress_remaining
    return float(value)


def build_model(instance: str, seed: int = 0, **overrides: Any) -> tuple[MaskablePPO, int]:
    """The ``MaskablePPO`` an instance's defaults describe, on a ``DummyVecEnv`` of :func:`make_env` envs, each in
    SB3's ``Monitor`` (episode returns and lengths in ``ep_info_buffer``).

    :param instance: an instance name or ``random:JxM`` spec.
    :param seed: the model's and the envs' seed.
    :param overrides: entries that replace the defaults' (``n_envs=2``, ``n_steps=36``, ``verbose=1``...).
    :return: the model and the defaults' ``n_timesteps`` (or the override's).
    :raises ValueError: an unknown instance, with the fix.
    :raises ImportError: the ``scheduling`` extra is not installed.
    """
    from stable_baselines3.common.env_util import make_vec_env

    from torchrl_mask.algorithms.ppo import MaskablePPO
    from torchrl_mask.scheduling.env import make_env

    params = {**train_defaults(instance), **overrides}
    n_timesteps = int(params.pop("n_timesteps"))
    make_env(instance)  # checks the name once, before the envs are made
    venv = make_vec_env(make_env, n_envs=params.pop("n_envs"), seed=seed, env_kwargs={"instance": instance})
    params["learning_rate"] = learning_rate(params["learning_rate"])
    policy = policy_class(params.pop("policy", "MlpPolicy"))
    return MaskablePPO(policy, venv, seed=seed, device="cpu", **params), n_timesteps


def policy_class(name: str) -> Any:
    """The policy a defaults entry names: ``"JobScorerPolicy"`` is
    :class:`~torchrl_mask.scheduling.network.JobScorerPolicy`; any other name (``"MlpPolicy"``) is SB3's, passed on.

    :param name: the entry's ``policy``.
    """
    if name == "JobScorerPolicy":
        from torchrl_mask.scheduling.network import JobScorerPolicy

        return JobScorerPolicy
    return name
