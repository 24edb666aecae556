"""MaskableRecurrentPPO against sb3-contrib: RecurrentPPO's parameters bit for bit without masks; with masks,
sb3-contrib's masked distributions on the LSTM's logits, legal actions everywhere, and a memory task it learns."""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np
import pytest
import torch
from collector_envs import CueRecall
from gymnasium import spaces
from sb3_contrib import RecurrentPPO
from sb3_contrib.common.envs import (
    InvalidActionEnvDiscrete,
    InvalidActionEnvMultiBinary,
    InvalidActionEnvMultiDiscrete,
)
from sb3_contrib.common.maskable.distributions import make_masked_proba_distribution
from sb3_contrib.common.maskable.evaluation import evaluate_policy
from stable_baselines3.common.env_util import make_vec_env

from torchrl_mask import MaskablePPO, MaskableRecurrentPPO
from torchrl_mask.rollout.recurrent_buffers import MaskableRecurrentDictRolloutBuffer, MaskableRecurrentRolloutBuffer

N_STEPS, N_ENVS, BATCH, EPOCHS = 16, 2, 12, 2  # batch 12 of 32 steps: sequences split and padded


class SplitCartPole(gym.ObservationWrapper):
    """CartPole with a ``Dict`` observation: the cart's position and velocity, and the pole's."""

    def __init__(self, env: gym.Env) -> None:
        super().__init__(env)
        box = spaces.Box(-np.inf, np.inf, (2,), np.float32)
        self.observation_space = spaces.Dict({"cart": box, "pole": box})

    def observation(self, observation: np.ndarray) -> dict[str, np.ndarray]:
        return {"cart": observation[:2], "pole": observation[2:]}


def cartpole() -> gym.Env:
    return gym.make("CartPole-v1")


def dict_cartpole() -> gym.Env:
    return SplitCartPole(gym.make("CartPole-v1"))


def invalid_discrete() -> gym.Env:
    return InvalidActionEnvDiscrete(dim=5, ep_length=7, n_invalid_actions=3)


def invalid_multidiscrete() -> gym.Env:
    # One-hot observations: sb3-contrib's LSTM cannot take a MultiDiscrete observation space (its features_dim is
    # a NumPy integer, which nn.LSTM refuses).
    return gym.wrappers.FlattenObservation(InvalidActionEnvMultiDiscrete(dims=[3, 4], ep_length=7, n_invalid_actions=3))


def make(cls: type, make_env: Any, policy: str = "MlpLstmPolicy", seed: int = 3, **policy_kwargs: Any) -> Any:
    env = make_vec_env(make_env, n_envs=N_ENVS, seed=seed)
    kwargs = {"lstm_hidden_size": 8, "net_arch": [16], **policy_kwargs}
    return cls(policy, env, n_steps=N_STEPS, batch_size=BATCH, n_epochs=EPOCHS, seed=seed, policy_kwargs=kwargs)


PARITY = {
    "box-discrete-separate-lstms": (cartpole, "MlpLstmPolicy", {}),
    "box-discrete-unshared-extractors": (invalid_discrete, "MlpLstmPolicy", {"share_features_extractor": False}),
    "multidiscrete-shared-lstm": (
        invalid_multidiscrete,
        "MlpLstmPolicy",
        {"shared_lstm": True, "enable_critic_lstm": False},
    ),
    "dict-discrete-no-critic-lstm-2-layers": (
        dict_cartpole,
        "MultiInputLstmPolicy",
        {"enable_critic_lstm": False, "n_lstm_layers": 2},
    ),
}


@pytest.mark.parametrize("case", PARITY)
def test_unmasked_learns_recurrent_ppos_parameters_bit_for_bit(case: str) -> None:
    make_env, policy, policy_kwargs = PARITY[case]
    ref = make(RecurrentPPO, make_env, policy, **policy_kwargs).learn(5 * N_STEPS * N_ENVS)
    ours = make(MaskableRecurrentPPO, make_env, policy, **policy_kwargs).learn(5 * N_STEPS * N_ENVS, use_masking=False)
    assert ours._n_updates == ref._n_updates == 10
    ref_params, our_params = ref.policy.state_dict(), ours.policy.state_dict()
    assert ref_params.keys() == our_params.keys()
    for name, value in ref_params.items():
        assert torch.equal(value, our_params[name]), name
    assert np.array_equal(ref.rollout_buffer.actions, ours.rollout_buffer.actions)


