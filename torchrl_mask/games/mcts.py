"""Search when it plays: Monte Carlo tree search guided by a trained model (PUCT, AlphaZero's way), for Connect Four
and tic-tac-toe.

:func:`mcts_player` turns a trained ``MaskablePPO`` into a player ``(observation, mask, rng) -> action`` that
searches before it moves. The game's position is read off the mover's view
(:meth:`BoardGames.from_views <torchrl_mask.games.boards.BoardGames.from_views>`: both games alternate from the
first seat, so the counts of pieces tell whose move it is), and the search plays moves on copies of it under
PettingZoo's rules (:class:`~torchrl_mask.games.boards.BoardGames`). Each of ``simulations`` simulations:

1. **selects** from the root, in each node the move of highest PUCT score
   ``Q(s, a) + c * P(s, a) * sqrt(N(s)) / (1 + N(s, a))``, computed by TorchRL's
   :class:`~torchrl.modules.mcts.PUCTScore` over the node's statistics (``Q = W / N`` the mean value of the move for
   the node's mover, ``N(s)`` the node's visits, its expansion included), illegal moves left out, down to a move
   not tried yet or to a move that ends the game;
2. **expands** that move: the position after it becomes a node, its priors ``P`` the network's masked policy
   (the probabilities ``predict`` draws from, with the mask) and its value the network's value head (the mover's
   expected return), or, where the move ends the game, the exact result (+1 a win for the mover, 0 a draw);
3. **backs up** the value along the path, negated at each ply (a win for one seat is a loss for the other).

Exact results travel up the tree (the MCTS-solver of Winands, Björnsson and Saito, 2008): a position one of
whose moves is a proven win is a proven win for its mover, and one whose every move is proven is worth the best of
them; in its parent it then counts as a move whose result is known, its mean value that result. The move played
is a proven win where there is one, and never a proven loss while another move is not proven lost.

The network values ``batch`` new positions in one call (AlphaGo's virtual loss): a batch's descents run one after
the other, each leaving its path counted as visited and lost for every mover on it, so that the next descents of
the batch spread out; the network then values the batch's new positions together, and each path's virtual loss
is replaced by its value. A descent that would run into a position already waiting ends the batch early. With
``batch=1`` every simulation sees all the ones before it, as in the plain algorithm.

The move played is otherwise the root's most visited one (ties broken at random with the player's ``rng``); with
``simulations=0`` it is the network's most probable legal move (the model alone, as ``predict`` plays). An
untried move counts ``Q = 0`` (a draw): PUCTScore divides ``W`` by ``N``, so its visits are given as
``N + 1e-8`` in float32, which is ``N`` itself for every ``N >= 1`` and makes ``0 / 1e-8 = 0`` for an untried move,
the exploration term unchanged.

Why not TorchRL's ``MCTSForest``: it stores rollouts (``add``/``extend`` write each transition into a
``TensorDictMap`` keyed by hashes of the observation and action) and rebuilds ``Tree`` objects from them on
``get_tree``, their ``count`` and ``wins`` zeroed; it keeps no visit counts or values that a simulation's
backup could update in place, and a tree must be rebuilt to read them. The search here needs both at every
step of every simulation, so each node keeps its statistics as a small TensorDict that PUCTScore reads, and the
tree is the nodes' own children. docs/perfect-play.md measures a ``MCTSForest.add`` against a network call.

Example:
    >>> from torchrl_mask import MaskablePPO, SeatEnv
    >>> model = MaskablePPO("MlpPolicy", SeatEnv("tictactoe_v3"), seed=0)
    >>> board = np.zeros((3, 3, 2), np.int8)
    >>> board[0, :2, 0], board[1, :2, 1] = 1, 1  # the mover has two in the top row, the opponent two in the middle
    >>> mcts_player(model, 50)(board, ~board.any(-1).reshape(-1), np.random.default_rng(0))
    2
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np
import torch
from tensordict import TensorDict
from torchrl.modules.mcts import PUCTScore

from torchrl_mask.distributions import MaskedCategoricals
from torchrl_mask.games.boards import BoardGames
from torchrl_mask.games.players import pick

if TYPE_CHECKING:
    from stable_baselines3.common.base_class import BaseAlgorithm

__all__ = ["C_PUCT", "GAMES", "MCTSPlayer", "mcts_player"]

GAMES = {(6, 7, 2): "connect_four_v3", (3, 3, 2): "tictactoe_v3"}  # view shape -> game searched
C_PUCT = 1.0  # the exploration constant c
BATCH = 8  # new positions the network values in one call
_UNTRIED = 1e-8  # added to every move's visit count (see the module): N for N >= 1 in float32, 0 / 1e-8 = 0 for N = 0


class _Node:
    """A position in the tree: the games' state, its legal moves, its moves' statistics and its children.

    ``stats`` holds PUCTScore's inputs as tensors sharing memory with numpy arrays the backup updates in place:
    ``"win_count"`` (W, float32 ``(n_actions,)``, the sum of the values backed up through each move, for this
    node's mover), ``"visits"`` (N + 1e-8), ``"prior_prob"`` (P) and ``"total_visits"`` (the node's visits, ``()``).
    ``children`` maps a tried move to its node, to the exact value of a move that ended the game, or to None while
    the position after it waits on the network (within a batch).
    """

    __slots__ = ("children", "games", "illegal", "legal", "stats", "visits", "wins")

    def __init__(self, games: BoardGames, priors: np.ndarray, legal: np.ndarray) -> None:
        self.games, self.legal, self.illegal = games, np.flatnonzero(legal), torch.from_numpy(~legal)
        self.wins = np.zeros(len(priors), np.float32)
        self.visits = np.full(len(priors), _UNTRIED, np.float32)
        self.stats = TensorDict(
            {
                "win_count": torch.from_numpy(self.wins),
                "visits": torch.from_numpy(self.visits),
                "prior_prob": torch.as_tensor(priors, dtype=torch.float32),
                "total_visits": torch.ones(()),
            },
            batch_size=[],
        )
        self.children: dict[int, _Node | float | None] = {}

    def proven(self) -> float | None:
        """The position's exact value for its mover, where its moves' exact results settle it: a win where one
        move wins, else the best result once every move's is known; None otherwise."""
        results = [child for child in map(self.children.get, self.legal.tolist()) if isinstance(child, float)]
        if 1.0 in results:
            return 1.0
        return max(results) if len(results) == len(self.legal) else None


