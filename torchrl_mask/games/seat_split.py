"""A self-play batch split seat by seat: each seat's moves become its own trajectory of transitions.

:func:`seat_transitions` turns a collector batch of a game's alternating moves, ``(n_envs, T)``
(:class:`~torchrl_mask.games.env.TurnBasedEnv` under :class:`~torchrl_mask.games.selfplay.SelfPlayPolicy`), into
transitions; :func:`pack_rows` lays them out as the rollout's rows. A seat's transition is its move:

- observation, mask, action, log-probability and value: the mover's, at its move;
- reward: the seat's own rewards from its move up to its next move, so a loss that arrives on the opponent's
  winning move is the loser's reward for the move before it;
- next state: the seat's next turn (``V`` of that observation, already in the batch); the game's end is terminal
  for every seat, also where the env cut the game by a move limit (truncated): its score stands, and nothing is
  bootstrapped past it, as the seats' next views after a cut game are in no batch (hanabi's OpenSpiel layer cuts
  its games at ``max_game_length``, counting the card deals too, so a long game of a strong pair ends so);
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
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np
import torch
from tensordict import TensorDict, TensorDictBase
from tensordict.utils import NestedKey

from torchrl_mask.algorithms.collector_source import EPISODE_REWARD, STEP_COUNT
from torchrl_mask.games.env import SEAT, SEAT_REWARD
from torchrl_mask.rollout import storage as st

__all__ = ["GAME_START", "NEXT_SEAT", "pack_rows", "seat_transitions"]

NEXT_SEAT = ("next", SEAT)
NEXT_SEAT_REWARD = ("next", SEAT_REWARD)
GAME_START = "game_start"
_STEP_KEYS = (st.ACTION, st.ACTION_MASK, st.VALUE, st.LOG_PROB)


def seat_transitions(
    batch: TensorDictBase,
    last_values: torch.Tensor,
    trained: torch.Tensor | None = None,
    carried: Mapping[NestedKey, torch.Tensor] | None = None,
) -> TensorDict:
    """Split a batch of alternating moves into each seat's transitions (see the module for the rules).

    :param batch: ``(n_envs, T)`` moves with ``"seat"``, ``("next", "seat")``, ``("next", "seat_reward")``
        ``(n_seats,)``, ``("next", "done" | "terminated" | "truncated")`` and the policy's ``"action"``,
        ``"action_mask"``, ``"state_value"``, ``"action_log_prob"`` and ``"observation"``.
    :param last_values: ``V`` of ``("next", "observation")`` at each row's last move, ``(n_envs,)`` (read only
        where no game ended there, for the seat that moves next).
    :param trained: bool ``(n_envs, T)``, the moves to keep (the learner's); None keeps every seat's.
    :param carried: more entries of each move to keep, ``key -> (n_envs, T, ...)`` (the mover's LSTM states).
    :return: ``(N,)`` transitions, each seat's trajectory contiguous and in time order, env by env: the step's
        entries, ``("next", "reward")``, ``("next", "state_value")``, ``("next", "done")``,
        ``("next", "terminated")`` (``(N, 1)``), ``"is_init"`` (a trajectory starts), ``"game_start"`` (the seat's
        transition before this one ended its game) and, where a game ended, the seat's
        ``("next", "episode_reward")`` and ``("next", "step_count")`` in this batch.
    """
    seat, next_seat = batch.get(SEAT).cpu().numpy(), batch.get(NEXT_SEAT)[:, -1].cpu().numpy()
    rewards = batch.get(NEXT_SEAT_REWARD).cpu().numpy()
    done = batch.get(st.NEXT_DONE)[..., 0].cpu().numpy()  # terminated or cut: the game's end either way
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
    game_start = np.zeros_like(terminal)
    game_start[1:] = terminal[:-1] & (group[1:] == group[:-1])
    columns = {
        "row": env,
        "t": t,
        "reward": reward,
        "next_value": next_value,
        "done": is_done,
        "terminal": terminal,
        GAME_START: game_start,
    }
    episodes = {int(i): (float(returns[i]), int(length[i])) for i in np.flatnonzero(terminal)}
    return _gather(batch, columns, episodes, carried or {})


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
    batch: TensorDictBase,
    columns: dict[str, np.ndarray],
    episodes: dict[int, tuple[float, int]],
    carried: Mapping[NestedKey, torch.Tensor],
) -> TensorDict:
    """The chosen moves' entries and their per-seat reward, next value, done and terminated, as ``(N,)``."""
    rows, times = torch.from_numpy(columns["row"]), torch.from_numpy(columns["t"])
    n = len(times)
    done = torch.from_numpy(columns["done"]).reshape(n, 1)
    out = TensorDict({key: batch.get(key)[rows, times].cpu() for key in (st.OBSERVATION, *_STEP_KEYS)}, [n])
    out.update({key: tensor[rows, times].cpu() for key, tensor in carried.items()})
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
            GAME_START: torch.from_numpy(columns[GAME_START]).reshape(n, 1),
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
        ``n_rows * K`` are dropped; a row's first transition is marked ``"is_init"`` (in the rows returned; the
        other entries are views of ``transitions``, whose own ``"is_init"`` is left as it was).
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
    is_init = rows.get(st.IS_INIT).clone()  # the rows' own: the transitions' marks stay as they were
    is_init[:, 0] = True
    rows.set(st.IS_INIT, is_init)
    return rows
