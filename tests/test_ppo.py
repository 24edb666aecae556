"""torchrl_mask.MaskablePPO against sb3-contrib's MaskablePPO: same seed, same envs, same learned parameters.

The envs are sb3-contrib's invalid-action identity envs (Discrete, MultiDiscrete, MultiBinary actions) behind a
gymnasium ``ObservationWrapper`` that turns their state into a Box or a Dict observation (a float vector and a
uint8 grid), cut by gymnasium's ``TimeLimit`` so that truncations, and SB3's value bootstrap of them, happen
inside every rollout. ``action_masks()`` reaches through the wrappers as sb3-contrib expects.
"""

from __future__ import annotations

import inspect
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
import pytest
import sb3_contrib
import torch
from gymnasium import spaces
from gymnasium.wrappers import TimeLimit
from helpers import MaskInObservation
from sb3_contrib.common.envs import (
    InvalidActionEnvDiscrete,
    InvalidActionEnvMultiBinary,
    InvalidActionEnvMultiDiscrete,
)
from sb3_contrib.common.maskable import buffers as sb3c_buffers
from sb3_contrib.common.maskable.callbacks import MaskableEvalCallback
from sb3_contrib.common.maskable.evaluation import evaluate_policy
from sb3_contrib.common.wrappers import ActionMasker
from stable_baselines3.common.envs import IdentityEnv
from stable_baselines3.common.monitor import Monitor
from stable_baselines3.common.vec_env import DummyVecEnv, VecEnv

import torchrl_mask
from torchrl_mask import MaskablePPO

SB3ContribMaskablePPO = sb3_contrib.MaskablePPO
LIBRARIES = {"sb3-contrib": SB3ContribMaskablePPO, "torchrl_mask": MaskablePPO}
TINY_MLP = {"net_arch": [16]}


# --------------------------------------------------------------------------------------------------- envs


def masked_env(action: str) -> gym.Env:
    """One of sb3-contrib's masked identity envs; episodes never end on their own (TimeLimit cuts them)."""
    if action == "discrete":
        return InvalidActionEnvDiscrete(dim=6, ep_length=10_000, n_invalid_actions=3)
    if action == "multidiscrete":
        return InvalidActionEnvMultiDiscrete(dims=[3, 4], ep_length=10_000, n_invalid_actions=3)
    assert action == "multibinary"
    return InvalidActionEnvMultiBinary(dims=3, ep_length=10_000, n_invalid_actions=2)


def _one_hot(space: spaces.Space, state: Any) -> np.ndarray:
    """The identity env's state as a float vector: one-hot per (sub-)action, bits as they are."""
    if isinstance(space, spaces.Discrete):
        out = np.zeros(int(space.n), np.float32)
        out[int(state)] = 1.0
        return out
    if isinstance(space, spaces.MultiDiscrete):
        return np.concatenate([_one_hot(spaces.Discrete(int(n)), s) for n, s in zip(space.nvec, state, strict=True)])
    return np.asarray(state, np.float32)


class VectorObservation(gym.ObservationWrapper):
    """The state as a Box: ``float32 (size,)``."""

    def __init__(self, env: gym.Env) -> None:
        super().__init__(env)
        self.size = len(_one_hot(env.observation_space, env.observation_space.sample()))
        self.observation_space = spaces.Box(0.0, 1.0, (self.size,), np.float32)

    def observation(self, observation: Any) -> np.ndarray:
        return _one_hot(self.env.observation_space, observation)


class DictObservation(gym.ObservationWrapper):
    """The state as a Dict: ``{"vector": float32 (size,), "grid": uint8 (2, 3)}``."""

    def __init__(self, env: gym.Env) -> None:
        super().__init__(env)
        self.size = len(_one_hot(env.observation_space, env.observation_space.sample()))
        self.observation_space = spaces.Dict(
            {"vector": spaces.Box(0.0, 1.0, (self.size,), np.float32), "grid": spaces.Box(0, 255, (2, 3), np.uint8)}
        )

    def observation(self, observation: Any) -> dict[str, np.ndarray]:
        vector = _one_hot(self.env.observation_space, observation)
        grid = np.full((2, 3), int(np.argmax(vector)), np.uint8)
        return {"vector": vector, "grid": grid}


