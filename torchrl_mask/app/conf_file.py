"""rl-zoo3's hyperparameter files, as ``--conf-file`` gives them to ``train`` and ``tune``: a YAML file whose
top-level keys are env ids (``default`` for any other env), each holding ``n_timesteps``, ``n_envs``, ``policy``,
``policy_kwargs`` and MaskablePPO's own arguments (`rl-baselines3-zoo <https://github.com/DLR-RM/rl-baselines3-zoo>`_).

An entry for a ``pettingzoo:<game>`` may also hold self-play's keys (``pool_size``, ``league_players``,
``fixed_share``, ``self_share``, ``images``, ``openings``, ``threads``: those of a game's record in
:mod:`torchrl_mask.games.profile`). The file is read with YAML's safe loader (no ``!!python`` tags) and every value
is checked (:mod:`torchrl_mask.app.hyperparams`) before anything is trained or written. Nothing heavy is imported.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

from torchrl_mask.app.hyperparams import UsageError, check_hyperparams
from torchrl_mask.app.kinds import env_kind
from torchrl_mask.games.profile import SELFPLAY_KEYS

__all__ = ["ConfEntry", "load_conf_file"]

#: An entry of a file: its hyperparameters (checked), and self-play's keys (checked with the options they stand for).
ConfEntry = tuple[dict[str, Any], dict[str, Any]]


def _read_yaml(path: Path) -> Any:
    """The YAML document in ``path``, read as UTF-8 with YAML's safe loader (no ``!!python`` tags)."""
    import yaml  # only when a file is given: --help stays fast

    if path.suffix not in (".yml", ".yaml"):
        raise UsageError(f"--conf-file {path}: expected a YAML file (.yml or .yaml) in rl-zoo3's format.")
    try:
        return yaml.safe_load(path.read_text(encoding="utf-8"))
    except OSError as err:
        raise UsageError(f"--conf-file {path}: cannot read it ({err.strerror or err}); pass a YAML file.") from None
    except UnicodeDecodeError as err:
        raise UsageError(
            f"--conf-file {path}: not UTF-8 text (byte {err.object[err.start]:#04x} at offset {err.start}); "
            "save the file as UTF-8."
        ) from None
    except yaml.YAMLError as err:
        where = getattr(err, "problem_mark", None)
        line = f" at line {where.line + 1}" if where is not None else ""
        tag = re.search(r"tag:yaml\.org,2002:(python/[^'\s]*)", str(getattr(err, "problem", "")))
        if tag is not None:
            raise UsageError(
                f"--conf-file {path}: the tag !!{tag.group(1)}{line} is refused (a python tag runs code when the "
                'file is read); write the value as text, e.g. policy_kwargs: "dict(activation_fn=nn.ReLU)".'
            ) from None
        raise UsageError(f"--conf-file {path}: not valid YAML{line}; fix the file.") from None


def load_conf_file(path: Path, env_id: str) -> ConfEntry:
    """The hyperparameters for ``env_id`` in an rl-zoo3 YAML file: its ``env_id`` entry, else its ``default``.

    :param path: a ``.yml``/``.yaml`` file whose top-level keys are env ids.
    :param env_id: the env to train.
    :return: the entry's hyperparameters (``policy_kwargs`` strings parsed) and its self-play keys (empty unless
        ``env_id`` is a game).
    :raises UsageError: a missing or unreadable file, YAML that does not parse or is not a mapping of env
        ids, no entry for ``env_id`` and no ``default``, an entry :func:`check_hyperparams` refuses, or self-play's
        keys for an env that is not a game.
    """
    document = _read_yaml(path)
    if not isinstance(document, dict) or not all(isinstance(entry, dict) for entry in document.values()):
        raise UsageError(
            f"--conf-file {path}: expected env ids at the top level, each with its hyperparameters "
            "(rl-zoo3's format, e.g. 'Taxi-v4:' then '  n_timesteps: 100000')."
        )
    name = env_id if env_id in document else "default" if "default" in document else None
    if name is None:
        raise UsageError(
            f"--conf-file {path} has no entry for {env_id!r} and no 'default' (it has: "
            + ", ".join(map(str, document))
            + "); add one, or pass --env with one of those."
        )
    entry = document[name]
    selfplay = {key: entry[key] for key in SELFPLAY_KEYS if key in entry}
    if selfplay and not env_kind(env_id).is_game:
        raise UsageError(
            f"--conf-file {path}, {name}: {', '.join(selfplay)} is for a pettingzoo:<game>'s self-play, not "
            f"{env_id}; remove it."
        )
    rest = {key: value for key, value in entry.items() if key not in selfplay}
    source = f"--conf-file {path}, {name}"
    return check_hyperparams(rest, source), _check_selfplay(selfplay, source)


def _is_number(value: Any, low: float, high: float, high_open: bool = False) -> bool:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return False
    return low <= value < high if high_open else low <= value <= high


# Self-play's keys, each with what its value must be: the same as its train option takes.
_SELFPLAY_CHECKS: dict[str, tuple[Callable[[Any], bool], str]] = {
    "pool_size": (lambda v: isinstance(v, int) and not isinstance(v, bool) and v >= 0, "a whole number >= 0"),
    "league_players": (
        lambda v: isinstance(v, list) and all(isinstance(name, str) for name in v),
        "a list of the ladder's player names",
    ),
    "fixed_share": (lambda v: v in (None, "none") or _is_number(v, 0, 1), "a share from 0 to 1, or none"),
    "self_share": (lambda v: _is_number(v, 0, 1, high_open=True), "a share in [0, 1)"),
    "images": (lambda v: v in ("all", "random"), "all or random"),
    "openings": (lambda v: isinstance(v, int) and not isinstance(v, bool) and v >= 0, "a whole number >= 0"),
    "threads": (lambda v: isinstance(v, int) and not isinstance(v, bool) and v >= 1, "a whole number >= 1"),
}


def _check_selfplay(values: dict[str, Any], source: str) -> dict[str, Any]:
    """Self-play's keys of a file's entry, each checked as its train option is."""
    for key, value in values.items():
        accepts, expected = _SELFPLAY_CHECKS[key]
        if not accepts(value):
            raise UsageError(f"{source}: {key}={value!r} is not valid; expected {expected}.")
    return values
