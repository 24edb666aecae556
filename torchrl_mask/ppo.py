"""MaskablePPO: sb3-contrib's class, with the TensorDict rollout buffers by default.

Change one import, ``from sb3_contrib import MaskablePPO`` to ``from torchrl_mask import MaskablePPO``; the
constructor, ``learn``, ``predict(..., action_masks=...)``, ``save``/``load``, callbacks and policies are
sb3-contrib's own. Under one seed it learns the same parameters.
"""

from __future__ import annotations

from gymnasium import spaces
from sb3_contrib import MaskablePPO as _SB3ContribMaskablePPO
from sb3_contrib.common.maskable import buffers as sb3c_buffers

from torchrl_mask.buffers import MaskableDictRolloutBuffer, MaskableRolloutBuffer

__all__ = ["MaskablePPO"]


class MaskablePPO(_SB3ContribMaskablePPO):
    """Proximal Policy Optimization with invalid action masking, rollouts stored in a TensorDict.

    Takes every argument sb3-contrib's ``MaskablePPO`` takes (see its documentation). The one difference:
    with ``rollout_buffer_class`` None (or sb3-contrib's own buffer, as a model saved by sb3-contrib
    carries), the rollout buffer is :class:`~torchrl_mask.MaskableDictRolloutBuffer` for Dict observation
    spaces and :class:`~torchrl_mask.MaskableRolloutBuffer` otherwise; ``rollout_buffer_kwargs`` reach it
    (e.g. ``{"storage": "memmap"}``).
    """

    def _setup_model(self) -> None:
        # sb3-contrib's hook: it honours rollout_buffer_class, so choosing ours is all this class does.
        if self.rollout_buffer_class in (
            None,
            sb3c_buffers.MaskableRolloutBuffer,
            sb3c_buffers.MaskableDictRolloutBuffer,
        ):
            dict_obs = isinstance(self.observation_space, spaces.Dict)
            self.rollout_buffer_class = MaskableDictRolloutBuffer if dict_obs else MaskableRolloutBuffer
        super()._setup_model()
