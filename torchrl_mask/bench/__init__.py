"""The benchmark harness behind ``torchrl-mask bench``: sb3-contrib and this package side by side, as ratios.

- ``buffers``, ``grid``, ``report``: the rollout-buffer grid (``add``, GAE, ``get``) and its tables;
- ``learn``: end-to-end ``learn()`` against sb3-contrib; ``spaces``: the cost of masking per action space, against
  SB3's unmasked ``PPO``; ``recurrent``: sb3-contrib's ``RecurrentPPO`` against ``MaskableRecurrentPPO`` unmasked;
  ``selfplay``: self-play's speed against the game's own; ``memory``: self-play with an LSTM against without, at
  equal wall time (Leduc hold'em); ``jobshop``: MaskablePPO's training rate on a job-shop instance against the
  env's own random play;
- ``charts``: the benchmark page's charts, drawn from the figures these recorded (``docs/data/`` to ``docs/img/``).

Not imported by ``import torchrl_mask``. May import anything in the library.
"""
