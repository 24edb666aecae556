"""Self-play with memory: ``MaskableRecurrentPPO``'s LSTM policy in every seat, each seat with its own LSTM state.

In a card game a seat's view leaves out what happened earlier in the hand (who raised, and when); an LSTM can
keep it, but only if each seat's state follows that seat's own moves. :class:`RecurrentSelfPlayPolicy` carries one
state per seat in the collector's TensorDict, under the recurrent rollout's keys
(:data:`~torchrl_mask.rollout.recurrent_buffers.STATE_KEYS`), each ``(*B, n_seats, n_lstm_layers, hidden)``:

- at a game's first step (``"is_init"``, which :class:`~torchrl_mask.games.env.TurnBasedEnv` writes) every seat's
  state restarts from zeros;
- at each move, the mover's state (``"seat"`` picks it) goes through the LSTM with the mover's view; the result
  replaces that seat's state under ``"next"``, and the other seats' states pass on unchanged (TorchRL's collectors
  move them to the next step; the env needs the policy's :meth:`~RecurrentSelfPlayPolicy.make_tensordict_primer`).

``MaskableRecurrentPPO.learn(total, collector=collector)`` reads the batches with :class:`RecurrentSelfPlayRollout`:
the batch is split seat by seat as for the feed-forward policy (:mod:`torchrl_mask.games.seat_split`), each move
keeping the state its seat started it from. The seats' trajectories lie end to end in the rollout's rows, so the
rollout cuts its LSTM sequences at every trajectory's start as well as at every game's start
(``extend(sequence_starts=)``): at a trajectory that begins inside a game, training restarts the LSTM from the
stored state of that seat, at a game's start from zeros. Training thus re-runs each seat's LSTM over that seat's
own moves, as they were played.

Example:
    >>> from torchrl.collectors import Collector
    >>> from torchrl_mask import MaskableRecurrentPPO, SeatEnv, TurnBasedEnv
    >>> model = MaskableRecurrentPPO("MlpLstmPolicy", SeatEnv("leduc_holdem_v4"), n_steps=32, batch_size=32,
    ...                              n_epochs=1, policy_kwargs={"lstm_hidden_size": 8}, seed=0)
    >>> players = RecurrentSelfPlayPolicy(model.policy)
    >>> games = TurnBasedEnv("leduc_holdem_v4", n_games=4).append_transform(players.make_tensordict_primer())
    >>> model = model.learn(64, collector=Collector(games, players, frames_per_batch=64))
    >>> model.rollout_buffer.tensordict["recurrent_state", "actor", "hidden"].shape[-2:]
    torch.Size([1, 8])
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import torch
from sb3_contrib.common.recurrent.policies import RecurrentActorCriticPolicy
from tensordict import TensorDictBase
from tensordict.utils import NestedKey
from torchrl.data import Unbounded
from torchrl.envs import TensorDictPrimer

from torchrl_mask.algorithms.recurrent_collector_source import RecurrentCollectorRollout
from torchrl_mask.games.env import SEAT
from torchrl_mask.games.players import Player
from torchrl_mask.games.seat_split import GAME_START, NEXT_SEAT
from torchrl_mask.games.selfplay import SelfPlayPolicy, SelfPlayRollout
from torchrl_mask.rollout import storage as st
from torchrl_mask.rollout.recurrent_buffers import STATE_KEYS, MaskableRecurrentRolloutBuffer
from torchrl_mask.torchrl.recurrent_policy import MaskableRecurrentPolicyModule

if TYPE_CHECKING:
    from torchrl_mask.algorithms.recurrent_ppo import MaskableRecurrentPPO

__all__ = ["RecurrentSelfPlayPolicy", "RecurrentSelfPlayRollout", "mover_states"]


def _seat_index(seat: torch.Tensor, states: torch.Tensor) -> torch.Tensor:
    """``seat`` ``(*B,)`` as a gather index into ``states`` ``(*B, n_seats, L, H)``: ``(*B, 1, L, H)``."""
    return seat.reshape(*seat.shape, 1, 1, 1).expand(*seat.shape, 1, *states.shape[-2:])


def mover_states(states: torch.Tensor, seat: torch.Tensor, is_init: torch.Tensor | None = None) -> torch.Tensor:
    """Each step's mover's state out of every seat's.

    :param states: every seat's state, ``(*B, n_seats, n_lstm_layers, hidden)``.
    :param seat: the mover, int64 ``(*B,)``.
    :param is_init: where a game starts, bool ``(*B, 1)``: every state there is zeros; None: as given.
    :return: ``(*B, n_lstm_layers, hidden)``.
    """
    if is_init is not None:
        states = states * ~is_init.reshape(*is_init.shape[:-1], 1, 1, 1)
    return states.gather(-3, _seat_index(seat, states)).squeeze(-3)


class RecurrentSelfPlayPolicy(SelfPlayPolicy):
    """:class:`~torchrl_mask.games.selfplay.SelfPlayPolicy` for ``MaskableRecurrentPPO``: the LSTM policy plays
    every seat (or the learner's seat against snapshots of its past weights), each seat's LSTM state carried.

    Reads ``"observation"``, ``"action_mask"``, ``"is_init"``, ``"seat"`` and the seats' states (see the module);
    writes ``"action"``, ``"action_log_prob"``, ``"state_value"`` and the seats' states after the move under
    ``"next"``.

    :param policy: the model's policy (``model.policy``), MaskableRecurrentPPO's.
    :param n_seats: the game's seats (``len(TurnBasedEnv(game).seats)``; 2 for the PettingZoo classic games).
    :param pool_size: 0 for pure self-play; ``n`` keeps ``n`` snapshots of past weights as opponents (the env
        needs ``TurnBasedEnv(game, opponents=n)``).
    :param snapshot_every: with a pool, the learner's weights replace the oldest snapshot every this many
        rollouts.
    :param fixed: fixed players the learner also meets, by name (as ``SelfPlayPolicy`` takes them).
    :param fixed_share: the fixed players' share of the games (as ``SelfPlayPolicy`` takes it).
    :param self_share: the share of the games against itself, every seat learning (as ``SelfPlayPolicy`` takes it).
    :raises TypeError: not MaskableRecurrentPPO's policy (for MaskablePPO's: ``SelfPlayPolicy``).
    :raises ValueError: ``n_seats`` below 1, a negative ``pool_size``, a ``snapshot_every`` below 1, or a
        ``self_share`` that ``SelfPlayPolicy`` refuses.
    """

    _module_type = MaskableRecurrentPolicyModule
    _other = "for MaskablePPO's policy use SelfPlayPolicy(model.policy)."
    learner: MaskableRecurrentPolicyModule

    def __init__(
        self,
        policy: RecurrentActorCriticPolicy,
        n_seats: int = 2,
        pool_size: int = 0,
        snapshot_every: int = 10,
        fixed: Mapping[str, Player] | None = None,
        fixed_share: float | None = None,
        self_share: float = 0.0,
    ) -> None:
        if n_seats < 1:
            raise ValueError(f"n_seats={n_seats}: give the game's number of seats, len(TurnBasedEnv(game).seats).")
        super().__init__(policy, pool_size, snapshot_every, fixed, fixed_share, self_share)  # type: ignore[arg-type]
        self.n_seats = n_seats
        if SEAT not in self.in_keys:
            self.in_keys.append(SEAT)

    @property
    def rollout_reader(self) -> type[RecurrentSelfPlayRollout]:
        """How ``MaskableRecurrentPPO.learn(collector=...)`` reads this policy's batches: seat by seat, states kept."""
        return RecurrentSelfPlayRollout

    def make_tensordict_primer(self) -> TensorDictPrimer:
        """The transform that puts every seat's LSTM states, zeros, in the env's specs.

        :return: a ``TensorDictPrimer`` of :data:`~torchrl_mask.rollout.recurrent_buffers.STATE_KEYS`, each
            ``(n_seats, n_lstm_layers, hidden)``: ``TurnBasedEnv(game).append_transform(primer)``.
        """
        layers, size = self._state_shape
        specs = {key: Unbounded(shape=(self.n_seats, layers, size), dtype=torch.float32) for key in STATE_KEYS}
        return TensorDictPrimer(specs, expand_specs=True)

    @property
    def _state_shape(self) -> tuple[int, int]:
        """A seat's LSTM state: ``(n_lstm_layers, lstm_hidden_size)``."""
        shape = self.learner.policy.lstm_hidden_state_shape
        return int(shape[0]), int(shape[2])

    def _seat_states(self, tensordict: TensorDictBase, key: NestedKey) -> torch.Tensor:
        """Every seat's state under ``key``, ``(*B, n_seats, L, H)``, zeros where a game starts."""
        states = tensordict.get(key, None)
        layers, size = self._state_shape
        expected = (*tensordict.batch_size, self.n_seats, layers, size)
        if states is None or tuple(states.shape) != expected:
            found = "no such entry" if states is None else f"shape {tuple(states.shape)}"
            raise KeyError(
                f"RecurrentSelfPlayPolicy reads every seat's LSTM state {key!r}, {expected}, and the step has {found}: "
                "append the policy's primer to the env, TurnBasedEnv(game).append_transform("
                f"policy.make_tensordict_primer()), with n_seats={self.n_seats} the game's seats."
            )
        is_init = tensordict.get(st.IS_INIT)
        return states * ~is_init.reshape(*is_init.shape[:-1], 1, 1, 1)

    def _inputs(self, tensordict: TensorDictBase) -> list[torch.Tensor]:
        seat = tensordict.get(SEAT)
        if seat.numel() and int(seat.max()) >= self.n_seats:
            raise ValueError(
                f"Seat {int(seat.max())} moves, but RecurrentSelfPlayPolicy keeps states for n_seats={self.n_seats}: "
                "give it the game's number of seats."
            )
        head = [tensordict.get(key) for key in self.learner.in_keys[: -len(STATE_KEYS)]]
        return [*head, *(mover_states(self._seat_states(tensordict, key), seat) for key in STATE_KEYS)]

    def _write(self, tensordict: TensorDictBase, outputs: list[torch.Tensor]) -> None:
        moves, after = outputs[: -len(STATE_KEYS)], outputs[-len(STATE_KEYS) :]
        for key, tensor in zip(self.learner.out_keys, moves, strict=False):
            tensordict.set(key, tensor)
        seat = tensordict.get(SEAT)
        for key, state in zip(STATE_KEYS, after, strict=True):
            states = self._seat_states(tensordict, key).clone()
            states.scatter_(-3, _seat_index(seat, states), state.unsqueeze(-3).to(states.dtype))
            tensordict.set(("next", *key), states)


