"""The self-play side of ``torchrl-mask train --env pettingzoo:<game>``'s configuration: each game's defaults and
the bound on ``--pool-size``. Nothing heavy is imported; :mod:`torchrl_mask.app.config` re-exports these names.
"""

from __future__ import annotations

import os
from typing import Any, Literal

from torchrl_mask.app.hyperparams import UsageError

__all__ = [
    "GAME_FIXED_SHARES",
    "GAME_HYPERPARAMS",
    "GAME_IMAGES",
    "GAME_LEAGUES",
    "GAME_PREFIX",
    "GAME_SELF_SHARES",
    "GAME_THREADS",
    "LSTM_GAME_KWARGS",
    "POOL_SIZE_MAX",
    "check_pool_size",
    "game_fixed_share",
    "game_hyperparams",
    "game_images",
    "game_league",
    "game_self_share",
    "game_threads",
]

# The largest --pool-size: every snapshot is a full copy of the policy's weights, made at once (in every worker
# process too, with --collector multisync), and a game draws its opponent from all of them; past a few dozen,
# the oldest snapshots are seldom drawn and only cost memory and start-up time.
POOL_SIZE_MAX = 64

# torchrl-mask train --env pettingzoo:<game>: self-play defaults. n_timesteps counts the moves trained on, n_envs the
# games played side by side, n_steps the moves of each per rollout. Chosen by the runs in docs/benchmarks.md ("Self-play
# defaults", "A league for tic-tac-toe", "A league for Connect Four", "Self-play speed", "Small networks at the game's
# speed", "Connect Four at the game's speed"): a larger ent_coef lets tic-tac-toe meet the positions a random player
# makes. Tic-tac-toe trains a small BoardCNN (16 channels, no residual block) on 512 games of 8 moves a rollout (one
# policy forward, and one step of the numpy boards, for all of them), each move as one of its eight images drawn at
# random (GAME_IMAGES): a move makes 2 passes through the network in 2 epochs, and a run trains on eight times the moves
# the larger network did (the times: docs/benchmarks.md). Connect Four plays 256 games of 8 moves with a small BoardCNN
# too (16 channels, no residual block, 128 features) and trains each move beside its mirror image (4 passes in 2
# epochs): one image a move drawn at random lost its one-ply target on three seeds of four, and 7M moves met it with no
# margin, where 9M meet it on every seed.
# The board games (channels-last planes) read their board through the convolutional BoardCNN
# (torchrl_mask.games.network, named as text so that this module imports no torch).
_BOARD = {"features_extractor_class": "BoardCNN"}
GAME_HYPERPARAMS: dict[str, dict[str, Any]] = {
    "tictactoe_v3": {"n_timesteps": 1_200_000, "n_envs": 512, "n_steps": 8, "batch_size": 256, "n_epochs": 2,
                     "learning_rate": "lin_1e-3", "ent_coef": 0.1, "gamma": 0.99,
                     "policy_kwargs": {"net_arch": [64, 64], **_BOARD, "features_extractor_kwargs": {
                         "channels": 16, "residual_blocks": 0, "features_dim": 64}}},
    # cards: short games of few moves; a small network, a lower learning rate (chips are noisy rewards)
    "leduc_holdem_v4": {"n_timesteps": 200_000, "n_envs": 8, "n_steps": 128, "batch_size": 256, "n_epochs": 10,
                        "learning_rate": 3e-4, "ent_coef": 0.01, "gamma": 0.99,
                        "policy_kwargs": {"net_arch": [64, 64]}},
    "texas_holdem_v4": {"n_timesteps": 300_000, "n_envs": 8, "n_steps": 128, "batch_size": 256, "n_epochs": 10,
                        "learning_rate": 3e-4, "ent_coef": 0.01, "gamma": 0.99,
                        "policy_kwargs": {"net_arch": [128, 128]}},
    "texas_holdem_no_limit_v6": {"n_timesteps": 300_000, "n_envs": 8, "n_steps": 128, "batch_size": 256,
                                 "n_epochs": 10, "learning_rate": 3e-4, "ent_coef": 0.01, "gamma": 0.99,
                                 "policy_kwargs": {"net_arch": [128, 128]}},
    # long board games with thousands of moves (chess 4672, go 362): a wider network, fewer epochs per rollout
    "chess_v6": {"n_timesteps": 1_000_000, "n_envs": 8, "n_steps": 256, "batch_size": 512, "n_epochs": 4,
                 "learning_rate": 3e-4, "ent_coef": 0.01, "gamma": 0.995,
                 "policy_kwargs": {"net_arch": [256, 256], **_BOARD}},
    "go_v5": {"n_timesteps": 1_000_000, "n_envs": 8, "n_steps": 256, "batch_size": 512, "n_epochs": 4,
              "learning_rate": 3e-4, "ent_coef": 0.01, "gamma": 0.995,
              "policy_kwargs": {"net_arch": [256, 256], **_BOARD}},
    # cooperative: every seat is the model, the reward the shared score
    "hanabi_v5": {"n_timesteps": 500_000, "n_envs": 8, "n_steps": 128, "batch_size": 256, "n_epochs": 10,
                  "learning_rate": 3e-4, "ent_coef": 0.01, "gamma": 0.99, "policy_kwargs": {"net_arch": [128, 128]}},
    "default": {"n_timesteps": 150_000, "n_envs": 8, "n_steps": 128, "batch_size": 256, "n_epochs": 10,
                "learning_rate": 1e-3, "ent_coef": 0.1, "gamma": 0.99, "policy_kwargs": {"net_arch": [64, 64]}},
    "connect_four_v3": {"n_timesteps": 9_000_000, "n_envs": 256, "n_steps": 8, "batch_size": 512, "n_epochs": 2,
                        "learning_rate": "lin_1e-3", "ent_coef": 0.01, "gamma": 0.99,
                        "policy_kwargs": {"net_arch": [128, 128], **_BOARD, "features_extractor_kwargs": {
                            "channels": 16, "residual_blocks": 0, "features_dim": 128}}},
}  # fmt: skip
GAME_PREFIX = "pettingzoo:"

