"""The cost of masking: learn() of SB3's unmasked PPO, sb3-contrib's MaskablePPO and ours, per action space.

Run as ``torchrl-mask bench learn --action-spaces`` (``--help`` for the knobs). Each cell is one action space
(Discrete {8, 4096}, MultiDiscrete {[5,5,5], [34]*10, [2,7,50,3]}, MultiBinary {16, 339}), one minibatch size
({64, 256}) and one observation kind (a 64-float ``Box``, or a ``Dict`` of that and a ``MultiBinary(8)``), on 16
``DummyVecEnv`` envs, ``n_steps=64``, 4 epochs, ``MlpPolicy``/``MultiInputPolicy`` with SB3's default network.
The env's mask forbids every third entry of the mask row (shifted each step), so every sub-action keeps a choice.

Each round times the three ``learn`` calls back to back in one process, in an order that rotates from round to
round; a ratio is the median over rounds of that round's ratio, which cancels most of a shared machine's drift.
Each ``learn`` starts after a ``gc.collect()``, so that none pays for the garbage of the one before it.
Every round checks that sb3-contrib and torchrl_mask learned the same parameters (``torch.equal``), so the
timings never compare different work. Columns: the three medians in seconds, the cost of masking (ours / PPO,
lower is better, 1.0 means masks cost nothing), its floor (PPO's time plus :func:`forced_extra_seconds`, the work
masking with sb3-contrib's bits forces beyond unmasked PPO, timed alone, over PPO's time), the speed-up over
sb3-contrib (sb3-contrib / ours) and how far ours is above the floor (ours / floor, 1.0 is at it). The forced
work is timed in every round, right after that round's learn calls, and both floor columns are medians of
per-round ratios, so that a drift of the machine moves the floor with the times it is compared to.
``--device cuda`` runs the three learners on the GPU; the forced work is CPU work, so there the floor columns
read ``-``, and sb3-contrib's and our parameters must agree to :data:`torchrl_mask.bench.report.CUDA_PARAMETER_ATOL`.
"""

from __future__ import annotations

import argparse
import gc
import itertools
import statistics
import time
from functools import partial
from typing import Any

import gymnasium as gym
import numpy as np
import torch
from gymnasium import spaces
from sb3_contrib import MaskablePPO as SB3ContribMaskablePPO
from stable_baselines3 import PPO
from stable_baselines3.common.distributions import make_proba_distribution
from stable_baselines3.common.logger import Logger
from stable_baselines3.common.vec_env import DummyVecEnv
from torch import nn

from torchrl_mask import MaskablePPO
from torchrl_mask.bench.report import parameter_gap, parameter_tolerance
from torchrl_mask.distributions import MaskedCategoricals
from torchrl_mask.rollout.masks import mask_spec

__all__ = ["ACTION_SPACES", "MaskedSpaceEnv", "forced_extra_seconds", "main", "time_cell"]

ACTION_SPACES: dict[str, spaces.Space] = {
    "Discrete(8)": spaces.Discrete(8),
    "Discrete(4096)": spaces.Discrete(4096),
    "MultiDiscrete([5,5,5])": spaces.MultiDiscrete([5, 5, 5]),
    "MultiDiscrete([34]*10)": spaces.MultiDiscrete([34] * 10),
    "MultiDiscrete([2,7,50,3])": spaces.MultiDiscrete([2, 7, 50, 3]),
    "MultiBinary(16)": spaces.MultiBinary(16),
    "MultiBinary(339)": spaces.MultiBinary(339),
}
ALGORITHMS: dict[str, Any] = {"PPO": PPO, "sb3-contrib": SB3ContribMaskablePPO, "ours": MaskablePPO}


