"""The evaluation ladder of turn-based games: a trained model against the fixed players, by win rate.

- :func:`evaluate_games`: win, draw and loss rates of a model against one fixed player, each seat half of the games;
- :class:`WinRates`: an SB3 callback measuring them during training.

Example:
    >>> from torchrl_mask import MaskablePPO, SeatEnv
    >>> model = MaskablePPO("MlpPolicy", SeatEnv("tictactoe_v3"), n_steps=64, batch_size=32, seed=0)
    >>> sorted(evaluate_games(model, "tictactoe_v3", "random", games=4, seed=0))
    ['draw', 'illegal_moves', 'loss', 'win']
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np
from sb3_contrib.common.maskable.evaluation import evaluate_policy
from stable_baselines3.common.callbacks import BaseCallback
from stable_baselines3.common.monitor import Monitor

from torchrl_mask.games.seat_env import SeatEnv

if TYPE_CHECKING:
    from torchrl_mask.algorithms.ppo import MaskablePPO

__all__ = ["EVAL_POINTS", "EVAL_POINT_GAMES", "OPPONENTS", "WinRates", "evaluate_games"]

OPPONENTS = ("random", "heuristic")
EVAL_POINTS = 10  # win-rate measurements during training
EVAL_POINT_GAMES = 50  # games per opponent at each of them


def evaluate_games(model: MaskablePPO, game: str, opponent: str, games: int, seed: int) -> dict[str, Any]:
    """Win, draw and loss rates of the model (deterministic, masked) against a fixed player.

    The model takes the first seat in every other game (:class:`~torchrl_mask.SeatEnv` alternates), and plays
    through sb3-contrib's ``evaluate_policy`` with ``use_masking=True``.

    :param model: the trained model.
    :param game: the game's name (``"tictactoe_v3"``).
    :param opponent: ``"random"`` or ``"heuristic"``.
    :param games: games to play.
    :param seed: seeds the games and the opponent.
    :return: ``{"win", "draw", "loss"}`` as fractions of ``games``, and ``"illegal_moves"``, the model's.
    """
    env = SeatEnv(game, opponent=opponent)
    env.reset(seed=seed)
    returns, _ = evaluate_policy(model, Monitor(env), n_eval_episodes=games, deterministic=True,
                                 return_episode_rewards=True, use_masking=True)  # fmt: skip
    result = np.sign(np.asarray(returns, dtype=float))
    return {"win": float(np.mean(result > 0)), "draw": float(np.mean(result == 0)),
            "loss": float(np.mean(result < 0)), "illegal_moves": env.illegal_moves}  # fmt: skip


class WinRates(BaseCallback):
    """Measures the win rates against each fixed player every ``every`` moves trained on, at a rollout's end.

    :param game: the game's name.
    :param every: moves trained on between measurements.
    :param games: games per opponent at each measurement.
    :param seed: seeds the evaluation games.
    """

    def __init__(self, game: str, every: int, games: int, seed: int) -> None:
        super().__init__()
        self.game, self.every, self.games, self.seed = game, max(every, 1), games, seed
        self.points: list[dict[str, Any]] = []
        self._next = 0

    def _on_step(self) -> bool:
        return True

    def _on_rollout_end(self) -> None:
        if self.num_timesteps < self._next:
            return
        self._next = self.num_timesteps + self.every
        point: dict[str, Any] = {"timestep": self.num_timesteps}
        for opponent in OPPONENTS:
            rates = evaluate_games(self.model, self.game, opponent, self.games, self.seed)  # type: ignore[arg-type]
            point.update({f"vs_{opponent}_{key}": rates[key] for key in ("win", "draw", "loss")})
        self.points.append(point)
