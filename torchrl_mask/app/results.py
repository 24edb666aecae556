"""What ``torchrl-mask train`` reports about a trained model: evaluations, the learning curve, its PNG.

- :func:`evaluate`: the trained policy with masks, without masks, and random legal actions, on identically
  seeded envs (sb3-contrib's ``evaluate_policy``);
- :func:`learning_curve`: every training episode's ``(timestep, return)`` from SB3's ``Monitor`` files, read
  with SB3's own ``load_results`` and ``ts2xy`` (episodes of all envs ordered by the time they ended);
- :func:`plot`: the curve beside the three evaluations, as a PNG.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any, cast

import gymnasium as gym
import numpy as np
from gymnasium import spaces
from sb3_contrib.common.maskable.evaluation import evaluate_policy
from stable_baselines3.common.env_util import make_vec_env
from stable_baselines3.common.monitor import load_results

from torchrl_mask.algorithms.ppo import UnmaskedPredictWarning
from torchrl_mask.algorithms.recurrent_evaluation import evaluate_policy as recurrent_evaluate_policy
from torchrl_mask.algorithms.recurrent_ppo import MaskableRecurrentPPO
from torchrl_mask.app.files import write_file
from torchrl_mask.rollout.masks import mask_spec

__all__ = ["evaluate", "learning_curve", "mean_return", "plot"]

EVAL_SEED_OFFSET = 10_000  # evaluation envs are seeded apart from the training envs


class _RandomLegalPolicy:
    """Picks a uniformly random allowed action in every mask group: the baseline a trained policy must beat."""

    def __init__(self, action_space: spaces.Space, seed: int) -> None:
        self.action_space = action_space
        self.groups = mask_spec(action_space).groups
        self.rng = np.random.default_rng(seed)

    def predict(self, observation: Any, *args: Any, action_masks: np.ndarray, **kwargs: Any) -> tuple[Any, None]:
        masks = np.asarray(action_masks, dtype=bool).reshape(-1, sum(self.groups))
        parts = np.split(masks, np.cumsum(self.groups)[:-1], axis=1)
        choice = np.array([[self.rng.choice(np.flatnonzero(row)) for row in part] for part in parts]).T
        if isinstance(self.action_space, spaces.Discrete):
            return choice[:, 0] + self.action_space.start, None
        return choice, None


def _episode_returns(
    player: Any, make_env: Callable[[], gym.Env], episodes: int, seed: int, use_masking: bool
) -> np.ndarray:
    """The returns of ``episodes`` deterministic episodes on a fresh env seeded ``seed + 10_000``, by sb3-contrib's
    masked ``evaluate_policy``, or for a recurrent model by
    :func:`~torchrl_mask.algorithms.recurrent_evaluation.evaluate_policy`, which keeps the LSTM state (sb3-contrib's
    drops it). Played without masks on purpose, the warning for users who forget them is noise here."""
    evaluate_episodes = recurrent_evaluate_policy if isinstance(player, MaskableRecurrentPPO) else evaluate_policy
    env = make_vec_env(make_env, n_envs=1, seed=seed + EVAL_SEED_OFFSET)
    try:
        with warnings.catch_warnings():
            if not use_masking:
                warnings.simplefilter("ignore", UnmaskedPredictWarning)
            returns, _ = evaluate_episodes(
                cast(Any, player),
                env,
                n_eval_episodes=episodes,
                deterministic=True,
                return_episode_rewards=True,
                use_masking=use_masking,
            )
    finally:
        env.close()
    return np.asarray(returns)


def mean_return(
    model: Any, make_env: Callable[[], gym.Env], episodes: int, seed: int, use_masking: bool = True
) -> float:
    """The mean return of ``episodes`` deterministic episodes of ``model``, as :func:`evaluate` scores it (a fresh
    env seeded ``seed + 10_000``; a recurrent model keeps its LSTM state): ``torchrl-mask tune``'s trial value.

    :param model: a MaskablePPO or MaskableRecurrentPPO.
    :param make_env: makes one masked env (with ``action_masks()``).
    :param episodes: episodes to play.
    :param seed: the run's seed.
    :param use_masking: play with the env's masks (False: the unmasked score, for comparison).
    :return: the mean episode return.
    """
    return float(np.mean(_episode_returns(model, make_env, episodes, seed, use_masking)))


def evaluate(model: Any, make_env: Callable[[], gym.Env], episodes: int, seed: int) -> dict[str, dict[str, Any]]:
    """Mean and std of the episode return of the model with masks, without masks, and of random legal actions.

    Each of the three plays ``episodes`` deterministic episodes on a fresh env seeded ``seed + 10_000``, so all
    three see the same start states. One that raises (an env that refuses an illegal move, played without
    masks) is recorded as ``{"error": "<type>: <message>"}`` and the others still play.

    :param model: a trained MaskablePPO or MaskableRecurrentPPO.
    :param make_env: makes one masked env (with ``action_masks()``).
    :param episodes: episodes per evaluation.
    :param seed: the run's seed.
    :return: ``{"masked" | "unmasked" | "random": {"mean": ..., "std": ...} or {"error": ...}}``.
    """
    results: dict[str, dict[str, Any]] = {}
    players: dict[str, tuple[Any, bool]] = {
        "masked": (model, True),
        "unmasked": (model, False),
        "random": (_RandomLegalPolicy(model.action_space, seed), True),
    }
    for name, (player, use_masking) in players.items():
        try:
            returns = _episode_returns(player, make_env, episodes, seed, use_masking)
        except Exception as err:  # the env's own error: reported, the model is already saved
            results[name] = {"error": f"{type(err).__name__}: {' '.join(str(err).split())}"}
            continue
        results[name] = {"mean": float(np.mean(returns)), "std": float(np.std(returns))}
    return results


def learning_curve(monitor_dir: Path) -> list[tuple[int, float]]:
    """``(timestep, return)`` of every episode in the ``*.monitor.csv`` files of ``monitor_dir``.

    :param monitor_dir: the folder SB3's ``Monitor`` wrote into.
    :return: one point per episode, the timestep being the running sum of episode lengths (SB3's ``ts2xy``).
    """
    from stable_baselines3.common.results_plotter import X_TIMESTEPS, ts2xy  # imports matplotlib: only here

    steps, returns = ts2xy(load_results(str(monitor_dir)), X_TIMESTEPS)
    return [(int(step), float(ret)) for step, ret in zip(steps, returns, strict=True)]


def plot(
    curve: list[tuple[int, float]],
    evaluation: dict[str, dict[str, Any]],
    env_id: str,
    episodes: int,
    path: Path,
    algo_name: str = "MaskablePPO",
) -> None:
    """Draw the learning curve (each episode and a running mean) beside the three evaluations, as a PNG.

    :param curve: what :func:`learning_curve` returns.
    :param evaluation: what :func:`evaluate` returns (one that raised is drawn as an empty bar marked "raised").
    :param env_id: the env's name, for the titles.
    :param episodes: episodes per evaluation, for the title.
    :param path: the PNG to write.
    :param algo_name: the model's class, for the title.
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (ax_curve, ax_eval) = plt.subplots(1, 2, figsize=(11, 4.2), width_ratios=(2.2, 1), layout="constrained")
    if curve:
        steps, returns = (np.asarray(column) for column in zip(*curve, strict=True))
        window = max(1, min(50, len(returns) // 10))
        smooth = np.convolve(returns, np.ones(window) / window, mode="valid")
        ax_curve.scatter(steps, returns, s=4, alpha=0.25, color="tab:blue", label="episode")
        ax_curve.plot(steps[window - 1 :], smooth, color="tab:blue", lw=2, label=f"mean of last {window}")
        ax_curve.legend(loc="lower right")
    else:
        ax_curve.text(0.5, 0.5, "no episode ended during training", ha="center", transform=ax_curve.transAxes)
    ax_curve.set(xlabel="timestep", ylabel="episode return", title=f"{algo_name} on {env_id}: training")
    ax_curve.grid(alpha=0.3)

    labels = {"masked": "trained,\nmasks", "unmasked": "trained,\nno masks", "random": "random\nlegal"}
    means = [evaluation[key].get("mean", 0.0) for key in labels]
    texts = [f"{evaluation[key]['mean']:.1f}" if "mean" in evaluation[key] else "raised" for key in labels]
    bars = ax_eval.bar(list(labels.values()), means, color=["tab:green", "tab:red", "tab:gray"])
    ax_eval.bar_label(bars, labels=texts, padding=2)
    ax_eval.axhline(0, color="black", lw=0.8)
    ax_eval.set(ylabel="mean episode return", title=f"evaluation, {episodes} episodes")
    try:
        write_file(path, lambda partial: fig.savefig(partial, format="png", dpi=100))
    finally:
        plt.close(fig)