class MaskedSpaceEnv(gym.Env):
    """Random observations, a reward for the first sub-action's parity, episodes of 32 steps, and a mask.

    :param action_space: the action space.
    :param dict_obs: observe a ``Dict`` (``"state"``: 64 floats, ``"flags"``: ``MultiBinary(8)``) instead of the
        64 floats alone.
    :param seed: the seed of the env's observations.
    """

    def __init__(self, action_space: spaces.Space, dict_obs: bool, seed: int) -> None:
        self.action_space = action_space
        state = spaces.Box(-1.0, 1.0, (64,), np.float32)
        self.observation_space = spaces.Dict({"state": state, "flags": spaces.MultiBinary(8)}) if dict_obs else state
        self._rng = np.random.default_rng(seed)
        self._width = mask_spec(action_space).size
        self._t = 0

    def _obs(self) -> Any:
        state = self._rng.uniform(-1, 1, 64).astype(np.float32)
        if isinstance(self.observation_space, spaces.Dict):
            return {"state": state, "flags": self._rng.integers(0, 2, 8).astype(np.int8)}
        return state

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[Any, dict]:
        super().reset(seed=seed)
        self._t = 0
        return self._obs(), {}

    def step(self, action: Any) -> tuple[Any, float, bool, bool, dict]:
        self._t += 1
        reward = float(int(np.asarray(action).flat[0]) % 2)
        return self._obs(), reward, self._t >= 32, False, {}

    def action_masks(self) -> np.ndarray:
        """Every third entry of the mask row forbidden, shifted by the step count: ``(mask_width,)`` bool."""
        return (np.arange(self._width) + self._t) % 3 != 2


def time_learn(name: str, space: str, dict_obs: bool, batch_size: int, args: argparse.Namespace) -> tuple[float, Any]:
    """Seconds of one ``learn(args.timesteps)`` of a fresh model, and its learned parameters.

    :param name: a key of :data:`ALGORITHMS`.
    :param space: a key of :data:`ACTION_SPACES`.
    :param dict_obs: Dict observations (``MultiInputPolicy``).
    :param batch_size: the minibatch size.
    :param args: the parsed command line.
    """
    env = DummyVecEnv([partial(MaskedSpaceEnv, ACTION_SPACES[space], dict_obs, i) for i in range(args.n_envs)])
    model = ALGORITHMS[name](
        "MultiInputPolicy" if dict_obs else "MlpPolicy",
        env,
        n_steps=args.n_steps,
        batch_size=batch_size,
        n_epochs=args.n_epochs,
        seed=args.seed,
        device=args.device,
    )
    model.set_logger(Logger(None, []))
    # Each learn starts with nothing left to collect: a full collection of this process (torch, TorchRL and Ray
    # imported) can outlast a small cell's learn, and without this one learner would pay for the objects the one
    # before it left (sb3-contrib's loops allocate the most).
    gc.collect()
    start = time.perf_counter()
    model.learn(args.timesteps)
    seconds = time.perf_counter() - start
    env.close()
    return seconds, {k: v.detach().clone() for k, v in model.policy.state_dict().items()}


def _distribution_extra_seconds(space: spaces.Space, rows: int, grad: bool, repeat: int) -> float:
    """What one distribution step of ours on ``rows`` rows (under a mask read from numpy) costs beyond SB3's
    unmasked distribution's: the median of ``repeat`` runs of ours minus the median of ``repeat`` runs of SB3's.
    Each is timed in a loop of its own, as each runs in its own ``learn`` (alternating them would have each work
    in the caches the other left, which slows the small unmasked one most). Sampling without gradients, or
    (``grad``) log-prob, entropy and their backward as ``train()`` asks for them."""
    width = mask_spec(space).size
    mask = np.ones((rows, width), dtype=bool)
    mask[:, 2::3] = False
    ours = MaskedCategoricals(mask_spec(space).groups)
    ppo = make_proba_distribution(space)
    # SB3's MultiBinary is a Bernoulli per sub-action: one logit each, where the masked distribution has two.
    n_logits = int(np.prod(space.shape or ())) if isinstance(space, spaces.MultiBinary) else width
    logits = {True: torch.randn(rows, width), False: torch.randn(rows, n_logits)}
    actions = torch.zeros(rows, len(mask_spec(space).groups), dtype=torch.long)
    ppo_actions = actions[:, 0] if isinstance(space, spaces.Discrete) else actions.float()

    def step(masked: bool) -> float:
        x = logits[masked].clone().requires_grad_(grad)
        start = time.perf_counter()
        with torch.set_grad_enabled(grad):
            if masked:
                bool_mask = torch.as_tensor(mask)
                log_pmf = ours.log_pmf(x, bool_mask)
                out = ours.log_prob(log_pmf, actions) if grad else ours.sample_and_log_prob(log_pmf)[1]
                out = out + ours.entropy(log_pmf, bool_mask) if grad else out
            else:
                dist = ppo.proba_distribution(x)
                out = dist.log_prob(ppo_actions if grad else dist.sample())
                entropy = dist.entropy()
                out = out + entropy if grad and entropy is not None else out
            if grad:
                out.sum().backward()
        return time.perf_counter() - start

    medians = []
    for masked in (True, False):
        step(masked)  # warm-up
        medians.append(statistics.median(step(masked) for _ in range(repeat)))
    return medians[0] - medians[1]