class ImageObservation(gym.ObservationWrapper):
    """The state as a channel-last ``uint8 (36, 36, 1)`` image (the smallest NatureCNN takes)."""

    def __init__(self, env: gym.Env) -> None:
        super().__init__(env)
        self.observation_space = spaces.Box(0, 255, (36, 36, 1), np.uint8)

    def observation(self, observation: Any) -> np.ndarray:
        image = np.zeros((36, 36, 1), np.uint8)
        image[int(observation) * 5 : int(observation) * 5 + 5] = 255
        return image


OBSERVATION_WRAPPERS: dict[str, Callable[[gym.Env], gym.Env]] = {
    "box": VectorObservation,
    "dict": DictObservation,
    "image": ImageObservation,
}


def make_venv(
    action: str = "discrete",
    observation: str = "box",
    n_envs: int = 1,
    episode_steps: int = 5,
    make: Callable[[str], gym.Env] = masked_env,
) -> VecEnv:
    """``n_envs`` identically seeded envs, truncated by ``TimeLimit`` after ``episode_steps`` steps, in ``Monitor``.

    The identity envs draw their states from their own action space, so each is seeded here (the algorithm's
    ``seed`` reaches only the first env's); the invalid actions come from numpy's global generator, which the
    algorithm's ``seed`` sets.
    """

    def factory(index: int) -> Callable[[], gym.Env]:
        def build() -> gym.Env:
            env = make(action)
            env.action_space.seed(100 + index)
            return Monitor(TimeLimit(OBSERVATION_WRAPPERS[observation](env), max_episode_steps=episode_steps))

        return build

    return DummyVecEnv([factory(i) for i in range(n_envs)])


def policy_for(observation: str) -> str:
    return {"box": "MlpPolicy", "dict": "MultiInputPolicy", "image": "CnnPolicy"}[observation]


# ------------------------------------------------------------------------------------------------ helpers


def train(
    algorithm: type[SB3ContribMaskablePPO],
    env: VecEnv,
    policy: str = "MlpPolicy",
    iterations: int = 3,
    learn_kwargs: dict[str, Any] | None = None,
    **kwargs: Any,
) -> SB3ContribMaskablePPO:
    """A few PPO iterations with a tiny network: ``n_steps=16``, minibatches of 8, two epochs."""
    settings: dict[str, Any] = {
        "n_steps": 16,
        "batch_size": 8,
        "n_epochs": 2,
        "seed": 7,
        "policy_kwargs": TINY_MLP,
        "device": "cpu",
    }
    settings.update(kwargs)
    model = algorithm(policy, env, **settings)
    model.learn(iterations * model.n_steps * env.num_envs, **(learn_kwargs or {}))
    return model


def parameters(model: SB3ContribMaskablePPO) -> dict[str, torch.Tensor]:
    return {key: value.detach().clone() for key, value in model.policy.state_dict().items()}


def assert_same_parameters(ref: dict[str, torch.Tensor], ours: dict[str, torch.Tensor]) -> None:
    """Bit-identical: parity with sb3-contrib under one seed is exact, not close."""
    assert list(ours) == list(ref)
    for key in ref:
        assert torch.equal(ours[key], ref[key]), f"policy parameter {key!r} differs from sb3-contrib's"


def assert_trained(model: SB3ContribMaskablePPO, initial: dict[str, torch.Tensor]) -> None:
    """The parameters moved: a parity check on untouched weights would prove nothing."""
    moved = [key for key, value in parameters(model).items() if not torch.equal(value, initial[key])]
    assert "action_net.weight" in moved and any("value_net" in key for key in moved), moved


# ------------------------------------------------------------------------------------------------- parity


