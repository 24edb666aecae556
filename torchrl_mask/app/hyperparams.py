"""The hyperparameters of ``torchrl-mask train``: every name a file or ``--hyperparams`` may set, the check its
value passes, and :class:`UsageError`, the error a user can fix; nothing heavy is imported (no torch).

A value is a Python literal (``0.001``, ``[64, 64]``, ``None``), ``lin_<number>`` for a schedule that falls
linearly to 0 (``learning_rate``, ``clip_range``), or for ``policy_kwargs`` a ``dict(...)`` call of literals,
where ``nn.<Name>`` names a ``torch.nn`` class (``activation_fn=nn.ReLU``). Numbers must be finite, sizes
(``n_envs``, ``n_steps``, ``batch_size``) below clear maxima, and :func:`check_minibatches` refuses a
minibatch of one row, whose advantage normalisation turns the parameters into NaN.
:mod:`torchrl_mask.app.config` re-exports all of it.

Example:
    >>> parse_hyperparam("policy_kwargs=dict(net_arch=[32, 32], activation_fn=nn.Tanh)")
    ('policy_kwargs', {'net_arch': [32, 32], 'activation_fn': 'nn.Tanh'})
    >>> check_hyperparams({"n_timesteps": 1e5, "learning_rate": "lin_3e-4"}, "--hyperparams")
    {'n_timesteps': 100000, 'learning_rate': 'lin_3e-4'}
"""

from __future__ import annotations

import ast
import math
import re
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from torchrl_mask.algorithms.minibatches import check_minibatches as algorithms_check

__all__ = [
    "DEFAULT_HYPERPARAMS",
    "HYPERPARAMS",
    "MAX_N_ENVS",
    "MAX_ROLLOUT",
    "UsageError",
    "check_hyperparams",
    "check_minibatches",
    "parse_hyperparam",
    "without_policy_kwargs",
]


class UsageError(ValueError):
    """Input the user can fix: the message says what is wrong and how to fix it, on one line."""


# What `torchrl-mask train` trains with when no --conf-file is given; tuned for Taxi-v4: 100k steps take about a
# minute on 2 CPU cores and reach a mean return near the env's solved threshold of 8 (random legal actions: -175).
# Without a file and without batch_size, the minibatch is a quarter of the rollout (n_steps * n_envs / 4).
DEFAULT_HYPERPARAMS: dict[str, Any] = {
    "n_timesteps": 100_000,
    "n_envs": 8,
    "n_steps": 256,
    "learning_rate": 1e-3,
    "ent_coef": 0.01,
    "gamma": 0.99,
    "policy_kwargs": {"net_arch": [64, 64]},
}
POLICIES = (
    "MlpPolicy",
    "MultiInputPolicy",
    "CnnPolicy",
    "MlpLstmPolicy",
    "MultiInputLstmPolicy",
    "CnnLstmPolicy",
    "JobScorerPolicy",  # a job-shop run's (torchrl_mask.scheduling.network)
)
_FLOAT = re.compile(r"[+-]?(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?")
_SCHEDULE = re.compile(r"lin_(" + _FLOAT.pattern + ")")
_TORCH_NN = re.compile(r"(?:th\.|torch\.)?nn\.[A-Za-z_]\w*")
MAX_N_ENVS = 1024  # each env is made in this process (or is a worker process): more would not fit a machine
MAX_ROLLOUT = 2**24  # rows of the rollout buffer (n_steps * n_envs), each held in memory
_MAX_COUNT = 2**62  # any other whole number (n_timesteps, n_epochs...): far beyond a run, inside int64


def _number(value: Any, low: float, high: float = float("inf"), *, open_low: bool = False) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        return None
    if not (low < value if open_low else low <= value) or not value <= high:
        return None
    return float(value)


def _positive_int(value: Any, maximum: int = _MAX_COUNT, why: str = "") -> tuple[Any, str]:
    number = _number(value, 1.0)
    if number is None or not number.is_integer():
        return value, "a positive integer"
    if value > maximum:
        return value, f"a positive integer up to {maximum:,}{why}"
    return int(value), ""


def _n_envs(value: Any) -> tuple[Any, str]:
    return _positive_int(value, MAX_N_ENVS, " (each env is made in this process, or runs in a worker process)")


