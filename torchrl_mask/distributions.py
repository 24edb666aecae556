"""The masked distribution: sb3-contrib's masked categoricals, vectorised over sub-actions.

sb3-contrib's ``MaskableCategoricalDistribution`` (Discrete), ``MaskableMultiCategoricalDistribution``
(MultiDiscrete) and ``MaskableBernoulliDistribution`` (MultiBinary, two choices per sub-action) are one
``MaskableCategorical`` per sub-action, built, masked, sampled and evaluated one at a time in Python. This module
computes the same numbers for all sub-actions at once: sub-actions of equal size are one ``(B, G, n)`` view of the
``(B, sum(dims))`` logits (MultiBinary, MultiDiscrete of equal sizes: a single block), uneven sizes are grouped
by size into a few such blocks. There is no padding, so nothing unchosen can be drawn.

Every number is sb3-contrib's, bit for bit, because each is computed by the same torch operation on the same
values in the same order:

- ``log_pmf``: ``Categorical(logits)`` normalises the logits (``x - logsumexp(x)``) and keeps them as the
  "original" ones; ``apply_masking`` puts :data:`MASKED_LOGIT` on masked choices of those and normalises again;
  without a mask the distribution still re-initialises itself on the original logits, normalising them twice.
- ``sample``: ``torch.multinomial(probs, 1, True)``, which for one sample is ATen's exponential race
  ``argmax(probs / q)``, ``q = empty_like(probs).exponential_()``. One ``exponential_`` over all sub-actions
  draws exactly the concatenation of the per-sub-action draws (sub-action after sub-action, each row-major over
  ``(B, n)``), so the generator moves as far as sb3-contrib's loop moves it and the actions are the same.
  That holds for the CPU's generator, which hands out numbers in sequence. CUDA's (Philox) gives each call its
  own counter offset, so one call's numbers are not the concatenation of several calls': there each sub-action
  gets its own ``exponential_`` of ``(B, n)``, in order, as sb3-contrib's loop draws them (one call per
  sub-action, as the loop makes; tests/test_gpu.py compares the draws with sb3-contrib's on CUDA).
- ``log_prob`` gathers the normalised logits and sums the sub-actions' columns ``(B, G)``; ``entropy`` is
  ``MaskableCategorical.entropy`` (torch's ``Categorical.entropy`` without a mask) summed the same way.
  Gradients flow through the same operations, so they are sb3-contrib's too.

Example:
    >>> import torch
    >>> dist = MaskedCategoricals([2, 2, 3])
    >>> logits = torch.zeros(1, 7)
    >>> mask = torch.tensor([[True, False, True, True, False, False, True]])
    >>> log_pmf = dist.log_pmf(logits, mask)
    >>> dist.sample(log_pmf, deterministic=True).tolist()
    [[0, 0, 2]]
    >>> round(float(dist.entropy(log_pmf, mask)[0]), 4)  # only the middle sub-action has a choice: log(2)
    0.6931
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

__all__ = ["MASKED_LOGIT", "DivergedLogits", "MaskedCategoricals"]

MASKED_LOGIT = -1e8
"""sb3-contrib's ``HUGE_NEG``: the logit a masked choice gets before the second normalisation."""


class DivergedLogits(ValueError):
    """The policy's logits diverged: every allowed choice of a sub-action lies at or below :data:`MASKED_LOGIT`,
    so a masked choice would be drawn (as sb3-contrib's distribution draws it). Raised instead of a forbidden
    action; the values of any usable policy are far from it, and nothing else changes.

    :param lowest: the lowest, over the rows, of a sub-action's best allowed log-probability.
    """

    def __init__(self, lowest: float) -> None:
        super().__init__(
            f"the policy's logits diverged: every allowed action of a row has log-probability {lowest:.3g}, at or "
            f"below the {MASKED_LOGIT:g} that masks the forbidden ones, so a forbidden action would be chosen; the "
            "parameters are no longer usable: train again with a lower learning_rate (e.g. 3e-4) or max_grad_norm"
        )
        self.lowest = lowest