@pytest.mark.parametrize(
    ("action", "observation", "n_envs"),
    [
        ("discrete", "box", 1),
        ("discrete", "dict", 2),
        ("multidiscrete", "box", 2),
        ("multidiscrete", "dict", 1),
        ("multibinary", "box", 3),
        ("multibinary", "dict", 2),
    ],
)
def test_learns_the_same_parameters_as_sb3_contrib(action: str, observation: str, n_envs: int) -> None:
    policy = policy_for(observation)
    initial = parameters(train(MaskablePPO, make_venv(action, observation, n_envs), policy, iterations=0))
    ref = train(SB3ContribMaskablePPO, make_venv(action, observation, n_envs), policy)
    ours = train(MaskablePPO, make_venv(action, observation, n_envs), policy)

    expected = torchrl_mask.MaskableDictRolloutBuffer if observation == "dict" else torchrl_mask.MaskableRolloutBuffer
    assert type(ours.rollout_buffer) is expected
    assert tuple(ours.rollout_buffer.tensordict.batch_size) == (n_envs, 16), "the rollout lives in the TensorDict"
    assert ours.rollout_buffer.episode_starts[1:].any(), "no episode ended inside the rollout"
    assert_trained(ours, initial)
    assert_same_parameters(parameters(ref), parameters(ours))
    assert ours.num_timesteps == ref.num_timesteps == 3 * 16 * n_envs
    assert [info["r"] for info in ours.ep_info_buffer] == [info["r"] for info in ref.ep_info_buffer]


@pytest.mark.parametrize(
    ("observation", "buffer_class"),
    [("dict", torchrl_mask.MaskableDictRolloutBuffer), ("box", torchrl_mask.MaskableRolloutBuffer)],
)
def test_sb3_contrib_maskable_ppo_with_our_buffer_learns_the_same_parameters(
    observation: str, buffer_class: type
) -> None:
    policy = policy_for(observation)
    ref = train(SB3ContribMaskablePPO, make_venv("multidiscrete", observation, 2), policy)
    hosted = train(
        SB3ContribMaskablePPO, make_venv("multidiscrete", observation, 2), policy, rollout_buffer_class=buffer_class
    )

    assert type(hosted) is SB3ContribMaskablePPO
    assert type(hosted.rollout_buffer) is buffer_class
    assert_same_parameters(parameters(ref), parameters(hosted))


def test_a_memmap_backed_rollout_learns_the_same_parameters(tmp_path: Path) -> None:
    ref = train(SB3ContribMaskablePPO, make_venv("multidiscrete", "dict", 2), "MultiInputPolicy")
    ours = train(
        MaskablePPO,
        make_venv("multidiscrete", "dict", 2),
        "MultiInputPolicy",
        rollout_buffer_kwargs={"storage": "memmap", "memmap_dir": str(tmp_path)},
    )
    assert ours.rollout_buffer.tensordict.is_memmap()
    assert any(tmp_path.iterdir()), "the rollout was not written to files"
    assert_same_parameters(parameters(ref), parameters(ours))


def test_cnn_policy_on_image_observations_learns_the_same_parameters_as_sb3_contrib() -> None:
    cnn = {"net_arch": [], "features_extractor_kwargs": {"features_dim": 8}}
    ref = train(SB3ContribMaskablePPO, make_venv("discrete", "image", 2), "CnnPolicy", iterations=2, policy_kwargs=cnn)
    ours = train(MaskablePPO, make_venv("discrete", "image", 2), "CnnPolicy", iterations=2, policy_kwargs=cnn)

    assert ours.observation_space.shape == (1, 36, 36), "SB3 transposes channel-last images"
    assert ours.rollout_buffer.observations.dtype == np.uint8, "the images are stored as uint8"
    assert_same_parameters(parameters(ref), parameters(ours))