def _rollout_size(value: Any) -> tuple[Any, str]:
    return _positive_int(value, MAX_ROLLOUT, " (the rollout buffer holds n_steps * n_envs rows in memory)")


def _unit(value: Any) -> tuple[Any, str]:
    return (value, "") if _number(value, 0.0, 1.0) is not None else (value, "a number from 0 to 1")


def _non_negative(value: Any) -> tuple[Any, str]:
    return (value, "") if _number(value, 0.0) is not None else (value, "a number >= 0")


def _positive(value: Any) -> tuple[Any, str]:
    return (value, "") if _number(value, 0.0, open_low=True) is not None else (value, "a number > 0")


def _optional_positive(value: Any) -> tuple[Any, str]:
    return (value, "") if value is None else (value, _positive(value)[1] and "None or a number > 0")


def _schedule(value: Any) -> tuple[Any, str]:
    """A number > 0, or rl-zoo3's ``lin_<number>`` (linear from that number at the start to 0 at the end)."""
    match = _SCHEDULE.fullmatch(value) if isinstance(value, str) else None
    if match is not None:
        start = float(match.group(1))
        return (value, "") if 0 < start < math.inf else (value, "a number > 0 or lin_<number > 0>")
    return (value, "") if _number(value, 0.0, open_low=True) is not None else (value, "a number > 0 or lin_<number>")


def _flag(value: Any) -> tuple[Any, str]:
    return (value, "") if isinstance(value, bool) else (value, "True or False")


def _policy(value: Any) -> tuple[Any, str]:
    return (value, "") if value in POLICIES else (value, "one of " + ", ".join(POLICIES))


def _net_arch_ok(net_arch: Any) -> bool:
    """SB3's ``net_arch``: a list of layer sizes, or a dict of ``pi`` and ``vf`` lists."""
    if isinstance(net_arch, dict):
        return set(net_arch) <= {"pi", "vf"} and all(map(_net_arch_ok, net_arch.values()))
    if not isinstance(net_arch, list):
        return False
    return all(isinstance(size, int) and not isinstance(size, bool) and 0 < size <= MAX_ROLLOUT for size in net_arch)


def _policy_kwargs(value: Any) -> tuple[Any, str]:
    if isinstance(value, str):
        try:
            value = _literal(value)
        except UsageError as err:
            return value, f"a dict(...) of literals ({err})"
    if not isinstance(value, dict) or not all(isinstance(key, str) for key in value):
        return value, "a dict of keyword arguments, e.g. dict(net_arch=[64, 64])"
    net_arch = value.get("net_arch")
    if net_arch is not None and not _net_arch_ok(net_arch):
        return value, "a dict whose net_arch lists layer sizes > 0, e.g. net_arch=[64, 64] or dict(pi=[64], vf=[64])"
    activation = value.get("activation_fn")
    if activation is not None and not (isinstance(activation, str) and _TORCH_NN.fullmatch(activation)):
        return value, "a dict whose activation_fn names a torch.nn class, e.g. activation_fn=nn.ReLU"
    return value, _lstm_expected(value)


def _size_ok(size: Any) -> bool:
    return isinstance(size, int) and not isinstance(size, bool) and 0 < size <= MAX_ROLLOUT


# nn.LSTM's own arguments that sb3-contrib's LSTM policies leave free and that keep the shapes they expect (its
# sequences are time-first, one direction, no projection).
_LSTM_KWARGS: dict[str, Callable[[Any], bool]] = {
    "bias": lambda value: isinstance(value, bool),
    "dropout": lambda value: _number(value, 0.0, 1.0) is not None,
}


def _lstm_expected(kwargs: dict[str, Any]) -> str:
    """What sb3-contrib's LSTM policies need of their ``policy_kwargs`` (which would otherwise fail in torch or in an
    assert once the run has begun), or ``""`` where these hold."""
    for key, example in (("lstm_hidden_size", 64), ("n_lstm_layers", 1)):
        if key in kwargs and not _size_ok(kwargs[key]):
            return f"a dict whose {key} is a whole number > 0, e.g. {key}={example}"
    for key in ("shared_lstm", "enable_critic_lstm", "share_features_extractor"):
        if key in kwargs and not isinstance(kwargs[key], bool):
            return f"a dict whose {key} is True or False"
    if kwargs.get("shared_lstm") and kwargs.get("enable_critic_lstm", True):
        return "shared_lstm=True with enable_critic_lstm=False (the critic shares the actor's LSTM or has its own)"
    if kwargs.get("shared_lstm") and not kwargs.get("share_features_extractor", True):
        return "shared_lstm=True with share_features_extractor=True (a shared LSTM needs one features extractor)"
    lstm_kwargs = kwargs.get("lstm_kwargs", {})
    if not isinstance(lstm_kwargs, dict) or not all(
        key in _LSTM_KWARGS and _LSTM_KWARGS[key](item) for key, item in lstm_kwargs.items()
    ):
        return "a dict whose lstm_kwargs sets only bias (True or False) and dropout (0 to 1), e.g. dict(dropout=0.1)"
    return ""


