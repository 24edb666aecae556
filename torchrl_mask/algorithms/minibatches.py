"""The minibatch guard of both models: a rollout whose last minibatch would hold one row is refused.

sb3-contrib's ``MaskablePPO.train()`` and ``RecurrentPPO.train()`` normalise each minibatch's advantages by their
standard deviation, which for one row is ``NaN``: the parameters become ``NaN`` at the first update and the next
rollout fails far from the cause. SB3's ``PPO`` asserts ``batch_size > 1``; sb3-contrib does not guard.
:func:`check_minibatches` is called by :class:`~torchrl_mask.MaskablePPO` and
:class:`~torchrl_mask.MaskableRecurrentPPO` when their model is set up (constructor and ``load``), and by the
command line before anything is written. Every run it refuses would have ended in ``NaN``; every other run is
untouched. Nothing heavy is imported.

Example:
    >>> check_minibatches(n_steps=96, n_envs=1, batch_size=32)
    >>> check_minibatches(n_steps=97, n_envs=1, batch_size=32)
    Traceback (most recent call last):
    ...
    ValueError: n_steps * n_envs = 97 rows in minibatches of batch_size=32 leaves a last minibatch of one row, ...
"""

from __future__ import annotations

__all__ = ["check_minibatches"]


def check_minibatches(n_steps: int, n_envs: int, batch_size: int, normalize_advantage: bool = True) -> None:
    """Refuse a rollout of ``n_steps * n_envs`` rows that would train on a minibatch of one row.

    :param n_steps: steps per env in a rollout.
    :param n_envs: envs stepped side by side.
    :param batch_size: rows per minibatch.
    :param normalize_advantage: whether the advantages are normalised per minibatch (the models' default); without
        it a one-row minibatch is allowed.
    :raises ValueError: (normalising) ``batch_size`` 1, or a last minibatch of one row; the message names the fix.
    """
    if not normalize_advantage:
        return
    if batch_size == 1:
        raise ValueError("batch_size=1 trains on minibatches of one row (NaN parameters); use batch_size >= 2.")
    rows = n_steps * n_envs
    if rows % batch_size == 1:
        raise ValueError(
            f"n_steps * n_envs = {rows} rows in minibatches of batch_size={batch_size} leaves a last minibatch "
            "of one row, whose advantage normalisation makes the parameters NaN; pick a batch_size that divides "
            f"{rows} (or n_steps so that n_steps * n_envs does), or normalize_advantage=False."
        )