def test_the_buffer_fits_the_observation_space() -> None:
    assert isinstance(make(MaskableRecurrentPPO, cartpole).rollout_buffer, MaskableRecurrentRolloutBuffer)
    dict_model = make(MaskableRecurrentPPO, dict_cartpole, "MultiInputLstmPolicy")
    assert isinstance(dict_model.rollout_buffer, MaskableRecurrentDictRolloutBuffer)


def assert_same(ref: Any, ours: Any, name: str) -> None:
    """Bit-equal tensors, also inside dicts and (named) tuples such as ``RNNStates``."""
    if isinstance(ref, dict):
        assert list(ours) == list(ref), name
        for key in ref:
            assert_same(ref[key], ours[key], f"{name}[{key!r}]")
    elif isinstance(ref, tuple):
        assert len(ours) == len(ref), name
        for index, (ref_item, our_item) in enumerate(zip(ref, ours, strict=True)):
            assert_same(ref_item, our_item, f"{name}[{index}]")
    else:
        assert ours.dtype == ref.dtype and torch.equal(ours, ref), name


def legal(actions: np.ndarray, masks: np.ndarray, action_space: spaces.Space) -> np.ndarray:
    """Whether each action (``(batch, n_dims)`` or ``(batch,)``) is allowed by its ``(batch, mask_dims)`` mask."""
    if isinstance(action_space, spaces.MultiBinary):
        nvec = [2] * int(action_space.n)
    else:
        nvec = [action_space.n] if isinstance(action_space, spaces.Discrete) else list(action_space.nvec)
    offsets = np.cumsum([0, *nvec[:-1]])
    index = actions.reshape(len(masks), len(nvec)).astype(int) + offsets
    return np.take_along_axis(masks > 0.5, index, axis=1).all(axis=1)


def invalid_multibinary() -> gym.Env:
    return gym.wrappers.FlattenObservation(InvalidActionEnvMultiBinary(dims=4, ep_length=7, n_invalid_actions=2))


MASKED = {"discrete": invalid_discrete, "multidiscrete": invalid_multidiscrete, "multibinary": invalid_multibinary}


@pytest.mark.parametrize("case", MASKED)
def test_rollout_log_probs_are_sb3_contribs_masked_distribution_of_the_lstm_logits(case: str) -> None:
    model = make(MaskableRecurrentPPO, MASKED[case])
    logits: list[torch.Tensor] = []
    hook = model.policy.action_net.register_forward_hook(lambda _m, _i, out: logits.append(out.detach()))
    model.learn(N_STEPS * N_ENVS)  # one rollout, then one update (whose own calls the hook records after these)
    hook.remove()
    buffer, space = model.rollout_buffer, model.action_space
    steps = buffer.buffer_size * buffer.n_envs
    # The buffer's arrays are flattened env-major by get(); the hook saw steps time-major, n_envs at a time.
    masks = buffer.action_masks.reshape(buffer.n_envs, buffer.buffer_size, -1).swapaxes(0, 1)
    actions = buffer.actions.reshape(buffer.n_envs, buffer.buffer_size, -1).swapaxes(0, 1)
    log_probs = buffer.log_probs.reshape(buffer.n_envs, buffer.buffer_size).T
    assert legal(actions.reshape(steps, -1), masks.reshape(steps, -1), space).all()
    assert (masks < 0.5).any()
    reference = make_masked_proba_distribution(space)
    for step in range(buffer.buffer_size):
        reference.proba_distribution(logits[step])
        reference.apply_masking(masks[step])
        expected = reference.log_prob(
            torch.as_tensor(actions[step]).squeeze(-1) if case == "discrete" else torch.as_tensor(actions[step])
        )
        assert torch.equal(expected, torch.as_tensor(log_probs[step])), step


@pytest.mark.parametrize("case", MASKED)
def test_training_evaluates_each_minibatch_under_its_masks(case: str) -> None:
    model = make(MaskableRecurrentPPO, MASKED[case])
    policy, space = model.policy, model.action_space
    evaluate, checked = policy.evaluate_actions, []

    def checking(obs: Any, actions: torch.Tensor, lstm_states: Any, episode_starts: torch.Tensor) -> Any:
        logits: list[torch.Tensor] = []
        hook = policy.action_net.register_forward_hook(lambda _m, _i, out: logits.append(out))
        values, log_prob, entropy = evaluate(obs, actions, lstm_states, episode_starts)
        hook.remove()
        masks = model.rollout_buffer.last_action_masks
        assert masks is not None and legal(actions.numpy(), masks.numpy(), space).all()
        reference = make_masked_proba_distribution(space)
        reference.proba_distribution(logits[0])
        reference.apply_masking(masks)
        assert torch.equal(log_prob, reference.log_prob(actions))
        assert torch.equal(entropy, reference.entropy())
        checked.append(bool((masks < 0.5).any()))
        return values, log_prob, entropy

    policy.evaluate_actions = checking  # type: ignore[method-assign]
    model.learn(2 * N_STEPS * N_ENVS)
    assert len(checked) == 2 * EPOCHS * 3 and any(checked)  # 32 steps in minibatches of 12: 3 per epoch


