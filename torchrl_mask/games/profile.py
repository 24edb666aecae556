"""One record per game: how self-play trains it and what its evaluation judges it against, read from the
shipped ``profiles.yml`` (rl-zoo3's per-env hyperparameter file, with self-play's and the evaluation's keys beside
the training ones; the file's header says what each key means).

Everything else that needs a fact about a game reads it here: the command line's defaults, the ladder
(:mod:`torchrl_mask.games.ladder`), the symmetries trained on (:mod:`torchrl_mask.games.symmetry`). A game
not in the file gets its ``default`` record. Nothing heavy is imported.

Example:
    >>> profile = game_profile("connect_four_v3")
    >>> profile.hyperparams["n_envs"], profile.league_players, profile.opponents
    (256, ('heuristic', 'negamax_2', 'random'), ('random', 'heuristic', 'negamax_2', 'solver'))
    >>> game_profile("some_new_game_v0").name
    'default'
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cache
from importlib import resources
from typing import Any, Literal

__all__ = [
    "DEFAULT",
    "SELFPLAY_KEYS",
    "GameProfile",
    "Images",
    "game_profile",
    "not_a_game",
    "profiles",
]

#: How a run trains on its moves' images: each move and all its images, or one of them drawn at random.
Images = Literal["all", "random"]

DEFAULT = "default"  # the record of a game the file does not list
#: The keys of a record (and of a ``--conf-file`` entry for a game) that say how self-play trains, beside the
#: training keys rl-zoo3 knows.
SELFPLAY_KEYS = ("pool_size", "league_players", "fixed_share", "self_share", "images", "openings", "threads")
_EVALUATION_KEYS = ("ladder", "symmetries")
_WIN_RATE_UNIT = "result (+1 win, 0 draw, -1 loss)"
_NO_HEURISTIC = (
    "no opponent beyond random fits {game}: the one-ply heuristic, negamax and minimax are defined for "
    "tic-tac-toe and Connect Four boards only"
)


@dataclass(frozen=True)
class GameProfile:
    """A game's record.

    :param name: the game (``"connect_four_v3"``), or ``"default"``.
    :param hyperparams: the training keys, as rl-zoo3's files give them (``n_timesteps``, ``n_envs``, ``n_steps``,
        ``policy_kwargs``, ...); a copy is the caller's to change.
    :param pool_size: past snapshots the learner plays against by default (0: pure self-play).
    :param league_players: the ladder's fixed players it also meets by default.
    :param fixed_share: the fixed players' share of the league's games; None: one draw over all the opponents.
    :param self_share: the share of the league's games it plays against itself.
    :param images: ``"all"`` or ``"random"``: how a move's images are trained on, where the game has symmetries.
    :param openings: each training game opens with up to this many random legal moves (0: none; Connect Four and
        tic-tac-toe only, :class:`~torchrl_mask.TurnBasedEnv`'s ``openings``).
    :param threads: torch CPU threads by default.
    :param metric: the evaluation's metric: ``"win_rate"``, ``"chips"`` or ``"score"``.
    :param unit: what the game's rewards count.
    :param opponents: the ladder's opponent names, weakest first (``"self"``: the model in every other seat).
    :param note: what the ladder lacks and why (empty when nothing is missing).
    :param missing: opponent name -> why it does not fit this game (asked for by name, the evaluation says so).
    :param measures: what the evaluation measures of the model alone, by name
        (:data:`~torchrl_mask.games.ladder.MEASURES`: Connect Four's ``perfect_play``).
    :param symmetries: ``(height, width, actions)`` of a board whose symmetries it trains on; None: none.
    """

    name: str
    hyperparams: dict[str, Any]
    pool_size: int = 0
    league_players: tuple[str, ...] = ()
    fixed_share: float | None = None
    self_share: float = 0.0
    images: Images = "all"
    openings: int = 0
    threads: int = 1
    metric: str = "win_rate"
    unit: str = _WIN_RATE_UNIT
    opponents: tuple[str, ...] = ("random",)
    note: str = ""
    missing: dict[str, str] = field(default_factory=dict)
    measures: tuple[str, ...] = ()
    symmetries: tuple[int, int, str] | None = None

    @property
    def has_league(self) -> bool:
        """Whether the default run meets a league (snapshots or fixed players) rather than pure self-play."""
        return bool(self.pool_size or self.league_players)


def _profile(name: str, entry: dict[str, Any]) -> GameProfile:
    """A record from its YAML entry: the training keys apart from self-play's and the evaluation's."""
    ladder = entry["ladder"]
    opponents = tuple(ladder["opponents"])
    listed = name != DEFAULT
    note = ladder.get("note", _NO_HEURISTIC.format(game=name) if listed and opponents == ("random",) else "")
    missing = {"heuristic": _NO_HEURISTIC.format(game=name)} if listed and "heuristic" not in opponents else {}
    board = entry.get("symmetries")
    return GameProfile(
        name=name,
        hyperparams={key: value for key, value in entry.items() if key not in (*SELFPLAY_KEYS, *_EVALUATION_KEYS)},
        pool_size=int(entry.get("pool_size", 0)),
        league_players=tuple(entry.get("league_players", ())),
        fixed_share=entry.get("fixed_share"),
        self_share=float(entry.get("self_share", 0.0)),
        images=entry.get("images", "all"),
        openings=int(entry.get("openings", 0)),
        threads=int(entry.get("threads", 1)),
        metric=ladder["metric"],
        unit=ladder.get("unit", _WIN_RATE_UNIT),
        opponents=opponents,
        note=note,
        missing=missing,
        measures=tuple(ladder.get("measures", ())),
        symmetries=None if board is None else (*board["board"], board["actions"]),
    )


@cache
def profiles() -> dict[str, GameProfile]:
    """Every record of ``profiles.yml``, ``"default"`` among them.

    :return: game name -> record.
    """
    import yaml  # only when a game is asked about

    text = resources.files("torchrl_mask.games").joinpath("profiles.yml").read_text(encoding="utf-8")
    return {name: _profile(name, entry) for name, entry in yaml.safe_load(text).items()}


def game_profile(game: str) -> GameProfile:
    """A game's record, or the ``default`` one for a game the file does not list.

    :param game: a PettingZoo classic game's name (``"tictactoe_v3"``).
    :return: its record; its ``hyperparams`` are a fresh copy.
    """
    found = profiles().get(game, profiles()[DEFAULT])
    return GameProfile(**{**found.__dict__, "hyperparams": _copy(found.hyperparams)})


def _copy(value: Any) -> Any:
    """A deep copy of a YAML value (dicts and lists of plain values)."""
    if isinstance(value, dict):
        return {key: _copy(item) for key, item in value.items()}
    if isinstance(value, list):
        return [_copy(item) for item in value]
    return value


def not_a_game(game: str) -> str:
    """What to say of a name that is no PettingZoo classic game, and which to use instead: one sentence, for
    :func:`~torchrl_mask.games.env.make_game` and for the command line's check before torch is imported.

    :param game: the name given (``"conect_four_v3"``).
    """
    return (
        f"{game!r} is not a PettingZoo classic game; use e.g. 'connect_four_v3' or 'tictactoe_v3' "
        "(pettingzoo.classic lists them)."
    )