def test_timelimit_truncation_bootstraps_the_reward_with_the_terminal_value_as_sb3_contrib() -> None:
    # One rollout, no update yet: the stored rewards are what the truncation bootstrap made of the env's.
    models = []
    for algorithm in (SB3ContribMaskablePPO, MaskablePPO):
        model = algorithm("MultiInputPolicy", make_venv("discrete", "dict", 2), n_steps=16, seed=3, device="cpu")
        _, callback = model._setup_learn(32, None)
        assert model.collect_rollouts(model.env, callback, model.rollout_buffer, n_rollout_steps=16)
        models.append(model)
    ref, ours = models

    rewards = ours.rollout_buffer.rewards
    np.testing.assert_allclose(rewards, ref.rollout_buffer.rewards, rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(ours.rollout_buffer.returns, ref.rollout_buffer.returns, rtol=1e-5, atol=1e-5)
    # TimeLimit(5) ends an episode at steps 4, 9, 14 of each env; the identity env itself pays 0 or 1.
    ends = np.zeros_like(rewards, dtype=bool)
    ends[[4, 9, 14]] = True
    assert ours.rollout_buffer.episode_starts[[5, 10, 15]].all()
    assert not np.isin(rewards[ends], [0.0, 1.0]).any(), "truncated steps were not bootstrapped"
    assert np.isin(rewards[~ends], [0.0, 1.0]).all()


def test_use_masking_false_on_an_env_without_masks_learns_the_same_parameters_as_sb3_contrib() -> None:
    def unmasked(action: str) -> gym.Env:
        return IdentityEnv(dim=4, ep_length=10_000)

    runs = {
        name: train(algorithm, make_venv(n_envs=2, make=unmasked), learn_kwargs={"use_masking": False})
        for name, algorithm in LIBRARIES.items()
    }
    assert_same_parameters(parameters(runs["sb3-contrib"]), parameters(runs["torchrl_mask"]))
    assert runs["torchrl_mask"].rollout_buffer.action_masks.all(), "no mask given: every action is allowed"


def test_learn_with_masking_on_an_env_without_masks_raises_as_sb3_contrib() -> None:
    model = MaskablePPO("MlpPolicy", make_venv(make=lambda action: IdentityEnv(dim=4)), n_steps=8, seed=0)
    with pytest.raises(ValueError, match=r"does not support action masking\. Consider using ActionMasker"):
        model.learn(8)


def test_action_masker_wrapper_supplies_the_masks_as_in_sb3_contrib() -> None:
    def allow_below_state(env: gym.Env) -> np.ndarray:
        return np.arange(4) <= env.unwrapped.state  # type: ignore[attr-defined]

    def masked_by_wrapper(action: str) -> gym.Env:
        return ActionMasker(IdentityEnv(dim=4, ep_length=10_000), allow_below_state)

    runs = {
        name: train(algorithm, make_venv(n_envs=2, make=masked_by_wrapper)) for name, algorithm in LIBRARIES.items()
    }
    assert_same_parameters(parameters(runs["sb3-contrib"]), parameters(runs["torchrl_mask"]))
    masks = runs["torchrl_mask"].rollout_buffer.action_masks
    assert not masks.all(), "the wrapper's masks were not used"
    actions = runs["torchrl_mask"].rollout_buffer.actions.astype(int)
    assert np.take_along_axis(masks, actions, axis=-1).all(), "an action outside the mask was taken"


# ------------------------------------------------------------------------------------------ save and load


@pytest.mark.parametrize(("saver", "loader"), [("torchrl_mask", "sb3-contrib"), ("sb3-contrib", "torchrl_mask")])
def test_a_model_saved_by_one_library_loads_in_the_other_with_identical_parameters(
    saver: str, loader: str, tmp_path: Path
) -> None:
    saved = train(LIBRARIES[saver], make_venv("discrete", "dict", 2), "MultiInputPolicy", iterations=1)
    saved.save(tmp_path / "model.zip")

    loaded = LIBRARIES[loader].load(tmp_path / "model.zip", env=make_venv("discrete", "dict", 2), device="cpu")

    assert type(loaded) is LIBRARIES[loader]
    for key, value in parameters(saved).items():
        assert torch.equal(parameters(loaded)[key], value), key
    obs = make_venv("discrete", "dict", 2).reset()
    masks = np.stack(make_venv("discrete", "dict", 2).env_method("action_masks"))
    np.testing.assert_array_equal(
        loaded.predict(obs, action_masks=masks, deterministic=True)[0],
        saved.predict(obs, action_masks=masks, deterministic=True)[0],
    )
    # Each library then rolls out into its own buffer: the save names no buffer class.
    expected = {"torchrl_mask": torchrl_mask, "sb3-contrib": sb3c_buffers}[loader].MaskableDictRolloutBuffer
    assert type(loaded.rollout_buffer) is expected
    loaded.learn(32)  # and training goes on


@pytest.mark.slow  # starts processes: kept out of make test-fast
def test_sb3_contrib_loads_our_saved_model_where_torchrl_mask_is_not_installed(tmp_path: Path) -> None:
    model = train(MaskablePPO, make_venv("discrete", "dict", 1), "MultiInputPolicy", iterations=1)
    model.save(tmp_path / "model.zip")
    torch.save(parameters(model), tmp_path / "expected.pt")
    script = f"""
import sys
sys.modules["torchrl_mask"] = None  # import torchrl_mask now fails, as where it is not installed
import torch
from sb3_contrib import MaskablePPO
loaded = MaskablePPO.load({str(tmp_path / "model.zip")!r}, device="cpu")
expected = torch.load({str(tmp_path / "expected.pt")!r})
assert all(torch.equal(value, expected[key]) for key, value in loaded.policy.state_dict().items())
print(type(loaded.rollout_buffer).__module__)
"""
    run = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120, check=False)
    assert run.returncode == 0, run.stderr
    assert run.stdout.strip() == "sb3_contrib.common.maskable.buffers"


