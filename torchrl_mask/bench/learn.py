"""End-to-end learn() time of sb3-contrib's MaskablePPO against torchrl_mask's, on masked envs.

Workloads (``--workloads``):

- ``dict-dummy``: ``DummyVecEnv`` of 8 envs, Dict observations (``MultiInputPolicy``), Discrete actions;
- ``subproc``: ``SubprocVecEnv`` of 4 worker processes, the same env;
- ``multidiscrete``: ``DummyVecEnv`` of 8 envs, MultiDiscrete actions and observations (``MlpPolicy``).

The env is sb3-contrib's ``InvalidActionEnvDiscrete``/``InvalidActionEnvMultiDiscrete`` (a random state each
step, some actions masked out), truncated by ``TimeLimit`` (which exercises the value bootstrap). Its masks come
from an ``action_masks()`` method computed with numpy (``--env-masks numpy``, as a real env would) or from the
test env's own Python loop (``--env-masks python``, 20 us an env per call), the same masks either way.

Both libraries run in this process on identical env stacks and hyper-parameters, alternating which goes first
each round (ABBA), so that drift in machine load hits both alike. Reported per workload: the median seconds per
``learn`` call of each, split into rollout collection and the rest (mostly ``train``), and the median of the
per-round speed-ups (sb3-contrib time / torchrl_mask time; above 1 means torchrl_mask is faster). The two runs of
a round use one seed and both use their defaults, so they must learn bit-identical parameters;
the benchmark checks that, so it never times two different computations. Beside them, a bound: the envs alone
stepped for the same number of steps (masks read, an allowed action taken, no policy, no buffer), and the speed-up
``learn`` would have if our rollout cost only that while the rest (``train``, the same arithmetic in both
libraries since the parameters are the same) stayed as measured.

Run it as ``torchrl-mask bench learn`` or ``python benchmarks/bench_ppo.py`` (a few minutes); ``--help`` for the
knobs. SB3's default shape: ``--n-steps 2048 --n-epochs 10 --timesteps 16384``. ``--action-spaces`` runs the
action-space grid instead (:mod:`torchrl_mask.bench.spaces`: SB3's unmasked PPO, sb3-contrib and ours),
``--fast-paths`` what each fast path buys (:mod:`torchrl_mask.bench.fastpaths`) and ``--recurrent`` RecurrentPPO
against MaskableRecurrentPPO (:mod:`torchrl_mask.bench.recurrent`). ``--device cuda`` puts both models on the GPU
(the envs stay on the host); there the parameters must agree to
:data:`torchrl_mask.bench.report.CUDA_PARAMETER_ATOL`, and the largest gap is printed under the workload's line.
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable
from typing import Any

import gymnasium as gym
import numpy as np
import torch
from gymnasium import spaces
from gymnasium.wrappers import TimeLimit
from sb3_contrib import MaskablePPO as SB3ContribMaskablePPO
from sb3_contrib.common.envs import InvalidActionEnvDiscrete, InvalidActionEnvMultiDiscrete
from stable_baselines3.common.callbacks import BaseCallback
from stable_baselines3.common.logger import Logger
from stable_baselines3.common.vec_env import DummyVecEnv, SubprocVecEnv, VecEnv

from torchrl_mask import MaskablePPO
from torchrl_mask.bench.report import parameter_gap, parameter_tolerance
from torchrl_mask.torchrl.envs import vec_env_masks

ALGORITHMS: dict[str, type[SB3ContribMaskablePPO]] = {
    "sb3-contrib": SB3ContribMaskablePPO,
    "torchrl_mask": MaskablePPO,
}
# name: (VecEnv class, number of envs, Dict observations, MultiDiscrete actions)
WORKLOADS: dict[str, tuple[type[DummyVecEnv] | type[SubprocVecEnv], int, bool, bool]] = {
    "dict-dummy": (DummyVecEnv, 8, True, False),
    "subproc": (SubprocVecEnv, 4, True, False),
    "multidiscrete": (DummyVecEnv, 8, False, True),
}


class BoardObservation(gym.ObservationWrapper):
    """Turns ``InvalidActionEnvDiscrete``'s Discrete state into a board-game-like Dict observation.

    ``{"state": one-hot float32 (dim,), "board": uint8 (rows, cols)}``; ``action_masks()`` still reaches the
    wrapped env through ``get_wrapper_attr``.
    """

    def __init__(self, env: gym.Env, board: tuple[int, int] = (6, 7)) -> None:
        super().__init__(env)
        self.dim = int(env.observation_space.n)  # type: ignore[attr-defined]
        self.board = board
        self.observation_space = spaces.Dict(
            {
                "state": spaces.Box(0.0, 1.0, (self.dim,), np.float32),
                "board": spaces.Box(0, 255, board, np.uint8),
            }
        )

    def observation(self, observation: Any) -> dict[str, np.ndarray]:
        state = np.zeros(self.dim, np.float32)
        state[int(observation)] = 1.0
        board = np.full(self.board, int(observation) % 3, np.uint8)
        return {"state": state, "board": board}


class NumpyMasks(gym.Wrapper):
    """``action_masks()`` of sb3-contrib's invalid-action test envs computed with numpy: the same mask as their
    own method, at the cost a real env's mask has."""

    def action_masks(self) -> np.ndarray:
        inner: Any = self.env.unwrapped
        mask = np.ones(len(inner.possible_actions), bool)
        mask[np.asarray(inner.invalid_actions, dtype=np.int64)] = False
        return mask


