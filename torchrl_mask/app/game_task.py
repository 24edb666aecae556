"""A run on a PettingZoo classic game (``--env pettingzoo:<game>``), by self-play: MaskablePPO (or, with
``--algo ppo_lstm_mask``, MaskableRecurrentPPO, each seat with its own LSTM state) learning from the run's
collector (:mod:`torchrl_mask.app.game_collector`), seat by seat (:mod:`torchrl_mask.games.selfplay`).
``n_timesteps`` counts the moves trained on; ``n_steps`` is moves per game per rollout.

The model is judged against its game's ladder of fixed players (:mod:`torchrl_mask.games.ladder`: win rates, chips
per game or the shared score), during training (:class:`~torchrl_mask.games.evaluation.WinRates`) and after. It
writes, besides ``model.zip`` (:mod:`torchrl_mask.app.selfplay_files`): ``win_rates.csv``, ``evaluation.json`` and
``learning_curve.png``.
"""

from __future__ import annotations

from functools import partial
from pathlib import Path
from typing import Any

from stable_baselines3.common.callbacks import BaseCallback
from stable_baselines3.common.vec_env import DummyVecEnv
from torchrl.collectors import BaseCollector

from torchrl_mask.algorithms.collector_checks import was_shut_down
from torchrl_mask.app import selfplay_files
from torchrl_mask.app.config import ALGOS, SelfPlay, TrainConfig
from torchrl_mask.app.game_collector import SNAPSHOTS, build_collector, run_symmetries, worker_count
from torchrl_mask.app.hyperparams import UsageError
from torchrl_mask.app.models import ALGORITHMS, Model, build_model, model_kwargs
from torchrl_mask.app.results import EVAL_SEED_OFFSET
from torchrl_mask.app.trained_agent import check_trained_agent
from torchrl_mask.games.env import game_spaces, make_game
from torchrl_mask.games.evaluation import EVAL_POINT_GAMES, EVAL_POINTS, WinRates, evaluate_ladder, ladder_score
from torchrl_mask.games.network import with_extractor_classes
from torchrl_mask.games.seat_env import SeatEnv
from torchrl_mask.torchrl.workers import shutdown

__all__ = ["GameTask", "check_game"]


def check_game(env_id: str, game: str) -> None:
    """Refuse a game PettingZoo does not have, or one self-play cannot train (no masked Dict observations).

    :param env_id: the ``--env`` given, for the message.
    :param game: its game's name (``"tictactoe_v3"``).
    :raises UsageError: PettingZoo is not installed, it has no classic game of that name, or the game has no
        masked Dict observations (``rps_v2``).
    """
    try:
        game_spaces(make_game(game))
    except (ImportError, ValueError) as err:
        raise UsageError(f"--env {env_id}: {' '.join(str(err).split())}") from None


def _policy(config: TrainConfig) -> str:
    """``MlpPolicy`` (an LSTM's with ``--algo ppo_lstm_mask``): a board's planes go through the features extractor
    its ``policy_kwargs`` name."""
    fits = "MlpLstmPolicy" if config.algo == "ppo_lstm_mask" else "MlpPolicy"
    policy = config.hyperparams.get("policy", fits)
    if policy != fits:
        raise UsageError(
            f"policy={policy} with --algo {config.algo} on {config.env_id}: self-play builds {fits} (a board game's "
            f"board goes through policy_kwargs' features_extractor_class); use policy={fits}, or leave it out."
        )
    return str(policy)


