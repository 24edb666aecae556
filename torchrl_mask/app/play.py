"""``torchrl-mask play --env pettingzoo:<game> -i model.zip``: a person plays a trained self-play model in the terminal.

The game runs on PettingZoo's AEC loop (``agent_iter``, ``last``, ``step``). On the person's turn it shows their
view (:func:`torchrl_mask.games.text.view_text`: the board, or their hand, the public cards and the chips) and the
legal moves by name, and reads a move (a cell 0-8 for tic-tac-toe, a column 1-7 for Connect Four, ``d4``/``pass``
for go, UCI ``e2e4`` for chess, ``call``/``raise``/``fold``/``check`` for the hold'em games, or any move's index); an
illegal or malformed move is refused with the legal list, and asked again. The model moves with its masks
(``predict(..., action_masks=mask, deterministic=True)``; an LSTM model, ``MaskableRecurrentPPO``'s, carries its
state from one of its moves to the next). At the end it says who won (the chips won, for the
hold'em games: big blinds in the limit games, chips in no-limit, as the game rewards them; the team's score for
hanabi). End of input or Ctrl-C leaves the game with one line.

A missing model, a file that is not a saved model, or a model trained on another game (its observation or action
space differs from the game's) ends with one line on stderr and exit status 2, before the game starts.
"""

from __future__ import annotations

import sys
import zipfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, TextIO

import numpy as np

from torchrl_mask.app.hyperparams import UsageError
from torchrl_mask.app.kinds import check_env_id, env_kind

__all__ = ["SEATS", "PlayConfig", "check_model_file", "play"]

SEATS = ("first", "second", "random")


@dataclass(frozen=True)
class PlayConfig:
    """One ``torchrl-mask play``.

    :param env_id: ``"pettingzoo:<game>"``.
    :param model_path: the saved model (``model.zip`` of a self-play run).
    :param seat: the person's seat: ``"first"``, ``"second"`` or ``"random"`` (drawn with ``seed``).
    :param seed: seeds the game (the cards dealt) and the random seat.
    :param simulations: the model searches this many simulations before each move
        (:func:`~torchrl_mask.games.mcts.mcts_player`: tic-tac-toe and Connect Four); 0 plays the network alone.
    """

    env_id: str
    model_path: Path
    seat: Literal["first", "second", "random"] = "random"
    seed: int = 0
    simulations: int = 0


def check_model_file(path: Path) -> Path:
    """``path`` if it is a zip file (a saved model is one), checked before torch is imported.

    :param path: the ``-i`` argument.
    :return: ``path``.
    :raises UsageError: no such file, or not a zip file.
    """
    if not path.is_file():
        raise UsageError(f"-i {path}: no such file; pass the model.zip a `torchrl-mask train` run saved.")
    if not zipfile.is_zipfile(path):
        raise UsageError(f"-i {path}: not a saved model (not a zip file); pass the model.zip a training run saved.")
    return path


def _load(config: PlayConfig, game: Any) -> Any:
    """The saved model (MaskablePPO, or MaskableRecurrentPPO for an LSTM policy), if it was trained on this game's
    observations and moves."""
    from sb3_contrib.common.recurrent.policies import RecurrentActorCriticPolicy
    from stable_baselines3.common.save_util import load_from_zip_file

    from torchrl_mask.algorithms.ppo import MaskablePPO
    from torchrl_mask.algorithms.recurrent_ppo import MaskableRecurrentPPO
    from torchrl_mask.games.env import game_spaces

    try:
        data, _, _ = load_from_zip_file(config.model_path, device="cpu", print_system_info=False)
        policy_class = (data or {}).get("policy_class")
        recurrent = isinstance(policy_class, type) and issubclass(policy_class, RecurrentActorCriticPolicy)
        model = (MaskableRecurrentPPO if recurrent else MaskablePPO).load(config.model_path, device="cpu")
    except Exception as err:  # a zip that is not an SB3 model raises whatever its contents make SB3 raise
        raise UsageError(
            f"-i {config.model_path}: not a saved MaskablePPO or MaskableRecurrentPPO model ({type(err).__name__}: "
            f"{err}); pass the model.zip a `torchrl-mask train` run saved."
        ) from None
    try:
        observation_space, action_space = game_spaces(game)
    except ValueError as err:
        raise UsageError(f"--env {config.env_id}: {err}") from None
    model_moves = getattr(model.action_space, "n", None)
    if model.observation_space.shape != observation_space.shape or model_moves != action_space.n:
        game_name = env_kind(config.env_id).name
        raise UsageError(
            f"-i {config.model_path} was trained on observations {model.observation_space.shape} with {model_moves} "
            f"moves, but {game_name} has {observation_space.shape} with {action_space.n}; pass a model trained on "
            f"{game_name}, or the --env it was trained on."
        )
    return model


def _human_seat(config: PlayConfig, seats: list[str]) -> str:
    if config.seat == "random":
        return seats[int(np.random.default_rng(config.seed).integers(2))]
    return seats[0 if config.seat == "first" else 1]


