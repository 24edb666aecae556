"""Evaluation of turn-based games: a trained model as a player, and its results against its game's ladder.

- :func:`model_player`: a trained model as a player ``(observation, mask, rng) -> action``, the kind
  :func:`~torchrl_mask.games.arena.play_games` (the loop of games, re-exported here with its
  :class:`~torchrl_mask.games.arena.GameRecord` and :func:`~torchrl_mask.games.arena.seated`) seats beside the
  fixed players of :mod:`~torchrl_mask.games.players` and :mod:`~torchrl_mask.games.search`;
- :func:`evaluate_games`: a model against one opponent of its game's ladder (:mod:`~torchrl_mask.games.ladder`),
  summarised by the ladder's metric as a JSON-able dict; :func:`evaluate_ladder`: against every opponent, and the
  ladder's measures of the model alone (Connect Four's mistake rates on Pons' test positions);
- :class:`WinRates`: an SB3 callback measuring the ladder during training.

The same seed gives the same numbers: the games' deals and every player's random choices come from one generator
seeded by it, and the model plays deterministically.

Example:
    >>> from torchrl_mask import MaskablePPO, SeatEnv
    >>> model = MaskablePPO("MlpPolicy", SeatEnv("tictactoe_v3"), n_steps=64, batch_size=32, seed=0)
    >>> result = evaluate_games(model, "tictactoe_v3", "perfect", games=4, seed=0)
    >>> result["metric"], result["win"], result["illegal_moves"], sorted(result["seats"])
    ('win_rate', 0.0, 0, ['player_1', 'player_2'])
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

import numpy as np
from stable_baselines3.common.callbacks import BaseCallback

from torchrl_mask.games.arena import GameRecord, play_games, seated
from torchrl_mask.games.env import make_game
from torchrl_mask.games.ladder import known_opponents, ladder
from torchrl_mask.games.players import BatchPlayer, Player

if TYPE_CHECKING:
    from stable_baselines3.common.base_class import BaseAlgorithm

__all__ = [
    "EVAL_POINTS",
    "EVAL_POINT_GAMES",
    "GameRecord",
    "ModelPlayer",
    "RecurrentPlayer",
    "WinRates",
    "evaluate_games",
    "evaluate_ladder",
    "ladder_score",
    "model_player",
    "play_games",
    "seated",
]

EVAL_POINTS = 10  # measurements during training
EVAL_POINT_GAMES = 50  # games per opponent at each of them


def model_player(model: BaseAlgorithm) -> Player:
    """A trained model as a player: ``model.predict`` with the mask, deterministic.

    An LSTM model (``MaskableRecurrentPPO``) gives a :class:`RecurrentPlayer`, its state carried from move to move;
    :func:`play_games` seats a fresh one (:meth:`RecurrentPlayer.fresh`) in each seat of each game.

    :param model: a MaskablePPO or MaskableRecurrentPPO (any model whose ``predict`` takes ``action_masks=``).
    :return: the player.
    """
    if hasattr(model.policy, "lstm_hidden_state_shape"):
        return RecurrentPlayer(model)
    return ModelPlayer(model)


class ModelPlayer(BatchPlayer):
    """A feed-forward model as a player: ``model.predict`` with the masks, deterministic, over all its waiting games.

    :param model: a MaskablePPO (any model whose ``predict`` takes ``action_masks=``).
    """

    __name__ = "model"

    def __init__(self, model: BaseAlgorithm) -> None:
        self.model = model

    def batch(self, views: np.ndarray, masks: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        """:param views: the seats' views, ``(n, *view)``.
        :param masks: bool ``(n, n_actions)``.
        :param rng: unused (the model plays deterministically).
        :return: int64 ``(n,)``.
        """
        actions, _ = self.model.predict(views, action_masks=masks, deterministic=True)  # type: ignore[call-arg]
        return np.asarray(actions).reshape(len(views))


class RecurrentPlayer:
    """An LSTM model as a player of one seat in one game: its state carried from move to move, from zeros at first.

    :param model: a MaskableRecurrentPPO.
    """

    def __init__(self, model: BaseAlgorithm) -> None:
        self.model = model
        self.state: tuple[np.ndarray, ...] | None = None

    def fresh(self) -> RecurrentPlayer:
        """The same model with a fresh state, for a new seat or a new game."""
        return RecurrentPlayer(self.model)

    def __call__(self, observation: np.ndarray, mask: np.ndarray, rng: np.random.Generator) -> int:
        """The model's move, deterministic, its state carried to the next call.

        :param observation: the seat's view.
        :param mask: bool ``(n_actions,)``, the legal moves.
        :param rng: unused (the model plays deterministically).
        :return: the move.
        """
        start = np.array([self.state is None])
        action, self.state = self.model.predict(
            observation,
            state=self.state,
            episode_start=start,  # type: ignore[call-arg]
            action_masks=mask,
            deterministic=True,
        )
        return int(np.asarray(action).reshape(()))


def _summary(metric: str, results: np.ndarray) -> dict[str, float]:
    """The metric over the player's returns ``(games,)``: win/draw/loss shares, or mean and std."""
    if metric == "win_rate":
        sign = np.sign(results)
        return {"win": float(np.mean(sign > 0)), "draw": float(np.mean(sign == 0)), "loss": float(np.mean(sign < 0))}
    return {"mean": float(np.mean(results)), "std": float(np.std(results))}


