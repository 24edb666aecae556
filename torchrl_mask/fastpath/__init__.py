"""Every place that runs another library's code in our own version, for speed, with the same bits.

- ``stock``: when sb3-contrib's stock policy may run without its wrappers, its network's half of the forward, and
  ``predict``'s draw through the one masked distribution, swapped in for one ``predict`` call (not for speed:
  so that every draw of the package is :mod:`torchrl_mask.distributions`' own);
- ``evaluation``: ``train()``'s ``evaluate_actions`` on the one masked distribution, swapped in for one ``train()``
  call and restored after it;
- ``adam``: ``torch.optim.Adam``'s step for the policy's parameters, swapped in the same way.

Each path is scoped (nothing is patched at import), falls back to the library's own code where its conditions do not
hold, and is listed with what it relies on and what it buys end to end in ``docs/benchmarks.md``.

May import: :mod:`torchrl_mask.rollout` and :mod:`torchrl_mask.distributions`; nothing else from this package.
"""
