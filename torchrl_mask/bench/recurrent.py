"""End-to-end learn() time of sb3-contrib's RecurrentPPO against MaskableRecurrentPPO with ``use_masking=False``.

What it shows: that the recurrent model's rollout in the TensorDict storage (the step checks of ``add``, GAE by
TorchRL's function, the minibatches of sequences gathered from flat views) costs no more than sb3-contrib's NumPy
buffer when nothing is masked. Beside it, the same model with ``use_masking=True`` on the same env (every action
allowed), for the cost of reading and applying masks.

Workloads (``--workloads``): ``cartpole``, a ``DummyVecEnv`` of 8 ``CartPole-v1`` (``MlpLstmPolicy``), and
``dict``, the same with a ``Dict`` observation (``MultiInputLstmPolicy``). Each env has an ``action_masks()``
method allowing every action (sb3-contrib's ``ActionMasker``), which ``RecurrentPPO`` does not read.

Both run in this process on identical env stacks and hyper-parameters, alternating which goes first each round
(ABBA), so that drift in machine load hits both alike. The two runs of a round use one seed, so they must learn
bit-identical parameters; the benchmark checks that, so it never times two different computations. Reported per
workload: the median seconds per ``learn`` call of each, and the median of the per-round ratios (ours / sb3-contrib:
at most 1 means the unmasked model costs no more).

Run it as ``torchrl-mask bench learn --recurrent`` (a minute or two); ``--help`` for the knobs.
"""

from __future__ import annotations

import argparse
import statistics
import time
from typing import Any

import gymnasium as gym
import numpy as np
import torch
from gymnasium import spaces
from sb3_contrib import RecurrentPPO
from sb3_contrib.common.recurrent.buffers import RecurrentRolloutBuffer
from sb3_contrib.common.recurrent.type_aliases import RNNStates
from sb3_contrib.common.wrappers import ActionMasker
from stable_baselines3.common.logger import Logger
from stable_baselines3.common.vec_env import DummyVecEnv

from torchrl_mask import MaskableRecurrentPPO
from torchrl_mask.rollout.recurrent_buffers import MaskableRecurrentRolloutBuffer

# name: (Dict observations)
WORKLOADS = {"cartpole": False, "dict": True}
RUNS = ("sb3-contrib", "ours, unmasked", "ours, masked")


class _SplitObservation(gym.ObservationWrapper):
    """CartPole's observation as a ``Dict``: the cart's position and velocity, and the pole's."""

    def __init__(self, env: gym.Env) -> None:
        super().__init__(env)
        box = spaces.Box(-np.inf, np.inf, (2,), np.float32)
        self.observation_space = spaces.Dict({"cart": box, "pole": box})

    def observation(self, observation: np.ndarray) -> dict[str, np.ndarray]:
        return {"cart": observation[:2], "pole": observation[2:]}


def _all_allowed(env: gym.Env) -> np.ndarray:
    return np.ones(2, dtype=bool)


def make_vec_env(workload: str, n_envs: int) -> DummyVecEnv:
    """The workload's VecEnv: ``n_envs`` CartPoles with an ``action_masks()`` method that allows everything.

    :param workload: a key of :data:`WORKLOADS`.
    :param n_envs: envs stepped together.
    :return: the vectorized env.
    """

    def make() -> gym.Env:
        env: gym.Env = gym.make("CartPole-v1")
        if WORKLOADS[workload]:
            env = _SplitObservation(env)
        return ActionMasker(env, _all_allowed)

    return DummyVecEnv([make] * n_envs)


def time_learn(run: str, workload: str, args: argparse.Namespace) -> tuple[float, float, dict[str, torch.Tensor]]:
    """Build one model on a fresh VecEnv and time one ``learn`` call.

    :param run: one of :data:`RUNS`.
    :param workload: a key of :data:`WORKLOADS`.
    :param args: the parsed command line.
    :return: wall seconds in ``learn``, CPU seconds of this process in it (less sensitive than wall time to other
        load on a shared machine), and the learned parameters.
    """
    env = make_vec_env(workload, args.n_envs)
    algorithm: Any = RecurrentPPO if run == "sb3-contrib" else MaskableRecurrentPPO
    model = algorithm(
        "MultiInputLstmPolicy" if WORKLOADS[workload] else "MlpLstmPolicy",
        env,
        n_steps=args.n_steps,
        batch_size=args.batch_size,
        n_epochs=args.n_epochs,
        seed=args.seed,
        policy_kwargs={"lstm_hidden_size": args.lstm_hidden_size, "net_arch": [64]},
        device="cpu",
    )
    model.set_logger(Logger(None, []))
    kwargs = {} if run == "sb3-contrib" else {"use_masking": run == "ours, masked"}
    start, cpu_start = time.perf_counter(), time.process_time()
    model.learn(args.timesteps, **kwargs)
    seconds, cpu = time.perf_counter() - start, time.process_time() - cpu_start
    env.close()
    return seconds, cpu, {key: value.detach().clone() for key, value in model.policy.state_dict().items()}