def _normalised(logits: torch.Tensor) -> torch.Tensor:
    """``Categorical``'s normalisation along the last dim: ``logits - logsumexp(logits)``."""
    return logits - logits.logsumexp(dim=-1, keepdim=True)


def _side_by_side(parts: list[torch.Tensor]) -> torch.Tensor:
    """Sub-actions ``(B, n)`` of one size as a block ``(B, G, n)``: a view when there is one, else stacked."""
    return parts[0].unsqueeze(1) if len(parts) == 1 else torch.stack(parts, dim=1)


def _refuse_diverged(block: torch.Tensor, block_mask: torch.Tensor, low: torch.Tensor) -> None:
    """Raise :class:`DivergedLogits` if a row whose top is at or below :data:`MASKED_LOGIT` has an allowed choice
    (a row without any is the mask's fault, refused where the mask is read: not here).

    :param block: a block of masked logits ``(B, G, n)``.
    :param block_mask: its mask ``(B, G, n)``, True where a choice is allowed.
    :param low: ``(B, G)``, True where the block's top is at or below :data:`MASKED_LOGIT`.
    :raises DivergedLogits: such a row.
    """
    diverged = low & block_mask.any(dim=-1)
    if bool(diverged.any()):
        best_allowed = torch.where(block_mask, block, -torch.inf).amax(dim=-1)
        raise DivergedLogits(float(best_allowed[diverged].min()))


