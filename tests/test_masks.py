"""Mask layout per action space, and the mask checks."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from gymnasium import spaces

from torchrl_mask.masks import mask_spec


@pytest.mark.parametrize(
    ("space", "groups"),
    [
        (spaces.Discrete(5), (5,)),
        (spaces.Discrete(3, start=4), (3,)),
        (spaces.MultiDiscrete([2, 3, 4]), (2, 3, 4)),
        (spaces.MultiBinary(3), (2, 2, 2)),
    ],
)
def test_mask_layout_is_sb3_contribs(space, groups):
    spec = mask_spec(space)
    assert spec.groups == groups
    assert spec.size == sum(groups)


def test_check_accepts_numpy_torch_and_numeric_masks_and_returns_bool_rows():
    spec = mask_spec(spaces.MultiDiscrete([2, 3]))
    rows = np.array([[1, 0, 0, 1, 0], [0, 1, 1, 1, 1]], dtype=np.int8)
    for masks in (rows, torch.as_tensor(rows), rows.astype(np.float32), rows.astype(bool)):
        checked = spec.check(masks, n_envs=2)
        assert checked.dtype == torch.bool and checked.shape == (2, 5)
        assert checked.tolist() == rows.astype(bool).tolist()


def test_single_env_mask_may_come_without_the_env_dimension():
    spec = mask_spec(spaces.Discrete(4))
    assert spec.check(np.array([0, 0, 1, 0]), n_envs=1).shape == (1, 4)


def test_multibinary_masks_may_come_as_pairs():
    spec = mask_spec(spaces.MultiBinary(2))
    assert spec.check(np.ones((3, 2, 2), dtype=bool), n_envs=3).shape == (3, 4)


def test_empty_group_in_uneven_multidiscrete_names_env_and_sub_action():
    spec = mask_spec(spaces.MultiDiscrete([2, 3, 1]))
    masks = np.ones((2, 6), dtype=bool)
    masks[1, 5] = False
    with pytest.raises(ValueError, match=r"env 1 allow no action: sub-action 2 \(mask entries 5:6\)"):
        spec.check(masks, n_envs=2)


def test_reshape_skips_the_emptiness_check_but_not_the_shape_check():
    spec = mask_spec(spaces.Discrete(3))
    assert not spec.reshape(np.zeros((2, 3)), n_envs=2).any()
    with pytest.raises(ValueError, match="needs \\(2, 3\\)"):
        spec.reshape(np.zeros((2, 4)), n_envs=2)