def test_a_loaded_model_keeps_learning_the_same_parameters_in_either_library(tmp_path: Path) -> None:
    train(MaskablePPO, make_venv("multibinary", "box", 2), iterations=1).save(tmp_path / "model.zip")
    continued = {}
    for name, algorithm in LIBRARIES.items():
        model = algorithm.load(tmp_path / "model.zip", env=make_venv("multibinary", "box", 2), device="cpu")
        model.set_random_seed(11)
        model.learn(64, reset_num_timesteps=False)
        continued[name] = parameters(model)
    assert_same_parameters(continued["sb3-contrib"], continued["torchrl_mask"])


# -------------------------------------------------------------------------------------- predict, evaluate


@pytest.mark.parametrize("action", ["discrete", "multidiscrete", "multibinary"])
def test_predict_with_masks_only_picks_allowed_actions(action: str) -> None:
    env = make_venv(action, "box", n_envs=4)
    model = MaskablePPO("MlpPolicy", env, n_steps=16, seed=0, policy_kwargs=TINY_MLP)
    spec = torchrl_mask.rollout.masks.mask_spec(env.action_space)
    offsets = np.cumsum((0, *spec.groups))[:-1]
    obs = env.reset()
    for step in range(30):
        masks = np.stack(env.env_method("action_masks"))
        actions, _ = model.predict(obs, action_masks=masks, deterministic=step % 2 == 0)
        chosen = np.asarray(actions).reshape(4, -1) + offsets  # index of each sub-action in the mask row
        assert np.take_along_axis(masks, chosen, axis=1).all(), f"step {step}: an action outside the mask"
        obs = env.step(np.asarray(actions))[0]


def test_predict_refuses_masks_add_refuses_and_writes_nothing() -> None:
    env = InvalidActionEnvDiscrete(dim=4, n_invalid_actions=1)
    model = MaskablePPO("MlpPolicy", env, n_steps=16, seed=0, policy_kwargs=TINY_MLP)
    obs, _ = env.reset(seed=0)
    for bad, message in [
        (np.zeros(4, bool), "allow no action"),
        (np.array([1.0, np.nan, 1.0, 0.0]), "other than 0"),
        (np.ones(5, bool), "shape"),
    ]:
        with pytest.raises(ValueError, match=message):
            model.predict(obs, action_masks=bad)


