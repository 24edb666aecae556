"""Self-play for turn-based games: one shared policy plays every seat, and each seat learns from its own moves.

A collector over :class:`~torchrl_mask.games.env.TurnBasedEnv` running :class:`SelfPlayPolicy` gives
batches of the game's alternating moves, ``(n_envs, T)``. ``MaskablePPO.learn(total, collector=collector)``
reads each batch with the reader the policy names (:attr:`SelfPlayPolicy.rollout_reader`,
:class:`SelfPlayRollout`), which splits it by seat
before the rollout's ``extend`` (:func:`seat_transitions`). A seat's transition is its move:

- observation, mask, action, log-probability and value: the mover's, at its move;
- reward: the seat's own rewards from its move up to its next move, so a loss that arrives on the opponent's
  winning move is the loser's reward for the move before it;
- next state: the seat's next turn (``V`` of that observation, already in the batch); the game's end is terminal
  for every seat;
- the rollout's end cuts a seat's trajectory: its last move is *truncated* (done, not terminated), bootstrapped
  with ``V`` of that seat's next observation, when that observation is in the batch (the seat moves right after
  the batch's last move). The other seat's last move, whose outcome the batch does not hold yet (the opponent's
  reply may end the game), is dropped; so is a seat's move whose next turn is in no batch.

Rows of unequal length: the seats' trajectories are laid end to end (env by env, seat by seat, each in time
order), and the stream is cut into ``model.n_envs`` rows of equal length ``K = N // model.n_envs`` (the rows SB3's
progress bar and callbacks count by; one row, nothing cut, for a model built on one
:class:`~torchrl_mask.SeatEnv`); the ``N mod n_envs`` transitions left at the stream's end are dropped, and one
more step per row while ``K`` would leave a last minibatch of one row. Every transition carries its own next
value and done, so a row's end bootstraps like any truncation, and GAE (TorchRL's
``generalized_advantage_estimate``, through ``extend``) runs along each seat's trajectory. ``K`` changes from one
batch to the next with the games' lengths; the rollout buffer is then re-made with the new shape.
``num_timesteps`` counts the moves trained on, and the callbacks' ``dones`` are the games' ends.

Opponents: ``SelfPlayPolicy(policy)`` is pure self-play, every move trains. ``SelfPlayPolicy(policy, pool_size=n)``
with ``TurnBasedEnv(game, opponents=n)`` plays each game with the learner in one seat (drawn per game) and one of
``n`` snapshots of past weights in the others; only the learner's moves train. A snapshot of the learner's weights
replaces the oldest every ``snapshot_every`` rollouts.

Example:
    >>> from torchrl.collectors import Collector
    >>> from torchrl_mask import MaskablePPO, SeatEnv, SelfPlayPolicy, TurnBasedEnv
    >>> model = MaskablePPO("MlpPolicy", SeatEnv("tictactoe_v3"), batch_size=32, n_epochs=1, seed=0)
    >>> collector = Collector(lambda: TurnBasedEnv("tictactoe_v3"), SelfPlayPolicy(model.policy),
    ...                       frames_per_batch=64)
    >>> model = model.learn(126, collector=collector)
    >>> model.rollout_buffer.buffer_size
    63
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import numpy as np
import torch
from sb3_contrib.common.maskable.policies import MaskableActorCriticPolicy
from tensordict import TensorDict, TensorDictBase
from tensordict.nn import TensorDictModuleBase
from tensordict.utils import NestedKey
from torch import nn

from torchrl_mask.algorithms.collector_source import EPISODE_REWARD, STEP_COUNT, CollectorRollout
from torchrl_mask.games.env import LEARNER_SEAT, OPPONENT, SEAT, SEAT_REWARD
from torchrl_mask.rollout import storage as st
from torchrl_mask.rollout.buffers import MaskableRolloutBuffer
from torchrl_mask.torchrl.policy import MaskablePolicyModule

if TYPE_CHECKING:
    from sb3_contrib import MaskablePPO

__all__ = ["SelfPlayPolicy", "SelfPlayRollout", "pack_rows", "seat_transitions"]

NEXT_SEAT = ("next", SEAT)
NEXT_SEAT_REWARD = ("next", SEAT_REWARD)
NEXT_TRUNCATED = ("next", "truncated")
_STEP_KEYS = (st.ACTION, st.ACTION_MASK, st.VALUE, st.LOG_PROB)


def _snapshot(policy: MaskableActorCriticPolicy) -> MaskableActorCriticPolicy:
    """A copy of ``policy`` built as SB3 rebuilds a saved policy (its constructor arguments, then its weights)."""
    copy = type(policy)(**policy._get_constructor_parameters())
    copy.load_state_dict(policy.state_dict())
    copy.set_training_mode(False)
    return copy.to(policy.device)


class SelfPlayPolicy(TensorDictModuleBase):
    """The model's policy playing every seat of a turn-based game, or the learner's seat against past snapshots.

    Reads ``"observation"`` and ``"action_mask"`` (and, with a pool, ``"seat"``, ``"learner_seat"`` and
    ``"opponent"``, as :class:`~torchrl_mask.games.env.TurnBasedEnv` writes them) and writes
    ``"action"``, ``"action_log_prob"`` and ``"state_value"`` as :class:`~torchrl_mask.MaskablePolicyModule`
    does. Its pool snapshots are submodules, so ``collector.update_policy_weights_()`` ships them to worker
    processes with the learner's weights.

    :param policy: the model's policy (``model.policy``).
    :param pool_size: 0 for pure self-play; ``n`` keeps ``n`` snapshots of past weights as opponents (the env
        needs ``TurnBasedEnv(game, opponents=n)``).
    :param snapshot_every: with a pool, the learner's weights replace the oldest snapshot every this many
        rollouts.
    :raises ValueError: a negative ``pool_size`` or a ``snapshot_every`` below 1.
    """

    def __init__(self, policy: MaskableActorCriticPolicy, pool_size: int = 0, snapshot_every: int = 10) -> None:
        if pool_size < 0 or snapshot_every < 1:
            raise ValueError(
                f"pool_size={pool_size}, snapshot_every={snapshot_every}: use pool_size >= 0 (0 is pure self-play) "
                "and snapshot_every >= 1."
            )
        super().__init__()
        self.learner = MaskablePolicyModule(policy)
        self.pool = nn.ModuleList(MaskablePolicyModule(_snapshot(policy)) for _ in range(pool_size))
        self.snapshot_every = snapshot_every
        self.rollouts = 0  # rollouts seen, for the snapshot schedule
        self.in_keys = [*self.learner.in_keys, *((SEAT, LEARNER_SEAT, OPPONENT) if pool_size else ())]
        self.out_keys = list(self.learner.out_keys)

    @property
    def policy(self) -> MaskableActorCriticPolicy:
        """The learner's sb3-contrib policy."""
        return self.learner.policy

    @property
    def rollout_reader(self) -> type[SelfPlayRollout]:
        """How ``MaskablePPO.learn(collector=...)`` reads the batches this policy collects: seat by seat."""
        return SelfPlayRollout

    def learner_moves(self, batch: TensorDictBase) -> torch.Tensor:
        """Which moves of a batch the learner made (all of them in pure self-play).

        :param batch: steps with ``"seat"`` (and ``"learner_seat"`` with a pool), batch dims ``B``.
        :return: bool ``B``.
        """
        seat = batch.get(SEAT)
        return torch.ones_like(seat, dtype=torch.bool) if not len(self.pool) else seat == batch.get(LEARNER_SEAT)

    def forward(self, tensordict: TensorDictBase) -> TensorDictBase:
        """Write the action, its log-probability and the state value of the seat to move.

        :param tensordict: the step(s), batch dims ``B``.
        :return: ``tensordict``, with ``"action"``, ``"action_log_prob"`` and ``"state_value"`` set.
        """
        inputs = [tensordict.get(key) for key in self.learner.in_keys]
        outputs = list(self.learner.module(*inputs))
        if len(self.pool):
            self._check_opponents(tensordict)
            theirs = ~self.learner_moves(tensordict)
            opponent = tensordict.get(OPPONENT)
            for index, snapshot in enumerate(self.pool):
                rows = theirs & (opponent == index)
                if bool(rows.any()):
                    played = snapshot.module(*[leaf[rows] for leaf in inputs])  # type: ignore[operator]
                    for out, new in zip(outputs, played, strict=True):
                        out[rows] = new.to(out.dtype)
        for key, tensor in zip(self.out_keys, outputs, strict=True):
            tensordict.set(key, tensor)
        return tensordict

    def _check_opponents(self, tensordict: TensorDictBase) -> None:
        """Refuse steps that do not say which seat learns and which snapshot plays, or name a snapshot the pool
        lacks (those moves would silently be the learner's)."""
        if LEARNER_SEAT not in tensordict or OPPONENT not in tensordict:
            raise KeyError(
                f"SelfPlayPolicy(pool_size={len(self.pool)}) reads {LEARNER_SEAT!r} and {OPPONENT!r} from each step, "
                f"and this env writes neither: make it TurnBasedEnv(game, opponents={len(self.pool)}), or use "
                "pool_size=0 for pure self-play."
            )
        opponent = tensordict.get(OPPONENT)
        highest = int(opponent.max()) if opponent.numel() else -1
        if highest >= len(self.pool):
            raise ValueError(
                f"The env drew opponent {highest}, but SelfPlayPolicy keeps {len(self.pool)} snapshots (0 to "
                f"{len(self.pool) - 1}): give TurnBasedEnv(game, opponents=n) and SelfPlayPolicy(pool_size=n) the "
                "same n."
            )

    def rollout_done(self) -> None:
        """Count one rollout; on every ``snapshot_every``-th, the learner's weights replace the oldest snapshot."""
        self.rollouts += 1
        if len(self.pool) and self.rollouts % self.snapshot_every == 0:
            oldest = self.pool[(self.rollouts // self.snapshot_every - 1) % len(self.pool)]
            oldest.policy.load_state_dict(self.policy.state_dict())  # type: ignore[union-attr]


def seat_transitions(
    batch: TensorDictBase, last_values: torch.Tensor, trained: torch.Tensor | None = None
) -> TensorDict:
    """Split a batch of alternating moves into each seat's transitions (see the module for the rules).

    :param batch: ``(n_envs, T)`` moves with ``"seat"``, ``("next", "seat")``, ``("next", "seat_reward")``
        ``(n_seats,)``, ``("next", "done" | "terminated" | "truncated")`` and the policy's ``"action"``,
        ``"action_mask"``, ``"state_value"``, ``"action_log_prob"`` and ``"observation"``.
    :param last_values: ``V`` of ``("next", "observation")`` at each row's last move, ``(n_envs,)`` (read only
        where no game ended there, for the seat that moves next).
    :param trained: bool ``(n_envs, T)``, the moves to keep (the learner's); None keeps every seat's.
    :return: ``(N,)`` transitions, each seat's trajectory contiguous and in time order, env by env: the step's
        entries, ``("next", "reward")``, ``("next", "state_value")``, ``("next", "done")``,
        ``("next", "terminated")`` (``(N, 1)``), ``"is_init"`` and, where a game ended, the seat's
        ``("next", "episode_reward")`` and ``("next", "step_count")`` in this batch.
    :raises ValueError: a game ended by truncation (its seats' next observations are not in the batch).
    """
    seat, next_seat = batch.get(SEAT).cpu().numpy(), batch.get(NEXT_SEAT)[:, -1].cpu().numpy()
    rewards = batch.get(NEXT_SEAT_REWARD).cpu().numpy()
    done, terminated = (batch.get(key)[..., 0].cpu().numpy() for key in (st.NEXT_DONE, st.NEXT_TERMINATED))
    if bool((done & ~terminated).any()):
        raise ValueError(
            "A game in the batch ended by truncation: self-play needs games that end by termination (the classic "
            "board games do); remove the step limit, or make the limit a terminal state of the game."
        )
    values = batch.get(st.VALUE)[..., 0].cpu().numpy()
    keep = np.ones_like(done) if trained is None else trained.cpu().numpy()
    env, t, reward, next_value, is_done, terminal = _seat_moves(seat, next_seat, rewards, done, values, last_values)
    order = np.lexsort((t, seat[env, t], env))  # env by env, seat by seat, each in time order
    env, t, reward, next_value, is_done, terminal = (a[order] for a in (env, t, reward, next_value, is_done, terminal))
    group = env * rewards.shape[-1] + seat[env, t]
    returns, length = _episode_totals(group, reward, terminal)
    kept = keep[env, t].astype(bool)
    env, t, reward, next_value, is_done, terminal, returns, length, group = (
        a[kept] for a in (env, t, reward, next_value, is_done, terminal, returns, length, group)
    )
    is_done[np.flatnonzero(np.diff(group, append=-1))] = True  # a seat's trajectory ends in this batch: cut
    columns = {"row": env, "t": t, "reward": reward, "next_value": next_value, "done": is_done, "terminal": terminal}
    episodes = {int(i): (float(returns[i]), int(length[i])) for i in np.flatnonzero(terminal)}
    return _gather(batch, columns, episodes)


def _seat_moves(
    seat: np.ndarray,
    next_seat: np.ndarray,
    rewards: np.ndarray,
    done: np.ndarray,
    values: np.ndarray,
    last_values: torch.Tensor,
) -> tuple[np.ndarray, ...]:
    """Every move's transition for its own seat, over the whole batch at once (see the module for the rules).

    :param seat: the mover, ``(n_envs, T)``; ``next_seat``: the seat to move after each row's last move,
        ``(n_envs,)``; ``rewards``: every seat's reward of each move, ``(n_envs, T, n_seats)``; ``done``: bool
        ``(n_envs, T)``; ``values``: ``V`` of each move, ``(n_envs, T)``; ``last_values``: ``(n_envs,)``.
    :return: the moves that have a transition (a seat's last move whose outcome is not in the batch has none):
        their env, time, reward, next value, done and terminated, each ``(M,)``, in time order env by env.
    """
    n_envs, steps = seat.shape
    times = np.broadcast_to(np.arange(steps), seat.shape)
    # the seat's next move after t (or T): a running minimum from the right of the seat's move times
    later = np.full(seat.shape, steps)
    for s in range(rewards.shape[-1]):
        moves = np.where(seat == s, times, steps)
        after = np.minimum.accumulate(moves[:, ::-1], axis=1)[:, ::-1]
        later = np.where(seat == s, np.concatenate([after[:, 1:], np.full((n_envs, 1), steps)], axis=1), later)
    first_end = np.minimum.accumulate(np.where(done, times, steps)[:, ::-1], axis=1)[:, ::-1]  # first done >= t
    ends = first_end < later
    has_next = ~ends & (later < steps)
    cut = ~ends & ~has_next & (next_seat[:, None] == seat)  # moves right after the batch: truncated, bootstrapped
    env, t = np.nonzero(ends | has_next | cut)
    mover, last = seat[env, t], np.where(ends, first_end, later - 1)[env, t]
    # the seat's rewards from its move to the game's end, or to the move before its next turn (or the batch's end)
    running = np.cumsum(rewards, axis=1, dtype=np.float64)
    reward = running[env, last, mover] - running[env, t, mover] + rewards[env, t, mover]
    bootstrap = np.asarray(last_values, dtype=np.float64).reshape(-1)[env]
    following = values[env, np.minimum(later[env, t], steps - 1)].astype(np.float64)
    next_value = np.where(ends[env, t], 0.0, np.where(has_next[env, t], following, bootstrap))
    return env, t, reward, next_value, ends[env, t] | cut[env, t], ends[env, t].copy()


def _episode_totals(group: np.ndarray, reward: np.ndarray, terminal: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Each game's return and move count for its seat, up to each move: a running sum along each seat's
    trajectory (``group``, contiguous), restarted after the game's end.

    :return: the return and count at each move, ``(M,)`` (read where the move ends a game).
    """
    if not len(group):
        return np.zeros(0), np.zeros(0, np.int64)
    starts = np.ones(len(group), dtype=bool)
    starts[1:] = (group[1:] != group[:-1]) | terminal[:-1]
    segment = np.cumsum(starts) - 1
    sums, first = np.cumsum(reward), np.flatnonzero(starts)
    offset = np.concatenate([[0.0], sums])[first][segment]
    return sums - offset, np.arange(len(group)) - first[segment] + 1


def _gather(
    batch: TensorDictBase, columns: dict[str, np.ndarray], episodes: dict[int, tuple[float, int]]
) -> TensorDict:
    """The chosen moves' entries and their per-seat reward, next value, done and terminated, as ``(N,)``."""
    rows, times = torch.from_numpy(columns["row"]), torch.from_numpy(columns["t"])
    n = len(times)
    done = torch.from_numpy(columns["done"]).reshape(n, 1)
    out = TensorDict({key: batch.get(key)[rows, times].cpu() for key in (st.OBSERVATION, *_STEP_KEYS)}, [n])
    is_init = torch.ones(n, 1, dtype=torch.bool)
    is_init[1:] = done[:-1]
    episode_reward, step_count = torch.zeros(n, 1), torch.zeros(n, 1, dtype=torch.int64)
    for index, (returns, length) in episodes.items():
        episode_reward[index], step_count[index] = returns, length
    out.update(
        {
            st.NEXT_REWARD: torch.tensor(columns["reward"], dtype=torch.float32).reshape(n, 1),
            st.NEXT_VALUE: torch.tensor(columns["next_value"], dtype=torch.float32).reshape(n, 1),
            st.NEXT_DONE: done,
            st.NEXT_TERMINATED: torch.from_numpy(columns["terminal"]).reshape(n, 1),
            st.IS_INIT: is_init,
            EPISODE_REWARD: episode_reward,
            STEP_COUNT: step_count,
        }
    )
    return out


def pack_rows(transitions: TensorDictBase, n_rows: int, batch_size: int | None = None) -> TensorDictBase:
    """Seat trajectories laid end to end, cut into ``n_rows`` rows of ``len // n_rows`` transitions.

    :param transitions: ``(N,)`` transitions (:func:`seat_transitions`).
    :param n_rows: rows of the rollout.
    :param batch_size: the minibatch size; rows are shortened by a step while they would leave a last
        minibatch of one row (whose advantage normalisation in sb3-contrib's ``train()`` is NaN). None: no check.
    :return: ``(n_rows, K)`` with ``K = N // n_rows`` (less where ``batch_size`` asks); the transitions past
        ``n_rows * K`` are dropped; a row's first transition is marked ``"is_init"``.
    :raises ValueError: fewer transitions than rows (a batch too short for its envs).
    """
    length = transitions.shape[0] // n_rows
    while batch_size is not None and length > 1 and (n_rows * length) % batch_size == 1:
        length -= 1
    if length == 0:
        raise ValueError(
            f"The batch holds {transitions.shape[0]} seat moves to train on for {n_rows} rows: raise the "
            "collector's frames_per_batch (at least 2 moves per env and seat)."
        )
    rows = transitions[: n_rows * length].reshape(n_rows, length)
    rows.get(st.IS_INIT)[:, 0] = True
    return rows


class SelfPlayRollout(CollectorRollout):
    """:class:`~torchrl_mask.algorithms.collector_source.CollectorRollout` for a collector running
    :class:`SelfPlayPolicy`: each batch is split by seat (:func:`seat_transitions`, :func:`pack_rows`) before
    ``extend``; the batch fetching, weight updates, buffer shape and callbacks are the collector source's.

    :param model: the MaskablePPO being trained.
    :param collector: a TorchRL collector over :class:`~torchrl_mask.games.env.TurnBasedEnv` running
        a :class:`SelfPlayPolicy` over ``model.policy``.
    :param args: the rest of :class:`~torchrl_mask.algorithms.collector_source.CollectorRollout`'s arguments.
    :param kwargs: the same, by name.
    :raises ValueError: the collector's :class:`SelfPlayPolicy` plays another policy than the model's.
    """

    def __init__(self, model: MaskablePPO, collector: Any, *args: Any, **kwargs: Any) -> None:
        super().__init__(model, collector, *args, **kwargs)
        self.players: SelfPlayPolicy = collector.policy

    def _check_policy(self, shipped: Any, model: MaskablePPO) -> None:
        if not isinstance(shipped, SelfPlayPolicy) or shipped.policy is not model.policy:
            raise ValueError(
                "The collector's SelfPlayPolicy plays another policy than this model's: build it with "
                "SelfPlayPolicy(model.policy) of the model that learns."
            )

    def _fill(self) -> tuple[MaskableRolloutBuffer, TensorDictBase]:
        self.players.rollout_done()  # before the weights are sent: a new snapshot travels with them
        batch = self._next_batch()
        transitions = seat_transitions(batch, self._last_values(batch), self.players.learner_moves(batch))
        # the rows SB3's progress bar and callbacks count by; no minibatch of one row (NaN normalisation)
        batch_size = self.model.batch_size if self.model.normalize_advantage else None
        rows = pack_rows(transitions, self.model.n_envs, batch_size)
        buffer = self._buffer_for(rows.shape[0], rows.shape[1])
        buffer.reset()
        buffer.extend(rows, self.module.observation_keys, st.NEXT_REWARD)
        steps = rows.copy()  # the callbacks' dones are the games' ends, not the trajectories' cuts
        steps.set(st.NEXT_DONE, rows.get(st.NEXT_TERMINATED))
        return buffer, steps

    @torch.no_grad()
    def _last_values(self, batch: TensorDictBase) -> torch.Tensor:
        """``V`` of each row's last next observation, ``(n_envs,)`` (the seat to move right after the batch)."""
        keys: Sequence[NestedKey] = self.module.observation_keys
        leaves = [batch.get(("next", key) if isinstance(key, str) else ("next", *key))[:, -1] for key in keys]
        self.model.policy.set_training_mode(False)
        return self.module.module.value(leaves).reshape(-1).cpu()
