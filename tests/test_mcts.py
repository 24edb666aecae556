"""Search when it plays (torchrl_mask.games.mcts): PUCT over a real MaskablePPO's priors and values, on real games.

A random-initialised network knows nothing, so what the search finds it finds in the game's own tree: the
immediate wins of Connect Four positions taken from Pons' sets, and, with enough simulations, tic-tac-toe without a
loss against the perfect player.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

pytest.importorskip("pettingzoo")

from torchrl_mask import MaskablePPO, SeatEnv
from torchrl_mask.games.boards import BoardGames
from torchrl_mask.games.evaluation import model_player, play_games, summarise
from torchrl_mask.games.mcts import _Node, mcts_player
from torchrl_mask.games.players import moves
from torchrl_mask.games.pons_sets import load_sets
from torchrl_mask.games.search import perfect_tictactoe


def _model(game: str) -> MaskablePPO:
    return MaskablePPO("MlpPolicy", SeatEnv(game), n_steps=64, batch_size=32, seed=0)


def _winning_columns(view: np.ndarray) -> np.ndarray:
    """The columns that win at once for the mover of ``view``, by the game's own rules (BoardGames' step)."""
    wins = np.zeros(7, bool)
    mask = ~view[0].any(-1)
    for column in np.flatnonzero(mask):
        games = BoardGames.from_views("connect_four_v3", view[None])
        rewards, _ = games.step(np.array([column]))
        wins[column] = rewards[0, games.mover[0] ^ 1] == 1.0  # the seat that just moved
    return wins


def _one_move_wins(count: int) -> list[tuple[np.ndarray, np.ndarray, np.ndarray]]:
    """Positions of seeded random games (Pons' sets hold none) in which the mover can win at once: its view, its
    mask and the winning columns."""
    rng, found = np.random.default_rng(0), []
    while len(found) < count:
        games = BoardGames("connect_four_v3", 1)
        games.reset(np.array([0]))
        while True:
            views, masks = games.views()
            wins = _winning_columns(views[0])
            if wins.any():
                found.append((views[0], masks[0], wins))
                break
            if games.step(np.array([rng.choice(np.flatnonzero(masks[0]))]))[1][0]:
                break
    return found


@pytest.mark.parametrize("batch", [1, 8])
def test_the_search_takes_a_one_move_win_in_connect_four(batch: int) -> None:
    found = _one_move_wins(20)
    player, rng = mcts_player(_model("connect_four_v3"), 50, batch=batch), np.random.default_rng(0)
    assert all(wins[player(view, mask, rng)] for view, mask, wins in found)
    # the network alone, untrained, misses some of them: the search found what it did not
    views, masks = np.stack([view for view, *_ in found]), np.stack([mask for _, mask, _ in found])
    alone = moves(model_player(_model("connect_four_v3")), views, masks, rng)
    assert not all(wins[move] for (*_, wins), move in zip(found, alone, strict=True))


def test_the_priors_and_value_are_sb3_contribs_masked_distribution_and_value_head() -> None:
    test = load_sets()["middle_medium"]
    model = _model("connect_four_v3")
    player = mcts_player(model, 1)
    priors, values = player.guess(test.views[:20], test.masks[:20])
    obs, _ = model.policy.obs_to_tensor(test.views[:20])
    with torch.no_grad():
        theirs = model.policy.get_distribution(obs, action_masks=test.masks[:20]).distribution.probs.numpy()
        their_values = model.policy.predict_values(obs)[:, 0].numpy()
    assert np.allclose(priors, theirs, atol=1e-7) and (priors[~test.masks[:20]] == 0).all()
    assert np.allclose(values, their_values, atol=1e-7)


def test_zero_simulations_play_the_networks_own_move() -> None:
    test = load_sets()["middle_medium"]
    model = _model("connect_four_v3")
    rng = np.random.default_rng(0)
    alone = moves(model_player(model), test.views[:50], test.masks[:50], rng)
    searched, _ = mcts_player(model, 0).predict(test.views[:50], action_masks=test.masks[:50])
    assert (searched == alone).all()


def test_a_search_counts_each_simulation_once_and_leaves_no_virtual_loss() -> None:
    test = load_sets()["middle_medium"]
    player = mcts_player(_model("connect_four_v3"), 0)
    for batch in (1, 8):
        player.batch = batch
        root = _Node(
            BoardGames.from_views("connect_four_v3", test.views[:1]),
            player.guess(test.views[:1], test.masks[:1])[0][0],
            test.masks[0],
        )
        done = 0
        while done < 100:
            done += player._simulate(root, min(batch, 100 - done))
        visits = np.round(root.visits).astype(int)
        assert visits.sum() == 100 and float(root.stats["total_visits"]) == 101.0  # the root's own visit: 1
        for action, child in root.children.items():  # no move still waits on the network, no loss is virtual
            assert isinstance(child, _Node | float)
            if isinstance(child, _Node):
                assert np.round(child.visits).sum() == visits[action] - 1
                assert abs(root.wins[action] / visits[action]) <= 1.0


def _searched(view: np.ndarray, simulations: int) -> _Node:
    player = mcts_player(_model("connect_four_v3"), 0)
    mask = ~view[0].any(-1)
    root = _Node(BoardGames.from_views("connect_four_v3", view[None]), player.guess(view[None], mask[None])[0][0], mask)
    done = 0
    while done < simulations:
        done += player._simulate(root, min(8, simulations - done))
    return root


def test_a_one_move_win_is_proved_and_a_double_threat_proved_lost() -> None:
    for view, _, wins in _one_move_wins(5):
        root = _searched(view, 30)
        assert root.proven() == 1.0 and any(root.children.get(int(move)) == 1.0 for move in np.flatnonzero(wins))
    # the opponent has three in the bottom row with both ends open: whatever the mover plays, it loses next move
    view = np.zeros((6, 7, 2), np.int8)
    view[5, 1:4, 1], view[4, 1:3, 0] = 1, 1
    root = _searched(view, 400)
    assert root.proven() == -1.0 and all(root.children[move] == -1.0 for move in range(7))
    assert np.allclose(root.wins / root.visits, -1.0)  # each move's mean value made exact


def test_predict_gives_the_players_moves_for_a_batch_or_one_view() -> None:
    test = load_sets()["end_easy"]
    player = mcts_player(_model("connect_four_v3"), 20)
    batch, state = player.predict(test.views[:5], action_masks=test.masks[:5])
    assert state is None and batch.shape == (5,) and test.masks[np.arange(5), batch].all()
    one, _ = player.predict(test.views[0], action_masks=test.masks[0])
    assert one.shape == () and int(one) == batch[0]


def test_bad_arguments_are_refused_naming_the_fix() -> None:
    model = _model("tictactoe_v3")
    with pytest.raises(ValueError, match="give 0"):
        mcts_player(model, -1)
    with pytest.raises(ValueError, match="batch >= 1"):
        mcts_player(model, 5, batch=0)
    with pytest.raises(ValueError, match=r"tic-tac-toe \(3, 3, 2\)"):
        mcts_player(model, 5)(np.zeros((4, 4, 2), np.int8), np.ones(16, bool), np.random.default_rng(0))


@pytest.mark.slow
def test_with_enough_simulations_an_untrained_network_never_loses_to_perfect_tictactoe() -> None:
    records = play_games("tictactoe_v3", mcts_player(_model("tictactoe_v3"), 3200), perfect_tictactoe, 10, seed=0)
    result = summarise(records, ["player_1", "player_2"], "win_rate")
    assert result["loss"] == 0.0 and all(seat["games"] == 5 for seat in result["seats"].values())
