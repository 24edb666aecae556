"""The algorithms: ``MaskablePPO`` and ``MaskableRecurrentPPO``, and the sources of their rollouts.

- ``ppo``: sb3-contrib's ``MaskablePPO`` with this package's rollout buffer (``rollout_buffer_class``), and
  ``collect_rollouts`` choosing the source;
- ``vecenv_source``: the rollout from an SB3 VecEnv (the default path);
- ``collector_source``: the rollout from a TorchRL collector batch (a collector's policy module may name its own
  reader, as self-play's does); ``collectors``: ``learn_from_collector``;
- ``recurrent_ppo``, ``recurrent_policies``: sb3-contrib's ``RecurrentPPO`` with action masks;
  ``recurrent_collector_source``: its rollout from a TorchRL collector, the LSTM states kept;
- ``recurrent_evaluation``: a masked ``evaluate_policy`` and ``EvalCallback`` that keep the LSTM state;
- ``predict_masks``: the one mask check of both models' ``predict`` (where the masks are read, what is refused);
- ``minibatches``: both models' guard against a last minibatch of one row (NaN parameters), also the CLI's.

May import: :mod:`torchrl_mask.rollout`, :mod:`torchrl_mask.distributions`, :mod:`torchrl_mask.fastpath`,
:mod:`torchrl_mask.torchrl`; never :mod:`torchrl_mask.games`, :mod:`torchrl_mask.app` or :mod:`torchrl_mask.bench`.
"""