class Strict(gym.Wrapper):
    """Raises in ``step`` on an action the env's mask forbids."""

    def step(self, action: Any) -> Any:
        masks = np.asarray(self.env.unwrapped.action_masks())[None]
        assert legal(np.asarray(action)[None], masks, self.action_space).all(), (action, masks)
        return self.env.step(action)

    def action_masks(self) -> np.ndarray:
        return np.asarray(self.env.unwrapped.action_masks())


@pytest.mark.parametrize("case", MASKED)
def test_training_predict_and_evaluate_policy_take_only_legal_actions(case: str) -> None:
    model = make(MaskableRecurrentPPO, lambda: Strict(MASKED[case]()))
    model.learn(3 * N_STEPS * N_ENVS)  # the env raises on an illegal action
    env = Strict(MASKED[case]())
    obs, _ = env.reset(seed=0)
    state, start = None, np.array([True])
    for _ in range(30):
        action, state = model.predict(obs, state=state, episode_start=start, action_masks=env.action_masks())
        obs, _, terminated, truncated, _ = env.step(action)
        start = np.array([terminated or truncated])
        if terminated or truncated:
            obs, _ = env.reset()
    evaluate_policy(model, make_vec_env(lambda: Strict(MASKED[case]()), n_envs=2, seed=1), n_eval_episodes=6)


def test_masking_needs_an_env_with_action_masks() -> None:
    with pytest.raises(ValueError, match="action masking"):
        make(MaskableRecurrentPPO, cartpole).learn(N_STEPS * N_ENVS)


def test_masks_need_a_discrete_or_multidiscrete_action_space() -> None:
    env = gym.make("Pendulum-v1")
    model = MaskableRecurrentPPO("MlpLstmPolicy", env, n_steps=8, policy_kwargs={"lstm_hidden_size": 4})
    with pytest.raises(ValueError, match="Discrete, MultiDiscrete or MultiBinary"):
        model.predict(np.zeros(3, np.float32), action_masks=np.ones(1))


def success_rate(model: Any, seed: int, n_envs: int = 8, rounds: int = 25, delay: int = 2) -> float:
    """Deterministic wins per episode of ``CueRecall(delay)`` under the masks. Not sb3-contrib's masked
    ``evaluate_policy``: with masks it drops the LSTM state ``predict`` returns (``actions, state = ...``, then
    ``state=states``)."""
    env = make_vec_env(CueRecall, n_envs=n_envs, seed=seed, env_kwargs={"delay": delay})
    obs, state, starts, wins, episodes = env.reset(), None, np.ones(n_envs, bool), 0.0, 0
    recurrent = isinstance(model, MaskableRecurrentPPO)
    while episodes < n_envs * rounds:
        masks = np.stack(env.env_method("action_masks"))
        if recurrent:
            actions, state = model.predict(
                obs, state=state, episode_start=starts, deterministic=True, action_masks=masks
            )
        else:
            actions, _ = model.predict(obs, deterministic=True, action_masks=masks)
        obs, rewards, starts, _ = env.step(actions)
        wins, episodes = wins + float(rewards.sum()), episodes + int(starts.sum())
    return wins / episodes


@pytest.mark.slow
@pytest.mark.parametrize("seed", range(2))
def test_a_memory_task_gated_by_masks_is_learned_with_the_lstm_and_not_without(seed: int) -> None:
    # Measured at these settings: success 1.0 for seeds 0-19 with the LSTM, 0.45-0.52 without (lr 3e-3 and 8000
    # steps failed one seed in ten). Two seeds here, to keep the suite's time.
    kwargs = {"n_steps": 16, "batch_size": 64, "n_epochs": 4, "learning_rate": 1e-3, "seed": seed}
    env = make_vec_env(CueRecall, n_envs=8, seed=seed)
    recurrent = MaskableRecurrentPPO(
        "MlpLstmPolicy", env, policy_kwargs={"lstm_hidden_size": 16, "net_arch": [16]}, **kwargs
    )
    feedforward = MaskablePPO(
        "MlpPolicy", make_vec_env(CueRecall, n_envs=8, seed=seed), policy_kwargs={"net_arch": [16]}, **kwargs
    )
    assert success_rate(recurrent.learn(12000), seed + 100) >= 0.9
    assert success_rate(feedforward.learn(12000), seed + 100) <= 0.65


