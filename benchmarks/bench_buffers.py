"""sb3-contrib's maskable rollout buffers against torchrl_mask's, side by side: ``python benchmarks/bench_buffers.py``.

The same as ``torchrl-mask bench``; the workloads and the method are in :mod:`torchrl_mask.benchmark`.
"""

from torchrl_mask.benchmark import main

if __name__ == "__main__":
    raise SystemExit(main())
