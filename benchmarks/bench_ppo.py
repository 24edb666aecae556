"""End-to-end ``MaskablePPO.learn`` of sb3-contrib against torchrl_mask: ``python benchmarks/bench_ppo.py``.

The same as ``torchrl-mask bench learn`` (``--workloads``, ``--rounds``, ``--n-steps``, ``--n-epochs``,
``--timesteps``...); the workloads and the method are in :mod:`torchrl_mask.bench.learn`.
"""

from torchrl_mask.bench.learn import main

if __name__ == "__main__":
    raise SystemExit(main())
