"""Where ``get()`` should gather a leaf once per epoch and where per minibatch: ``python benchmarks/bench_gather.py``.

Times both of :mod:`torchrl_mask.rollout.minibatches`' host gathers on one uint8 leaf of 16384 rows, for minibatch
slices of 4 KiB to 4 MiB, and prints microseconds per minibatch (medians of 15 epochs, the two alternating).
The crossover is what :data:`torchrl_mask.rollout.minibatches.PER_EPOCH_SLICE_BYTES` is set from.
"""

from __future__ import annotations

import statistics
import time

import numpy as np
import torch

from torchrl_mask.rollout.minibatches import _HostGather


def main() -> None:
    """Print the table."""
    torch.set_num_threads(1)
    total = 16384
    print("| batch | slice bytes | per epoch, us/minibatch | per minibatch, us/minibatch |")
    print("|---:|---:|---:|---:|")
    for batch in (64, 256):
        for width in (64, 256, 1024, 4096, 16384):
            if width * batch > 4 << 20:
                continue
            leaf = np.random.randint(0, 255, (total, width), dtype=np.uint8)
            times: dict[str, list[float]] = {"epoch": [], "minibatch": []}
            for _ in range(15):
                gather = _HostGather(np.random.permutation(total), [batch] * (total // batch))
                for way in times:
                    start = time.perf_counter()
                    column = gather.per_epoch(leaf, False) if way == "epoch" else gather.per_minibatch(leaf, False)
                    for _rows in column:
                        pass
                    times[way].append((time.perf_counter() - start) * 1e6 / (total // batch))
            epoch, minibatch = (statistics.median(times[way]) for way in ("epoch", "minibatch"))
            print(f"| {batch} | {width * batch} | {epoch:.2f} | {minibatch:.2f} |")


if __name__ == "__main__":
    main()