def summarise(records: list[GameRecord], seats: list[str], metric: str) -> dict[str, Any]:
    """The player's results: the metric over all games and per seat, illegal moves, games.

    :param records: :func:`play_games`'s records.
    :param seats: the game's ``possible_agents``.
    :param metric: ``"win_rate"``, ``"chips"`` or ``"score"``.
    :return: the metric's values (``win``/``draw``/``loss`` or ``mean``/``std``), ``"illegal_moves"`` (the
        player's), ``"games"`` and ``"seats"``: per seat name, its games, the metric's values and
        ``"games_over_before_moving"`` (games that ended before the player's first move in that seat).
    """
    results = np.array([record.returns[record.seat] for record in records])
    per_seat: dict[str, Any] = {}
    for index, name in enumerate(seats):
        mine = [record for record in records if record.seat == index]
        if mine:
            per_seat[name] = {
                "games": len(mine),
                **_summary(metric, np.array([record.returns[index] for record in mine])),
                "games_over_before_moving": sum(int(record.moves[index] == 0) for record in mine),
            }
    illegal = sum(int(record.illegal[record.seat]) for record in records)
    return {**_summary(metric, results), "illegal_moves": illegal, "games": len(records), "seats": per_seat}


def evaluate_games(model: BaseAlgorithm | Player, game: str, opponent: str, games: int, seed: int) -> dict[str, Any]:
    """A model (or a player) against one opponent of its game's ladder, summarised by the ladder's metric.

    :param model: the trained model (played by :func:`model_player`) or a player function.
    :param game: the game's name (``"tictactoe_v3"``, ``"leduc_holdem_v4"``).
    :param opponent: an opponent name of the game's ladder (:func:`~torchrl_mask.games.ladder.ladder`).
    :param games: games to play, the model in each seat the same share of them.
    :param seed: seeds the games and the players.
    :return: ``{"opponent", "metric", "unit"}``, then :func:`summarise`'s entries. For an opponent that does not
        fit the game (``"heuristic"`` for go), ``{"opponent", "skipped": why, "ladder": the game's opponents,
        "illegal_moves": 0, "games": 0}`` instead: the evaluation says so rather than raising.
    :raises ValueError: an opponent name no game knows.
    """
    board = ladder(game)
    head: dict[str, Any] = {"opponent": opponent}
    if opponent not in board.opponents:
        if opponent not in known_opponents() and opponent not in board.missing:
            raise ValueError(f"opponent={opponent!r} is in no game's ladder; {game}'s are {sorted(board.opponents)}.")
        reason = board.missing.get(opponent, f"{opponent!r} is not an opponent of {game}")
        return {**head, "skipped": reason, "ladder": sorted(board.opponents), "illegal_moves": 0, "games": 0}
    player = model if callable(model) else model_player(model)
    records = play_games(game, player, board.opponents[opponent], games, seed)
    seats = list(make_game(game).possible_agents)
    return {**head, "metric": board.metric, "unit": board.unit, **summarise(records, seats, board.metric)}


def evaluate_ladder(model: BaseAlgorithm | Player, game: str, games: int, seed: int) -> dict[str, Any]:
    """A model against every opponent of its game's ladder, each with the same seed.

    :param model: the trained model or a player function.
    :param game: the game's name.
    :param games: games per opponent.
    :param seed: seeds each opponent's games.
    :return: ``{"metric", "unit", "vs_<opponent>": evaluate_games' dict, ..., "illegal_moves": total}``, with
        ``"note"`` where the ladder lacks an opponent (``"no opponent beyond random fits chess_v6: ..."``), and each
        of the ladder's measures by name (Connect Four's ``"perfect_play"``:
        :func:`~torchrl_mask.games.perfect_play.mistake_rates`, seeded by ``seed``).
    """
    board = ladder(game)
    out: dict[str, Any] = {"metric": board.metric, "unit": board.unit}
    if board.note:
        out["note"] = board.note
    for opponent in board.opponents:
        out[f"vs_{opponent}"] = evaluate_games(model, game, opponent, games, seed)
    out["illegal_moves"] = sum(out[f"vs_{opponent}"]["illegal_moves"] for opponent in board.opponents)
    player = model if callable(model) else model_player(model)
    out.update({name: measure(player, seed=seed) for name, measure in board.measures.items()})
    return out