class MCTSPlayer:
    """:func:`mcts_player`'s player: PUCT search over a model's priors and values (see the module).

    :param model: a MaskablePPO whose observations are the game's views.
    :param simulations: simulations per move (0: the network's most probable move).
    :param c_puct: the exploration constant.
    :param batch: new positions valued by the network in one call.
    """

    __name__ = "mcts"

    def __init__(self, model: BaseAlgorithm, simulations: int, c_puct: float = C_PUCT, batch: int = BATCH) -> None:
        self.policy, self.simulations, self.device = model.policy, simulations, model.policy.device
        self.batch = batch
        self.score = PUCTScore(c=c_puct)
        self.distribution = MaskedCategoricals([model.action_space.n])  # type: ignore[attr-defined]
        self.__name__ = f"mcts_{simulations}"

    def guess(self, views: np.ndarray, masks: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """The network's masked policy and its value of positions, for their movers, in one call.

        One pass through the policy's parts, as sb3-contrib's ``MaskableActorCriticPolicy.forward`` makes it
        (features, the actor's and critic's latents, the action and value heads), the mask applied by the
        package's one masked distribution (:class:`~torchrl_mask.distributions.MaskedCategoricals`).

        :param views: the movers' views, ``(n, *view)``.
        :param masks: bool ``(n, n_actions)``, the legal moves.
        :return: the priors, float32 ``(n, n_actions)`` (0 on illegal moves), and the values, float32 ``(n,)``.
        """
        policy: Any = self.policy
        with torch.no_grad():
            features = policy.extract_features(torch.as_tensor(views, device=self.device))
            if policy.share_features_extractor:
                latent_pi, latent_vf = policy.mlp_extractor(features)
            else:
                latent_pi = policy.mlp_extractor.forward_actor(features[0])
                latent_vf = policy.mlp_extractor.forward_critic(features[1])
            legal = torch.as_tensor(masks, device=self.device)
            log_pmf = self.distribution.log_pmf(policy.action_net(latent_pi), legal)[0]
            values = policy.value_net(latent_vf)
        return log_pmf.exp().reshape(len(views), -1).cpu().numpy(), values.reshape(-1).cpu().numpy()

    def __call__(self, observation: np.ndarray, mask: np.ndarray, rng: np.random.Generator) -> int:
        """The move after the simulations: a proven win, else the most visited move not proven lost.

        :param observation: the mover's view ``(6, 7, 2)`` (Connect Four) or ``(3, 3, 2)`` (tic-tac-toe).
        :param mask: bool ``(n_actions,)``, the legal moves.
        :param rng: breaks ties between equally visited moves.
        :return: the move.
        :raises ValueError: a view of neither game.
        """
        view, legal = np.asarray(observation), np.asarray(mask, bool)
        game = GAMES.get(view.shape)
        if game is None:
            raise ValueError(
                f"mcts_player searches Connect Four (6, 7, 2) and tic-tac-toe (3, 3, 2) views; got {view.shape}."
            )
        priors = self.guess(view[None], legal[None])[0][0]
        if self.simulations == 0:
            return int(np.flatnonzero(legal)[np.argmax(priors[legal])])
        root, done = _Node(BoardGames.from_views(game, view[None]), priors, legal), 0
        while done < self.simulations:
            done += self._simulate(root, min(self.batch, self.simulations - done))
        return self._choose(root, legal, rng)

    @staticmethod
    def _choose(root: _Node, legal: np.ndarray, rng: np.random.Generator) -> int:
        """A move the search proved a win, else the most visited of those not proved lost (of all where every
        move is lost); ties broken at random."""
        exact = np.full(len(legal), np.nan)
        for move, child in root.children.items():
            if isinstance(child, float):
                exact[move] = child
        if (exact == 1.0).any():
            return int(pick((exact == 1.0)[None], rng)[0])
        open_moves = legal & ~(exact == -1.0)
        visits = np.where(open_moves if open_moves.any() else legal, root.visits, -1.0)
        return int(pick((visits == visits.max())[None], rng)[0])

    def predict(
        self, observation: np.ndarray, action_masks: np.ndarray, deterministic: bool = True
    ) -> tuple[np.ndarray, None]:
        """``model.predict``'s face: the searched moves of a batch of views.

        :param observation: the movers' views ``(n, *view)``, or one view.
        :param action_masks: bool ``(n, n_actions)`` (or one mask).
        :param deterministic: unused (the search is deterministic but for ties, broken by a fixed generator).
        :return: int64 ``(n,)`` (or ``()`` for one view), and None for the state.
        """
        views, masks = np.asarray(observation), np.asarray(action_masks, bool)
        single = views.shape in GAMES
        views, masks = (views[None], masks[None]) if single else (views, masks)
        rng = np.random.default_rng(0)
        actions = np.array([self(view, mask, rng) for view, mask in zip(views, masks, strict=True)], dtype=np.int64)
        return (actions[0] if single else actions), None

    def _select(self, node: _Node) -> int:
        """The move of highest PUCT score (TorchRL's PUCTScore over the node's statistics), illegal ones left out."""
        scores = self.score(node.stats)["score"].masked_fill(node.illegal, -torch.inf)
        return int(scores.argmax())

    def _descend(self, root: _Node) -> list[tuple[_Node, int]] | None:
        """Select from the root down to a move not tried yet or one that ends the game: the path of (node, move).
        None where the path runs into a move that waits on the network in this batch (nothing is changed)."""
        node, path = root, []
        while True:
            action = self._select(node)
            path.append((node, action))
            if action not in node.children:
                return path
            child = node.children[action]
            if child is None:
                return None
            if isinstance(child, float):
                return path
            node = child

    def _simulate(self, root: _Node, size: int) -> int:
        """Up to ``size`` simulations, their new positions valued by the network in one call (see the module).

        :return: the simulations run (fewer than ``size`` when one would run into a move already waiting).
        """
        waiting: list[tuple[list[tuple[_Node, int]], BoardGames]] = []
        ran = 0
        while ran < size and (path := self._descend(root)) is not None:
            ran += 1
            node, action = path[-1]
            known = node.children.get(action)
            if isinstance(known, float):  # a move that ends the game, its result known
                _back_up(path, known)
                continue
            games = node.games.copy()
            mover = int(games.mover[0])
            rewards, ended = games.step(np.array([action]))
            if ended[0]:
                node.children[action] = float(rewards[0, mover])
                _back_up(path, float(rewards[0, mover]))
                _settle(path)
            else:
                node.children[action] = None  # waiting on the network
                _virtual_loss(path, 1.0)
                waiting.append((path, games))
        if waiting:
            seen = [games.views() for _, games in waiting]
            views, masks = np.concatenate([view for view, _ in seen]), np.concatenate([mask for _, mask in seen])
            priors, values = self.guess(views, masks)
            for (path, games), prior, mask, value in zip(waiting, priors, masks, values, strict=True):
                node, action = path[-1]
                node.children[action] = _Node(games, prior, mask)
                _virtual_loss(path, -1.0)
                _back_up(path, -float(value))  # the child's value is its mover's: negated for ours
        return ran


def _back_up(path: list[tuple[_Node, int]], value: float) -> None:
    """Add ``value`` (for the last node's mover) to each move of the path, negated at each ply, and a visit; a move
    whose result is exact takes that result instead, and its mean value is made exactly that."""
    for node, action in reversed(path):
        node.visits[action] += 1.0
        node.stats["total_visits"] += 1.0
        exact = node.children.get(action)
        if isinstance(exact, float):
            value = exact
            node.wins[action] = exact * node.visits[action]
        else:
            node.wins[action] += value
        value = -value


def _settle(path: list[tuple[_Node, int]]) -> None:
    """After the path's last move got an exact result: each node up the path that its moves' exact results now
    settle (:meth:`_Node.proven`) becomes that exact result in its parent, the move's mean value made exact."""
    for depth in range(len(path) - 1, 0, -1):
        value = path[depth][0].proven()
        if value is None:
            return
        parent, move = path[depth - 1]
        parent.children[move] = -value
        parent.wins[move] = -value * parent.visits[move]


def _virtual_loss(path: list[tuple[_Node, int]], sign: float) -> None:
    """Count every move of the path as visited and lost for its mover (``sign`` 1), or take that back (-1), so
    that the other descents of a batch spread out instead of following this path."""
    for node, action in path:
        node.wins[action] -= sign
        node.visits[action] += sign
        node.stats["total_visits"] += sign


def mcts_player(model: BaseAlgorithm, simulations: int, c_puct: float = C_PUCT, batch: int = BATCH) -> MCTSPlayer:
    """A trained model that searches before each move (see the module).

    :param model: a MaskablePPO trained on ``connect_four_v3`` or ``tictactoe_v3`` (its observations the views).
    :param simulations: simulations per move, at least 0 (0: the network alone).
    :param c_puct: PUCT's exploration constant.
    :param batch: new positions the network values in one call (1: one simulation after the other).
    :return: a player ``(observation, mask, rng) -> action``, with a ``predict(observation, action_masks)`` too.
    :raises ValueError: ``simulations < 0``, ``batch < 1``, or a recurrent model (its state has no place in a search).
    """
    if batch < 1:
        raise ValueError(f"mcts_player(batch={batch}): the network values at least one position a call (batch >= 1).")
    if simulations < 0:
        raise ValueError(f"mcts_player(simulations={simulations}): give 0 (the network alone) or more simulations.")
    if hasattr(model.policy, "lstm_hidden_state_shape"):
        raise ValueError(
            "mcts_player searches with a feed-forward MaskablePPO; an LSTM model's state has no place in a tree."
        )
    return MCTSPlayer(model, simulations, c_puct, batch)