def test_the_policy_aliases_are_sb3_contribs_lstm_policies_with_masks() -> None:
    from sb3_contrib.ppo_recurrent import CnnLstmPolicy, MlpLstmPolicy, MultiInputLstmPolicy

    from torchrl_mask.algorithms.recurrent_policies import MaskableRecurrentActorCriticPolicy

    for name, base in [("MlpLstmPolicy", MlpLstmPolicy), ("CnnLstmPolicy", CnnLstmPolicy)]:
        assert issubclass(MaskableRecurrentPPO.policy_aliases[name], base)
    assert issubclass(MaskableRecurrentPPO.policy_aliases["MultiInputLstmPolicy"], MultiInputLstmPolicy)
    assert all(
        issubclass(cls, MaskableRecurrentActorCriticPolicy) for cls in MaskableRecurrentPPO.policy_aliases.values()
    )


def test_a_saved_model_loads_and_predicts_the_same_masked_actions(tmp_path: Any) -> None:
    model = make(MaskableRecurrentPPO, invalid_discrete)
    model.learn(N_STEPS * N_ENVS)
    model.save(tmp_path / "model.zip")
    loaded = MaskableRecurrentPPO.load(tmp_path / "model.zip")
    assert type(loaded.policy) is type(model.policy)
    obs, masks = np.array([1, 3]), np.array([[0, 0, 1, 1, 0], [1, 0, 0, 0, 0]], bool)
    for chosen in (model, loaded):
        actions, _ = chosen.predict(obs, deterministic=True, action_masks=masks)
        assert legal(actions, masks, model.action_space).all()
    assert np.array_equal(
        model.predict(obs, deterministic=True, action_masks=masks)[0],
        loaded.predict(obs, deterministic=True, action_masks=masks)[0],
    )


def test_the_command_lines_evaluation_of_a_recurrent_model_takes_only_legal_actions() -> None:
    from torchrl_mask.app import results

    model = make(MaskableRecurrentPPO, invalid_discrete).learn(N_STEPS * N_ENVS)
    evaluation = results.evaluate(model, lambda: Strict(invalid_discrete()), episodes=4, seed=0)
    assert "mean" in evaluation["masked"] and "mean" in evaluation["random"], evaluation  # Strict raises otherwise


class _MaskInObservationOnly(gym.Env):
    """A Dict observation whose ``"action_mask"`` entry is the only place the mask lives (no ``action_masks()``),
    and a step that raises on a forbidden action."""

    def __init__(self) -> None:
        self.observation_space = spaces.Dict(
            {"obs": spaces.Box(-1.0, 1.0, (3,), np.float32), "action_mask": spaces.MultiBinary(4)}
        )
        self.action_space = spaces.Discrete(4)
        self._mask = np.ones(4, dtype=np.int8)
        self._t = 0

    def _observe(self) -> dict[str, np.ndarray]:
        self._mask = (self.np_random.random(4) < 0.5).astype(np.int8)
        self._mask[self.np_random.integers(4)] = 1
        return {"obs": self.np_random.uniform(-1, 1, 3).astype(np.float32), "action_mask": self._mask.copy()}

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[Any, dict]:
        super().reset(seed=seed)
        self._t = 0
        return self._observe(), {}

    def step(self, action: Any) -> tuple[Any, float, bool, bool, dict]:
        assert self._mask[int(action)], f"forbidden action {action} under mask {self._mask}"
        self._t += 1
        return self._observe(), float(action == 0), self._t >= 10, False, {}


def test_masks_in_a_dict_observation_entry_are_read_and_kept_with_the_rollout() -> None:
    env = make_vec_env(_MaskInObservationOnly, n_envs=2, seed=0)
    model = MaskableRecurrentPPO(
        "MultiInputLstmPolicy",
        env,
        n_steps=16,
        batch_size=16,
        n_epochs=1,
        seed=0,
        policy_kwargs={"lstm_hidden_size": 8, "net_arch": [8]},
    )
    model.learn(64)  # the env raises on a forbidden action
    buffer = model.rollout_buffer
    stored = buffer.tensordict["action_mask"]
    observed = buffer.tensordict["observation", "action_mask"].to(torch.bool)
    assert torch.equal(stored, observed)


