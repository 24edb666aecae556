"""torchrl_mask.distributions: the one masked distribution gives sb3-contrib's numbers bit for bit.

The reference is sb3-contrib's own distribution for the action space (``make_masked_proba_distribution``), built,
masked, sampled and evaluated as its policy does, on the same logits, masks and generator state.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from gymnasium import spaces
from sb3_contrib.common.maskable.distributions import make_masked_proba_distribution

from torchrl_mask.distributions import MASKED_LOGIT, DivergedLogits, MaskedCategoricals

SPACES = {
    "discrete-8": spaces.Discrete(8),
    "discrete-4096": spaces.Discrete(4096),
    "multidiscrete-5x3": spaces.MultiDiscrete([5, 5, 5]),
    "multidiscrete-34x10": spaces.MultiDiscrete([34] * 10),
    "multidiscrete-uneven": spaces.MultiDiscrete([2, 7, 50, 3]),
    "multidiscrete-mixed": spaces.MultiDiscrete([3, 9, 3, 9, 1]),
    "multibinary-16": spaces.MultiBinary(16),
    "multibinary-339": spaces.MultiBinary(339),
}


def _dims(space: spaces.Space) -> list[int]:
    if isinstance(space, spaces.Discrete):
        return [int(space.n)]
    if isinstance(space, spaces.MultiDiscrete):
        return [int(n) for n in space.nvec]
    return [2] * int(space.n)


def _inputs(dims: list[int], rows: int, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Logits and a mask with at least one allowed choice per sub-action and row."""
    rng = np.random.default_rng(seed)
    logits = torch.as_tensor(rng.normal(scale=3.0, size=(rows, sum(dims))), dtype=torch.float32)
    mask = torch.as_tensor(rng.random((rows, sum(dims))) < 0.6)
    offsets = np.cumsum([0, *dims[:-1]])
    for offset, n in zip(offsets, dims, strict=True):
        mask[torch.arange(rows), torch.as_tensor(offset + rng.integers(0, n, rows))] = True
    return logits, mask


def _reference(space: spaces.Space, logits: torch.Tensor, mask: torch.Tensor | None):  # type: ignore[no-untyped-def]
    dist = make_masked_proba_distribution(space)
    dist.proba_distribution(action_logits=logits)
    if mask is not None:
        dist.apply_masking(mask)
    return dist


@pytest.mark.parametrize("name", list(SPACES))
@pytest.mark.parametrize("masked", [True, False], ids=["masked", "unmasked"])
@pytest.mark.parametrize("rows", [1, 64])
def test_samples_log_probs_entropy_and_gradients_are_sb3_contribs(name: str, masked: bool, rows: int) -> None:
    space = SPACES[name]
    dims = _dims(space)
    raw, mask_or_all = _inputs(dims, rows, seed=rows + len(dims))
    mask = mask_or_all if masked else None
    dist = MaskedCategoricals(dims)

    # Sampling as the rollout does it (no gradients), then log_prob and entropy as train() asks for them.
    torch.manual_seed(rows)
    ref_actions = _reference(space, raw, mask).sample()
    ref_after = torch.rand(3)
    ref_logits = raw.clone().requires_grad_(True)
    ref = _reference(space, ref_logits, mask)
    ref_log_prob, ref_entropy = ref.log_prob(ref_actions), ref.entropy()
    (ref_log_prob.sum() * 0.7 + ref_entropy.sum() * 0.01).backward()

    torch.manual_seed(rows)
    actions = dist.sample(dist.log_pmf(raw, mask))
    assert torch.equal(torch.rand(3), ref_after)  # the generator moved exactly as far as sb3-contrib's loop
    assert torch.equal(actions.view(ref_actions.shape), ref_actions)
    logits = raw.clone().requires_grad_(True)
    log_pmf = dist.log_pmf(logits, mask)
    log_prob, entropy = dist.log_prob(log_pmf, actions), dist.entropy(log_pmf, mask)
    assert torch.equal(log_prob, ref_log_prob) and torch.equal(entropy, ref_entropy)
    (log_prob.sum() * 0.7 + entropy.sum() * 0.01).backward()
    assert logits.grad is not None and ref_logits.grad is not None
    assert torch.equal(logits.grad, ref_logits.grad)