class RecurrentSelfPlayRollout(SelfPlayRollout, RecurrentCollectorRollout):
    """The batches of a collector running :class:`RecurrentSelfPlayPolicy`, read for ``MaskableRecurrentPPO``:
    split seat by seat as :class:`~torchrl_mask.games.selfplay.SelfPlayRollout` splits them, each move with its
    seat's LSTM states, into the model's recurrent rollout (sequences cut at each seat's trajectory).

    :param model: the MaskableRecurrentPPO being trained.
    :param collector: a TorchRL collector over :class:`~torchrl_mask.games.env.TurnBasedEnv` (with the policy's
        primer) running a :class:`RecurrentSelfPlayPolicy` over ``model.policy``.
    :param args: the rest of :class:`~torchrl_mask.algorithms.collector_source.CollectorRollout`'s arguments.
    :param kwargs: the same, by name.
    :raises TypeError: the model's rollout buffer is not the masked recurrent one.
    :raises ValueError: the collector's policy is not a :class:`RecurrentSelfPlayPolicy` over ``model.policy``.
    """

    model: MaskableRecurrentPPO  # type: ignore[assignment]
    module: MaskableRecurrentPolicyModule

    def _check_policy(self, shipped: Any, model: Any) -> None:
        if not isinstance(shipped, RecurrentSelfPlayPolicy) or shipped.policy is not model.policy:
            raise ValueError(
                "The collector's RecurrentSelfPlayPolicy plays another policy than this model's: build it with "
                "RecurrentSelfPlayPolicy(model.policy) of the MaskableRecurrentPPO that learns."
            )

    def _carried(self, batch: TensorDictBase) -> dict[NestedKey, torch.Tensor]:
        """Each move's LSTM states: its seat's, before the move (zeros at a game's first step)."""
        seat, is_init = batch.get(SEAT), batch.get(st.IS_INIT)
        return {**super()._carried(batch), **{key: mover_states(batch.get(key), seat, is_init) for key in STATE_KEYS}}

    def _extend(self, rows: TensorDictBase) -> MaskableRecurrentRolloutBuffer:  # type: ignore[override]
        """The recurrent rollout from ``rows``: episodes start at the seats' games' starts, sequences also at each
        trajectory's start (``"is_init"`` of the rows)."""
        buffer = self._buffer_for(rows.shape[0], rows.shape[1])
        buffer.reset()
        steps = rows.copy()
        steps.set(st.IS_INIT, rows.get(GAME_START))
        buffer.extend(steps, self.module.observation_keys, st.NEXT_REWARD, sequence_starts=rows.get(st.IS_INIT))
        return buffer

    @torch.no_grad()
    def _last_values(self, batch: TensorDictBase) -> torch.Tensor:
        """``V`` of each row's last next observation, from the critic state of the seat to move, ``(n_envs,)``."""
        keys = self.module.observation_keys
        leaves = [batch.get(("next", key) if isinstance(key, str) else ("next", *key))[:, -1] for key in keys]
        seat = batch.get(NEXT_SEAT)[:, -1]
        critic = [mover_states(batch.get(("next", *key))[:, -1], seat) for key in STATE_KEYS[2:]]
        self.model.policy.set_training_mode(False)
        return self.module.module.value(leaves, critic, batch.get(st.NEXT_DONE)[:, -1, 0]).reshape(-1).cpu()