def make_vec_env(workload: str, args: argparse.Namespace) -> VecEnv:
    """The workload's VecEnv: masked envs truncated by ``TimeLimit`` after ``args.episode_steps`` steps.

    :param workload: a key of :data:`WORKLOADS`.
    :param args: the parsed command line (``dim``, ``n_invalid``, ``episode_steps``, ``env_masks``).
    :return: the vectorized env.
    """
    vec_cls, n_envs, dict_obs, multi = WORKLOADS[workload]

    def factory(index: int) -> Callable[[], gym.Env]:
        def make() -> gym.Env:
            # The test envs draw masks from numpy's global generator: seeded here for worker processes (the
            # model's seed reseeds it in this process), so that both libraries see the same envs.
            np.random.seed(1000 + index)
            env: gym.Env
            if multi:
                env = InvalidActionEnvMultiDiscrete(
                    dims=[args.dim // 4] * 4, ep_length=10 * args.episode_steps, n_invalid_actions=args.n_invalid // 2
                )
            else:
                env = InvalidActionEnvDiscrete(
                    dim=args.dim, ep_length=10 * args.episode_steps, n_invalid_actions=args.n_invalid
                )
            env.action_space.seed(1000 + index)  # the env samples its states from its own action space
            if dict_obs:
                env = BoardObservation(env)
            if args.env_masks == "numpy":
                env = NumpyMasks(env)
            return TimeLimit(env, max_episode_steps=args.episode_steps)

        return make

    return vec_cls([factory(i) for i in range(n_envs)])


class _PhaseTimer(BaseCallback):
    """Adds up the wall time spent inside ``collect_rollouts`` (rollout start to rollout end)."""

    def __init__(self) -> None:
        super().__init__()
        self.rollout_s = 0.0
        self._start = 0.0

    def _on_rollout_start(self) -> None:
        self._start = time.perf_counter()

    def _on_rollout_end(self) -> None:
        self.rollout_s += time.perf_counter() - self._start

    def _on_step(self) -> bool:
        return True


def time_learn(
    name: str, workload: str, args: argparse.Namespace
) -> tuple[float, float, float, dict[str, torch.Tensor]]:
    """Build one model on a fresh VecEnv and time one ``learn`` call.

    :param name: a key of :data:`ALGORITHMS`.
    :param workload: a key of :data:`WORKLOADS`.
    :param args: the parsed command line.
    :return: wall seconds in ``learn``, wall seconds of it in ``collect_rollouts``, CPU seconds of this process in
        ``learn`` (less sensitive than wall time to other load on a shared machine; without the workers' time),
        the learned parameters.
    """
    env = make_vec_env(workload, args)
    try:
        model = ALGORITHMS[name](
            "MultiInputPolicy" if WORKLOADS[workload][2] else "MlpPolicy",
            env,
            n_steps=args.n_steps,
            batch_size=args.batch_size,
            n_epochs=args.n_epochs,
            seed=args.seed,
            policy_kwargs={"net_arch": [64, 64]},
            device=args.device,
        )
        model.set_logger(Logger(None, []))  # no /tmp/SB3-<date> folder per learn (the same for both)
        timer = _PhaseTimer()
        start, cpu_start = time.perf_counter(), time.process_time()
        model.learn(args.timesteps, callback=timer)
        total, cpu = time.perf_counter() - start, time.process_time() - cpu_start
    finally:
        env.close()
    return total, timer.rollout_s, cpu, {k: v.detach().clone() for k, v in model.policy.state_dict().items()}


def time_env_alone(workload: str, args: argparse.Namespace) -> float:
    """Wall seconds the workload's envs alone take for one ``learn`` call's steps: each step's masks read and the
    VecEnv stepped with an allowed action, as any masked rollout must, and nothing else (no policy, no buffer).

    :param workload: a key of :data:`WORKLOADS`.
    :param args: the parsed command line.
    :return: seconds for ``args.timesteps`` env steps (rounded up to whole rollouts, as ``learn`` runs them).
    """
    env = make_vec_env(workload, args)
    try:
        masks = vec_env_masks(env)
        assert masks is not None, "the bench envs have an action_masks() method"
        n_env_steps = -(-args.timesteps // (args.n_steps * env.num_envs)) * args.n_steps
        obs = env.reset()
        start = time.perf_counter()
        for _ in range(n_env_steps):
            mask = masks.masks(obs)
            obs = masks.step(_first_allowed(mask, env.action_space))[0]
        return time.perf_counter() - start
    finally:
        env.close()


def _first_allowed(mask: np.ndarray, action_space: spaces.Space) -> np.ndarray:
    """Each env's first allowed choice per sub-action: ``(n_envs,)`` or ``(n_envs, n_sub_actions)``."""
    if isinstance(action_space, spaces.Discrete):
        return mask.argmax(axis=1)
    dims = np.asarray(action_space.nvec)  # type: ignore[attr-defined]
    return np.stack([part.argmax(axis=1) for part in np.split(mask, np.cumsum(dims)[:-1], axis=1)], axis=1)


def _parse(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="torchrl-mask bench learn", description=__doc__.splitlines()[0] if __doc__ else None
    )
    parser.add_argument("--workloads", nargs="+", choices=list(WORKLOADS), default=list(WORKLOADS))
    parser.add_argument(
        "--action-spaces",
        action="store_true",
        help="the action-space grid instead: SB3's unmasked PPO, sb3-contrib and ours (its own knobs: "
        "torchrl-mask bench learn --action-spaces --help)",
    )
    parser.add_argument(
        "--fast-paths",
        action="store_true",
        help="what each fast path buys instead: learn() with one path off against all on (its own knobs: "
        "torchrl-mask bench learn --fast-paths --help)",
    )
    parser.add_argument(
        "--recurrent",
        action="store_true",
        help="sb3-contrib's RecurrentPPO against MaskableRecurrentPPO(use_masking=False) instead (its own knobs: "
        "torchrl-mask bench learn --recurrent --help)",
    )
    parser.add_argument("--rounds", type=int, default=7, help="timed rounds per library (after one warm-up)")
    parser.add_argument("--timesteps", type=int, default=4096, help="total_timesteps of each learn call")
    parser.add_argument("--n-steps", type=int, default=256)
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--n-epochs", type=int, default=4)
    parser.add_argument("--dim", type=int, default=40, help="actions of the masked env")
    parser.add_argument("--n-invalid", type=int, default=25, help="actions masked out at each step")
    parser.add_argument("--episode-steps", type=int, default=50, help="TimeLimit truncation length")
    parser.add_argument("--env-masks", choices=("numpy", "python"), default="numpy", help="how the env builds masks")
    parser.add_argument("--threads", type=int, default=1, help="torch.set_num_threads for both")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--device", default="cpu", help="both models' device: cpu or cuda (default cpu)")
    args = parser.parse_args(argv)
    if args.device.startswith("cuda") and not torch.cuda.is_available():
        parser.error(f"--device {args.device}: no CUDA device is visible here; use --device cpu.")
    return args


def run_workload(workload: str, args: argparse.Namespace) -> bool:
    """Time one workload in paired rounds and print its line.

    :param workload: a key of :data:`WORKLOADS`.
    :param args: the parsed command line.
    :return: False if the two libraries learned different parameters (the timings would compare different work).
    """
    names = list(ALGORITHMS)
    for name in names:  # warm-up: imports, allocator, first-call overheads
        time_learn(name, workload, args)
    totals: dict[str, list[float]] = {name: [] for name in names}
    rollouts: dict[str, list[float]] = {name: [] for name in names}
    cpus: dict[str, list[float]] = {name: [] for name in names}
    gaps: list[float] = []
    for round_ in range(args.rounds):
        params = {}
        for name in names if round_ % 2 == 0 else names[::-1]:
            total, rollout, cpu, params[name] = time_learn(name, workload, args)
            totals[name].append(total)
            rollouts[name].append(rollout)
            cpus[name].append(cpu)
        gaps.append(parameter_gap(params["torchrl_mask"], params["sb3-contrib"]))
        if gaps[-1] > parameter_tolerance(args.device):
            print(
                f"FAIL {workload}: the libraries' parameters differ by {gaps[-1]:.3g}; the timings compare other work."
            )
            return False
    ref, ours = (totals[name] for name in names)
    # The two runs of a round share the machine's load of the moment: their ratio cancels most of it.
    speedups = [r / o for r, o in zip(ref, ours, strict=True)]
    rollout_speedups = [r / o for r, o in zip(*(rollouts[name] for name in names), strict=True)]
    rest = {name: [t - r for t, r in zip(totals[name], rollouts[name], strict=True)] for name in names}
    rest_speedups = [r / o for r, o in zip(*(rest[name] for name in names), strict=True)]
    cpu_speedups = [r / o for r, o in zip(*(cpus[name] for name in names), strict=True)]
    share = statistics.median(rollouts["sb3-contrib"]) / statistics.median(ref)
    # The best learn() could do with a rollout that cost only its envs' own time, and train() as it is.
    env_alone = statistics.median(time_env_alone(workload, args) for _ in range(3))
    bound = statistics.median(ref) / (env_alone + statistics.median(rest["torchrl_mask"]))
    print(
        f"{workload:14s} {statistics.median(ref):8.3f} {statistics.median(ours):8.3f} "
        f"{statistics.median(speedups):7.2f}x ({min(speedups):.2f}-{max(speedups):.2f}) "
        f"{statistics.median(rollout_speedups):8.2f}x {statistics.median(rest_speedups):6.2f}x {share:6.0%} "
        f"{statistics.median(cpu_speedups):6.2f}x {env_alone:7.3f} {bound:6.2f}x"
    )
    if args.device != "cpu":  # on the CPU the check above asks for equal bits
        print(f"{'':14s} learned parameters on {args.device}: at most {max(gaps):.1e} from sb3-contrib's")
    return True


def main(argv: list[str] | None = None) -> int:
    """Run the benchmark and print, per workload, medians and the median paired speed-up (``bench learn``'s
    ``--recurrent``, ``--action-spaces`` and ``--fast-paths`` run the others: :mod:`torchrl_mask.bench.commands`).

    :param argv: command-line arguments (``sys.argv[1:]`` when None).
    :return: 0 on success; 1 if the two libraries learned different parameters.
    """
    args = _parse(argv)
    torch.set_num_threads(args.threads)
    print(
        f"MaskablePPO learn({args.timesteps}): n_steps={args.n_steps}, batch_size={args.batch_size}, "
        f"n_epochs={args.n_epochs}, dim={args.dim}, n_invalid={args.n_invalid}, TimeLimit={args.episode_steps}, "
        f"env masks={args.env_masks}, torch threads={args.threads}, rounds={args.rounds} (+1 warm-up), "
        f"device={args.device}"
    )
    print(
        f"{'workload':14s} {'sb3c s':>8s} {'ours s':>8s} {'speed-up (min-max)':>20s} "
        f"{'rollout':>9s} {'rest':>7s} {'share':>6s} {'cpu':>7s} {'envs s':>7s} {'bound':>7s}"
    )
    ok = all([run_workload(workload, args) for workload in args.workloads])
    print(
        "speed-ups: medians of per-round sb3-contrib time / torchrl_mask time (all of learn, its rollouts, the "
        "rest: train, and this process's CPU time in learn); share: the rollouts' part of sb3-contrib's learn; "
        "envs s: the envs alone for the same steps (masks read, steps taken, nothing else); bound: the speed-up "
        "if our rollout cost only that and the rest stayed as measured"
    )
    return 0 if ok else 1