def test_predict_without_masks_reads_the_dict_observations_mask_entry() -> None:
    env = MaskInObservation(InvalidActionEnvDiscrete(dim=8, n_invalid_actions=5))
    model = MaskablePPO("MultiInputPolicy", env, n_steps=16, seed=0, policy_kwargs=TINY_MLP)
    obs, _ = env.reset(seed=0)
    for _ in range(100):
        action, _ = model.predict(obs)
        assert obs["action_mask"][int(action)] == 1
        obs = env.step(int(action))[0]


def test_predict_without_masks_on_a_masked_env_warns_that_illegal_actions_can_be_drawn() -> None:
    env = InvalidActionEnvDiscrete(dim=8, n_invalid_actions=5)
    model = MaskablePPO("MlpPolicy", env, n_steps=16, seed=0, policy_kwargs=TINY_MLP)
    with pytest.warns(torchrl_mask.algorithms.ppo.UnmaskedPredictWarning, match="get_action_masks"):
        model.predict(env.reset(seed=0)[0])


class CountInvalidActions(gym.Wrapper):
    """Counts the actions taken that ``action_masks()`` disallowed."""

    def __init__(self, env: gym.Env) -> None:
        super().__init__(env)
        self.invalid = 0

    def step(self, action: Any) -> Any:
        if not self.env.get_wrapper_attr("action_masks")()[int(action)]:
            self.invalid += 1
        return self.env.step(action)


@pytest.mark.parametrize("use_masking", [True, False])
def test_evaluate_policy_respects_masks_only_when_masking(use_masking: bool) -> None:
    env = Monitor(CountInvalidActions(InvalidActionEnvDiscrete(dim=10, ep_length=20, n_invalid_actions=8)))
    model = MaskablePPO("MlpPolicy", env, n_steps=16, seed=0, policy_kwargs=TINY_MLP)

    _, lengths = evaluate_policy(
        model, env, n_eval_episodes=5, deterministic=False, return_episode_rewards=True, use_masking=use_masking
    )

    assert lengths == [20] * 5
    invalid = env.get_wrapper_attr("invalid")
    if use_masking:
        assert invalid == 0
    else:  # 8 of 10 actions are invalid at each step: an untrained policy hits them
        assert invalid > 20


def test_maskable_eval_callback_evaluates_and_saves_the_best_model_as_with_sb3_contrib(tmp_path: Path) -> None:
    results = {}
    for name, algorithm in LIBRARIES.items():
        callback = MaskableEvalCallback(
            make_venv("discrete", "dict", 1),
            eval_freq=16,
            n_eval_episodes=2,
            best_model_save_path=str(tmp_path / name),
            log_path=str(tmp_path / name),
            verbose=0,
        )
        model = train(
            algorithm, make_venv("discrete", "dict", 2), "MultiInputPolicy", learn_kwargs={"callback": callback}
        )
        results[name] = (model, np.load(tmp_path / name / "evaluations.npz"))

    (ref, ref_log), (ours, our_log) = results["sb3-contrib"], results["torchrl_mask"]
    assert our_log["timesteps"].tolist() == [32, 64, 96]
    np.testing.assert_allclose(our_log["results"], ref_log["results"])
    assert_same_parameters(parameters(ref), parameters(ours))
    best = MaskablePPO.load(tmp_path / "torchrl_mask" / "best_model.zip", device="cpu")
    assert isinstance(best.rollout_buffer, torchrl_mask.MaskableDictRolloutBuffer)


# --------------------------------------------------------------------------------------- API and logging


COLLECTOR_ARGUMENTS = ["collector", "observation_keys", "reward_key", "batch_timeout", "shutdown"]


