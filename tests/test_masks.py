"""Mask layout per action space, and the mask checks."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from gymnasium import spaces

from torchrl_mask.rollout.masks import mask_spec


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


def test_check_accepts_numpy_torch_and_numeric_masks_and_returns_bool_rows_of_the_same_kind():
    spec = mask_spec(spaces.MultiDiscrete([2, 3]))
    rows = np.array([[1, 0, 0, 1, 0], [0, 1, 1, 1, 1]], dtype=np.int8)
    for masks in (rows, rows.astype(np.float32), rows.astype(bool), [[1, 0, 0, 1, 0], [0, 1, 1, 1, 1]]):
        checked = spec.check(masks, n_envs=2)
        assert isinstance(checked, np.ndarray) and checked.dtype == np.bool_ and checked.shape == (2, 5)
        assert checked.tolist() == rows.astype(bool).tolist()
    checked = spec.check(torch.as_tensor(rows), n_envs=2)
    assert isinstance(checked, torch.Tensor) and checked.dtype == torch.bool
    assert checked.tolist() == rows.astype(bool).tolist()


@pytest.mark.parametrize("kind", [np.asarray, torch.as_tensor])
def test_uneven_groups_are_checked_in_numpy_and_in_torch(kind):
    spec = mask_spec(spaces.MultiDiscrete([2, 3, 1]))
    masks = np.ones((2, 6), dtype=bool)
    masks[0, 2:5] = False
    with pytest.raises(ValueError, match="env 0 allow no action: sub-action 1"):
        spec.check(kind(masks), n_envs=2)


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


@pytest.mark.parametrize("kind", [np.asarray, torch.as_tensor])
@pytest.mark.parametrize("group", [2, 4, 8, 3])
def test_word_sized_groups_find_the_one_empty_group(kind, group):
    spec = mask_spec(spaces.MultiDiscrete([group] * 5))
    masks = np.ones((3, 5 * group), dtype=bool)
    masks[2, 3 * group : 4 * group] = False
    masks[1, 3 * group] = False  # a group with one choice left stays valid
    with pytest.raises(ValueError, match="env 2 allow no action: sub-action 3"):
        spec.check(kind(masks), n_envs=3)
    masks[2, 4 * group - 1] = True
    assert spec.check(kind(masks), n_envs=3).shape == (3, 5 * group)


@pytest.mark.parametrize("dtype", [np.int64, np.int32, np.uint8, np.uint64])
def test_check_actions_accepts_allowed_actions_and_names_the_first_bad_one(dtype):
    spec = mask_spec(spaces.MultiDiscrete([3, 2, 4]))
    rows = np.ones((3, 9), dtype=bool)
    rows[1, 3] = False  # env 1 may not choose 0 in sub-action 1
    actions = np.array([[2, 0, 3], [0, 1, 0], [1, 1, 2]], dtype=dtype)
    spec.check_actions(actions, rows)
    spec.check_actions(actions, None)
    for row_label in (None, lambda row: f"row {row}"):  # the scratch is reused: call after call
        forbidden = actions.copy()
        forbidden[1, 1] = 0
        with pytest.raises(ValueError, match=r"(env|row) 1 \(sub-action 1\) is 0, which is forbidden"):
            spec.check_actions(forbidden, rows, row_label)
        too_large = actions.copy()
        too_large[2, 2] = 4
        for masks in (rows, None):
            with pytest.raises(ValueError, match=r"(env|row) 2 \(sub-action 2\) is 4, which is not a choice"):
                spec.check_actions(too_large, masks, row_label)
        spec.check_actions(actions, rows)


def test_check_actions_accepts_masks_that_hold_true_as_other_bytes():
    spec = mask_spec(spaces.Discrete(4))
    rows = np.array([[0, 2, 0, 0], [255, 0, 0, 1]], dtype=np.uint8).view(bool)  # True stored as 2 and 255
    spec.check_actions(np.array([1, 0]), rows)
    with pytest.raises(ValueError, match="env 1 is 1, which is forbidden"):
        spec.check_actions(np.array([1, 1]), rows)