# The games whose default run trains against a league (--pool-size, --league-players) rather than by pure
# self-play: tic-tac-toe meets 4 snapshots of itself and the ladder's three fixed players, which it must learn to
# hold to a draw from either seat; Connect Four meets 4 snapshots, the one-ply player, the depth-2 negamax and
# random play, the search players teaching it the threats pure self-play never punished (docs/benchmarks.md,
# "A league for tic-tac-toe", "A league for Connect Four").
GAME_LEAGUES: dict[str, tuple[int, tuple[str, ...]]] = {
    "tictactoe_v3": (4, ("perfect", "heuristic", "random")),
    "connect_four_v3": (4, ("heuristic", "negamax_2", "random")),
}

# A game's default share of its league's games for the fixed players (--fixed-share; League's fixed_share), the
# snapshots the rest (of the games not against itself); unlisted, one draw over all the opponents. Connect Four's
# small network met its one-ply target with half (docs/benchmarks.md, "Connect Four at the game's speed"), and
# missed it with none.
GAME_FIXED_SHARES: dict[str, float] = {"connect_four_v3": 0.5}

# A game's default share of its league's games that the learner plays against itself, every seat learning
# (--self-share; League's self_share): both seats of those games train, so Connect Four collects one move for each
# it trains on there. Tic-tac-toe lost games to random and perfect play with half (docs/benchmarks.md).
GAME_SELF_SHARES: dict[str, float] = {"connect_four_v3": 0.5}

# A game's default torch CPU threads (--threads) where a second thread pays: Connect Four's convolutions on 256
# games (docs/benchmarks.md, "Connect Four at the game's speed"). At most the cores this process may use; 1 for the
# other games (one is fastest for small networks) and with --collector multisync (its workers take the cores).
GAME_THREADS: dict[str, int] = {"connect_four_v3": 2}


#: How a run trains on its moves' images: each move and all its images, or one of them drawn at random.
Images = Literal["all", "random"]

# How a game trains on its moves' images by default (--images; SelfPlayPolicy's images): "all" (each move and all
# its images) unless listed. Tic-tac-toe draws one of its eight at random for each move: its seven images made a
# rollout eight times the moves played (docs/benchmarks.md, "Small networks at the game's speed"). Connect Four
# keeps its mirror beside each move: its faster configurations lost the one-ply target.
GAME_IMAGES: dict[str, Images] = {"tictactoe_v3": "random"}


#: What ``--algo ppo_lstm_mask`` adds to a game's ``policy_kwargs``: a smaller LSTM than sb3-contrib's 256 units
#: (a seat's view of these games is small, and every move of a rollout runs the LSTM one step).
LSTM_GAME_KWARGS: dict[str, Any] = {"lstm_hidden_size": 64}


def game_hyperparams(env_id: str, algo: str = "ppo_mask") -> dict[str, Any]:
    """The self-play defaults of a ``pettingzoo:<game>`` env id (:data:`GAME_HYPERPARAMS`).

    :param env_id: ``"pettingzoo:connect_four_v3"``.
    :param algo: ``"ppo_mask"``, or ``"ppo_lstm_mask"`` (:data:`LSTM_GAME_KWARGS` added to ``policy_kwargs``).
    :return: a copy of the game's entry, or of ``"default"``.
    """
    name = env_id.removeprefix(GAME_PREFIX)
    entry = dict(GAME_HYPERPARAMS.get(name, GAME_HYPERPARAMS["default"]))
    if algo == "ppo_lstm_mask":
        entry["policy_kwargs"] = {**entry["policy_kwargs"], **LSTM_GAME_KWARGS}
    return entry


