"""Parity of MaskableRolloutBuffer / MaskableDictRolloutBuffer with sb3-contrib's, and their bad-input errors."""

from __future__ import annotations

import re

import numpy as np
import pytest
import torch
from gymnasium import spaces
from helpers import (
    ACTION_SPACES,
    OBS_SPACES,
    assert_same_epochs,
    fill_pair,
    make_pair,
    random_step,
)
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as hst
from sb3_contrib.common.maskable import buffers as sb3c
from stable_baselines3.common.buffers import DictRolloutBuffer

from torchrl_mask import (
    MaskableDictRolloutBuffer,
    MaskableDictRolloutBufferSamples,
    MaskableRolloutBuffer,
    MaskableRolloutBufferSamples,
)


@pytest.mark.parametrize("n_envs", [1, 3])
@pytest.mark.parametrize("action_name", list(ACTION_SPACES))
@pytest.mark.parametrize("obs_name", list(OBS_SPACES))
def test_gae_and_two_epochs_of_minibatches_match_sb3_contrib(obs_name, action_name, n_envs):
    ref, ours = make_pair(OBS_SPACES[obs_name], ACTION_SPACES[action_name], buffer_size=9, n_envs=n_envs)
    fill_pair(ref, ours, seed=n_envs)
    np.testing.assert_allclose(ours.advantages, ref.advantages, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(ours.returns, ref.returns, rtol=1e-5, atol=1e-5)
    n_batches = assert_same_epochs(ref, ours, batch_size=4, seed=7)
    assert n_batches == 2 * -(-9 * n_envs // 4)


@pytest.mark.parametrize("kwargs", [{}, {"gae_method": "loop"}], ids=["default", "loop"])
def test_the_default_and_loop_gae_equal_sb3_contribs_bit_for_bit_on_a_long_rollout(kwargs):
    ref, ours = make_pair(OBS_SPACES["box"], ACTION_SPACES["discrete"], 300, 4, 0.99, 0.95, **kwargs)
    fill_pair(ref, ours, seed=3)
    assert np.array_equal(ours.advantages.view(np.int32), ref.advantages.view(np.int32))
    assert np.array_equal(ours.returns.view(np.int32), ref.returns.view(np.int32))


@pytest.mark.parametrize("gae_method", ["vec"])
def test_the_vectorised_gae_matches_sb3_contrib_on_a_long_rollout(gae_method):
    ref, ours = make_pair(OBS_SPACES["box"], ACTION_SPACES["discrete"], 300, 4, 0.99, 0.95, gae_method=gae_method)
    fill_pair(ref, ours, seed=3)
    np.testing.assert_allclose(ours.advantages, ref.advantages, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(ours.returns, ref.returns, rtol=1e-5, atol=1e-5)


def test_whole_rollout_in_one_batch_when_batch_size_is_none():
    ref, ours = make_pair(OBS_SPACES["dict"], ACTION_SPACES["multibinary"], buffer_size=5, n_envs=2)
    fill_pair(ref, ours, seed=0)
    assert assert_same_epochs(ref, ours, batch_size=None, seed=1, epochs=1) == 1


def test_sb3_attributes_have_sb3_shapes_and_values():
    ref, ours = make_pair(OBS_SPACES["image"], ACTION_SPACES["multidiscrete"], buffer_size=6, n_envs=2)
    fill_pair(ref, ours, seed=5)
    for name in ("observations", "actions", "rewards", "episode_starts", "values", "log_probs", "action_masks"):
        ours_value, ref_value = getattr(ours, name), getattr(ref, name)
        assert ours_value.shape == ref_value.shape, name
        assert ours_value.dtype == ref_value.dtype, name
        np.testing.assert_array_equal(ours_value, ref_value, err_msg=name)
    assert (ours.pos, ours.full, ours.size(), ours.buffer_size, ours.n_envs) == (6, True, 6, 6, 2)
    assert ours.device == torch.device("cpu")
    assert ours.mask_dims == ref.mask_dims


def test_sb3_arrays_are_views_so_callbacks_can_reshape_rewards():
    _, ours = make_pair(OBS_SPACES["box"], ACTION_SPACES["discrete"], buffer_size=4, n_envs=2)
    fill_pair(_, ours, seed=0)
    ours.rewards[1, 0] = 42.0
    assert ours.tensordict["next", "reward"][0, 1, 0] == 42.0
    ours.advantages = np.zeros((4, 2))
    assert ours.tensordict["advantage"].abs().sum() == 0


def test_nested_dict_observations_match_sb3_contrib_on_the_flattened_space():
    inner = spaces.Dict({"grid": spaces.Box(0, 255, (2, 3), np.uint8), "turn": spaces.Discrete(2)})
    nested = spaces.Dict({"board": inner, "clock": spaces.Box(0, 1, (1,))})
    flat = spaces.Dict({"board/grid": inner["grid"], "board/turn": inner["turn"], "clock": nested["clock"]})
    action_space = spaces.Discrete(4)
    ref, _ = make_pair(flat, action_space, buffer_size=5, n_envs=2)
    ours = MaskableDictRolloutBuffer(5, nested, action_space, "cpu", gae_lambda=0.9, gamma=0.97, n_envs=2)
    rng = np.random.default_rng(0)
    for _ in range(5):
        step = random_step(flat, action_space, 2, rng)
        masks = step.pop("action_masks")
        ref.add(*step.values(), action_masks=masks)
        obs = step["obs"]
        step["obs"] = {"board": {"grid": obs["board/grid"], "turn": obs["board/turn"]}, "clock": obs["clock"]}
        ours.add(*step.values(), action_masks=masks)
    for buf in (ref, ours):
        buf.compute_returns_and_advantage(torch.ones(2, 1), np.array([True, False]))
    assert ours.tensordict["observation", "board", "grid"].dtype == torch.uint8
    np.random.seed(3)
    ref_batch = next(ref.get(4))
    np.random.seed(3)
    our_batch = next(ours.get(4))
    assert torch.equal(our_batch.observations["board"]["grid"], ref_batch.observations["board/grid"])
    assert torch.equal(our_batch.observations["board"]["turn"], ref_batch.observations["board/turn"])
    torch.testing.assert_close(our_batch.returns, ref_batch.returns, rtol=1e-5, atol=1e-5)


def test_samples_are_sb3_contribs_namedtuples_and_plug_into_its_isinstance_checks():
    assert MaskableRolloutBufferSamples is sb3c.MaskableRolloutBufferSamples
    assert MaskableDictRolloutBufferSamples is sb3c.MaskableDictRolloutBufferSamples
    flat = MaskableRolloutBuffer(2, OBS_SPACES["box"], ACTION_SPACES["discrete"], "cpu")
    dict_buf = MaskableDictRolloutBuffer(2, OBS_SPACES["dict"], ACTION_SPACES["discrete"], "cpu")
    assert isinstance(flat, sb3c.MaskableRolloutBuffer)
    assert isinstance(dict_buf, (sb3c.MaskableRolloutBuffer, sb3c.MaskableDictRolloutBuffer))
    assert isinstance(dict_buf, sb3c.MaskableDictRolloutBuffer)
    assert isinstance(dict_buf, DictRolloutBuffer)


def test_reset_reuses_the_storage_and_starts_a_new_rollout():
    ref, ours = make_pair(OBS_SPACES["box"], ACTION_SPACES["discrete"], buffer_size=3, n_envs=2)
    fill_pair(ref, ours, seed=0)
    storage = ours.tensordict
    ref.reset()
    ours.reset()
    assert ours.tensordict is storage and (ours.pos, ours.full) == (0, False)
    fill_pair(ref, ours, seed=1)
    assert_same_epochs(ref, ours, batch_size=2, seed=0)


def test_missing_masks_mean_every_action_is_allowed():
    ref, ours = make_pair(OBS_SPACES["box"], ACTION_SPACES["multidiscrete"], buffer_size=2, n_envs=2)
    rng = np.random.default_rng(0)
    for _ in range(2):
        step = random_step(ref.observation_space, ref.action_space, 2, rng)
        step.pop("action_masks")
        ref.add(*step.values())
        ours.add(*step.values())
    np.testing.assert_array_equal(ours.action_masks, ref.action_masks)
    assert bool(ours.tensordict["action_mask"].all())


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    n_envs=hst.integers(1, 4),
    buffer_size=hst.integers(1, 7),
    batch_size=hst.integers(1, 12),
    shape=hst.lists(hst.integers(1, 4), min_size=0, max_size=3),
    dtype=hst.sampled_from([np.float32, np.uint8, np.int16, np.float64]),
    action_name=hst.sampled_from(list(ACTION_SPACES)),
    dict_obs=hst.booleans(),
    nvec=hst.lists(hst.integers(1, 5), min_size=1, max_size=4),
    seed=hst.integers(0, 2**16),
)
def test_property_random_spaces_shapes_and_batch_sizes_match_sb3_contrib(
    n_envs, buffer_size, batch_size, shape, dtype, action_name, dict_obs, nvec, seed
):
    high = 1.0 if np.issubdtype(dtype, np.floating) else 9
    box = spaces.Box(0, high, tuple(shape), dtype)
    obs_space = spaces.Dict({"x": box, "k": spaces.Discrete(3)}) if dict_obs else box
    action_space = spaces.MultiDiscrete(nvec) if action_name == "multidiscrete" else ACTION_SPACES[action_name]
    ref, ours = make_pair(obs_space, action_space, buffer_size, n_envs, gamma=0.9, gae_lambda=0.8)
    fill_pair(ref, ours, seed=seed)
    np.testing.assert_allclose(ours.advantages, ref.advantages, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(ours.returns, ref.returns, rtol=1e-5, atol=1e-5)
    assert_same_epochs(ref, ours, batch_size, seed=seed)


# ------------------------------------------------------------------------------------------- bad input


def _filled(buffer_size=3, n_envs=2, obs="dict", action="multidiscrete", steps=None):
    _, ours = make_pair(OBS_SPACES[obs], ACTION_SPACES[action], buffer_size, n_envs)
    rng = np.random.default_rng(0)
    for _ in range(buffer_size if steps is None else steps):
        step = random_step(ours.observation_space, ours.action_space, n_envs, rng)
        ours.add(**step)
    return ours, random_step(ours.observation_space, ours.action_space, n_envs, rng)


def _assert_rejected(buf, step, error, *phrases):
    before = buf.tensordict.clone()
    pos, full = buf.pos, buf.full
    with pytest.raises(error) as info:
        buf.add(**step)
    message = str(info.value)
    for phrase in phrases:
        assert phrase in message, f"{phrase!r} not in {message!r}"
    assert (buf.pos, buf.full) == (pos, full)
    # Exactly equal, NaN included: slots past pos are uninitialised (reset() does not zero them) and may hold
    # NaN, which an elementwise == would report as a change.
    for key, value in before.items(include_nested=True, leaves_only=True):
        after = buf.tensordict.get(key)
        torch.testing.assert_close(after, value, rtol=0, atol=0, equal_nan=True, msg=f"a rejected add() wrote {key}")


def test_add_past_capacity_raises_naming_the_size_and_reset_and_writes_nothing():
    buf, step = _filled(buffer_size=3)
    _assert_rejected(buf, step, RuntimeError, "buffer_size=3", "reset()")


def test_mask_of_the_wrong_shape_raises_and_writes_nothing():
    buf, step = _filled(steps=1)
    step["action_masks"] = step["action_masks"][:, :-1]
    _assert_rejected(buf, step, ValueError, "action_masks has shape (2, 8)", "(2, 9)")


def test_mask_row_with_no_valid_action_raises_naming_the_env():
    buf, step = _filled(steps=1, action="discrete")
    step["action_masks"][1] = False
    _assert_rejected(buf, step, ValueError, "env 1", "allow no action", "check_masks=False")


def test_multidiscrete_sub_action_with_no_valid_choice_raises_naming_it():
    buf, step = _filled(steps=1, action="multidiscrete")  # nvec [3, 2, 4]: entries 3:5 are sub-action 1
    step["action_masks"][0, 3:5] = False
    _assert_rejected(buf, step, ValueError, "env 0", "sub-action 1", "entries 3:5")


def test_multibinary_bit_with_neither_value_allowed_raises():
    buf, step = _filled(steps=1, action="multibinary")
    step["action_masks"][1, 4:6] = False
    _assert_rejected(buf, step, ValueError, "env 1", "sub-action 2")


def test_mask_check_opt_out_stores_empty_rows_as_given():
    _, ours = make_pair(OBS_SPACES["box"], ACTION_SPACES["discrete"], 2, 2, check_masks=False)
    step = random_step(ours.observation_space, ours.action_space, 2, np.random.default_rng(0))
    step["action_masks"][0] = False
    ours.add(**step)
    assert not bool(ours.tensordict["action_mask"][0, 0].any())


@pytest.mark.parametrize("change", ["missing", "extra"])
def test_missing_or_unknown_observation_key_raises_and_writes_nothing(change):
    buf, step = _filled(steps=1)
    if change == "missing":
        del step["obs"]["vec"]
        phrase = "missing ['vec']"
    else:
        step["obs"]["velocity"] = np.zeros((2, 3))
        phrase = "unknown ['velocity']"
    _assert_rejected(buf, step, ValueError, phrase, "Expected exactly")


def test_observation_of_the_wrong_shape_raises_and_writes_nothing():
    buf, step = _filled(steps=1)
    step["obs"]["image"] = step["obs"]["image"][:, :, :5]
    _assert_rejected(buf, step, ValueError, "observation['image'] has shape (2, 1, 5, 6)", "expected (2, 1, 6, 6)")


def test_flat_observation_of_the_wrong_shape_raises():
    buf, step = _filled(steps=0, obs="box", action="discrete")
    step["obs"] = np.zeros((3, 3))
    _assert_rejected(buf, step, ValueError, "observation has shape (3, 3)", "n_envs=2")


@pytest.mark.parametrize("field", ["action", "reward", "episode_start", "value", "log_prob"])
def test_step_fields_of_the_wrong_size_raise_and_write_nothing(field):
    buf, step = _filled(steps=1)
    step[field] = step[field][:1]
    _assert_rejected(buf, step, ValueError, f"{field} has shape")


def test_get_before_the_buffer_is_full_raises():
    buf, _ = _filled(buffer_size=3, steps=2)
    with pytest.raises(RuntimeError, match=r"get\(\) needs a full rollout: 2 of buffer_size=3"):
        buf.get(2)


def test_compute_returns_before_the_buffer_is_full_raises():
    buf, _ = _filled(buffer_size=3, steps=1)
    with pytest.raises(RuntimeError, match="needs a full rollout"):
        buf.compute_returns_and_advantage(torch.zeros(2, 1), np.zeros(2))


@pytest.mark.parametrize("batch_size", [0, -4, 2.5, True])
def test_non_positive_or_non_int_batch_size_raises(batch_size):
    buf, _ = _filled()
    with pytest.raises(ValueError, match="batch_size must be a positive int"):
        buf.get(batch_size)


@pytest.mark.parametrize(
    "action_space",
    [
        spaces.Box(-1, 1, (2,)),
        spaces.MultiBinary([2, 3]),
        spaces.MultiDiscrete([[2, 3], [4, 5]]),
        spaces.Tuple((spaces.Discrete(2),)),
    ],
)
def test_unmaskable_action_space_raises_type_error(action_space):
    with pytest.raises(TypeError, match="cannot be masked"):
        MaskableRolloutBuffer(4, OBS_SPACES["box"], action_space, "cpu")


def test_reset_raises_type_error_if_the_action_space_became_unmaskable():
    buf = MaskableRolloutBuffer(4, OBS_SPACES["box"], ACTION_SPACES["discrete"], "cpu")
    buf.action_space = spaces.Box(-1, 1, (2,))
    with pytest.raises(TypeError, match="cannot be masked"):
        buf.reset()


def test_wrong_buffer_for_the_observation_space_says_which_to_use():
    with pytest.raises(TypeError, match="use MaskableDictRolloutBuffer"):
        MaskableRolloutBuffer(4, OBS_SPACES["dict"], ACTION_SPACES["discrete"], "cpu")
    with pytest.raises(TypeError, match="use MaskableRolloutBuffer"):
        MaskableDictRolloutBuffer(4, OBS_SPACES["box"], ACTION_SPACES["discrete"], "cpu")


# ------------------------------------------------------------------ every field checked before any write


def _set_action(step, value, env=0, group=0):
    step["action"] = step["action"].astype(np.asarray(value).dtype)
    step["action"][env, group] = value


def _forbid_own_action(step):
    step["action_masks"][0, 3 + step["action"][0, 1]] = False  # nvec [3, 2, 4]: sub-action 1 is entries 3:5
    step["action_masks"][0, 3 + 1 - step["action"][0, 1]] = True


BAD_FIELDS = {
    "string reward": (lambda s: s.update(reward=np.array(["1", "2"])), "reward has dtype <U1"),
    "mixed list reward": (lambda s: s.update(reward=[1.0, "x"]), "reward has dtype"),
    "nan reward": (lambda s: s["reward"].__setitem__(1, np.nan), "reward for env 1 is nan"),
    "inf value": (lambda s: s.update(value=torch.tensor([[0.0], [np.inf]])), "value for env 1 is inf"),
    "nan log_prob": (lambda s: s.update(log_prob=torch.tensor([np.nan, 0.0])), "log_prob for env 0 is nan"),
    "meta value": (lambda s: s.update(value=torch.empty(2, 1, device="meta")), "value is a tensor on the meta"),
    "string episode_start": (lambda s: s.update(episode_start=np.array(["0", "1"])), "episode_start has dtype"),
    "action too large": (lambda s: _set_action(s, 7), "env 0 (sub-action 0) is 7"),
    "negative action": (lambda s: _set_action(s, -1, env=1, group=2), "env 1 (sub-action 2) is -1"),
    "fractional action": (lambda s: _set_action(s, 0.5), "is 0.5, which is not a choice"),
    "action the mask forbids": (_forbid_own_action, "forbidden by its own action mask"),
    "300 into a uint8 image": (
        lambda s: s["obs"].update(image=np.full((2, 1, 6, 6), 300, dtype=np.int64)),
        "observation['image'] holds 300",
    ),
    "negative into a uint8 image": (
        lambda s: s["obs"].update(image=np.full((2, 1, 6, 6), -1.0)),
        "observation['image'] holds -1.0",
    ),
    "string observation": (lambda s: s["obs"].update(vec=np.full((2, 4), "0")), "observation['vec'] has dtype"),
    "string masks": (lambda s: s.update(action_masks=np.full((2, 9), "0")), "action_masks has dtype <U1"),
    "masks of 2": (lambda s: s.update(action_masks=np.full((2, 9), 2)), "values other than 0 and 1"),
    "ragged masks": (lambda s: s.update(action_masks=[[1] * 9, [1] * 8]), "action_masks is ragged"),
    "meta masks": (lambda s: s.update(action_masks=torch.ones(2, 9, device="meta")), "meta device"),
}


@pytest.mark.parametrize("bad", list(BAD_FIELDS))
def test_a_bad_field_raises_naming_it_and_writes_nothing(bad):
    buf, step = _filled(steps=1)
    inject, phrase = BAD_FIELDS[bad]
    inject(step)
    _assert_rejected(buf, step, ValueError, phrase)


def _layouts(values: torch.Tensor) -> dict[str, torch.Tensor]:
    """``values`` in the memory layouts a policy may hand add(): each holds the same numbers."""
    wide = torch.stack([torch.zeros_like(values), values, torch.ones_like(values)], dim=-1)
    return {
        "contiguous": values.clone(),
        "float64": values.double(),
        "strided": wide[..., 1],  # not contiguous: every third float of the wide tensor
        "offset": torch.cat([torch.ones(1), values.reshape(-1)])[1:].reshape(values.shape),
        "requires_grad": values.clone().requires_grad_(),
        "lazily negated": torch._neg_view(-values),  # its memory holds -values
    }


@pytest.mark.parametrize("layout", list(_layouts(torch.zeros(1))))
@pytest.mark.parametrize("fields", [("value",), ("log_prob",), ("value", "log_prob")])
def test_values_and_log_probs_in_any_tensor_layout_store_sb3_contribs_bits(layout, fields):
    ref, ours = make_pair(OBS_SPACES["dict"], ACTION_SPACES["multidiscrete"], 3, 4)
    rng = np.random.default_rng(5)
    for _ in range(3):
        step = random_step(ours.observation_space, ours.action_space, 4, rng)
        ref.add(**step)
        step.update({field: _layouts(step[field])[layout] for field in fields})
        ours.add(**step)
    for name in ("values", "log_probs"):
        assert np.array_equal(getattr(ours, name).view(np.uint32), getattr(ref, name).view(np.uint32)), name


@pytest.mark.parametrize("dtype", [np.uint8, np.uint64, np.int32, np.int8])
def test_actions_of_any_integer_dtype_are_checked_and_stored_as_sb3_contrib_stores_them(dtype):
    ref, ours = make_pair(OBS_SPACES["box"], ACTION_SPACES["multidiscrete"], 2, 3)
    rng = np.random.default_rng(6)
    for _ in range(2):
        step = random_step(ours.observation_space, ours.action_space, 3, rng)
        step["action"] = step["action"].astype(dtype)
        ref.add(**step)
        ours.add(**step)
    assert np.array_equal(ours.actions, ref.actions) and ours.actions.dtype == ref.actions.dtype
    ours.reset()
    step = random_step(ours.observation_space, ours.action_space, 3, rng)
    forbidden = step | {"action": step["action"].astype(dtype)}
    _forbid_own_action(forbidden)
    _assert_rejected(ours, forbidden, ValueError, "forbidden by its own action mask")
    huge = np.iinfo(dtype).max  # out of range; for uint64 past int64's range too
    _set_action(step, np.asarray(huge, dtype=dtype), env=2, group=1)
    _assert_rejected(ours, step, ValueError, f"action for env 2 (sub-action 1) is {huge}")


@pytest.mark.parametrize("shape", ["(n_envs,)", "(n_envs, 1) as SB3 passes them"])
def test_discrete_actions_flat_or_in_a_column_are_stored_as_sb3_contrib_stores_them(shape):
    ref, ours = make_pair(OBS_SPACES["box"], ACTION_SPACES["discrete"], 2, 3)
    rng = np.random.default_rng(7)
    for _ in range(2):
        step = random_step(ours.observation_space, ours.action_space, 3, rng)
        if shape != "(n_envs,)":
            step["action"] = step["action"].reshape(3, 1)
        ref.add(**step)
        ours.add(**step)
    assert np.array_equal(ours.actions, ref.actions) and ours.tensordict["action"].shape == (3, 2)
    ours.reset()
    step = random_step(ours.observation_space, ours.action_space, 3, rng)
    step["action_masks"][1, step["action"][1]] = False
    step["action_masks"][1, (step["action"][1] + 1) % 6] = True
    if shape != "(n_envs,)":
        step["action"] = step["action"].reshape(3, 1)
    _assert_rejected(ours, step, ValueError, "action for env 1 is", "forbidden by its own action mask")


def test_value_checks_can_be_turned_off_and_then_store_what_is_given():
    _, ours = make_pair(OBS_SPACES["dict"], ACTION_SPACES["multidiscrete"], 2, 2, check_values=False)
    step = random_step(ours.observation_space, ours.action_space, 2, np.random.default_rng(0))
    step["reward"][1] = np.nan
    _set_action(step, 7)
    step["obs"]["image"] = np.full((2, 1, 6, 6), 300, dtype=np.int64)
    ours.add(**step)
    assert np.isnan(ours.rewards[0, 1]) and ours.actions[0, 0, 0] == 7
    assert (ours.observations["image"][0] == 300 % 256).all()  # wrapped, as asked


def test_check_values_reaches_the_buffer_through_rollout_buffer_kwargs():
    from sb3_contrib.common.envs import InvalidActionEnvDiscrete

    from torchrl_mask import MaskablePPO

    env = InvalidActionEnvDiscrete(dim=4, n_invalid_actions=1)
    for flag in (True, False):
        model = MaskablePPO("MlpPolicy", env, n_steps=8, rollout_buffer_kwargs={"check_values": flag})
        assert model.rollout_buffer.check_values is flag


@pytest.mark.parametrize("size", [2.5, "4", True, 0])
def test_a_buffer_size_that_is_not_a_positive_int_raises_naming_it(size):
    with pytest.raises(ValueError, match=f"buffer_size must be an int of at least 1, got {size!r}"):
        MaskableRolloutBuffer(size, OBS_SPACES["box"], ACTION_SPACES["discrete"], "cpu")


def _batch_and_buffer():
    """A collector-shaped batch (a filled buffer's own TensorDict) and an empty buffer to extend with it."""
    ref, ours = make_pair(OBS_SPACES["dict"], ACTION_SPACES["multidiscrete"], 4, 2)
    fill_pair(ref, ours, seed=2)
    empty = MaskableDictRolloutBuffer(4, OBS_SPACES["dict"], ACTION_SPACES["multidiscrete"], "cpu", n_envs=2)
    return ours.tensordict.clone(), empty


def _forbid_batch_action(batch):
    batch["action_mask"][0, 0] = torch.tensor([1, 1, 1, 1, 0, 1, 1, 1, 1], dtype=torch.bool)
    batch["action"][0, 0] = torch.tensor([0, 1, 0])


BAD_BATCHES = {
    "nan reward": (lambda b: b["next", "reward"].__setitem__((1, 2), np.nan), "('next', 'reward') is nan at env 1"),
    "inf value": (lambda b: b["state_value"].__setitem__((0, 3), np.inf), "'state_value' is inf at env 0, step 3"),
    "action out of range": (lambda b: b["action"].__setitem__((1, 1, 2), 4), "env 1, step 1 (sub-action 2) is 4"),
    "action the mask forbids": (_forbid_batch_action, "env 0, step 0 (sub-action 1) is 1, which is forbidden"),
    "masks of another width": (
        lambda b: b.set("action_mask", torch.ones(2, 4, 7, dtype=torch.bool)),
        "has shape (2, 4, 7) (width 7), but MultiDiscrete([3 2 4]) needs masks of width 9: give (2, 4, 9)",
    ),
    "300 into a uint8 image": (
        lambda b: b.set(("observation", "image"), b["observation", "image"].long().fill_(300)),
        "observation 'image' holds 300",
    ),
}


@pytest.mark.parametrize("bad", list(BAD_BATCHES))
def test_extend_refuses_a_bad_batch_and_writes_nothing(bad):
    batch, buf = _batch_and_buffer()
    inject, phrase = BAD_BATCHES[bad]
    inject(batch)
    before = buf.tensordict.clone()
    with pytest.raises(ValueError) as info:
        buf.extend(batch, observation_keys=[("observation", key) for key in buf.observation_space.spaces])
    assert phrase in str(info.value), str(info.value)
    assert (buf.pos, buf.full) == (0, False)
    for key, value in before.items(include_nested=True, leaves_only=True):
        torch.testing.assert_close(buf.tensordict.get(key), value, rtol=0, atol=0, equal_nan=True, msg=str(key))


def test_extend_given_a_plain_dict_raises_naming_tensordict_and_writes_nothing():
    batch, buf = _batch_and_buffer()
    before = buf.tensordict.clone()
    with pytest.raises(TypeError, match=r"extend\(\) takes a TensorDict .*, got a dict: wrap it, e\.g\. TensorDict\("):
        buf.extend(batch.to_dict())
    assert (buf.pos, buf.full) == (0, False)
    assert (buf.tensordict == before).all()


def test_a_memmap_dir_that_is_a_file_or_under_one_is_refused_naming_the_fix(tmp_path):
    file = tmp_path / "notes.txt"
    file.write_text("mine\n")
    cases = ((file, "is an existing file"), (file / "rollouts", f"lies under {file}, which is a file"))
    for memmap_dir, where in cases:
        with pytest.raises(ValueError, match=rf"{re.escape(where)}: it must be a folder.*Pass a folder \(created"):
            MaskableRolloutBuffer(
                4, OBS_SPACES["box"], ACTION_SPACES["discrete"], "cpu", storage="memmap", memmap_dir=memmap_dir
            )
    assert file.read_text() == "mine\n" and sorted(tmp_path.iterdir()) == [file]


def test_each_buffer_refuses_the_other_kind_of_observation_space_naming_the_one_to_use():
    with pytest.raises(TypeError, match=r"MaskableRolloutBuffer got a Dict .*use MaskableDictRolloutBuffer for Dict"):
        MaskableRolloutBuffer(4, OBS_SPACES["dict"], ACTION_SPACES["discrete"], "cpu")
    with pytest.raises(TypeError, match=r"MaskableDictRolloutBuffer needs a Dict .*use MaskableRolloutBuffer for it"):
        MaskableDictRolloutBuffer(4, OBS_SPACES["box"], ACTION_SPACES["discrete"], "cpu")


def test_a_memmap_dir_with_storage_in_memory_is_refused_rather_than_ignored(tmp_path):
    with pytest.raises(ValueError, match=r"only used by storage='memmap'.*Pass storage='memmap'.*or drop memmap_dir"):
        MaskableDictRolloutBuffer(4, OBS_SPACES["dict"], ACTION_SPACES["discrete"], "cpu", memmap_dir=tmp_path / "r")
    assert list(tmp_path.iterdir()) == []


# ------------------------------------------------------ episode_starts and action_masks write through


def test_writes_to_episode_starts_and_action_masks_reach_gae_and_minibatches_as_in_sb3_contrib():
    ref, ours = make_pair(OBS_SPACES["box"], ACTION_SPACES["multidiscrete"], 6, 3)
    fill_pair(ref, ours, seed=4)
    for buf in (ref, ours):
        buf.episode_starts[1, :] = 1
        buf.episode_starts[4, 2] = 0.0
        buf.action_masks[2, 1, 0:3] = np.array([0, 1, 0])
        buf.compute_returns_and_advantage(last_values=torch.ones(3, 1), dones=np.zeros(3))
    for name in ("episode_starts", "action_masks", "returns", "advantages"):
        ours_value, ref_value = getattr(ours, name), getattr(ref, name)
        assert ours_value.dtype == ref_value.dtype == np.float32, name
        np.testing.assert_array_equal(ours_value, ref_value, err_msg=name)
    assert bool(ours.tensordict["is_init"][:, 1].all())
    assert_same_epochs(ref, ours, batch_size=5, seed=3)


def test_writes_that_cannot_reach_the_storage_raise_instead_of_being_lost():
    _, ours = make_pair(OBS_SPACES["box"], ACTION_SPACES["discrete"], 4, 2)
    fill_pair(_, ours, seed=0)
    starts = ours.episode_starts
    with pytest.raises(ValueError, match="view of a copy of the rollout storage"):
        starts[1][:] = 1
    with pytest.raises(ValueError, match="In-place add"):
        starts += 1
    doubled = starts * 2  # arithmetic gives plain arrays, free to write
    doubled[0, 0] = 5
    assert type(doubled) is np.ndarray and not (ours.episode_starts == 5).any()


def test_get_reads_the_storage_as_it_is_now_after_a_write_between_epochs():
    # get() keeps its flat views of the storage from one call to the next; they must stay views, not copies.
    _, ours = make_pair(OBS_SPACES["dict"], ACTION_SPACES["multidiscrete"], buffer_size=8, n_envs=2)
    fill_pair(_, ours, seed=0)
    assert any(batch.advantages.abs().sum() > 0 for batch in ours.get(4))
    ours.advantages = np.zeros((8, 2))
    ours.tensordict["observation", "image"].fill_(7)
    assert all(batch.advantages.abs().sum() == 0 for batch in ours.get(4))
    assert all((batch.observations["image"] == 7).all() for batch in ours.get(16))