def ladder_score(result: dict[str, Any]) -> float:
    """One number for a whole ladder, higher is better: the mean over its opponents of ``win - loss`` (win rates),
    or of the mean return (chips, score). ``torchrl-mask tune`` maximises it for a game.

    :param result: :func:`evaluate_ladder`'s dict.
    :return: the score, in ``[-1, 1]`` for win rates, in the game's unit otherwise.

    Example:
        >>> ladder_score({"metric": "win_rate", "vs_random": {"win": 0.9, "loss": 0.1},
        ...               "vs_heuristic": {"win": 0.2, "loss": 0.6}})
        0.2
    """
    values = []
    for key, entry in result.items():
        if key.startswith("vs_") and "skipped" not in entry:
            values.append(entry["win"] - entry["loss"] if result["metric"] == "win_rate" else entry["mean"])
    return round(float(np.mean(values)), 12)


def point_values(result: dict[str, Any]) -> dict[str, float]:
    """The numbers of one opponent's result that a curve plots: ``win``/``draw``/``loss``, or ``chips``/``score``.

    :param result: :func:`evaluate_games`'s dict.
    :return: name -> value.
    """
    if result["metric"] == "win_rate":
        return {key: result[key] for key in ("win", "draw", "loss")}
    return {result["metric"]: result["mean"]}


class WinRates(BaseCallback):
    """Measures the model against its game's ladder every ``every`` moves trained on, at a rollout's end, and,
    given the self-play ``players`` of a run with a pool, at every snapshot of the learner they take.

    Each point is ``{"timestep", "seconds", "vs_<opponent>_<value>": ...}`` with :func:`point_values`' names
    (``vs_random_win``, ``vs_random_chips``, ``vs_self_score``); ``seconds`` is the wall time of training up to
    the point, since ``learn`` began, the measurements themselves left out (the one value that differs between
    two runs of one seed). With ``players``, each point also has ``"snapshot"``: the pool slot that took a copy of
    the weights measured (the snapshot's strength when it was taken), or -1 for a point between snapshots.

    :param game: the game's name.
    :param every: moves trained on between measurements; 0 with ``players``: at the snapshots only.
    :param games: games per opponent at each measurement.
    :param seed: seeds the evaluation games, each point's its own (:meth:`point_seed`): with one seed for all, a settled
        model replays much the same games at every point, and the whole curve can sit off the model's strength.
    :param players: a :class:`~torchrl_mask.games.selfplay.SelfPlayPolicy` with a pool, whose snapshots are
        measured as they are taken (its ``snapshots`` count and ``latest_slot``).
    """

    def __init__(self, game: str, every: int, games: int, seed: int, players: Any = None) -> None:
        super().__init__()
        self.game, self.games, self.seed, self.players = game, games, seed, players
        self.every = max(every, 1) if every or players is None else None
        self._snapshots = 0  # the players' snapshots measured so far
        self.points: list[dict[str, Any]] = []
        self._next = 0
        self._start = time.perf_counter()
        self._measuring = 0.0  # seconds spent measuring, left out of the points' training time

    def point_seed(self, index: int) -> int:
        """Point ``index``'s seed, ``seed + 1 + index``: no point replays another's games, nor a final evaluation's.

        :param index: the point's place in :attr:`points`.
        :return: the seed of its games against each opponent.
        """
        return self.seed + 1 + index

    def _on_training_start(self) -> None:
        self._start, self._measuring = time.perf_counter(), 0.0

    def _on_step(self) -> bool:
        return True

    def _on_rollout_end(self) -> None:
        snapshot = self.players is not None and self.players.snapshots > self._snapshots
        due = self.every is not None and self.num_timesteps >= self._next
        if not snapshot and not due:
            return
        if due and self.every is not None:
            self._next = self.num_timesteps + self.every
        began = time.perf_counter()
        point: dict[str, Any] = {"timestep": self.num_timesteps, "seconds": began - self._start - self._measuring}
        if self.players is not None:  # the weights the latest snapshot copied are the model's now
            self._snapshots = self.players.snapshots
            point["snapshot"] = self.players.latest_slot if snapshot else -1
        for opponent in ladder(self.game).opponents:
            result = evaluate_games(self.model, self.game, opponent, self.games, self.point_seed(len(self.points)))
            point.update({f"vs_{opponent}_{key}": value for key, value in point_values(result).items()})
        self.points.append(point)
        self._measuring += time.perf_counter() - began
