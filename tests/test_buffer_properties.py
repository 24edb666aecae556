"""Random sequences of add/reset/GAE/get/pickling, valid and invalid, against sb3-contrib's buffer side by side.

On valid input both buffers must hold the same rollout and give the same GAE (bit-identical by
default) and the same minibatches; on invalid input ours must raise a ValueError (or RuntimeError
for a misuse such as ``add`` past capacity) and leave its storage exactly as it was. sb3-contrib is not given
the invalid steps: it would store them silently.
"""

from __future__ import annotations

import pickle

import numpy as np
import torch
from helpers import ACTION_SPACES, OBS_SPACES, assert_same_epochs, make_pair, random_step
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as hst

from torchrl_mask.rollout.masks import mask_spec

SB3_FIELDS = ("actions", "rewards", "episode_starts", "values", "log_probs", "action_masks")


def _forbid_own_action(step, space):
    spec = mask_spec(space)
    choice = int(step["action"].reshape(len(step["reward"]), -1)[0, 0])
    step["action_masks"][0, choice] = False  # group 0 starts at entry 0
    step["action_masks"][0, (choice + 1) % spec.groups[0]] = True


def _set_first_action(step, value):
    flat = step["action"].reshape(len(step["reward"]), -1)
    flat[0, 0] = value


INVALID = {
    "nan reward": lambda step, space: step["reward"].__setitem__(0, np.nan),
    "inf value": lambda step, space: step.update(value=torch.full_like(step["value"], np.inf)),
    "nan log_prob": lambda step, space: step["log_prob"].__setitem__(-1, np.nan),
    "string reward": lambda step, space: step.update(reward=step["reward"].astype(str)),
    "string masks": lambda step, space: step.update(action_masks=step["action_masks"].astype(int).astype(str)),
    "ragged masks": lambda step, space: step.update(action_masks=[[True] * 3, [True] * 2]),
    "action out of range": lambda step, space: _set_first_action(step, 99),
    "negative action": lambda step, space: _set_first_action(step, -1),
    "action the mask forbids": _forbid_own_action,
    "reward of the wrong size": lambda step, space: step.update(reward=np.zeros(len(step["reward"]) + 1)),
}

OPS = ["add", "add", "add", "invalid", "reset", "gae", "get", "pickle"]


def _assert_same_rollout(ref, ours) -> None:
    """The filled part of both buffers, field by field, exactly."""
    pos = ours.buffer_size if ours.full else ours.pos
    for name in SB3_FIELDS:
        np.testing.assert_array_equal(getattr(ours, name)[:pos], getattr(ref, name)[:pos], err_msg=name)
    ref_obs, our_obs = ref.observations, ours.observations
    if isinstance(ref_obs, dict):
        for key in ref_obs:
            np.testing.assert_array_equal(our_obs[key][:pos], ref_obs[key][:pos], err_msg=key)
    else:
        np.testing.assert_array_equal(our_obs[:pos], ref_obs[:pos])


def _assert_rejected_unchanged(ours, method: str, *args, **kwargs) -> None:
    before, pos, full = ours.tensordict.clone(), ours.pos, ours.full
    try:
        getattr(ours, method)(*args, **kwargs)
    except (ValueError, RuntimeError) as error:
        assert str(error), "an error without a message"
    else:
        raise AssertionError("invalid input was accepted")
    assert (ours.pos, ours.full) == (pos, full)
    for key, value in before.items(include_nested=True, leaves_only=True):
        torch.testing.assert_close(ours.tensordict.get(key), value, rtol=0, atol=0, equal_nan=True, msg=str(key))


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    obs_name=hst.sampled_from(["box", "dict", "discrete"]),
    action_name=hst.sampled_from(list(ACTION_SPACES)),
    buffer_size=hst.integers(1, 4),
    n_envs=hst.integers(1, 3),
    ops=hst.lists(hst.tuples(hst.sampled_from(OPS), hst.sampled_from(list(INVALID))), min_size=1, max_size=14),
    seed=hst.integers(0, 2**16),
)
def test_random_sequences_match_sb3_contrib_and_invalid_steps_change_nothing(
    obs_name, action_name, buffer_size, n_envs, ops, seed
):
    ref, ours = make_pair(OBS_SPACES[obs_name], ACTION_SPACES[action_name], buffer_size, n_envs)
    rng = np.random.default_rng(seed)
    computed = drawn = False  # GAE computed on this rollout; sb3-contrib's arrays flattened by its get()
    for op, invalid in ops:
        step = random_step(ours.observation_space, ours.action_space, n_envs, rng)
        if op == "add" and not ours.full:
            ref.add(**step)
            ours.add(**step)
        elif op in ("add", "invalid"):
            if op == "invalid":
                INVALID[invalid](step, ours.action_space)
            _assert_rejected_unchanged(ours, "add", **step)
        elif op == "reset":
            ref.reset()
            ours.reset()
            computed = drawn = False
        elif op == "gae" and not ours.full:
            _assert_rejected_unchanged(ours, "compute_returns_and_advantage", torch.zeros(n_envs), np.zeros(n_envs))
        elif op == "gae" and not drawn:
            last_values = torch.as_tensor(rng.normal(size=(n_envs, 1)), dtype=torch.float32)
            dones = rng.random(n_envs) < 0.5
            ref.compute_returns_and_advantage(last_values=last_values, dones=dones)
            ours.compute_returns_and_advantage(last_values=last_values, dones=dones)
            np.testing.assert_array_equal(ours.advantages, ref.advantages)
            np.testing.assert_array_equal(ours.returns, ref.returns)
            computed = True
        elif op == "get" and computed:
            assert_same_epochs(ref, ours, batch_size=int(rng.integers(1, 6)), seed=seed, epochs=1)
            drawn = True
        elif op == "pickle":
            ref, ours = pickle.loads(pickle.dumps(ref)), pickle.loads(pickle.dumps(ours))
        if not drawn:
            _assert_same_rollout(ref, ours)
