"""What ``torchrl-mask tune`` searches: rl-zoo3's PPO space, and what masking and the LSTM add, per ``--algo``.

rl-zoo3's PPO space (`rl_zoo3/hyperparams_opt.py <https://github.com/DLR-RM/rl-baselines3-zoo>`_, its
``sample_ppo_params``) is kept by name and range, so that a study reads as rl-zoo3's does:

==========================  ==========================================================================
``n_steps``                 32 to 2048 (powers of 2), only those whose rollout fits in one trial
``batch_size``              32 to 512 (powers of 2), no larger than the rollout
``one_minus_gamma``         1e-4 to 0.03, log scale (``gamma = 1 - one_minus_gamma``)
``one_minus_gae_lambda``    1e-4 to 0.1, log scale (``gae_lambda = 1 - one_minus_gae_lambda``)
``learning_rate``           1e-5 to 2e-3, log scale
``ent_coef``                1e-8 to 0.1, log scale
``clip_range``              0.1, 0.2, 0.3, 0.4
``n_epochs``                1, 5, 10, 20
``max_grad_norm``           0.3 to 2
``net_arch``                tiny ``dict(pi=[64], vf=[64])``, small ``[64, 64]`` each, medium ``[256, 256]`` each
``activation_fn``           tanh, relu
==========================  ==========================================================================

What masking adds: the rollout (``n_steps * n_envs`` rows) never leaves a last minibatch of one row, whose
advantage normalisation turns the parameters into NaN (:func:`~torchrl_mask.app.hyperparams.check_minibatches`):
such a ``batch_size`` is lowered until it leaves none (:func:`minibatch_size`). ``ppo_lstm_mask`` adds the
LSTM's ``lstm_hidden_size`` (16 to 256) and ``enable_critic_lstm`` (a critic LSTM of its own, or none).

A hyperparameter the fixed part gives (``--conf-file``, ``--hyperparams``) is not searched: its value is used in
every trial. A fixed ``policy_kwargs`` fixes the network (``net_arch``, ``activation_fn`` and the LSTM's sizes).
Nothing heavy is imported here; ``trial`` is anything with Optuna's ``suggest_*`` methods.

Example:
    >>> import optuna
    >>> trial = optuna.create_study().ask()
    >>> params = sample("ppo_mask", trial, {"n_envs": 4, "learning_rate": 3e-4}, n_timesteps=10_000)
    >>> params["learning_rate"], params["n_steps"] * 4 <= 10_000
    (0.0003, True)
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

__all__ = ["NET_ARCHS", "SEARCH_SPACES", "minibatch_size", "sample", "sample_ppo_lstm_mask", "sample_ppo_mask"]

N_STEPS = (32, 64, 128, 256, 512, 1024, 2048)
BATCH_SIZES = (32, 64, 128, 256, 512)
NET_ARCHS: dict[str, dict[str, list[int]]] = {
    "tiny": {"pi": [64], "vf": [64]},
    "small": {"pi": [64, 64], "vf": [64, 64]},
    "medium": {"pi": [256, 256], "vf": [256, 256]},
}
ACTIVATIONS = {"tanh": "nn.Tanh", "relu": "nn.ReLU"}
LSTM_HIDDEN_SIZES = (16, 32, 64, 128, 256)


def minibatch_size(batch_size: int, rows: int) -> int:
    """``batch_size``, no larger than the rollout, lowered until the rollout leaves no last minibatch of one row.

    :param batch_size: the minibatch sampled.
    :param rows: rows of one rollout, ``n_steps * n_envs``.
    :return: a size from 2 to ``max(rows, 2)`` whose last minibatch has more than one row (for a rollout above 1).

    Example:
        >>> minibatch_size(64, 65), minibatch_size(512, 96), minibatch_size(64, 99)
        (63, 96, 64)
    """
    size = max(2, min(batch_size, rows))
    while size > 2 and rows % size == 1:
        size -= 1
    return rows if rows % size == 1 and rows > 1 else size  # an odd rollout below 3: one minibatch of it all


def _rollout(trial: Any, fixed: dict[str, Any], n_timesteps: int) -> dict[str, Any]:
    """``n_steps`` (the choices whose rollout fits in ``n_timesteps``, the smallest if none) and ``batch_size``."""
    n_envs = fixed.get("n_envs", 1)
    params: dict[str, Any] = {}
    if "n_steps" in fixed:
        n_steps = fixed["n_steps"]
    else:
        fitting = [steps for steps in N_STEPS if steps * n_envs <= n_timesteps] or [N_STEPS[0]]
        n_steps = params["n_steps"] = trial.suggest_categorical("n_steps", fitting)
    if "batch_size" not in fixed:  # a fixed one is the user's, checked as given (a drawn n_steps keeps it safe)
        drawn = trial.suggest_categorical("batch_size", BATCH_SIZES)
        params["batch_size"] = minibatch_size(drawn, n_steps * n_envs)
    return params


def _network(trial: Any, fixed: dict[str, Any], lstm: bool) -> dict[str, Any]:
    """``policy_kwargs``: rl-zoo3's ``net_arch`` and ``activation_fn``, the LSTM's sizes; none if it is fixed."""
    if "policy_kwargs" in fixed:
        return {}
    net_arch = NET_ARCHS[trial.suggest_categorical("net_arch", list(NET_ARCHS))]
    activation = ACTIVATIONS[trial.suggest_categorical("activation_fn", list(ACTIVATIONS))]
    policy_kwargs: dict[str, Any] = {"net_arch": net_arch, "activation_fn": activation}
    if lstm:
        policy_kwargs["lstm_hidden_size"] = trial.suggest_categorical("lstm_hidden_size", LSTM_HIDDEN_SIZES)
        policy_kwargs["enable_critic_lstm"] = trial.suggest_categorical("enable_critic_lstm", [False, True])
    return {"policy_kwargs": policy_kwargs}


def _ppo(trial: Any, fixed: dict[str, Any]) -> dict[str, Any]:
    """rl-zoo3's PPO scalars, each searched unless fixed."""
    suggest: dict[str, Callable[[], Any]] = {
        "gamma": lambda: 1 - trial.suggest_float("one_minus_gamma", 1e-4, 0.03, log=True),
        "gae_lambda": lambda: 1 - trial.suggest_float("one_minus_gae_lambda", 1e-4, 0.1, log=True),
        "learning_rate": lambda: trial.suggest_float("learning_rate", 1e-5, 2e-3, log=True),
        "ent_coef": lambda: trial.suggest_float("ent_coef", 1e-8, 0.1, log=True),
        "clip_range": lambda: trial.suggest_categorical("clip_range", [0.1, 0.2, 0.3, 0.4]),
        "n_epochs": lambda: trial.suggest_categorical("n_epochs", [1, 5, 10, 20]),
        "max_grad_norm": lambda: trial.suggest_float("max_grad_norm", 0.3, 2.0),
    }
    return {key: draw() for key, draw in suggest.items() if key not in fixed}