# Every key a file or --hyperparams may set, with the check its value passes: rl-zoo3's keys for PPO that
# MaskablePPO has (n_timesteps and n_envs are the run's, the rest MaskablePPO's constructor arguments).
HYPERPARAMS: dict[str, Callable[[Any], tuple[Any, str]]] = {
    "n_timesteps": _positive_int,
    "n_envs": _n_envs,
    "policy": _policy,
    "policy_kwargs": _policy_kwargs,
    "learning_rate": _schedule,
    "n_steps": _rollout_size,
    "batch_size": _rollout_size,
    "n_epochs": _positive_int,
    "gamma": _unit,
    "gae_lambda": _unit,
    "clip_range": _schedule,
    "clip_range_vf": lambda value: (value, "") if value is None else _schedule(value),
    "normalize_advantage": _flag,
    "ent_coef": _non_negative,
    "vf_coef": _non_negative,
    "max_grad_norm": _positive,
    "target_kl": _optional_positive,
    "stats_window_size": _positive_int,
}
# rl-zoo3's keys that wrap the env or its VecEnv, or SB3 features MaskablePPO lacks: refused by name.
RL_ZOO_ONLY = {
    "normalize",
    "env_wrapper",
    "vec_env_wrapper",
    "frame_stack",
    "callback",
    "monitor_kwargs",
    "use_sde",
    "sde_sample_freq",
    "env_kwargs",
}


def check_hyperparams(values: Mapping[str, Any], source: str) -> dict[str, Any]:
    """Check hyperparameters by name and value; ``policy_kwargs`` given as ``"dict(...)"`` comes back a dict.

    :param values: name -> value, as read from a file or the command line.
    :param source: where they came from, for the message (``"--hyperparams"``, ``"f.yml, Taxi-v4"``).
    :return: the checked values, whole numbers as ``int``.
    :raises UsageError: an unknown name or a value its check refuses.
    """
    checked: dict[str, Any] = {}
    for key, value in values.items():
        if isinstance(value, str) and _FLOAT.fullmatch(value.strip()):
            value = float(value)  # YAML 1.1 reads 1e-3 (no dot) as text; rl-zoo3's files write !!float 1e-3
        check = HYPERPARAMS.get(key)
        if key in RL_ZOO_ONLY:
            raise UsageError(
                f"{source}: rl-zoo3's {key!r} is not supported here (the env is trained as gymnasium makes it, "
                "wrapped for its masks only); remove it."
            )
        if check is None:
            raise UsageError(
                f"{source}: unknown hyperparameter {key!r}; torchrl-mask train takes " + ", ".join(HYPERPARAMS) + "."
            )
        checked[key], expected = check(value)
        if expected:
            raise UsageError(f"{source}: {key}={value!r} is not valid; expected {expected}.")
    return checked


def _node_value(node: ast.expr) -> Any:
    """A literal, ``dict(k=v, ...)`` of literals, or ``nn.Name`` (kept as its dotted name)."""
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "dict" and not node.args:
        if any(keyword.arg is None for keyword in node.keywords):
            raise UsageError("dict(**...) is not a literal")
        return {keyword.arg: _node_value(keyword.value) for keyword in node.keywords}
    if isinstance(node, ast.Dict):
        return {_node_value(key): _node_value(value) for key, value in zip(node.keys, node.values, strict=True) if key}
    if isinstance(node, ast.List | ast.Tuple):
        return [_node_value(item) for item in node.elts]
    if isinstance(node, ast.Attribute) and _TORCH_NN.fullmatch(ast.unparse(node)):
        return ast.unparse(node)
    try:
        return ast.literal_eval(node)
    except ValueError:
        raise UsageError(f"{ast.unparse(node)!r} is not a literal") from None


