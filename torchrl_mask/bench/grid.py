"""The benchmark's grid: its cells, the inputs each cell feeds both libraries, and the variants of our buffer.

A cell is one rollout shape and content: ``n_steps`` x ``n_envs``, a pattern of episode ends, an observation
space and an action space (its mask). The axes:

============  ==========================================================================================
axis          values
============  ==========================================================================================
``n_steps``   128, 2048 (SB3's default)
``n_envs``    1, 8, 64
``dones``     ``none`` (no episode ends), ``uniform`` (each step ends an episode with probability 1%),
              ``mixed`` (env 0 runs one long episode while the others end every 16-24 steps; with one env,
              the first half of the rollout is one episode and the second half ends every 16-24 steps)
``obs``       ``image``: Dict(uint8 image 3x64x64, float32 vector 8), minibatches of 256;
              ``vector``: Dict(three float32 vectors of 8), minibatches of 64
``mask``      ``discrete``: Discrete(32); ``multidiscrete``: MultiDiscrete([5, 5, 5, 5]);
              ``multibinary``: MultiBinary(16)
============  ==========================================================================================

:data:`GRIDS` holds three selections: ``full`` (every combination, 108 cells: an hour or more, and several GiB
for the 2048 x 64 image cells), ``default`` (every axis value at least once, SB3's default shape for both
observation kinds, and the known worst cases: the smallest rollouts, where fixed costs per call dominate, and
the mixed episode ends, where an estimator that pads trajectories is slowest), and ``quick`` (two small cells,
for the smoke test).

The inputs are what sb3-contrib's ``MaskablePPO.collect_rollouts`` passes: observations as a dict of numpy
arrays, actions as int64 numpy ``(n_envs, action_dim)``, rewards float32 numpy, episode starts as numpy bool
(the previous step's dones), values ``(n_envs, 1)`` and log-probs ``(n_envs,)`` as float32 tensors on the
buffer's device, masks as numpy bool ``(n_envs, mask_dims)`` (``get_action_masks`` stacks each env's); then
``compute_returns_and_advantage(last_values tensor, dones numpy)``.

A :class:`Variant` is one set of keyword arguments for our buffers' constructor; each variant is timed against
the same sb3-contrib run. A variant the installed buffers do not accept is an error, unless it is named in the
explicit skip list.
"""

from __future__ import annotations

import dataclasses
import itertools
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import torch
from gymnasium import spaces
from sb3_contrib.common.maskable import buffers as sb3c_buffers

from torchrl_mask.rollout import buffers as ours_buffers
from torchrl_mask.rollout.masks import mask_spec

__all__ = [
    "AXES",
    "GRIDS",
    "LIBRARY",
    "VARIANTS",
    "Cell",
    "Inputs",
    "Variant",
    "done_pattern",
    "grid",
    "make_buffer",
    "make_inputs",
]

LIBRARY = "sb3-contrib"  # the reference every variant is timed against

OBSERVATION_SPACES: dict[str, spaces.Dict] = {
    "image": spaces.Dict(
        {"image": spaces.Box(0, 255, (3, 64, 64), np.uint8), "vec": spaces.Box(-1, 1, (8,), np.float32)}
    ),
    "vector": spaces.Dict({key: spaces.Box(-1, 1, (8,), np.float32) for key in ("position", "velocity", "goal")}),
}
ACTION_SPACES: dict[str, spaces.Space] = {
    "discrete": spaces.Discrete(32),
    "multidiscrete": spaces.MultiDiscrete([5, 5, 5, 5]),
    "multibinary": spaces.MultiBinary(16),
}
BATCH_SIZES = {"image": 256, "vector": 64}
N_EPOCHS = 10
AXES: dict[str, tuple[Any, ...]] = {
    "n_steps": (128, 2048),
    "n_envs": (1, 8, 64),
    "dones": ("none", "uniform", "mixed"),
    "obs": tuple(OBSERVATION_SPACES),
    "mask": tuple(ACTION_SPACES),
}