def sample_ppo_mask(trial: Any, fixed: dict[str, Any], n_timesteps: int) -> dict[str, Any]:
    """MaskablePPO's hyperparameters for one trial: the fixed ones, the rest drawn from rl-zoo3's PPO space.

    :param trial: an Optuna trial.
    :param fixed: the checked fixed part (``n_envs`` included; ``n_timesteps`` is the run's).
    :param n_timesteps: env steps per trial; ``n_steps`` is searched among the rollouts that fit in it.
    :return: ``fixed`` with the drawn values, as ``--conf-file`` gives them (``activation_fn="nn.Tanh"``).
    """
    return {**fixed, **_rollout(trial, fixed, n_timesteps), **_ppo(trial, fixed), **_network(trial, fixed, False)}


def sample_ppo_lstm_mask(trial: Any, fixed: dict[str, Any], n_timesteps: int) -> dict[str, Any]:
    """MaskableRecurrentPPO's: :func:`sample_ppo_mask`'s space, and the LSTM's ``lstm_hidden_size`` and
    ``enable_critic_lstm`` (when ``policy_kwargs`` is not fixed).

    :param trial: an Optuna trial.
    :param fixed: the checked fixed part.
    :param n_timesteps: env steps per trial.
    :return: the trial's hyperparameters.
    """
    return {**fixed, **_rollout(trial, fixed, n_timesteps), **_ppo(trial, fixed), **_network(trial, fixed, True)}


#: The search space of each ``--algo``.
SEARCH_SPACES: dict[str, Callable[[Any, dict[str, Any], int], dict[str, Any]]] = {
    "ppo_mask": sample_ppo_mask,
    "ppo_lstm_mask": sample_ppo_lstm_mask,
}


def sample(algo: str, trial: Any, fixed: dict[str, Any], n_timesteps: int) -> dict[str, Any]:
    """One trial's hyperparameters for ``algo`` (:data:`SEARCH_SPACES`).

    :param algo: ``"ppo_mask"`` or ``"ppo_lstm_mask"``.
    :param trial: an Optuna trial.
    :param fixed: the checked fixed part.
    :param n_timesteps: env steps per trial.
    :return: the trial's hyperparameters, fixed and drawn.
    """
    return SEARCH_SPACES[algo](trial, fixed, n_timesteps)