def game_league(env_id: str, pool_size: int | None, players: list[str] | None) -> tuple[int, tuple[str, ...]]:
    """The league a run trains against: what ``--pool-size`` and ``--league-players`` give, else the game's
    default (:data:`GAME_LEAGUES`) when neither is given, else none.

    :param env_id: ``"pettingzoo:tictactoe_v3"``, or a gymnasium id (no league).
    :param pool_size: ``--pool-size``, None if not given.
    :param players: ``--league-players``, None if not given.
    :return: ``(pool_size, league_players)``.
    """
    if pool_size is None and players is None and env_id.startswith(GAME_PREFIX):
        return GAME_LEAGUES.get(env_id.removeprefix(GAME_PREFIX), (0, ()))
    return pool_size or 0, tuple(players or ())


def game_fixed_share(env_id: str, given: float | Literal["none"] | None, league: bool) -> float | None:
    """The fixed players' share of a league's games: ``--fixed-share`` if given (``"none"``: None), else the game's
    (:data:`GAME_FIXED_SHARES`) when the run has a league, else None (one draw over all the opponents).

    :param env_id: ``"pettingzoo:connect_four_v3"``, or a gymnasium id (no league).
    :param given: ``--fixed-share``: a share, ``"none"`` for one draw over all the opponents, None if not given.
    :param league: the run has a league (snapshots or fixed players); without one, there is no share to give.
    :return: the share, or None.
    """
    if isinstance(given, str):
        return None
    if given is not None or not league or not env_id.startswith(GAME_PREFIX):
        return given
    return GAME_FIXED_SHARES.get(env_id.removeprefix(GAME_PREFIX))


def game_self_share(env_id: str, given: float | None, league: bool) -> float:
    """The share of a league's games the learner plays against itself: ``--self-share`` if given, else the
    game's (:data:`GAME_SELF_SHARES`) when the run has a league, else 0.

    :param env_id: ``"pettingzoo:connect_four_v3"``, or a gymnasium id (no league).
    :param given: ``--self-share``, None if not given.
    :param league: the run has a league (snapshots or fixed players); without one, pure self-play has no share.
    :return: the share.
    """
    if given is not None:
        return given
    if not league or not env_id.startswith(GAME_PREFIX):
        return 0.0
    return GAME_SELF_SHARES.get(env_id.removeprefix(GAME_PREFIX), 0.0)


def game_images(env_id: str, given: Images | None, symmetries: bool) -> Images:
    """How a run trains on its moves' images: ``--images`` if given, else the game's (:data:`GAME_IMAGES`) when
    the run trains on images at all, else ``"all"`` (which then has nothing to image).

    :param env_id: ``"pettingzoo:tictactoe_v3"``, or a gymnasium id.
    :param given: ``--images``, None if not given.
    :param symmetries: the run trains on its game's symmetries (not ``--no-symmetries``, not an LSTM).
    :return: ``"all"`` or ``"random"``.
    """
    if given is not None:
        return given
    if not symmetries or not env_id.startswith(GAME_PREFIX):
        return "all"
    return GAME_IMAGES.get(env_id.removeprefix(GAME_PREFIX), "all")


def game_threads(env_id: str, given: int | None, collector: str | None) -> int:
    """The torch CPU threads a run uses: ``--threads`` if given, else the game's (:data:`GAME_THREADS`), at most
    the cores this process may use, unless the envs step in worker processes; else 1.

    :param env_id: ``"pettingzoo:connect_four_v3"``, or a gymnasium id.
    :param given: ``--threads``, None if not given.
    :param collector: ``--collector``: None, ``"sync"`` or ``"multisync"`` (its workers take the cores: 1).
    :return: the threads, at least 1.
    """
    if given is not None:
        return given
    if collector == "multisync" or not env_id.startswith(GAME_PREFIX):
        return 1
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
    return max(1, min(GAME_THREADS.get(env_id.removeprefix(GAME_PREFIX), 1), cores))


def check_pool_size(pool_size: int) -> None:
    """Refuse a ``--pool-size`` above :data:`POOL_SIZE_MAX`.

    :param pool_size: the snapshots of past weights the learner plays against.
    :raises UsageError: more than :data:`POOL_SIZE_MAX`.
    """
    if pool_size > POOL_SIZE_MAX:
        raise UsageError(
            f"--pool-size {pool_size} is above {POOL_SIZE_MAX}: every snapshot is a full copy of the policy's weights, "
            "made at start (in every worker process with --collector multisync), and past a few dozen the oldest are "
            f"seldom drawn; use --pool-size {POOL_SIZE_MAX} or less."
        )