def test_accepts_every_argument_of_sb3_contrib_maskable_ppo() -> None:
    for method in ("__init__", "learn", "predict", "load", "save", "collect_rollouts"):
        ours = inspect.signature(getattr(MaskablePPO, method))
        ref = inspect.signature(getattr(SB3ContribMaskablePPO, method))
        names, extra = list(ours.parameters), list(ours.parameters)[len(ref.parameters) :]
        assert names[: len(ref.parameters)] == list(ref.parameters), method
        # learn adds keyword-only arguments for a TorchRL collector: every call sb3-contrib accepts means the same
        assert extra == (COLLECTOR_ARGUMENTS if method == "learn" else []), method
        assert all(ours.parameters[name].kind is inspect.Parameter.KEYWORD_ONLY for name in extra), method
        for name, param in ref.parameters.items():
            assert ours.parameters[name].default == param.default, f"{method}({name}=...)"
    assert MaskablePPO.policy_aliases == SB3ContribMaskablePPO.policy_aliases


@pytest.mark.parametrize(
    ("observation", "rollout_buffer_class", "expected"),
    [
        ("box", None, torchrl_mask.MaskableRolloutBuffer),
        ("dict", None, torchrl_mask.MaskableDictRolloutBuffer),
        ("box", sb3c_buffers.MaskableRolloutBuffer, torchrl_mask.MaskableRolloutBuffer),
        ("dict", sb3c_buffers.MaskableDictRolloutBuffer, torchrl_mask.MaskableDictRolloutBuffer),
    ],
)
def test_picks_the_tensordict_buffer_for_the_observation_space(
    observation: str, rollout_buffer_class: type | None, expected: type
) -> None:
    model = MaskablePPO(
        policy_for(observation),
        make_venv(observation=observation),
        n_steps=8,
        rollout_buffer_class=rollout_buffer_class,
        rollout_buffer_kwargs={"check_masks": False},
    )
    assert type(model.rollout_buffer) is expected
    assert model.rollout_buffer_class is rollout_buffer_class, "the attribute keeps the value given"
    assert model.rollout_buffer.check_masks is False, "rollout_buffer_kwargs reach the buffer"


def test_a_custom_rollout_buffer_class_is_kept() -> None:
    class Custom(torchrl_mask.MaskableRolloutBuffer):
        pass

    model = MaskablePPO("MlpPolicy", make_venv(), n_steps=8, rollout_buffer_class=Custom)
    assert type(model.rollout_buffer) is Custom