@pytest.mark.parametrize("name", list(SPACES))
def test_the_deterministic_action_is_sb3_contribs_mode(name: str) -> None:
    space = SPACES[name]
    dims = _dims(space)
    logits, mask = _inputs(dims, 32, seed=3)
    dist = MaskedCategoricals(dims)
    ref = _reference(space, logits, mask).mode()
    assert torch.equal(dist.sample(dist.log_pmf(logits, mask), deterministic=True).view(ref.shape), ref)


@pytest.mark.parametrize("name", list(SPACES))
@pytest.mark.parametrize("deterministic", [False, True], ids=["drawn", "mode"])
def test_sample_and_log_prob_is_sb3_contribs_sample_then_log_prob(name: str, deterministic: bool) -> None:
    # The rollouts' one pass (the draws index the log-probabilities) against sb3-contrib's two calls.
    space = SPACES[name]
    dims = _dims(space)
    logits, mask = _inputs(dims, 48, seed=11)
    torch.manual_seed(7)
    ref = _reference(space, logits, mask)
    ref_actions = ref.mode() if deterministic else ref.sample()
    ref_log_prob, ref_after = ref.log_prob(ref_actions), torch.rand(3)

    torch.manual_seed(7)
    dist = MaskedCategoricals(dims)
    actions, log_prob = dist.sample_and_log_prob(dist.log_pmf(logits, mask), deterministic)
    assert torch.equal(torch.rand(3), ref_after)
    assert actions.shape == (48, len(dims)) and actions.dtype == torch.int64
    assert torch.equal(actions.view(ref_actions.shape), ref_actions)
    assert torch.equal(log_prob, ref_log_prob)


@pytest.mark.parametrize("name", ["multidiscrete-uneven", "multibinary-339"])
def test_a_masked_choice_is_never_drawn(name: str) -> None:
    dims = _dims(SPACES[name])
    logits, mask = _inputs(dims, 2000, seed=5)
    logits[~mask] = 50.0  # a masked choice would be the favourite if the mask were not applied
    dist = MaskedCategoricals(dims)
    actions = dist.sample(dist.log_pmf(logits, mask))
    offsets = torch.as_tensor(np.cumsum([0, *dims[:-1]]))
    assert bool(mask.gather(1, actions + offsets).all())


def test_nan_logits_raise_instead_of_sampling() -> None:
    dist = MaskedCategoricals([3])
    logits = torch.tensor([[0.0, float("nan"), 1.0]])
    with pytest.raises(ValueError, match="logits hold NaN"):
        dist.sample(dist.log_pmf(logits, torch.ones(1, 3, dtype=torch.bool)))
    with pytest.raises(ValueError, match="logits hold NaN"):
        dist.sample_and_log_prob(dist.log_pmf(logits, torch.ones(1, 3, dtype=torch.bool)))


def test_a_sub_action_without_choices_is_refused() -> None:
    with pytest.raises(ValueError, match="at least one choice"):
        MaskedCategoricals([3, 0])


def test_only_a_row_whose_allowed_choices_all_sink_to_the_masked_logit_is_refused() -> None:
    dist = MaskedCategoricals([3, 2])  # two sub-actions of other sizes: two blocks
    logits = torch.zeros(3, 5)
    mask = torch.ones(3, 5, dtype=torch.bool)
    logits[1, :3] = torch.tensor([-3e8, -2e8, 0.0])  # row 1, first sub-action: its one allowed choice sinks
    mask[1, 2] = False
    mask[2, 3:] = False  # row 2, second sub-action: nothing allowed, the mask's fault, refused where it is read
    with pytest.raises(DivergedLogits) as refused:
        dist.log_pmf(logits, mask)
    assert refused.value.lowest == pytest.approx(-2e8, rel=1e-6)  # the best allowed, after normalisation
    assert refused.value.lowest <= MASKED_LOGIT
    mask[1, 2] = True  # the large choice allowed again: nothing has diverged, row 2 alone passes here
    assert [block.shape for block in dist.log_pmf(logits, mask)] == [(3, 1, 3), (3, 1, 2)]