def _literal(text: str) -> Any:
    try:
        tree = ast.parse(text.strip(), mode="eval")
    except SyntaxError:
        raise UsageError(f"{text!r} is not a Python literal") from None
    return _node_value(tree.body)


def parse_hyperparam(text: str) -> tuple[str, Any]:
    """One ``--hyperparams`` item: ``name=value`` (rl-zoo3's ``name:value`` too), its value read as rl-zoo3 reads it.

    A value that is no Python literal (``MlpPolicy``, ``lin_0.001``) is kept as text; the name and the value
    are checked later, by :func:`check_hyperparams`.

    :param text: e.g. ``"learning_rate=3e-4"``, ``"policy_kwargs=dict(net_arch=[64, 64])"``.
    :return: the name and the value.
    :raises UsageError: no ``=`` after a name, or a ``dict(...)`` that is not made of literals.
    """
    match = re.fullmatch(r"\s*([A-Za-z_]\w*)\s*[=:](.*)", text, flags=re.DOTALL)
    if match is None:
        raise UsageError(f"--hyperparams {text!r}: expected name=value, e.g. learning_rate=3e-4")
    key, raw = match.group(1), match.group(2).strip()
    try:
        return key, _literal(raw)
    except UsageError as err:
        if raw.startswith(("dict(", "{", "[")):
            raise UsageError(f"--hyperparams {text!r}: {err}; use literals, e.g. dict(net_arch=[64, 64])") from None
        return key, raw


def check_minibatches(n_steps: int, n_envs: int, batch_size: int, normalize_advantage: bool = True) -> None:
    """Refuse a rollout that would train on a minibatch of one row.

    sb3-contrib's ``train()`` normalises the advantages of each minibatch by their standard deviation, which for
    one row is NaN: the parameters become NaN. The models refuse such a rollout when they are made
    (:func:`torchrl_mask.algorithms.minibatches.check_minibatches`); the command line asks them before anything
    is written, and refuses ``batch_size`` 1 also without advantage normalisation.

    :param n_steps: steps per env in a rollout.
    :param n_envs: envs stepped side by side.
    :param batch_size: rows per minibatch.
    :param normalize_advantage: whether the advantages are normalised per minibatch (MaskablePPO's default).
    :raises UsageError: ``batch_size`` 1, the rollout above :data:`MAX_ROLLOUT` rows, or (normalising) a
        rollout of ``n_steps * n_envs`` rows that leaves a last minibatch of one row.
    """
    rows = n_steps * n_envs
    if rows > MAX_ROLLOUT:
        raise UsageError(
            f"n_steps * n_envs = {rows:,} rows of rollout, above the {MAX_ROLLOUT:,} held in memory; "
            "lower n_steps or n_envs."
        )
    if batch_size == 1:
        raise UsageError("batch_size=1 trains on minibatches of one row (NaN parameters); use batch_size >= 2.")
    try:
        algorithms_check(n_steps, n_envs, batch_size, normalize_advantage)  # the models' own guard, as a usage error
    except ValueError as error:
        raise UsageError(str(error)) from None


def without_policy_kwargs(hyperparams: Mapping[str, Any], given: Sequence[str], trained_agent: Any) -> dict[str, Any]:
    """The hyperparameters for continuing ``trained_agent``, whose saved policy is kept (as rl-zoo3 keeps it): the
    ``policy_kwargs`` of a file or of the built-in defaults dropped, those given on the command line refused.

    :param hyperparams: the run's hyperparameters (file or defaults, then ``--hyperparams``).
    :param given: the names ``--hyperparams`` gave.
    :param trained_agent: the saved model's path, for the message.
    :return: ``hyperparams`` without ``policy_kwargs``.
    :raises UsageError: ``--hyperparams`` gave ``policy_kwargs``, which the saved policy cannot take.
    """
    if "policy_kwargs" in given:
        raise UsageError(
            f"-i {trained_agent} keeps the saved model's policy (its net_arch and activation_fn), which "
            "--hyperparams policy_kwargs cannot change; drop policy_kwargs, or train a new model without -i."
        )
    return {key: value for key, value in hyperparams.items() if key != "policy_kwargs"}
