"""Per-call costs behind choices in the code: ``python benchmarks/bench_calls.py``.

Prints microseconds per call (best of 5 repeats of 20000 calls, one torch thread) of the two ways to do each of:
float32 masks from a ``(64, 128)`` bool minibatch (``torchrl_mask.rollout.sb3_arrays.float_masks``), and one step's
write of 8 envs into a ``(8, 2048, 8)`` float32 leaf
(``torchrl_mask.rollout.tensordict_rollout.TensorDictRollout.write_step``). Figures go to docs/benchmarks.md, section
"Why the code does it this way".
"""

from __future__ import annotations

import timeit

import numpy as np
import torch


def per_call_us(stmt: str, names: dict[str, object], number: int = 20000) -> float:
    """Best of 5 repeats, microseconds per call."""
    return min(timeit.repeat(stmt, globals=names, number=number, repeat=5)) / number * 1e6


def main() -> None:
    """Print the table."""
    torch.set_num_threads(1)
    masks = torch.rand(64, 128) < 0.5
    leaf = torch.zeros(8, 2048, 8)
    names: dict[str, object] = {
        "np": np,
        "torch": torch,
        "masks": masks,
        "leaf": leaf,
        "target": leaf.numpy(),
        "row": np.ones((8, 8), np.float32),
        "row_t": torch.ones(8, 8),
    }
    rows = [
        ("float32 masks (64, 128), numpy", "torch.from_numpy(masks.numpy().astype(np.float32))"),
        ("float32 masks (64, 128), torch", "masks.to(torch.float32)"),
        ("one step's slot write (8, 8), numpy view", "target[:, 5] = row"),
        ("one step's slot write (8, 8), torch", "leaf[:, 5] = row_t"),
    ]
    print("| what | us per call |")
    print("|---|---:|")
    for label, stmt in rows:
        print(f"| {label} | {per_call_us(stmt, names):.2f} |")


if __name__ == "__main__":
    main()
