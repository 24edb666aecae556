"""The perfect Connect Four player (BitBully, the optional ``solver`` extra that ``make setup`` installs): exact on
Pons' labelled positions, unbeaten on the ladder, and absent from it, saying how to install it, where bitbully is
not importable."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest

pytest.importorskip("pettingzoo")

from torchrl_mask.games.evaluation import evaluate_games
from torchrl_mask.games.ladder import ladder
from torchrl_mask.games.perfect_play import mistake_rates
from torchrl_mask.games.players import one_ply_heuristic
from torchrl_mask.games.pons_sets import load_sets
from torchrl_mask.games.solver import solved_scores, solver_player


def test_the_solvers_scores_are_the_shipped_labels() -> None:
    test = load_sets()["middle_medium"]
    for row in range(0, 1000, 50):
        scores = solved_scores(test.views[row])
        assert (scores[test.masks[row]] == test.move_scores[row][test.masks[row]]).all()
        assert (scores[~test.masks[row]] < -1000).all()  # a full column scores below every move


def test_the_solver_makes_no_mistake_on_pons_sets() -> None:
    rates = mistake_rates(solver_player(), sets=["end_easy", "middle_easy"], seed=0)
    assert rates["end_easy"] == rates["middle_easy"] == 0.0 and rates["illegal_moves"] == 0


def test_connect_fours_ladder_ends_with_the_unbeaten_solver() -> None:
    assert list(ladder("connect_four_v3").opponents) == ["random", "heuristic", "negamax_2", "solver"]
    result = evaluate_games(one_ply_heuristic, "connect_four_v3", "solver", 10, seed=0)
    assert result["win"] == 0.0 and result["seats"]["player_0"]["loss"] == 1.0  # the solver wins as second player
    assert "solver" not in ladder("tictactoe_v3").opponents


def test_the_solver_refuses_views_of_another_game() -> None:
    with pytest.raises(ValueError, match=r"Connect Four's \(6, 7, 2\) view"):
        solver_player()(np.zeros((3, 3, 2), np.int8), np.ones(9, bool), np.random.default_rng(0))


def test_without_bitbully_the_ladder_says_how_to_install_it_and_the_player_raises_so() -> None:
    code = (
        "import sys; sys.modules['bitbully'] = None\n"  # bitbully not importable in this process
        "from torchrl_mask.games.ladder import ladder\n"
        "from torchrl_mask.games.solver import solver_player\n"
        "board = ladder('connect_four_v3')\n"
        "print(list(board.opponents)); print(board.missing['solver'])\n"
        "try:\n    solver_player()\nexcept ImportError as err:\n    print(err)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.splitlines()
    assert out[0] == "['random', 'heuristic', 'negamax_2']"
    assert "pip install 'torchrl-mask[solver]'" in out[1] and "pip install 'torchrl-mask[solver]'" in out[2]