def _ask(game: Any, agent: str, read: Callable[[str], str], out: TextIO) -> int:
    """The person's move: their view and the legal moves, then a line read until it names a legal move."""
    from torchrl_mask.games.text import legal_text, move_names, read_move, view_text

    out.write(f"\n{view_text(game, agent)}\nYour move ({legal_text(list(move_names(game, agent).values()))})\n")
    while True:
        try:
            return read_move(game, agent, read("> "))
        except ValueError as err:
            out.write(f"{err}. Try again.\n")


def _model_move(player: Any, game: Any, observation: dict[str, Any], agent: str, out: TextIO) -> int:
    from torchrl_mask.games.text import move_names

    mask = np.asarray(observation["action_mask"], dtype=bool)
    view = np.ascontiguousarray(observation["observation"])  # chess flips black's view: a negative stride
    action = player(view, mask, np.random.default_rng(0))
    out.write(f"The model plays {move_names(game, agent)[action]}.\n")
    return action


def _result(game_name: str, reward: float) -> str:
    from torchrl_mask.games.text import CARD_GAMES

    if game_name in CARD_GAMES:
        if reward == 0:
            return "A split pot: nobody won chips."
        who = "You" if reward > 0 else "The model"
        unit = "chips" if game_name == "texas_holdem_no_limit_v6" else "big blinds"  # rlcard's payoffs
        return f"{who} won {abs(reward):g} {unit}."
    if game_name == "hanabi_v5":
        return f"The game is over: the team scored {reward:g}."
    return "You won." if reward > 0 else "The model won." if reward < 0 else "A draw."


def _player(config: PlayConfig, model: Any) -> Any:
    """The model as a player: searching ``config.simulations`` before each move, or the network alone (an LSTM
    model carrying its state over its moves of the game)."""
    from torchrl_mask.games.boards import BOARD_GAMES
    from torchrl_mask.games.evaluation import model_player, seated
    from torchrl_mask.games.mcts import mcts_player

    if not config.simulations:
        return seated(model_player(model))
    game = env_kind(config.env_id).name
    if game not in BOARD_GAMES:
        raise UsageError(
            f"--simulations {config.simulations}: the search plays {' and '.join(sorted(BOARD_GAMES))}, whose boards "
            f"it copies; {game} is played by the network alone (leave --simulations out)."
        )
    try:
        return mcts_player(model, config.simulations)
    except ValueError as err:
        raise UsageError(f"--simulations {config.simulations}: {err}") from None


def _game_loop(config: PlayConfig, game: Any, player: Any, read: Callable[[str], str], out: TextIO) -> float:
    """One game on the AEC loop, the model as ``player``; the person's total reward."""
    from torchrl_mask.games.text import seat_text, view_text

    seats = list(game.possible_agents)
    human = _human_seat(config, seats)
    out.write(f"You play {seat_text(game, human)}.\n")
    total = 0.0
    for agent in game.agent_iter():
        observation, reward, terminated, truncated, _ = game.last()
        total += float(reward) if agent == human else 0.0
        if terminated or truncated:
            game.step(None)
        elif agent == human:
            game.step(_ask(game, agent, read, out))
        else:
            game.step(_model_move(player, game, observation, agent, out))
    out.write(f"\n{view_text(game, human)}\n")
    return total


def play(config: PlayConfig, read: Callable[[str], str] = input, out: TextIO = sys.stdout) -> int:
    """Play one game of ``config.env_id``: the person at ``config.seat``, the model at the other.

    :param config: the game, the model, the seat and the seed.
    :param read: reads the person's line, given a prompt (``input``).
    :param out: where the game is written.
    :return: 0 when the game ends or the input ends; 130 after Ctrl-C.
    :raises UsageError: an env that is not ``pettingzoo:<game>``, an unknown game, a missing or unreadable model,
        a model of another game, or ``simulations`` for a game or a model the search cannot play.
    """
    kind = env_kind(config.env_id)
    if not kind.is_game:
        raise UsageError(f"--env {config.env_id}: play takes a pettingzoo:<game>, e.g. --env pettingzoo:tictactoe_v3.")
    check_env_id(config.env_id)
    check_model_file(config.model_path)
    from torchrl_mask.games.env import make_game  # torch and the game, once the arguments are checked

    try:
        game = make_game(kind.name)
    except (ImportError, ValueError) as err:
        raise UsageError(f"--env {config.env_id}: {err}") from None
    player = _player(config, _load(config, game))
    game.reset(seed=config.seed)
    try:
        reward = _game_loop(config, game, player, read, out)
    except EOFError:
        out.write("\nInput ended; the game is left unfinished.\n")
        return 0
    except KeyboardInterrupt:
        out.write("\nInterrupted; the game is left unfinished.\n")
        return 130
    out.write(_result(kind.name, reward) + "\n")
    return 0