def _mask_read_seconds(space: spaces.Space, n_envs: int, repeat: int) -> float:
    """Seconds of reading one step's masks from ``n_envs`` envs, the least any masked learner does: each env's
    ``action_masks()`` and one ``np.stack`` into ``(n_envs, mask_width)``; median of ``repeat``."""
    envs = [MaskedSpaceEnv(space, False, seed) for seed in range(n_envs)]
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        np.stack([env.action_masks() for env in envs])
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def _head_extra_seconds(space: spaces.Space, rows: int, grad: bool, repeat: int) -> float:
    """What sb3-contrib's wider action head costs beyond PPO's on ``rows`` rows: for ``MultiBinary(n)`` its
    masked distribution is a two-way categorical per bit, so the policy's last layer is ``Linear(64, 2n)`` where
    PPO's Bernoulli needs ``Linear(64, n)`` (64: SB3's default latent width); 0.0 for the other spaces, whose
    heads are the same. Forward only, or (``grad``) a minibatch's share as SB3's ``train()`` runs it: gradients
    zeroed, forward, backward, the gradient norm clipped and SB3's Adam step (``eps=1e-5``) over the head's
    weights; median of ``repeat`` each."""
    if not isinstance(space, spaces.MultiBinary):
        return 0.0
    n = int(np.prod(space.shape or ()))
    medians = []
    for width in (2 * n, n):
        head, latent = nn.Linear(64, width), torch.randn(rows, 64, requires_grad=grad)
        optimizer = torch.optim.Adam(head.parameters(), eps=1e-5)
        times = []
        for _ in range(repeat + 1):  # the first is a warm-up
            start = time.perf_counter()
            with torch.set_grad_enabled(grad):
                if grad:
                    optimizer.zero_grad()
                out = head(latent)
                if grad:
                    out.sum().backward()
                    nn.utils.clip_grad_norm_(head.parameters(), 0.5)
                    optimizer.step()
            times.append(time.perf_counter() - start)
        medians.append(statistics.median(times[1:]))
    return medians[0] - medians[1]


def _mask_storage_seconds(
    space: spaces.Space, args: argparse.Namespace, batch_size: int, repeat: int
) -> tuple[float, float]:
    """Seconds of keeping the masks for ``train()``, the least any masked learner does: storing one step's
    ``(n_envs, mask_width)`` bool masks in a rollout's array, and gathering a minibatch's ``(batch_size,
    mask_width)`` rows by index from it as a tensor; median of ``repeat`` each. Unmasked PPO does neither.

    :return: (seconds a step, seconds a minibatch).
    """
    width = mask_spec(space).size
    rollout = np.zeros((args.n_steps, args.n_envs, width), dtype=bool)
    step = np.ones((args.n_envs, width), dtype=bool)
    flat = torch.from_numpy(rollout.reshape(-1, width))
    index = torch.randperm(len(flat))[:batch_size]
    stores, gathers = [], []
    for i in range(repeat + 1):  # the first is a warm-up
        start = time.perf_counter()
        rollout[i % args.n_steps] = step
        stores.append(time.perf_counter() - start)
        start = time.perf_counter()
        flat[index]
        gathers.append(time.perf_counter() - start)
    return statistics.median(stores[1:]), statistics.median(gathers[1:])