class GameTask:
    """A self-play run (see the module), checked when made: the game, the policy and its arguments, the ``-i``
    model (loaded on one seat of the game, :class:`~torchrl_mask.SeatEnv`).

    :param config: the run; its ``selfplay`` resolved (:func:`~torchrl_mask.app.config.train_config`).
    :param engine: what plays the moves (:class:`~torchrl_mask.TurnBasedEnv`'s ``engine``).
    :param snapshots: the snapshots of the learner a run with a pool takes, at most.
    :raises UsageError: an unknown game or one without masks, a policy that does not fit, an ``-i`` model that
        does not load or is not for this game.
    """

    unit = "move"
    files_text = "win_rates.csv, evaluation.json or learning_curve.png"

    def __init__(self, config: TrainConfig, engine: str = "auto", snapshots: int = SNAPSHOTS) -> None:
        self.game = config.kind.name
        check_game(config.env_id, self.game)
        self.policy = _policy(config)
        hyperparams = {key: value for key, value in config.hyperparams.items() if key != "policy"}
        self.kwargs = model_kwargs(hyperparams, self.policy, config.algo)
        if "policy_kwargs" in self.kwargs:  # the record names the board network as text (config imports no torch)
            self.kwargs["policy_kwargs"] = with_extractor_classes(self.kwargs["policy_kwargs"])
        if config.trained_agent is not None:
            seat_env = SeatEnv(self.game)
            check_trained_agent(config.trained_agent, seat_env, ALGORITHMS[config.algo])
            seat_env.close()
        self.config, self.engine, self.snapshots = config, engine, snapshots
        self.selfplay = config.selfplay or SelfPlay()
        self.collector: BaseCollector | None = None
        self.rates: WinRates | None = None

    def first_line(self) -> str:
        config, selfplay = self.config, self.selfplay
        opponents = "pure self-play"
        if selfplay.has_league:
            players = "".join(f", {name}" for name in selfplay.league_players)
            opponents = f"against a league of {selfplay.pool_size} past snapshots{players}"
            if selfplay.fixed_share is not None and selfplay.pool_size and selfplay.league_players:
                # of all the games: the fixed share is of those the learner does not play against itself
                opponents += f", the fixed players {selfplay.fixed_share * (1 - selfplay.self_share):.0%} of the games"
            if selfplay.self_share:
                opponents += f", itself {selfplay.self_share:.0%} of the games (every seat learning)"
        images = [symmetry.name for symmetry in run_symmetries(config, self.game)]
        if images and selfplay.images == "random":
            drawn = ", ".join(images)
            opponents += f"; each move trained on as one of its images drawn at random, itself among them: {drawn}"
        elif images:
            opponents += f"; each move also trained on in its images: {', '.join(images)}"
        if selfplay.openings:
            opponents += f"; each game opens with 0 to {selfplay.openings} random moves"
        workers = worker_count(config.n_envs) if config.collector == "multisync" else 0
        where = f" in {workers} worker process{'es' if workers > 1 else ''}" if workers else ""
        threads = f", {config.threads} torch threads" if config.threads > 1 else ""
        return (
            f"Training {ALGOS[config.algo]} on {config.env_id} by self-play ({opponents}) for {config.n_timesteps:,} "
            f"moves: {config.n_envs} games side by side{where}, seed {config.seed}, device {config.device}{threads}."
        )

    def build_model(self, device: str, out: Path | None) -> Model:
        model = build_model(self.config, self.policy, self.kwargs, DummyVecEnv([partial(SeatEnv, self.game)]), device)
        pool_size = self.selfplay.pool_size
        if pool_size and out is not None:  # what building the pool costs, before it is built
            weights = sum(parameter.numel() for parameter in model.policy.parameters())
            megabytes = pool_size * weights * 4 / 2**20
            print(
                f"Building {pool_size} snapshots of the policy ({weights:,} weights each, {megabytes:.1f} MB in all)."
            )
        self.collector = build_collector(self.config, model, self.game, self.engine, self.snapshots)
        return model

    def callbacks(self, model: Model, out: Path) -> list[BaseCallback]:
        """The ladder measured during training: every ``eval_freq`` moves (ten points a run without it), and with
        a pool at each snapshot as it is taken."""
        config = self.config
        every = config.eval_freq or config.n_timesteps // EVAL_POINTS
        games = min(EVAL_POINT_GAMES, config.eval_episodes)
        players = self.collector.policy if self.selfplay.pool_size and self.collector is not None else None
        self.rates = WinRates(self.game, every, games, config.seed + EVAL_SEED_OFFSET, players)
        return [self.rates]

    def learn(self, model: Model, callbacks: list[BaseCallback]) -> None:
        config = self.config
        # learn() shuts the collector and its workers down, also on an interrupt or an error
        model.learn(
            config.n_timesteps,
            callbacks,
            progress_bar=config.progress_bar,
            collector=self.collector,
            reset_num_timesteps=config.trained_agent is None,
        )

    def close(self) -> None:
        """The collector is learn()'s to shut down; one learn() never started is shut down here."""
        if self.collector is not None and not was_shut_down(self.collector):
            shutdown(self.collector)

    def write_progress(self, model: Model, out: Path) -> list[str]:
        points = [] if self.rates is None else self.rates.points
        selfplay_files.write_curve(out, points)
        return ["win_rates.csv"] if points else []

    def evaluate(self, model: Model) -> dict[str, Any]:
        config = self.config
        evaluation = evaluate_ladder(model, self.game, config.eval_episodes, config.seed + EVAL_SEED_OFFSET)
        league = None if self.collector is None else self.collector.policy.league
        if league is not None:  # the learner's running score (1 a win, 0 a loss) against each opponent it met
            evaluation["league_scores"] = league.summary()
        return evaluation

    def write(self, model: Model, evaluation: dict[str, Any], out: Path) -> list[str]:
        config = self.config
        points = [] if self.rates is None else self.rates.points
        used = selfplay_files.hyperparams_used(model, config.hyperparams)
        selfplay_files.write_evaluation(out, config, evaluation, used)
        selfplay_files.plot_win_rates(points, evaluation, config.env_id, out / "learning_curve.png")
        return ["evaluation.json", "learning_curve.png"]

    def report(self, evaluation: dict[str, Any]) -> list[str]:
        config = self.config
        lines = [
            f"\nEvaluation on {config.env_id}, {config.eval_episodes} games per opponent ({evaluation['metric']}, "
            f"{evaluation['unit']}):"
        ]
        for key, rates in evaluation.items():
            if not key.startswith("vs_"):
                continue
            if "skipped" in rates:
                lines.append(f"  {key:<15}skipped: {rates['skipped']}")
            elif rates["metric"] == "win_rate":
                lines.append(f"  {key:<15}win {rates['win']:.3f} / draw {rates['draw']:.3f} / loss {rates['loss']:.3f}")
            else:
                lines.append(f"  {key:<15}{rates['mean']:+.3f} ± {rates['std']:.3f} per game")
        lines.append(f"  illegal moves: {evaluation['illegal_moves']}")
        return lines

    def score(self, model: Model, episodes: int, seed: int) -> float:
        """The model against its game's whole ladder, as one number
        (:func:`~torchrl_mask.games.evaluation.ladder_score`: mean ``win - loss`` over the opponents, or chips, or
        the shared score), from the same evaluation ``train`` writes to ``evaluation.json``."""
        return ladder_score(evaluate_ladder(model, self.game, episodes, seed + EVAL_SEED_OFFSET))
