"""sb3-contrib's maskable rollout buffers against torchrl_mask's over a grid: ``python benchmarks/bench_buffers.py``.

The same as ``torchrl-mask bench`` (``--grid quick|default|full``, axis filters, variants, ``--update
docs/benchmarks.md``); the grid is in :mod:`torchrl_mask.bench.grid`, the method in
:mod:`torchrl_mask.bench.buffers`.
"""

from torchrl_mask.bench.buffers import main

if __name__ == "__main__":
    raise SystemExit(main())