def test_masks_in_the_infos_are_read_from_each_step_and_each_reset() -> None:
    # Taxi reports its mask in info["action_mask"]; StrictMask raises on any action that mask forbids. Its
    # 200-step time limit ends episodes inside the rollouts, so the masks after each reset are read too.
    from collector_envs import TAXI, StrictMask

    env = make_vec_env(lambda: StrictMask(gym.make(TAXI), "info"), n_envs=2, seed=0)
    model = MaskableRecurrentPPO(
        "MlpLstmPolicy",
        env,
        n_steps=128,
        batch_size=64,
        n_epochs=1,
        seed=0,
        policy_kwargs={"lstm_hidden_size": 8, "net_arch": [8]},
    )
    model.learn(512)
    stored = model.rollout_buffer.tensordict["action_mask"]
    assert not bool(stored.all()), "Taxi's masks forbid moves into walls: some entries must be False"
    assert bool(model.rollout_buffer.tensordict["is_init"][:, 1:].any()), "no episode ended inside a rollout"


class _CyclingInfoMask(gym.Env):
    """The mask lives only in ``info["action_mask"]`` and allows one action, ``t % 4``, which changes every step;
    ``step`` counts the actions that mask forbids (no episode ends, so no reset info serves a later step)."""

    observation_space = spaces.Box(-1.0, 1.0, (2,), np.float32)
    action_space = spaces.Discrete(4)

    def __init__(self) -> None:
        self.t, self.illegal = 0, 0

    def _info(self) -> dict[str, np.ndarray]:
        return {"action_mask": np.arange(4) == self.t % 4}

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[Any, dict]:
        super().reset(seed=seed)
        self.t = 0
        return np.zeros(2, np.float32), self._info()

    def step(self, action: Any) -> tuple[Any, float, bool, bool, dict]:
        self.illegal += int(action) != self.t % 4
        self.t += 1
        return np.zeros(2, np.float32), 0.0, False, False, self._info()


@pytest.mark.parametrize("n_envs", [1, 3])
def test_info_masks_at_each_rollouts_first_step_are_the_last_steps_not_the_resets(n_envs: int) -> None:
    # 5 steps per rollout: every rollout after the first starts at a t the reset's mask (action 0) forbids.
    env = make_vec_env(_CyclingInfoMask, n_envs=n_envs, seed=0)
    model = MaskableRecurrentPPO(
        "MlpLstmPolicy",
        env,
        n_steps=5,
        batch_size=5 * n_envs,
        n_epochs=1,
        seed=0,
        policy_kwargs={"lstm_hidden_size": 8, "net_arch": [8]},
    )
    model.learn(4 * 5 * n_envs)
    model.learn(5 * n_envs, reset_num_timesteps=False)  # a learn() that goes on from the last step, too
    assert env.get_attr("illegal") == [0] * n_envs


def test_a_recurrent_ppo_zip_loads_as_the_masked_policy_with_its_weights_and_masks(tmp_path: Any) -> None:
    saved = make(RecurrentPPO, invalid_discrete).learn(N_STEPS * N_ENVS)
    saved.save(tmp_path / "recurrent.zip")
    env = make_vec_env(lambda: Strict(invalid_discrete()), n_envs=N_ENVS, seed=1)
    model = MaskableRecurrentPPO.load(tmp_path / "recurrent.zip", env=env)
    assert type(model.policy).__name__ == "MaskableRecurrentActorCriticPolicy"
    expected = saved.policy.state_dict()
    assert all(torch.equal(value, expected[name]) for name, value in model.policy.state_dict().items())
    one = Strict(invalid_discrete())
    obs, _ = one.reset(seed=0)
    state, start = None, np.array([True])
    for _ in range(20):  # the env raises on an illegal action
        action, state = model.predict(obs, state=state, episode_start=start, action_masks=one.action_masks())
        obs, _, terminated, truncated, _ = one.step(action)
        start = np.array([terminated or truncated])
        if start[0]:
            obs, _ = one.reset()
    model.learn(N_STEPS * N_ENVS)  # masked: Strict raises otherwise


def test_a_multibinary_recurrent_ppo_zip_is_refused_naming_what_to_do(tmp_path: Any) -> None:
    make(RecurrentPPO, lambda: InvalidActionEnvMultiBinary(dims=3, n_invalid_actions=1)).save(tmp_path / "bits.zip")
    with pytest.raises(ValueError, match=r"one logit per bit.*train a new MaskableRecurrentPPO"):
        MaskableRecurrentPPO.load(tmp_path / "bits.zip")