def _buffer_inputs(args: argparse.Namespace) -> list[tuple[Any, ...]]:
    """One rollout's ``add`` arguments as ``RecurrentPPO`` passes them (CartPole's shapes), episodes of ~20 steps."""
    rng = np.random.default_rng(args.seed)
    n, hidden = args.n_envs, args.lstm_hidden_size
    steps = []
    for _ in range(args.n_steps):
        states = RNNStates(*[tuple(torch.randn(1, n, hidden) for _ in range(2)) for _ in range(2)])
        obs = rng.normal(size=(n, 4)).astype(np.float32)
        values, log_probs = torch.randn(n, 1), torch.randn(n)
        steps.append(
            (
                obs,
                rng.integers(2, size=(n, 1)),
                rng.normal(size=n).astype(np.float32),
                rng.random(n) < 0.05,
                values,
                log_probs,
                states,
            )
        )
    return steps


def time_buffer(run: str, inputs: list[tuple[Any, ...]], args: argparse.Namespace) -> float:
    """Wall seconds of one rollout's buffer work as ``RecurrentPPO`` does it: ``reset``, ``add`` per step, GAE,
    ``n_epochs`` of ``get(batch_size)`` (sb3-contrib's buffer, or ours).

    :param run: ``"sb3-contrib"`` or one of ours.
    :param inputs: from :func:`_buffer_inputs`.
    :param args: the parsed command line.
    :return: the seconds.
    """
    cls: Any = RecurrentRolloutBuffer if run == "sb3-contrib" else MaskableRecurrentRolloutBuffer
    shape = (args.n_steps, 1, args.n_envs, args.lstm_hidden_size)
    buffer = cls(
        args.n_steps,
        spaces.Box(-np.inf, np.inf, (4,), np.float32),
        spaces.Discrete(2),
        shape,
        "cpu",
        gae_lambda=0.95,
        gamma=0.99,
        n_envs=args.n_envs,
    )
    np.random.seed(args.seed)
    start = time.perf_counter()
    buffer.reset()
    for *fields, states in inputs:
        buffer.add(*fields, lstm_states=states)
    buffer.compute_returns_and_advantage(torch.zeros(args.n_envs, 1), np.zeros(args.n_envs, bool))
    for _ in range(args.n_epochs):
        for _batch in buffer.get(args.batch_size):
            pass
    return time.perf_counter() - start


def buffer_ratio(args: argparse.Namespace, rounds: int = 21) -> tuple[float, float, float]:
    """The buffer work alone in paired rounds (ABBA): medians of sb3-contrib's and our seconds, and of the ratios.

    :param args: the parsed command line.
    :param rounds: paired rounds (short: many of them).
    :return: sb3-contrib's seconds, ours, the median of ours / sb3-contrib.
    """
    inputs = _buffer_inputs(args)
    runs = ("sb3-contrib", "ours, unmasked")
    seconds: dict[str, list[float]] = {run: [] for run in runs}
    for round_ in range(rounds + 1):  # the first: warm-up
        for run in runs if round_ % 2 == 0 else runs[::-1]:
            elapsed = time_buffer(run, inputs, args)
            if round_:
                seconds[run].append(elapsed)
    ratios = [o / r for o, r in zip(seconds[runs[1]], seconds[runs[0]], strict=True)]
    return statistics.median(seconds[runs[0]]), statistics.median(seconds[runs[1]]), statistics.median(ratios)