@dataclasses.dataclass(frozen=True)
class Cell:
    """One rollout of the grid.

    :param n_steps: steps per env (``buffer_size``).
    :param n_envs: parallel envs.
    :param dones: episode-end pattern: ``"none"``, ``"uniform"`` or ``"mixed"``.
    :param obs: observation kind: ``"image"`` or ``"vector"``.
    :param mask: action space kind: ``"discrete"``, ``"multidiscrete"`` or ``"multibinary"``.
    """

    n_steps: int
    n_envs: int
    dones: str
    obs: str
    mask: str

    @property
    def key(self) -> str:
        """``"<n_steps>x<n_envs>-<dones>-<obs>-<mask>"``, e.g. ``"2048x8-uniform-vector-multidiscrete"``."""
        return f"{self.n_steps}x{self.n_envs}-{self.dones}-{self.obs}-{self.mask}"

    @classmethod
    def from_key(cls, key: str) -> Cell:
        """The cell of a :attr:`key`.

        :param key: as :attr:`key` writes it.
        :return: the cell.
        :raises ValueError: not a key of a cell on the grid's axes.
        """
        try:
            shape, dones, obs, mask = key.split("-")
            n_steps, n_envs = (int(n) for n in shape.split("x"))
        except ValueError:
            form = "<n_steps>x<n_envs>-<dones>-<obs>-<mask>"
            raise ValueError(f"{key!r} is not a cell key; write it as {form}.") from None
        cell = cls(n_steps, n_envs, dones, obs, mask)
        for axis in ("dones", "obs", "mask"):
            if getattr(cell, axis) not in AXES[axis]:
                raise ValueError(f"cell {key!r}: {axis} must be one of {AXES[axis]}.")
        return cell

    @property
    def batch_size(self) -> int:
        """Minibatch rows: 256 for images, 64 for vectors."""
        return BATCH_SIZES[self.obs]

    @property
    def observation_space(self) -> spaces.Dict:
        """The cell's Dict observation space."""
        return OBSERVATION_SPACES[self.obs]

    @property
    def action_space(self) -> spaces.Space:
        """The cell's maskable action space."""
        return ACTION_SPACES[self.mask]


def _cells(*rows: tuple[int, int, str, str, str]) -> tuple[Cell, ...]:
    return tuple(Cell(*row) for row in rows)


GRIDS: dict[str, tuple[Cell, ...]] = {
    "quick": _cells((128, 1, "mixed", "vector", "multibinary"), (128, 8, "uniform", "image", "discrete")),
    "default": _cells(
        (2048, 8, "uniform", "vector", "multidiscrete"),  # SB3's default shape, small vector observations
        (2048, 8, "uniform", "image", "discrete"),  # SB3's default shape, image observations
        (2048, 8, "mixed", "vector", "discrete"),  # long and short episodes side by side
        (2048, 64, "mixed", "vector", "multibinary"),  # the largest rollout of vectors, mixed ends
        (2048, 64, "none", "vector", "multidiscrete"),  # the largest, no episode end at all
        (2048, 1, "mixed", "vector", "multidiscrete"),  # one env: the mixed pattern in time
        (128, 1, "none", "vector", "discrete"),  # the smallest rollout: fixed costs per call dominate
        (128, 1, "uniform", "image", "multibinary"),  # the smallest image rollout
        (128, 8, "mixed", "image", "multidiscrete"),
        (128, 64, "uniform", "vector", "multibinary"),  # short rollout, many envs
        (128, 64, "mixed", "image", "discrete"),  # many envs, mixed ends, images
    ),
    "full": tuple(Cell(*values) for values in itertools.product(*AXES.values())),
}


def grid(name: str, **only: Sequence[Any] | None) -> list[Cell]:
    """The cells of a grid, optionally restricted on some axes.

    :param name: a key of :data:`GRIDS`.
    :param only: per axis of :data:`AXES`, the values to keep (None keeps all).
    :return: the cells, in the grid's order.
    :raises ValueError: an unknown grid or axis, or a restriction that leaves no cell.
    """
    if name not in GRIDS:
        raise ValueError(f"unknown grid {name!r}; choose one of {sorted(GRIDS)}.")
    unknown = set(only) - set(AXES)
    if unknown:
        raise ValueError(f"unknown axes {sorted(unknown)}; the axes are {list(AXES)}.")
    cells = [cell for cell in GRIDS[name] if all(v is None or getattr(cell, a) in v for a, v in only.items())]
    if not cells:
        kept = {axis: list(values) for axis, values in only.items() if values is not None}
        raise ValueError(f"no cell of the {name!r} grid has {kept}; try --grid full or fewer restrictions.")
    return cells


@dataclasses.dataclass(frozen=True)
class Variant:
    """One configuration of our buffers, timed against sb3-contrib.

    :param name: short name for the tables and the command line.
    :param kwargs: keyword arguments for our buffers' constructor.
    :param about: one line for the legend.
    """

    name: str
    kwargs: Mapping[str, Any]
    about: str


# Extend by adding a line; a variant the installed buffers reject is an error unless it is listed in --skip.
VARIANTS: dict[str, Variant] = {
    v.name: v
    for v in (
        Variant("default", {}, "our buffers with their defaults"),
        Variant("no-mask-check", {"check_masks": False}, "add() does not check that each mask row allows an action"),
        Variant("no-value-check", {"check_values": False}, "add() does not check the values it stores"),
    )
}