def forced_extra_seconds(space: str, batch_size: int, args: argparse.Namespace) -> float:
    """What masking with sb3-contrib's bits forces beyond unmasked PPO in one ``learn``, each part timed alone on
    the cell's shapes and multiplied by how often ``learn`` runs it:

    - per rollout step, reading the envs' masks (:func:`_mask_read_seconds`) and storing them
      (:func:`_mask_storage_seconds`), our masked distribution's extra time over SB3's unmasked one on
      ``(n_envs, width)`` (sampling) and the wider action head's forward (:func:`_head_extra_seconds`,
      MultiBinary only);
    - per minibatch, gathering its masks, the distribution's extra time on ``batch_size`` rows, forward and
      backward, and the head's extra forward, backward, gradient clipping and Adam step.

    :param space: a key of :data:`ACTION_SPACES`.
    :param batch_size: the minibatch size.
    :param args: the parsed command line.
    """
    action_space = ACTION_SPACES[space]
    updates = -(-args.timesteps // (args.n_steps * args.n_envs))
    steps = updates * args.n_steps
    minibatches = updates * args.n_epochs * -(-args.n_steps * args.n_envs // batch_size)
    store, gather = _mask_storage_seconds(action_space, args, batch_size, 101)
    step = _distribution_extra_seconds(action_space, args.n_envs, False, 101)
    step += _mask_read_seconds(action_space, args.n_envs, 101) + store
    step += _head_extra_seconds(action_space, args.n_envs, False, 101)
    minibatch = _distribution_extra_seconds(action_space, batch_size, True, 41) + gather
    minibatch += _head_extra_seconds(action_space, batch_size, True, 41)
    return steps * step + minibatches * minibatch


def time_cell(space: str, dict_obs: bool, batch_size: int, args: argparse.Namespace) -> dict[str, float] | None:
    """Time one cell in paired rounds. Each round times the three ``learn`` calls and then the floor's forced
    work (:func:`forced_extra_seconds`), so that the floor pairs with the learn times of its own round, as the
    ratios between the learners do.

    :return: the median seconds of each algorithm, ``cost`` (median of ours / PPO), ``speedup`` (median of
        sb3-contrib / ours), ``floor`` (median of (PPO + forced work) / PPO) and ``above`` (median of
        ours / (PPO + forced work)); None if sb3-contrib and ours learned different parameters.
    """
    names = list(ALGORITHMS)
    for name in names:  # warm-up
        time_learn(name, space, dict_obs, batch_size, args)
    seconds: dict[str, list[float]] = {name: [] for name in names}
    floors: list[float] = []
    gaps: list[float] = []
    cpu = args.device == "cpu"
    for round_ in range(args.rounds):
        params = {}
        for name in names[round_ % 3 :] + names[: round_ % 3]:
            elapsed, params[name] = time_learn(name, space, dict_obs, batch_size, args)
            seconds[name].append(elapsed)
        gaps.append(parameter_gap(params["ours"], params["sb3-contrib"]))
        if gaps[-1] > parameter_tolerance(args.device):
            return None
        # The forced work is timed with CPU tensors: on another device the floor is the CPU's (no floor columns).
        floors.append(seconds["PPO"][-1] + (forced_extra_seconds(space, batch_size, args) if cpu else float("nan")))
    result = {name: statistics.median(values) for name, values in seconds.items()}
    result["cost"] = statistics.median(o / p for o, p in zip(seconds["ours"], seconds["PPO"], strict=True))
    result["speedup"] = statistics.median(r / o for r, o in zip(seconds["sb3-contrib"], seconds["ours"], strict=True))
    result["floor"] = statistics.median(f / p for f, p in zip(floors, seconds["PPO"], strict=True))
    result["above"] = statistics.median(o / f for o, f in zip(seconds["ours"], floors, strict=True))
    result["gap"] = max(gaps)
    return result


def _parse(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="torchrl-mask bench learn --action-spaces", description=__doc__.splitlines()[0] if __doc__ else None
    )
    parser.add_argument("--spaces", nargs="+", choices=list(ACTION_SPACES), default=list(ACTION_SPACES))
    parser.add_argument("--batch-sizes", nargs="+", type=int, default=[64, 256])
    parser.add_argument("--observations", nargs="+", choices=("box", "dict"), default=["box", "dict"])
    parser.add_argument("--rounds", type=int, default=3, help="timed rounds per cell (after one warm-up)")
    parser.add_argument("--timesteps", type=int, default=2048, help="total_timesteps of each learn call")
    parser.add_argument("--n-envs", type=int, default=16)
    parser.add_argument("--n-steps", type=int, default=64)
    parser.add_argument("--n-epochs", type=int, default=4)
    parser.add_argument("--threads", type=int, default=1, help="torch.set_num_threads")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--device", default="cpu", help="the three models' device: cpu or cuda (default cpu)")
    args = parser.parse_args(argv)
    if args.device.startswith("cuda") and not torch.cuda.is_available():
        parser.error(f"--device {args.device}: no CUDA device is visible here; use --device cpu.")
    return args


def _shown(value: float, unit: str) -> str:
    """A floor column: the value, or ``-`` where no floor was timed (``--device cuda``)."""
    return "-" if value != value else f"{value:.2f}{unit}"


def main(argv: list[str] | None = None) -> int:
    """Run the grid and print a Markdown table, one row per cell, the worst cost of masking last.

    :param argv: command-line arguments (``sys.argv[1:]`` when None).
    :return: 0 on success; 1 if sb3-contrib and ours learned different parameters in some cell.
    """
    args = _parse(argv)
    torch.set_num_threads(args.threads)
    print(
        f"learn({args.timesteps}): {args.n_envs} DummyVecEnv envs, n_steps={args.n_steps}, n_epochs={args.n_epochs}, "
        f"torch threads={args.threads}, rounds={args.rounds} (+1 warm-up), device={args.device}\n"
    )
    print(
        "| action space | obs | batch | PPO, no masks (s) | sb3-contrib (s) | ours (s) | ours / PPO | floor / PPO | "
        "sb3-contrib / ours | ours / floor |\n|---|---|---:|---:|---:|---:|---:|---:|---:|---:|"
    )
    ok, costs, above, gaps = True, [], [], []
    for space, obs, batch_size in itertools.product(args.spaces, args.observations, args.batch_sizes):
        cell = time_cell(space, obs == "dict", batch_size, args)
        if cell is None:
            print(f"| {space} | {obs} | {batch_size} | FAIL: sb3-contrib and ours learned different parameters |")
            ok = False
            continue
        costs.append((cell["cost"], space, obs, batch_size))
        above.append((cell["above"], space, obs, batch_size))
        gaps.append(cell["gap"])
        print(
            f"| {space} | {obs} | {batch_size} | {cell['PPO']:.3f} | {cell['sb3-contrib']:.3f} | {cell['ours']:.3f} "
            f"| {cell['cost']:.2f}x | {_shown(cell['floor'], 'x')} | {cell['speedup']:.2f}x "
            f"| {_shown(cell['above'], '')} |",
            flush=True,
        )
    if costs:
        worst = max(costs)
        print(f"\nworst cost of masking: {worst[0]:.2f}x ({worst[1]}, {worst[2]}, batch {worst[3]})")
        highest = max(above)
        if args.device == "cpu":
            print(f"furthest above its floor: {highest[0]:.2f} ({highest[1]}, {highest[2]}, batch {highest[3]})")
        else:
            print(f"learned parameters on {args.device}: at most {max(gaps):.1e} from sb3-contrib's")
    return 0 if ok else 1