@pytest.mark.filterwarnings("ignore:rich is experimental")
def test_learn_logs_to_tensorboard_and_shows_a_progress_bar(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    model = train(
        MaskablePPO,
        make_venv("discrete", "dict", 2),
        "MultiInputPolicy",
        iterations=2,
        tensorboard_log=str(tmp_path),
        learn_kwargs={"progress_bar": True, "tb_log_name": "run"},
    )

    assert model.num_timesteps == 64
    runs = list(tmp_path.glob("run_*"))
    assert len(runs) == 1
    events = EventAccumulator(str(runs[0]))
    events.Reload()
    tags = set(events.Tags()["scalars"])
    assert {"rollout/ep_rew_mean", "train/value_loss", "train/approx_kl", "time/fps"} <= tags, tags
    assert "64/64" in capsys.readouterr().out.replace(" ", "")


# ---------------------------------------------------------------------------------------------- learning


@pytest.mark.slow
def test_learns_a_task_that_a_random_masked_policy_fails() -> None:
    env = InvalidActionEnvDiscrete(dim=70, n_invalid_actions=55)
    model = MaskablePPO("MlpPolicy", env, gamma=0.1, clip_range=0.4, n_epochs=2, seed=0, device="cpu")
    untrained, _ = evaluate_policy(model, env, n_eval_episodes=20, warn=False)

    # 2048 steps (one rollout) reach 82-88 for seeds 0-3, in sb3-contrib as here; two rollouts reach 95-98.
    model.learn(4096)
    trained, _ = evaluate_policy(model, env, n_eval_episodes=20, warn=False)

    assert untrained < 20, "the task is not hard enough to tell learning apart"
    assert trained >= 90


def test_default_settings_learn_sb3_contribs_parameters_bit_for_bit_over_ten_updates() -> None:
    # 8 envs, Dict observations, episodes of 7 steps inside rollouts of 32: the default GAE must be exact, since
    # Adam amplifies a 1e-7 difference in the advantages into visibly different parameters within two updates.
    kwargs: dict[str, Any] = {"n_steps": 32, "batch_size": 64, "n_epochs": 2, "gae_lambda": 0.95}
    initial = parameters(train(MaskablePPO, make_venv("multidiscrete", "dict", 8, 7), "MultiInputPolicy", 0, **kwargs))
    ref = train(SB3ContribMaskablePPO, make_venv("multidiscrete", "dict", 8, 7), "MultiInputPolicy", 10, **kwargs)
    ours = train(MaskablePPO, make_venv("multidiscrete", "dict", 8, 7), "MultiInputPolicy", 10, **kwargs)
    assert ours.rollout_buffer.gae_method == "loop"
    assert ours._n_updates == ref._n_updates == 10 * 2
    assert_trained(ours, initial)
    assert_same_parameters(parameters(ref), parameters(ours))


@pytest.mark.parametrize(
    "options",
    [
        {"learning_rate": lambda progress: 3e-3 * progress, "clip_range": lambda progress: 0.1 + 0.2 * progress},
        {"target_kl": 1e-6},
        {"clip_range_vf": 0.2, "normalize_advantage": False, "ent_coef": 0.01},
        {"policy_kwargs": {**TINY_MLP, "optimizer_kwargs": {"eps": 1e-8, "betas": (0.5, 0.99)}}},
        {"policy_kwargs": {**TINY_MLP, "share_features_extractor": False}},
    ],
    ids=["schedules", "target_kl", "clip_range_vf", "adam_kwargs", "separate_extractors"],
)
def test_train_options_learn_sb3_contribs_parameters_and_optimizer_state(options: dict[str, Any]) -> None:
    # What train() reads beyond the defaults (schedules change Adam's lr every update, target_kl stops an epoch
    # early, clip_range_vf and ent_coef change the loss): parameters and Adam's moments stay sb3-contrib's bits.
    ref = train(SB3ContribMaskablePPO, make_venv("discrete", "dict", 2), "MultiInputPolicy", 4, **options)
    ours = train(MaskablePPO, make_venv("discrete", "dict", 2), "MultiInputPolicy", 4, **options)
    assert ours._n_updates == ref._n_updates == (4 if "target_kl" in options else 8)  # each update stops early
    assert_same_parameters(parameters(ref), parameters(ours))
    ref_state, our_state = ref.policy.optimizer.state_dict(), ours.policy.optimizer.state_dict()
    assert our_state["param_groups"] == ref_state["param_groups"]
    for index, entry in ref_state["state"].items():
        for key, value in entry.items():
            assert torch.equal(our_state["state"][index][key], value), (index, key)


@pytest.mark.parametrize("algo", ["MaskablePPO", "MaskableRecurrentPPO"])
def test_a_rollout_whose_last_minibatch_is_one_row_is_refused_when_the_model_is_made(algo: str) -> None:
    # 97 rows in minibatches of 32: a last minibatch of one row, whose normalised advantage is NaN, and so are the
    # parameters after the first update. SB3's PPO refuses it; the CLI did, the Python API did not.
    cls = {"MaskablePPO": MaskablePPO, "MaskableRecurrentPPO": torchrl_mask.MaskableRecurrentPPO}[algo]
    policy = "MlpPolicy" if algo == "MaskablePPO" else "MlpLstmPolicy"
    env = InvalidActionEnvDiscrete(dim=4, n_invalid_actions=1)
    with pytest.raises(ValueError, match="97 rows in minibatches of batch_size=32 leaves a last minibatch of one row"):
        cls(policy, env, n_steps=97, batch_size=32)
    with pytest.raises(ValueError, match="use batch_size >= 2"):
        cls(policy, env, n_steps=96, batch_size=1)
    cls(policy, env, n_steps=97, batch_size=32, normalize_advantage=False)  # no normalisation: no NaN, accepted
    cls(policy, env, n_steps=96, batch_size=32)