def make_buffer(library: str, cell: Cell, device: str, kwargs: Mapping[str, Any] | None = None) -> Any:
    """A rollout buffer of one library for the cell (gamma 0.99, GAE lambda 0.95).

    :param library: :data:`LIBRARY` for sb3-contrib's, anything else for ours (a variant's name).
    :param cell: the cell.
    :param device: the buffer's device.
    :param kwargs: extra keyword arguments for our constructor.
    :return: a ``MaskableDictRolloutBuffer`` of that library.
    """
    cls = sb3c_buffers.MaskableDictRolloutBuffer if library == LIBRARY else ours_buffers.MaskableDictRolloutBuffer
    extra = {} if library == LIBRARY else dict(kwargs or {})
    return cls(cell.n_steps, cell.observation_space, cell.action_space, device, 0.95, 0.99, cell.n_envs, **extra)


@dataclasses.dataclass
class Inputs:
    """One rollout's ``add`` arguments and the arguments of ``compute_returns_and_advantage``.

    :param steps: per step, the positional ``add`` arguments ``(obs, actions, rewards, episode_starts, values,
        log_probs)`` and the ``action_masks``.
    :param last_values: ``(n_envs, 1)`` float32 tensor.
    :param dones: ``(n_envs,)`` numpy bool: whether the last step ended an episode.
    """

    steps: list[tuple[tuple[Any, ...], np.ndarray]]
    last_values: torch.Tensor
    dones: np.ndarray


def done_pattern(pattern: str, n_steps: int, n_envs: int, rng: np.random.Generator) -> np.ndarray:
    """Which steps end an episode, ``(n_steps, n_envs)`` bool (see the module docstring for the patterns).

    :param pattern: ``"none"``, ``"uniform"`` or ``"mixed"``.
    :param n_steps: steps per env.
    :param n_envs: envs.
    :param rng: the random source.
    :return: the dones.
    """
    if pattern == "none":
        return np.zeros((n_steps, n_envs), dtype=bool)
    if pattern == "uniform":
        return rng.random((n_steps, n_envs)) < 0.01
    if pattern != "mixed":
        raise ValueError(f"unknown done pattern {pattern!r}; choose one of {AXES['dones']}.")
    dones = np.zeros((n_steps, n_envs), dtype=bool)
    short = range(1, n_envs) if n_envs > 1 else [0]
    start = 0 if n_envs > 1 else n_steps // 2
    for env in short:
        length = int(rng.integers(16, 25))
        dones[start + int(rng.integers(0, length)) :: length, env] = True
    return dones


def make_inputs(cell: Cell, device: str, seed: int = 0, distinct_observations: int = 8) -> Inputs:
    """Pre-generate one rollout of inputs, as MaskablePPO passes them (see the module docstring).

    Observations cycle through a few distinct arrays (an env hands over a fresh array each step, warm in the
    cache), so that inputs for the large cells do not double the memory of the run.

    :param cell: the cell.
    :param device: where the value and log-prob tensors live (the policy's device).
    :param seed: the random seed.
    :param distinct_observations: how many distinct observation dicts to cycle through.
    :return: the inputs.
    """
    rng = np.random.default_rng(seed)
    n = cell.n_envs
    groups = mask_spec(cell.action_space).groups
    shapes = {key: (n, *(space.shape or ())) for key, space in cell.observation_space.spaces.items()}
    observations = [
        {
            key: rng.integers(0, 256, shape).astype(np.uint8)
            if cell.observation_space[key].dtype == np.uint8
            else rng.uniform(-1, 1, shape).astype(np.float32)
            for key, shape in shapes.items()
        }
        for _ in range(min(distinct_observations, cell.n_steps))
    ]
    dones = done_pattern(cell.dones, cell.n_steps, n, rng)
    starts = np.concatenate([dones[-1:], dones[:-1]])  # as if the previous rollout ended like this one
    width = 1 if isinstance(cell.action_space, spaces.Discrete) else len(groups)
    high = np.asarray(groups).reshape(1, -1) if width > 1 else groups[0]
    steps = []
    offsets = np.cumsum((0, *groups[:-1]))
    for t in range(cell.n_steps):
        action = rng.integers(0, high, (n, width), dtype=np.int64)
        masks = rng.random((n, sum(groups))) < 0.7
        np.put_along_axis(masks, offsets + action, True, axis=1)  # the action taken is allowed by its mask
        args = (
            observations[t % len(observations)],
            action,
            rng.standard_normal(n).astype(np.float32),
            starts[t].copy(),
            torch.as_tensor(rng.standard_normal((n, 1)), dtype=torch.float32, device=device),
            torch.as_tensor(rng.standard_normal(n), dtype=torch.float32, device=device),
        )
        steps.append((args, masks))
    last_values = torch.as_tensor(rng.standard_normal((n, 1)), dtype=torch.float32, device=device)
    return Inputs(steps, last_values, dones[-1].copy())
