"""The learner's opponents in self-play with a pool: past snapshots and fixed players, drawn by what it does not beat.

A :class:`League` holds the opponents' order (``n_snapshots`` snapshots of past weights, then the fixed players
by name, e.g. tic-tac-toe's perfect player) and the learner's running score against each: 1 a win, 0.5 a draw,
0 a loss, an exponential average over the games it played against that opponent (``rate`` per game), 0.5 before
any. An opponent is drawn with probability proportional to ``(1 - score) ** 2 + floor``: prioritized fictitious
self-play, as AlphaStar's league draws its opponents, so the games go to the opponents the learner does not beat
yet, and every opponent keeps a share (``floor``) so that a score can recover. With ``fixed_share``, the draw is
two-level, as AlphaStar's mixes its matchmaking: the fixed players together get that share of the games and the
snapshots the rest, each group drawn within by the same weights; without it, the snapshots, which the learner
beats about half the time, take most of the games, and the fixed players it already beats (random play) few.

With ``self_share``, that share of the games is the learner against itself (opponent ``"self"``, last), as
AlphaStar's main agents play a share of their games against themselves: the latest weights are the opponent the
learner has not met yet, and every seat of such a game learns (twice the moves trained on per move played). The
others are drawn as above (``fixed_share`` is then a share of those others). A game against itself moves no score.

The draw is split between the env and the policy: :class:`~torchrl_mask.games.env.TurnBasedEnv` deals each game a
uniform number in ``[0, 1)`` (``"opponent_draw"``, from its seeded generator), and the league maps it through its
probabilities (:meth:`League.choose`); the scores are a buffer of the policy module, so they reach worker processes
with the weights. A game that runs across two batches may change opponent at the batch boundary, when the scores
moved in between.

Example:
    >>> from torchrl_mask.games.search import perfect_tictactoe
    >>> league = League(2, {"perfect": perfect_tictactoe})
    >>> league.names, league.probabilities().tolist()
    (['snapshot_0', 'snapshot_1', 'perfect'], [0.3333333432674408, 0.3333333432674408, 0.3333333432674408])
    >>> league.record(np.array([2, 2, 0]), np.array([-1.0, 0.0, 1.0]))  # lost and drew to perfect, beat snapshot_0
    >>> [round(p, 3) for p in league.probabilities().tolist()]
    [0.306, 0.333, 0.36]
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np
import torch
from torch import nn

from torchrl_mask.games.players import Player, moves

__all__ = ["League"]


class League(nn.Module):
    """The opponents' scores and probabilities, and the fixed players' moves.

    :param n_snapshots: snapshots of past weights (opponents ``0`` to ``n_snapshots - 1``).
    :param fixed: the fixed players, by name (opponents ``n_snapshots`` on, in this order).
    :param rate: how far one game moves the learner's score against its opponent.
    :param floor: the least weight an opponent keeps, however well the learner does against it.
    :param fixed_share: the share of the games the fixed players get together, the snapshots the rest (of the
        games not against itself, with ``self_share``); None: one draw over all opponents by their weights. Only
        with both snapshots and fixed players.
    :param self_share: the share of the games the learner plays against itself (opponent ``"self"``, the last;
        every seat learns); the others are drawn as without it. 0: none, and no ``"self"`` opponent.
    :raises ValueError: no opponent at all, a rate outside ``(0, 1]``, a negative floor, a ``fixed_share``
        outside ``[0, 1]``, or a ``self_share`` outside ``[0, 1)``.
    """

    scores: torch.Tensor

    def __init__(
        self,
        n_snapshots: int,
        fixed: Mapping[str, Player] | None = None,
        rate: float = 0.05,
        floor: float = 0.05,
        fixed_share: float | None = None,
        self_share: float = 0.0,
    ) -> None:
        fixed = dict(fixed or {})
        if n_snapshots + len(fixed) < 1 or not 0 < rate <= 1 or floor < 0:
            raise ValueError(
                f"League(n_snapshots={n_snapshots}, {len(fixed)} fixed players, rate={rate}, floor={floor}): give at "
                "least one opponent, a rate in (0, 1] and a floor >= 0."
            )
        if fixed_share is not None and not 0 <= fixed_share <= 1:
            raise ValueError(f"League(fixed_share={fixed_share}): give the fixed players' share of games in [0, 1].")
        if not 0 <= self_share < 1:
            raise ValueError(
                f"League(self_share={self_share}): give the share of games against itself in [0, 1) "
                "(the rest go to the other opponents; pure self-play needs no league)."
            )
        super().__init__()
        self.n_snapshots = n_snapshots
        self.fixed = fixed
        self.names = [f"snapshot_{index}" for index in range(n_snapshots)] + list(fixed)
        self.self_share = self_share
        #: the learner's own index as an opponent (the last), None without games against itself
        self.self_index = len(self.names) if self_share > 0 else None
        self.names += ["self"] if self_share > 0 else []
        self.rate, self.floor = rate, floor
        both = n_snapshots > 0 and len(fixed) > 0
        self.fixed_share = fixed_share if both else None  # one group only: the split has nothing to split
        self.register_buffer("scores", torch.full((len(self.names),), 0.5))

    def probabilities(self) -> torch.Tensor:
        """Each opponent's probability of being drawn, ``(n_opponents,)``."""
        weights = (1.0 - self.scores[: self.n_snapshots + len(self.fixed)]) ** 2 + self.floor
        if self.fixed_share is None:
            others = weights / weights.sum()
        else:
            snapshots, fixed = weights[: self.n_snapshots], weights[self.n_snapshots :]
            share = self.fixed_share
            others = torch.cat([snapshots / snapshots.sum() * (1.0 - share), fixed / fixed.sum() * share])
        if self.self_index is None:
            return others
        return torch.cat([others * (1.0 - self.self_share), others.new_full((1,), self.self_share)])

    def choose(self, draw: torch.Tensor) -> torch.Tensor:
        """The opponents for uniform draws in ``[0, 1)``, by the league's probabilities.

        :param draw: float ``(*B,)``.
        :return: int64 ``(*B,)``, in ``[0, n_opponents)``.
        """
        cumulative = self.probabilities().cumsum(0)
        chosen = torch.searchsorted(cumulative, draw.to(cumulative.dtype).contiguous(), right=True)
        return chosen.clamp_(max=len(self.names) - 1)

    def record(self, opponents: np.ndarray, results: np.ndarray) -> None:
        """Move the learner's scores by finished games, in order.

        :param opponents: each game's opponent, int ``(n_games,)``.
        :param results: the learner's return in each game, ``(n_games,)``: its sign counts (win, draw, loss); games
            against itself are passed over.
        """
        scores = self.scores
        for opponent, result in zip(np.asarray(opponents).tolist(), np.sign(results).tolist(), strict=True):
            if opponent != self.self_index:  # against itself: each seat's result is the other's, nothing to learn
                scores[opponent] += self.rate * ((result + 1.0) / 2.0 - scores[opponent])

    def reset(self, opponent: int) -> None:
        """Forget the learner's score against ``opponent`` (a snapshot slot that now holds other weights).

        :param opponent: the opponent's index.
        """
        self.scores[opponent] = 0.5

    def fixed_moves(
        self, opponent: int, observations: np.ndarray, masks: np.ndarray, rng: np.random.Generator
    ) -> np.ndarray:
        """Fixed player ``opponent``'s moves in several games, all at once where it is a
        :class:`~torchrl_mask.games.players.BatchPlayer`.

        :param opponent: the opponent's index (at least ``n_snapshots``).
        :param observations: the games' views, ``(n, *view)``.
        :param masks: bool ``(n, n_actions)``.
        :param rng: the players' random choices (ties, random play).
        :return: int64 ``(n,)``.
        """
        return moves(self.fixed[self.names[opponent]], observations, masks, rng)

    def summary(self) -> dict[str, float]:
        """The learner's score against each opponent, by name."""
        scored = self.names[: self.n_snapshots + len(self.fixed)]  # not "self": no score is kept against itself
        return {name: round(float(score), 4) for name, score in zip(scored, self.scores.tolist(), strict=False)}
