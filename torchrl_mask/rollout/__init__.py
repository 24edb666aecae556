"""The rollout: one TensorDict holding a PPO rollout, and its sb3-contrib face.

What lives here, in the order data flows through it:

- ``storage``: the keys and allocation of the rollout's TensorDict (memory, memmap, any device);
- ``masks``: the mask layout of each action space (how big a mask is, how it is read, the checks and their errors);
- ``observations``, ``steps``: checking and writing one VecEnv step (``add``), all of it checked before anything is
  written; ``batches``: the same for a whole TorchRL collector batch (``extend``);
- ``advantage``: GAE, a thin call of TorchRL's ``generalized_advantage_estimate``;
- ``minibatches``: the shuffled minibatch gather into sb3-contrib's namedtuples; ``sb3_arrays``: SB3's numpy names;
- ``tensordict_rollout``: the rollout object that ties these together; ``buffers``: ``MaskableRolloutBuffer`` and
  ``MaskableDictRolloutBuffer`` (sb3-contrib's API); ``recurrent_buffers``: the recurrent buffers, with
  ``sequences``: their minibatches of whole sequences.

May import: torch, numpy, tensordict, TorchRL, SB3 and sb3-contrib; from this package, nothing outside this folder.
"""
