"""Self-play for turn-based games: one shared policy plays every seat, and each seat learns from its own moves.

A collector over :class:`~torchrl_mask.games.env.TurnBasedEnv` running :class:`SelfPlayPolicy` gives
batches of the game's alternating moves, ``(n_envs, T)``. ``MaskablePPO.learn(total, collector=collector)``
reads each batch with the reader the policy names (:attr:`SelfPlayPolicy.rollout_reader`,
:class:`SelfPlayRollout`), which splits it by seat before the rollout's ``extend``: each seat learns from its own
moves, its rewards up to its next move, and the game's end (the rules: :mod:`torchrl_mask.games.seat_split`).
``num_timesteps`` counts the moves trained on, and the callbacks' ``dones`` are the games' ends.

Opponents: ``SelfPlayPolicy(policy)`` is pure self-play, every move trains. ``SelfPlayPolicy(policy, pool_size=n,
fixed={name: player})`` with ``TurnBasedEnv(game, opponents=n + len(fixed))`` plays each game with the learner in
one seat (drawn per game) and, in the others, one of ``n`` snapshots of past weights or a fixed player (tic-tac-toe's
perfect player, Connect Four's negamax), drawn by what the learner does not beat yet (:mod:`torchrl_mask.games.league`);
only the learner's moves train. A snapshot of the learner's weights replaces the oldest every ``snapshot_every``
rollouts.

Symmetries: ``SelfPlayPolicy(policy, symmetries=game_symmetries(game))`` (:mod:`torchrl_mask.games.symmetry`)
has the reader add each learner move's images under the game's symmetries (Connect Four's mirror) to the rollout,
after the moves played; ``num_timesteps`` counts the moves played. With ``images="random"``, each move is trained
on as one of its images drawn at random instead (itself among them), and the rollout keeps its size.

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

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, Literal

import numpy as np
import torch
from sb3_contrib.common.maskable.policies import MaskableActorCriticPolicy
from tensordict import TensorDictBase
from tensordict.nn import TensorDictModuleBase
from tensordict.utils import NestedKey
from torch import nn

from torchrl_mask.algorithms.collector_source import CollectorRollout
from torchrl_mask.games.env import LEARNER_SEAT, OPPONENT, OPPONENT_CHOSEN, OPPONENT_DRAW, SEAT
from torchrl_mask.games.league import League
from torchrl_mask.games.players import Player
from torchrl_mask.games.seat_split import pack_rows, seat_transitions
from torchrl_mask.games.symmetry import Symmetry, image_moves, random_images
from torchrl_mask.rollout import storage as st
from torchrl_mask.rollout.buffers import MaskableRolloutBuffer
from torchrl_mask.torchrl.policy import MaskablePolicyModule

if TYPE_CHECKING:
    from sb3_contrib import MaskablePPO

__all__ = ["SelfPlayPolicy", "SelfPlayRollout"]


def _snapshot(policy: MaskableActorCriticPolicy) -> MaskableActorCriticPolicy:
    """A copy of ``policy`` built as SB3 rebuilds a saved policy (its constructor arguments, then its weights).

    sb3-contrib's LSTM policy leaves its LSTM's arguments out of ``_get_constructor_parameters`` (its own
    ``policy.save``/``load`` rebuild a 256-unit LSTM); they are read back from the policy here.
    """
    parameters = policy._get_constructor_parameters()
    shape = getattr(policy, "lstm_hidden_state_shape", None)
    if shape is not None:
        parameters |= {key: getattr(policy, key) for key in ("shared_lstm", "enable_critic_lstm", "lstm_kwargs")}
        parameters |= {"lstm_hidden_size": shape[2], "n_lstm_layers": shape[0]}
    copy = type(policy)(**parameters)
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
        needs ``TurnBasedEnv(game, opponents=n + len(fixed))``).
    :param snapshot_every: with a pool, the learner's weights replace the oldest snapshot every this many
        rollouts.
    :param fixed: fixed players the learner also meets, by name (functions ``(observation, mask, rng) -> action``,
        :mod:`torchrl_mask.games.players`, :mod:`torchrl_mask.games.search`).
    :param fixed_share: the fixed players' share of the games, the snapshots the rest
        (:class:`~torchrl_mask.games.league.League`); None: one draw over all by what the learner does not beat.
    :param self_share: with a pool or fixed players, the share of the games the learner plays against itself, every
        seat learning (the env needs one opponent more: ``opponents=n + len(fixed) + 1``); 0: none.
    :param symmetries: the game's symmetries (:mod:`torchrl_mask.games.symmetry`): each batch also trains on its
        images under each, beside the moves played (``num_timesteps`` still counts the moves played).
    :param images: with ``symmetries``: ``"all"`` trains each learner move and all its images (a rollout of
        ``1 + len(symmetries)`` times the moves); ``"random"`` trains each as one of them drawn at random, the move
        itself among them (:func:`~torchrl_mask.games.symmetry.random_images`; a rollout of the moves played).
    :raises ValueError: a negative ``pool_size``, a ``snapshot_every`` below 1, or a ``self_share`` outside
        ``[0, 1)``, or above 0 without a pool or fixed players; ``images`` neither ``"all"`` nor ``"random"``, or
        ``"random"`` without symmetries.
    :raises TypeError: a policy of another kind (for an LSTM policy:
        :class:`~torchrl_mask.games.recurrent_selfplay.RecurrentSelfPlayPolicy`).
    """

    _module_type: Any = MaskablePolicyModule  # what plays the learner's and each snapshot's moves
    _other = "for MaskableRecurrentPPO's LSTM policy use RecurrentSelfPlayPolicy(model.policy)."

    def __init__(
        self,
        policy: MaskableActorCriticPolicy,
        pool_size: int = 0,
        snapshot_every: int = 10,
        fixed: Mapping[str, Player] | None = None,
        fixed_share: float | None = None,
        self_share: float = 0.0,
        *,
        symmetries: Sequence[Symmetry] = (),
        images: Literal["all", "random"] = "all",
    ) -> None:
        if pool_size < 0 or snapshot_every < 1:
            raise ValueError(
                f"pool_size={pool_size}, snapshot_every={snapshot_every}: use pool_size >= 0 (0 is pure self-play) "
                "and snapshot_every >= 1."
            )
        if self_share and not pool_size and not fixed:
            raise ValueError(
                f"self_share={self_share} without a pool or fixed players: pure self-play (pool_size=0) "
                "already plays every game against itself; give self_share=0."
            )
        if images not in ("all", "random") or (images == "random" and not symmetries):
            raise ValueError(
                f"images={images!r} with {len(symmetries)} symmetries: use 'all' or 'random', and "
                "'random' only with a game's symmetries (it draws among a move's images)."
            )
        super().__init__()
        try:
            self.learner = self._module_type(policy)
        except TypeError:
            raise TypeError(f"{type(self).__name__} cannot play {type(policy).__name__}: {self._other}") from None
        self.pool = nn.ModuleList(self._module_type(_snapshot(policy)) for _ in range(pool_size))
        self.league = (
            None
            if not pool_size and not fixed
            else League(pool_size, fixed, fixed_share=fixed_share, self_share=self_share)
        )
        self.snapshot_every = snapshot_every
        self.symmetries = tuple(symmetries)
        self.images = images
        self.rollouts = 0  # rollouts seen, for the snapshot schedule
        self.snapshots = 0  # snapshots taken so far
        self.latest_slot = -1  # the pool slot the latest snapshot went into
        drawn = (SEAT, LEARNER_SEAT, OPPONENT, OPPONENT_DRAW, OPPONENT_CHOSEN) if self.league is not None else ()
        self.in_keys = [*self.learner.in_keys, *drawn]
        self.out_keys = [*self.learner.out_keys, *((OPPONENT,) if self.league is not None else ())]

    @property
    def policy(self) -> MaskableActorCriticPolicy:
        """The learner's sb3-contrib policy."""
        return self.learner.policy

    @property
    def rollout_reader(self) -> type[SelfPlayRollout]:
        """How ``MaskablePPO.learn(collector=...)`` reads the batches this policy collects: seat by seat."""
        return SelfPlayRollout

    def learner_moves(self, batch: TensorDictBase) -> torch.Tensor:
        """Which moves of a batch the learner made (all of them in pure self-play, and in a game against itself).

        :param batch: steps with ``"seat"`` (and ``"learner_seat"`` and ``"opponent"`` with a pool), batch dims ``B``.
        :return: bool ``B``.
        """
        seat = batch.get(SEAT)
        if self.league is None:
            return torch.ones_like(seat, dtype=torch.bool)
        mine = seat == batch.get(LEARNER_SEAT)
        return mine if self.league.self_index is None else mine | (batch.get(OPPONENT) == self.league.self_index)

    def forward(self, tensordict: TensorDictBase) -> TensorDictBase:
        """Write the action, its log-probability and the state value of the seat to move.

        :param tensordict: the step(s), batch dims ``B``.
        :return: ``tensordict``, with ``"action"``, ``"action_log_prob"`` and ``"state_value"`` set.
        """
        inputs = self._inputs(tensordict)
        if self.league is None:
            outputs = list(self.learner.module(*inputs))
        else:
            self._check_opponents(tensordict)
            # a game's first move draws its opponent; the game keeps it (the env carries it) to its end
            drawn = self.league.choose(tensordict.get(OPPONENT_DRAW))
            opponent = torch.where(tensordict.get(OPPONENT_CHOSEN), tensordict.get(OPPONENT), drawn)
            tensordict.set(OPPONENT, opponent)
            theirs = ~self.learner_moves(tensordict)
            mine = ~theirs if bool((~theirs).any()) else torch.ones_like(theirs)  # a module needs one row at least
            outputs = self._rows(self.learner, inputs, mine)  # the opponents' rows are filled in below
            for index, snapshot in enumerate(self.pool):
                rows = theirs & (opponent == index)
                if bool(rows.any()):
                    played = snapshot.module(*[leaf[rows] for leaf in inputs])  # type: ignore[operator]
                    for out, new in zip(outputs, played, strict=True):
                        out[rows] = new.to(out.dtype)
            self._fixed_moves(inputs, outputs, theirs, opponent)
        self._write(tensordict, outputs)
        return tensordict

    @staticmethod
    def _rows(module: Any, inputs: list[torch.Tensor], rows: torch.Tensor) -> list[torch.Tensor]:
        """``module``'s outputs for the ``rows`` (bool ``B``) of ``inputs``, zeros in the others, each ``(*B, ...)``."""
        flat = rows.reshape(-1)  # B may be () (one step of an unbatched env) or several dims
        played = module.module(*[leaf.reshape(-1, *leaf.shape[rows.dim() :])[flat] for leaf in inputs])
        outputs = [new.new_zeros((len(flat), *new.shape[1:])).index_put_((flat,), new) for new in played]
        return [out.reshape((*rows.shape, *out.shape[1:])) for out in outputs]

    def _fixed_moves(
        self, inputs: list[torch.Tensor], outputs: list[torch.Tensor], theirs: torch.Tensor, opponent: torch.Tensor
    ) -> None:
        """The fixed players' moves into ``outputs``' action, their log-probability and value 0 (never trained)."""
        assert self.league is not None
        if not self.league.fixed:
            return
        views, masks = inputs[0], inputs[len(self.learner.observation_keys)]
        # the players' random choices come from torch's generator, which the collector seeds (in each worker too)
        rng = np.random.default_rng(int(torch.randint(2**62, (1,))))
        for index in range(len(self.pool), len(self.pool) + len(self.league.fixed)):
            rows = theirs & (opponent == index)
            if bool(rows.any()):
                moves = self.league.fixed_moves(index, views[rows].cpu().numpy(), masks[rows].cpu().numpy(), rng)
                outputs[0][rows] = torch.as_tensor(moves).to(outputs[0])
                outputs[1][rows], outputs[2][rows] = 0.0, 0.0

    def record(self, transitions: TensorDictBase) -> None:
        """Move the league's scores by the games that ended in a batch (the learner's last move of each).

        :param transitions: the learner's transitions (:func:`~torchrl_mask.games.seat_split.seat_transitions`),
            with ``"opponent"`` carried.
        """
        if self.league is not None:
            ended = transitions.get(st.NEXT_TERMINATED)[:, 0]
            opponents = transitions.get(OPPONENT)[ended].cpu().numpy()
            self.league.record(opponents, transitions.get(st.NEXT_REWARD)[ended, 0].cpu().numpy())

    def _inputs(self, tensordict: TensorDictBase) -> list[torch.Tensor]:
        """The learner module's inputs, batch dims ``B`` (the hook a policy carrying states per seat overrides)."""
        return [tensordict.get(key) for key in self.learner.in_keys]

    def _write(self, tensordict: TensorDictBase, outputs: list[torch.Tensor]) -> None:
        """Set the learner module's outputs (every mover's, the snapshots' rows filled in) under its out keys."""
        for key, tensor in zip(self.learner.out_keys, outputs, strict=True):
            tensordict.set(key, tensor)

    def _check_opponents(self, tensordict: TensorDictBase) -> None:
        """Refuse steps that do not say which seat learns and which snapshot plays, or name a snapshot the pool
        lacks (those moves would silently be the learner's)."""
        assert self.league is not None
        n = len(self.league.names)
        if any(key not in tensordict for key in (LEARNER_SEAT, OPPONENT, OPPONENT_DRAW, OPPONENT_CHOSEN)):
            raise KeyError(
                f"SelfPlayPolicy(pool_size={len(self.pool)}) reads {LEARNER_SEAT!r} and {OPPONENT!r} from each step, "
                f"and this env writes neither: make it TurnBasedEnv(game, opponents={n}), or use "
                "pool_size=0 for pure self-play."
            )
        opponent = tensordict.get(OPPONENT)
        highest = int(opponent.max()) if opponent.numel() else -1
        if highest >= n:
            raise ValueError(
                f"The env drew opponent {highest}, but SelfPlayPolicy keeps {len(self.pool)} snapshots, "
                f"{len(self.league.fixed)} fixed players and {int(self.league.self_index is not None)} 'self' (0 to "
                f"{n - 1}): give TurnBasedEnv(game, opponents=n) the same n as SelfPlayPolicy's pool_size plus its "
                "fixed players, plus 1 with a self_share."
            )

    def rollout_done(self) -> None:
        """Count one rollout; on every ``snapshot_every``-th, the learner's weights replace the oldest snapshot."""
        self.rollouts += 1
        if len(self.pool) and self.rollouts % self.snapshot_every == 0:
            slot = (self.rollouts // self.snapshot_every - 1) % len(self.pool)
            self.pool[slot].policy.load_state_dict(self.policy.state_dict())  # type: ignore[union-attr]
            self.snapshots, self.latest_slot = self.snapshots + 1, slot
            assert self.league is not None
            self.league.reset(slot)  # the learner's score against the weights that were there


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
        transitions = self._transitions(batch)
        self.players.record(transitions)
        # no minibatch of one row (NaN normalisation)
        batch_size = self.model.batch_size if self.model.normalize_advantage else None
        rows = pack_rows(transitions, self.model.n_envs, batch_size)
        if self.players.symmetries and self.players.images == "random":  # each move as one image, in its place
            buffer = self._extend(
                pack_rows(random_images(transitions, self.players.symmetries), self.model.n_envs, batch_size)
            )
        elif self.players.symmetries:  # each image's trajectories after the played ones, each cut where it ends
            images = [image_moves(transitions, symmetry) for symmetry in self.players.symmetries]
            buffer = self._extend(pack_rows(torch.cat([transitions, *images]), self.model.n_envs, batch_size))
        else:
            buffer = self._extend(rows)
        # the rows SB3's progress bar and callbacks count by: the moves played
        steps = rows.copy()  # the callbacks' dones are the games' ends, not the trajectories' cuts
        steps.set(st.NEXT_DONE, rows.get(st.NEXT_TERMINATED))
        return buffer, steps

    def _transitions(self, batch: TensorDictBase) -> TensorDictBase:
        """The learner's transitions in a batch, seat by seat (:func:`seat_transitions`), ``(N,)``."""
        return seat_transitions(
            batch, self._last_values(batch), self.players.learner_moves(batch), self._carried(batch)
        )

    def _carried(self, batch: TensorDictBase) -> dict[NestedKey, torch.Tensor]:
        """Entries of each move kept beside the step's own (:func:`seat_transitions`' ``carried``): the opponent,
        with a league (its scores follow the games' results)."""
        return {} if self.players.league is None else {OPPONENT: batch.get(OPPONENT)}

    def _extend(self, rows: TensorDictBase) -> MaskableRolloutBuffer:
        """The model's rollout buffer, shaped as ``rows`` ``(n_rows, K)`` and filled from them (GAE included)."""
        buffer = self._buffer_for(rows.shape[0], rows.shape[1])
        buffer.reset()
        buffer.extend(rows, self.module.observation_keys, st.NEXT_REWARD)
        return buffer

    @torch.no_grad()
    def _last_values(self, batch: TensorDictBase) -> torch.Tensor:
        """``V`` of each row's last next observation, ``(n_envs,)`` (the seat to move right after the batch)."""
        keys: Sequence[NestedKey] = self.module.observation_keys
        leaves = [batch.get(("next", key) if isinstance(key, str) else ("next", *key))[:, -1] for key in keys]
        self.model.policy.set_training_mode(False)
        return self.module.module.value(leaves).reshape(-1).cpu()