def run_workload(workload: str, args: argparse.Namespace) -> bool:
    """Time one workload in paired rounds and print its line.

    :param workload: a key of :data:`WORKLOADS`.
    :param args: the parsed command line.
    :return: False if the unmasked model learned other parameters than sb3-contrib's.
    """
    for run in RUNS:  # warm-up: imports, allocator, first-call overheads
        time_learn(run, workload, args)
    seconds: dict[str, list[float]] = {run: [] for run in RUNS}
    cpus: dict[str, list[float]] = {run: [] for run in RUNS}
    for round_ in range(args.rounds):
        params = {}
        for run in RUNS if round_ % 2 == 0 else RUNS[::-1]:
            elapsed, cpu, params[run] = time_learn(run, workload, args)
            seconds[run].append(elapsed)
            cpus[run].append(cpu)
        for key, value in params["sb3-contrib"].items():
            if not torch.equal(params["ours, unmasked"][key], value):
                print(f"FAIL {workload}: use_masking=False learned another {key!r} than RecurrentPPO.")
                return False
    ref, unmasked, masked = (seconds[run] for run in RUNS)
    ratios = [o / r for o, r in zip(unmasked, ref, strict=True)]
    masked_ratios = [o / r for o, r in zip(masked, ref, strict=True)]
    cpu_ratios = [o / r for o, r in zip(cpus["ours, unmasked"], cpus["sb3-contrib"], strict=True)]
    print(
        f"{workload:10s} {statistics.median(ref):8.3f} {statistics.median(unmasked):8.3f} "
        f"{statistics.median(ratios):6.2f}x ({min(ratios):.2f}-{max(ratios):.2f}) "
        f"{statistics.median(cpu_ratios):6.2f}x "
        f"{statistics.median(masked):8.3f} {statistics.median(masked_ratios):6.2f}x"
    )
    return True


def _parse(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="torchrl-mask bench learn --recurrent", description=__doc__.splitlines()[0] if __doc__ else None
    )
    parser.add_argument("--workloads", nargs="+", choices=list(WORKLOADS), default=list(WORKLOADS))
    parser.add_argument("--rounds", type=int, default=5, help="timed rounds per run (after one warm-up)")
    parser.add_argument("--timesteps", type=int, default=4096, help="total_timesteps of each learn call")
    parser.add_argument("--n-envs", type=int, default=8)
    parser.add_argument("--n-steps", type=int, default=128)
    parser.add_argument("--batch-size", type=int, default=128)
    parser.add_argument("--n-epochs", type=int, default=4)
    parser.add_argument("--lstm-hidden-size", type=int, default=64)
    parser.add_argument("--threads", type=int, default=1, help="torch.set_num_threads for all runs")
    parser.add_argument("--seed", type=int, default=0)
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    """Run the benchmark and print, per workload, medians and the median paired ratio.

    :param argv: command-line arguments (``sys.argv[1:]`` when None).
    :return: 0 on success; 1 if the unmasked model learned other parameters than sb3-contrib's.
    """
    args = _parse(argv)
    torch.set_num_threads(args.threads)
    print(
        f"RecurrentPPO learn({args.timesteps}): {args.n_envs} envs, n_steps={args.n_steps}, "
        f"batch_size={args.batch_size}, n_epochs={args.n_epochs}, lstm_hidden_size={args.lstm_hidden_size}, "
        f"torch threads={args.threads}, rounds={args.rounds} (+1 warm-up)"
    )
    print(
        f"{'workload':10s} {'sb3c s':>8s} {'ours s':>8s} {'ours/sb3c (min-max)':>21s} {'cpu':>7s} {'masked s':>8s} "
        f"{'/sb3c':>7s}"
    )
    ok = all([run_workload(workload, args) for workload in args.workloads])
    ref, ours, ratio = buffer_ratio(args)
    print(
        f"buffer work alone (reset, {args.n_steps} adds, GAE, {args.n_epochs} epochs of get({args.batch_size})): "
        f"sb3-contrib {ref * 1e3:.1f} ms, ours {ours * 1e3:.1f} ms, ours/sb3c {ratio:.2f}x (median of 21 paired rounds)"
    )
    print(
        "ours s: MaskableRecurrentPPO with use_masking=False, parameters checked equal to sb3-contrib's; ratios: "
        "medians of per-round ours / sb3-contrib time (at most 1: no more costly), of wall time and of this "
        "process's CPU time in learn (cpu); masked s: use_masking=True, every action allowed"
    )
    return 0 if ok else 1