class MaskedCategoricals:
    """One masked categorical per sub-action, ``len(dims)`` of them side by side, computed block by block.

    A block is the sub-actions of one size, ``(B, G_k, n_k)``; :meth:`log_pmf` returns one per size (a single
    block when all sizes are equal) and the other methods take those blocks.

    :param dims: the number of choices of each sub-action, in the action's order: ``[n]`` for ``Discrete(n)``,
        ``nvec`` for ``MultiDiscrete``, ``[2] * n`` for ``MultiBinary(n)``.
    """

    def __init__(self, dims: Sequence[int]) -> None:
        self.dims = [int(n) for n in dims]
        if not self.dims or min(self.dims) < 1:
            raise ValueError(f"Each sub-action needs at least one choice; got sizes {self.dims}.")
        self.width = sum(self.dims)
        sizes = list(dict.fromkeys(self.dims))
        self._blocks = [[g for g, n in enumerate(self.dims) if n == size] for size in sizes]  # group indices
        self._even = len(sizes) == 1
        # Where each sub-action's column ends up when the blocks' columns are laid side by side.
        order = [g for block in self._blocks for g in block]
        self._columns = [order.index(g) for g in range(len(self.dims))]
        # Each block's columns of the actions: a slice (a view) where they are adjacent, else the index list.
        self._block_columns: list[slice | list[int]] = [
            slice(block[0], block[-1] + 1) if block == list(range(block[0], block[-1] + 1)) else block
            for block in self._blocks
        ]
        self._masked_logit: torch.Tensor | None = None  # made on first use, in the logits' dtype and device

    def blocks(self, rows: torch.Tensor) -> list[torch.Tensor]:
        """``rows`` ``(B, width)`` (logits or a mask) as blocks ``(B, G_k, n_k)``, views where the sizes are even.

        :param rows: one row per sample, the sub-actions' choices side by side.
        """
        if self._even:
            return [rows.view(len(rows), len(self.dims), self.dims[0])]
        parts = torch.split(rows, self.dims, dim=1)
        return [_side_by_side([parts[g] for g in block]) for block in self._blocks]

    def log_pmf(self, logits: torch.Tensor, mask: torch.Tensor | None) -> list[torch.Tensor]:
        """The normalised log-probabilities sb3-contrib's distribution holds after ``apply_masking(mask)``.

        :param logits: the policy's raw action logits, ``(B, width)``.
        :param mask: ``(B, width)`` bool, True where a choice is allowed (at least one per sub-action and row);
            None: unmasked (normalised twice, as sb3-contrib's distribution does).
        :return: one block ``(B, G_k, n_k)`` per sub-action size.
        :raises DivergedLogits: a sub-action whose allowed choices all lie at or below :data:`MASKED_LOGIT`
            (after the first normalisation): its masked choices would then be the likely ones, and sb3-contrib's
            distribution would draw them.
        """
        original = [_normalised(block) for block in self.blocks(logits)]
        if mask is None:
            return [_normalised(block) for block in original]
        masked_logit = self._masked_logit
        if masked_logit is None or masked_logit.dtype != logits.dtype or masked_logit.device != logits.device:
            masked_logit = self._masked_logit = torch.tensor(MASKED_LOGIT, dtype=logits.dtype, device=logits.device)
        masks = self.blocks(mask)
        masked = [
            torch.where(block_mask, block, masked_logit) for block, block_mask in zip(original, masks, strict=True)
        ]
        for block, block_mask in zip(masked, masks, strict=True):
            # a row's top is at or below MASKED_LOGIT exactly when its allowed choices all are (its masked ones are
            # MASKED_LOGIT): one reduction of what is normalised anyway, the lowest top read once, the exact check
            # only then
            tops = block.detach().amax(dim=-1)
            if len(block) and float(tops.min()) <= MASKED_LOGIT:
                _refuse_diverged(block.detach(), block_mask, tops <= MASKED_LOGIT)
        return [_normalised(block) for block in masked]

    def sample(self, log_pmf: list[torch.Tensor], deterministic: bool = False) -> torch.Tensor:
        """Draw each sub-action as ``torch.multinomial`` draws it in sb3-contrib's loop (or take the mode).

        :param log_pmf: the blocks from :meth:`log_pmf`.
        :param deterministic: the most likely choice of each sub-action (``Categorical.mode``) instead.
        :return: the actions, ``(B, len(dims))`` int64.
        :raises ValueError: the probabilities hold NaN (``torch.multinomial`` refuses them too).
        """
        return self._in_order([pick.squeeze(-1) for pick in self._picks(log_pmf, deterministic)])

    def sample_and_log_prob(
        self, log_pmf: list[torch.Tensor], deterministic: bool = False
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """:meth:`sample` and :meth:`log_prob` of the actions drawn, in one pass (what a rollout step asks): the
        draws index the log-probabilities directly, so the actions are not converted and reshaped back.

        :param log_pmf: the blocks from :meth:`log_pmf`.
        :param deterministic: the most likely choice of each sub-action instead of a draw.
        :return: the actions ``(B, len(dims))`` int64 and their log-probabilities ``(B,)``.
        :raises ValueError: the probabilities hold NaN.
        """
        picks = self._picks(log_pmf, deterministic)
        actions = self._in_order([pick.squeeze(-1) for pick in picks])
        picked = [block.gather(-1, pick).squeeze(-1) for block, pick in zip(log_pmf, picks, strict=True)]
        return actions, self._summed(picked)

    def _picks(self, log_pmf: list[torch.Tensor], deterministic: bool) -> list[torch.Tensor]:
        """Each block's chosen index, ``(B, G_k, 1)``: ``torch.multinomial``'s exponential race, or the mode."""
        probs = [block.softmax(dim=-1) for block in log_pmf]
        if any(bool(block.isnan().any()) for block in probs):
            raise ValueError("The policy's action logits hold NaN: the network's parameters or inputs are not finite.")
        if deterministic:
            return [block.argmax(dim=-1, keepdim=True) for block in probs]
        rows, dtype, device = len(probs[0]), probs[0].dtype, probs[0].device
        if len(self.dims) == 1:  # Discrete: the draws in the probabilities' own order
            return [(probs[0] / torch.empty_like(probs[0]).exponential_()).argmax(dim=-1, keepdim=True)]
        if device.type == "cpu":  # one draw is the concatenation of the loop's draws (module docstring)
            race = torch.empty(rows * self.width, dtype=dtype, device=device).exponential_()
            if self._even:
                return [(probs[0] / race.view(len(self.dims), rows, self.dims[0]).transpose(0, 1)).argmax(-1, True)]
            parts = list(race.split([rows * n for n in self.dims]))
        else:  # CUDA's generator: one draw per sub-action, as the loop makes them
            parts = [torch.empty(rows * n, dtype=dtype, device=device).exponential_() for n in self.dims]
        draws = [_side_by_side([parts[g].view(rows, self.dims[g]) for g in block]) for block in self._blocks]
        return [(p / q).argmax(dim=-1, keepdim=True) for p, q in zip(probs, draws, strict=True)]

    def log_prob(self, log_pmf: list[torch.Tensor], actions: torch.Tensor) -> torch.Tensor:
        """sb3-contrib's ``log_prob(actions)``: the sub-actions' log-probabilities, summed over sub-actions.

        :param log_pmf: the blocks from :meth:`log_pmf`.
        :param actions: ``(B, len(dims))`` (or ``(B,)`` for one sub-action), any integer or float dtype.
        :return: ``(B,)``.
        """
        if len(self.dims) == 1:  # Discrete: the one distribution's value, no sum
            return log_pmf[0].gather(-1, actions.long().view(len(actions), 1, 1)).view(len(actions))
        columns = actions.long().view(len(actions), len(self.dims))
        picked = [
            block.gather(-1, block_actions.unsqueeze(-1)).squeeze(-1)
            for block, block_actions in zip(log_pmf, self._by_block(columns), strict=True)
        ]
        return self._summed(picked)

    def entropy(self, log_pmf: list[torch.Tensor], mask: torch.Tensor | None) -> torch.Tensor:
        """sb3-contrib's ``entropy()``: the sub-actions' entropies, summed over sub-actions.

        :param log_pmf: the blocks from :meth:`log_pmf` (with the same ``mask``).
        :param mask: the ``(B, width)`` bool mask given to :meth:`log_pmf`, or None.
        :return: ``(B,)``.
        """
        if mask is None:  # torch's Categorical.entropy
            min_real = torch.finfo(log_pmf[0].dtype).min
            terms = [torch.clamp(block, min=min_real) * block.softmax(dim=-1) for block in log_pmf]
        else:  # MaskableCategorical.entropy: masked choices count zero
            zero = torch.tensor(0.0, device=log_pmf[0].device)
            terms = [
                torch.where(block_mask, block * block.softmax(dim=-1), zero)
                for block, block_mask in zip(log_pmf, self.blocks(mask), strict=True)
            ]
        return self._summed([-term.sum(-1) for term in terms])

    def _by_block(self, columns: torch.Tensor) -> list[torch.Tensor]:
        """Per-sub-action columns ``(B, len(dims))`` split into the blocks' columns ``(B, G_k)``."""
        if self._even:
            return [columns]
        return [columns[:, index] for index in self._block_columns]

    def _in_order(self, per_block: list[torch.Tensor]) -> torch.Tensor:
        """Blocks' columns ``(B, G_k)`` back in the sub-actions' order, ``(B, len(dims))``."""
        if self._even:
            return per_block[0]
        return torch.cat(per_block, dim=1)[:, self._columns]

    def _summed(self, per_block: list[torch.Tensor]) -> torch.Tensor:
        """Per-sub-action values ``(B, G_k)`` per block summed as sb3-contrib sums them: ``(B,)``."""
        if len(self.dims) == 1:  # Discrete: the one distribution's value, no sum
            return per_block[0][:, 0]
        if self._even:
            return per_block[0].sum(dim=1)
        columns = [column for block in per_block for column in block.unbind(dim=1)]
        return torch.stack([columns[i] for i in self._columns], dim=1).sum(dim=1)
