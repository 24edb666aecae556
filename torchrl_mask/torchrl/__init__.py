"""The TorchRL side: masked envs and env wrappers, the SB3 policy as a TorchRL policy, worker watching.

- ``envs``: ``masked_gym_env`` and the mask conventions (a gymnasium env as a TorchRL env with a bool
  ``"action_mask"`` entry);
- ``nested``: nested Dict observations for SB3 (``FlattenNestedDict``);
- ``policy``: ``MaskablePolicyModule``, the model's policy as a TorchRL policy module for collectors;
- ``recurrent_policy``: ``MaskableRecurrentPolicyModule``, the LSTM policy's, its states carried in the TensorDict;
- ``workers``: watching collector worker processes, so a dead or silent worker is an error, not a hang.

May import: :mod:`torchrl_mask.rollout`, :mod:`torchrl_mask.distributions`, :mod:`torchrl_mask.fastpath`; never
:mod:`torchrl_mask.algorithms`, :mod:`torchrl_mask.games`, :mod:`torchrl_mask.app` or :mod:`torchrl_mask.bench`.
Turn-based games (PettingZoo) live in :mod:`torchrl_mask.games`.
"""
