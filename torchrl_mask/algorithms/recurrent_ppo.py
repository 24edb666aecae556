"""MaskableRecurrentPPO: sb3-contrib's ``RecurrentPPO`` (LSTM policies) with ``MaskablePPO``'s action masks.

Everything is sb3-contrib's ``RecurrentPPO``: its constructor, its policies (``MlpLstmPolicy``, ``CnnLstmPolicy``,
``MultiInputLstmPolicy``, with their masked distribution from :mod:`torchrl_mask.algorithms.recurrent_policies`), its
rollout loop and its training loop. What masking adds: ``learn(use_masking=True)`` reads the masks from the env's
``action_masks()`` (sb3-contrib's ``get_action_masks``, as ``MaskablePPO`` does), or else from a Dict observation's
``"action_mask"`` entry or the infos' (``info["action_mask"]``), samples only legal actions,
keeps the masks in the rollout buffer (:mod:`torchrl_mask.rollout.recurrent_buffers`) and evaluates the minibatches'
actions under them; ``predict(..., action_masks=)`` takes them too. With ``use_masking=False`` the parameters it
learns are sb3-contrib's ``RecurrentPPO``'s, bit for bit, under one seed.

``learn(total_timesteps, collector=collector)`` takes each rollout from a TorchRL collector running
:class:`~torchrl_mask.torchrl.recurrent_policy.MaskableRecurrentPolicyModule` over ``model.policy``, which carries the
LSTM states in the collector's TensorDict (:mod:`torchrl_mask.algorithms.recurrent_collector_source`), as
``MaskablePPO.learn(collector=...)`` does with its policy module.

>>> import gymnasium as gym, numpy as np
>>> from sb3_contrib.common.wrappers import ActionMasker
>>> env = ActionMasker(gym.make("CartPole-v1"), lambda env: np.array([True, False]))
>>> model = MaskableRecurrentPPO("MlpLstmPolicy", env, n_steps=16, batch_size=16, n_epochs=1, seed=0,
...                              policy_kwargs={"lstm_hidden_size": 8})
>>> model = model.learn(32)
>>> action, state = model.predict(np.zeros(4, np.float32), action_masks=np.array([False, True]))
>>> int(action), state[0].shape
(1, (1, 1, 8))
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, ClassVar, TypeVar

import numpy as np
from gymnasium import spaces
from sb3_contrib import RecurrentPPO
from sb3_contrib.common.maskable.utils import get_action_masks, is_masking_supported
from sb3_contrib.common.recurrent.policies import (
    RecurrentActorCriticCnnPolicy,
    RecurrentActorCriticPolicy,
    RecurrentMultiInputActorCriticPolicy,
)
from stable_baselines3.common.buffers import RolloutBuffer
from stable_baselines3.common.callbacks import BaseCallback
from stable_baselines3.common.policies import BasePolicy
from stable_baselines3.common.type_aliases import GymEnv, MaybeCallback
from stable_baselines3.common.vec_env import VecEnv
from tensordict.utils import NestedKey
from torchrl.collectors import BaseCollector

from torchrl_mask.algorithms.collector_source import DEFAULT_BATCH_TIMEOUT, CollectorRollout, learn_through
from torchrl_mask.algorithms.minibatches import check_minibatches
from torchrl_mask.algorithms.predict_masks import predict_masks
from torchrl_mask.algorithms.recurrent_collector_source import RecurrentCollectorRollout
from torchrl_mask.algorithms.recurrent_policies import (
    MaskableRecurrentActorCriticCnnPolicy,
    MaskableRecurrentActorCriticPolicy,
    MaskableRecurrentMultiInputActorCriticPolicy,
    MaybeMasks,
)
from torchrl_mask.rollout.masks import mask_spec
from torchrl_mask.rollout.recurrent_buffers import MaskableRecurrentDictRolloutBuffer, MaskableRecurrentRolloutBuffer
from torchrl_mask.rollout.storage import ACTION_MASK, NEXT_REWARD
from torchrl_mask.torchrl.envs import VecEnvMasks
from torchrl_mask.torchrl.nested import flatten_nested_env

SelfMaskableRecurrentPPO = TypeVar("SelfMaskableRecurrentPPO", bound="MaskableRecurrentPPO")


class MaskableRecurrentPPO(RecurrentPPO):
    """sb3-contrib's ``RecurrentPPO`` with action masks; takes ``RecurrentPPO``'s arguments unchanged.

    Masks apply to ``Discrete``, ``MultiDiscrete`` and 1-D ``MultiBinary`` action spaces (``MultiBinary`` with two
    logits per bit, as ``MaskablePPO`` has it, where ``RecurrentPPO`` has one); ``Box`` trains as ``RecurrentPPO``
    does with ``use_masking=False``.

    The LSTM's settings go in ``policy_kwargs`` as for ``RecurrentPPO``: ``lstm_hidden_size``, ``n_lstm_layers``,
    ``shared_lstm``, ``enable_critic_lstm``.

    ``MaskableRecurrentPPO.load`` of a zip saved by sb3-contrib's ``RecurrentPPO`` (and a constructor given one of
    sb3-contrib's LSTM policy classes) takes the masked twin of its policy class, the same network with the same
    weights, so that ``predict(..., action_masks=)`` and ``learn()`` mask (not for ``MultiBinary`` actions, whose
    head differs: refused with a ``ValueError``).
    """

    _last_infos: tuple[Any, Any] | None = None  # the last step's (infos, dones): the next masks, for info masks
    policy_aliases: ClassVar[dict[str, type[BasePolicy]]] = {
        "MlpLstmPolicy": MaskableRecurrentActorCriticPolicy,
        "CnnLstmPolicy": MaskableRecurrentActorCriticCnnPolicy,
        "MultiInputLstmPolicy": MaskableRecurrentMultiInputActorCriticPolicy,
    }
    policy: MaskableRecurrentActorCriticPolicy
    rollout_buffer: MaskableRecurrentRolloutBuffer | MaskableRecurrentDictRolloutBuffer
    #: Whether the last ``learn`` call masks (read by ``collect_rollouts`` and ``train``).
    use_masking: bool = True
    _collector_rollout: CollectorRollout | None = None  # the source while learn(collector=...) runs
    _kept_collector_rollout: CollectorRollout | None = None  # after learn(..., shutdown=False), for the next learn

    @staticmethod
    def _wrap_env(env: GymEnv, verbose: int = 0, monitor_wrapper: bool = True) -> VecEnv:
        # SB3's hook for every env the model gets, as MaskablePPO uses it: a nested Dict flattened one level first.
        return RecurrentPPO._wrap_env(flatten_nested_env(env), verbose, monitor_wrapper)

    def _setup_model(self) -> None:
        # RecurrentPPO picks its buffer class inside _setup_model (it has no rollout_buffer_class): the same buffer
        # again, in the TensorDict storage with the masks, for every action space a mask fits (Box keeps its own).
        # A rollout whose last minibatch of one row would make the parameters NaN is refused first, as in MaskablePPO.
        check_minibatches(
            self.n_steps, self.n_envs, self.batch_size or self.n_steps * self.n_envs, self.normalize_advantage
        )
        self.policy_class = _masked_policy_class(self.policy_class, self.action_space)
        super()._setup_model()
        try:
            mask_spec(self.action_space)
        except TypeError:
            return
        dict_obs = isinstance(self.observation_space, spaces.Dict)
        buffer_class = MaskableRecurrentDictRolloutBuffer if dict_obs else MaskableRecurrentRolloutBuffer
        self.rollout_buffer = buffer_class(
            self.n_steps,
            self.observation_space,
            self.action_space,
            self.rollout_buffer.hidden_state_shape,
            self.device,
            gamma=self.gamma,
            gae_lambda=self.gae_lambda,
            n_envs=self.n_envs,
        )

    def collect_rollouts(
        self,
        env: VecEnv,
        callback: BaseCallback,
        rollout_buffer: RolloutBuffer,
        n_rollout_steps: int,
        use_masking: bool | None = None,
    ) -> bool:
        """``RecurrentPPO``'s rollout, its actions drawn under the env's masks and the masks kept in the buffer.

        :param env: the training env; with masking, its masks come from ``action_masks()``, a Dict observation's
            ``"action_mask"`` entry or the infos' (see :func:`_mask_reader`).
        :param callback: called at each step and at the rollout's start and end.
        :param rollout_buffer: a :class:`~torchrl_mask.rollout.recurrent_buffers.MaskableRecurrentRolloutBuffer` (or
            Dict) to mask.
        :param n_rollout_steps: steps per env.
        :param use_masking: read and apply the masks; None: :attr:`use_masking`.
        :return: False if the callback stopped the rollout.
        :raises ValueError: masking with an env whose masks are neither.
        """
        if self._collector_rollout is not None:  # learn(collector=...): the collector's next batch is the rollout
            return self._collector_rollout.collect(callback)
        use_masking = self.use_masking if use_masking is None else use_masking
        if not use_masking:
            return super().collect_rollouts(env, callback, rollout_buffer, n_rollout_steps)
        reader = _mask_reader(env)

        def step_masks() -> np.ndarray:
            # Read as MaskablePPO reads them, when the policy is called on the step's observation; the step's add().
            masks = np.asarray(reader(self._last_obs, self._last_infos)).astype(bool)
            if isinstance(rollout_buffer, MaskableRecurrentRolloutBuffer):
                rollout_buffer.pending_masks = masks
            return masks

        # Overridden because RecurrentPPO's loop calls the policy and add() without masks: they come from step_masks.
        with self.policy.masks_from(step_masks):
            return super().collect_rollouts(env, callback, rollout_buffer, n_rollout_steps)

    def _setup_learn(
        self,
        total_timesteps: int,
        callback: MaybeCallback = None,
        reset_num_timesteps: bool = True,
        tb_log_name: str = "run",
        progress_bar: bool = False,
    ) -> tuple[int, BaseCallback]:
        # Overridden to forget the last step's infos where SB3 resets the env (a new learn, or no observation yet):
        # the first masks are then the reset's. A learn() that goes on from the last one keeps them, as each rollout
        # after the first does.
        if reset_num_timesteps or self._last_obs is None:
            self._last_infos = None
        return super()._setup_learn(total_timesteps, callback, reset_num_timesteps, tb_log_name, progress_bar)

    def _excluded_save_params(self) -> list[str]:
        # The last step's infos belong to the env, which is not saved either.
        return [*super()._excluded_save_params(), "_last_infos", "_collector_rollout", "_kept_collector_rollout"]

    def _update_info_buffer(self, infos: list[dict[str, Any]], dones: np.ndarray | None = None) -> None:
        # Overridden to keep the step's infos: the next step's masks, where the env reports them there.
        self._last_infos = (infos, dones)
        super()._update_info_buffer(infos, dones)

    def train(self) -> None:
        """``RecurrentPPO``'s update, each minibatch's actions evaluated under that minibatch's masks."""
        buffer = self.rollout_buffer
        if not self.use_masking or not isinstance(buffer, MaskableRecurrentRolloutBuffer):
            return super().train()
        # Overridden because RecurrentPPO.train calls evaluate_actions without masks: the buffer keeps those of the
        # minibatch get() yielded last.
        with self.policy.masks_from(lambda: buffer.last_action_masks):
            super().train()

    def learn(  # type: ignore[override]
        self: SelfMaskableRecurrentPPO,
        total_timesteps: int,
        callback: MaybeCallback = None,
        log_interval: int = 1,
        tb_log_name: str = "MaskableRecurrentPPO",
        reset_num_timesteps: bool = True,
        use_masking: bool = True,
        progress_bar: bool = False,
        collector: BaseCollector | None = None,
        *,
        observation_keys: Sequence[NestedKey] | None = None,
        reward_key: NestedKey = NEXT_REWARD,
        batch_timeout: float | None = DEFAULT_BATCH_TIMEOUT,
        shutdown: bool = True,
    ) -> SelfMaskableRecurrentPPO:
        """``RecurrentPPO.learn``, with ``MaskablePPO``'s ``use_masking`` and ``collector``.

        With a collector, each rollout is one batch ``(n_envs, T)`` of it, as for ``MaskablePPO.learn`` (weights
        sent before each batch, the rollout buffer re-made for the batch's shape, callbacks once per collected step,
        the collector shut down at the end unless ``shutdown`` is False, a watcher for its workers); the batch keeps
        the LSTM states its :class:`~torchrl_mask.torchrl.recurrent_policy.MaskableRecurrentPolicyModule` carried
        (see :mod:`torchrl_mask.algorithms.recurrent_collector_source`). ``self.env`` is then used for its spaces only.

        :param total_timesteps: env steps to train for (rounded up to whole rollouts).
        :param callback: SB3 callback(s).
        :param log_interval: rollouts between logs.
        :param tb_log_name: the TensorBoard run's name.
        :param reset_num_timesteps: start the step count at zero.
        :param use_masking: read the masks from the env's ``action_masks()`` and apply them (must be True with a
            collector).
        :param progress_bar: show a progress bar.
        :param collector: a TorchRL collector running ``MaskableRecurrentPolicyModule(model.policy)`` over envs with
            the module's ``make_tensordict_primer()`` and an ``InitTracker`` (``Collector``, ``MultiSyncCollector``,
            ``DistributedCollector(sync=True)``, ``RayCollector(sync=True)``); None steps ``self.env``.
        :param observation_keys: the batch key of each observation leaf; None takes them from the collector's module.
        :param reward_key: where the reward is in a collector batch, ``(*B, 1)``.
        :param batch_timeout: seconds one batch (or weight update) may take from worker processes before the silent
            workers are declared stuck and killed; None waits forever.
        :param shutdown: shut the collector down when done; with False, a later ``learn`` continues its batches.
        :return: the model.
        :raises TypeError: the collector's policy is not a ``MaskableRecurrentPolicyModule``, the model's action space
            cannot be masked, or an off-policy collector (as ``MaskablePPO.learn`` refuses it); refused before anything
            runs.
        :raises ValueError: ``use_masking`` False with a collector, a module over another policy, or batches without
            masks, ``"is_init"`` or carried LSTM states.
        :raises RuntimeError: the collector has been shut down.
        :raises CollectorFailed: collection failed; the collector is shut down and its workers are gone.
        """

        def run() -> SelfMaskableRecurrentPPO:
            self.use_masking = use_masking
            return super(MaskableRecurrentPPO, self).learn(
                total_timesteps, callback, log_interval, tb_log_name, reset_num_timesteps, progress_bar
            )

        if collector is None:
            return run()
        return learn_through(
            self,
            RecurrentCollectorRollout,
            collector,
            run,
            observation_keys=observation_keys,
            reward_key=reward_key,
            batch_timeout=batch_timeout,
            use_masking=use_masking,
            shutdown=shutdown,
        )

    def predict(
        self,
        observation: np.ndarray | dict[str, np.ndarray],
        state: tuple[np.ndarray, ...] | None = None,
        episode_start: np.ndarray | None = None,
        deterministic: bool = False,
        action_masks: MaybeMasks = None,
    ) -> tuple[np.ndarray, tuple[np.ndarray, ...] | None]:
        """The policy's action (and next LSTM state) for an observation, under the given masks.

        :param observation: observations, shape ``(n_envs, *obs_shape)`` or one ``obs_shape``.
        :param state: the LSTM state ``predict`` returned last, each ``(n_lstm_layers, n_envs, hidden)``.
        :param episode_start: True where an episode starts, shape ``(n_envs,)``.
        :param deterministic: take the most likely legal action.
        :param action_masks: masks, shape ``(n_envs, sum of the action dims)`` (``(sum of the action dims,)`` for
            one observation), checked by :func:`~torchrl_mask.algorithms.predict_masks.predict_masks` as
            ``MaskablePPO.predict`` checks them; None reads a Dict observation's ``"action_mask"`` entry if it has
            one (else predicts unmasked, with a warning where the model's env has masks).
        :return: the actions and the next LSTM state.
        :raises ValueError: a mask of the wrong size or row count, with entries other than 0 and 1, or allowing no
            action; masks for an action space that cannot be masked.
        """
        masks, _ = predict_masks(self.action_space, self.observation_space, observation, action_masks, self.env)
        return self.policy.predict(observation, state, episode_start, deterministic, action_masks=masks)


# sb3-contrib's LSTM policies (those a RecurrentPPO zip names) and their masked twins, which have the same network.
_MASKED_POLICIES: dict[type, type[MaskableRecurrentActorCriticPolicy]] = {
    RecurrentActorCriticPolicy: MaskableRecurrentActorCriticPolicy,
    RecurrentActorCriticCnnPolicy: MaskableRecurrentActorCriticCnnPolicy,
    RecurrentMultiInputActorCriticPolicy: MaskableRecurrentMultiInputActorCriticPolicy,
}


def _masked_policy_class(policy_class: type, action_space: spaces.Space) -> type:
    """The masked twin of one of sb3-contrib's LSTM policy classes (what ``RecurrentPPO.load`` of its zip names, or
    a class given to the constructor): the same network, so its saved weights load into it; others unchanged.

    :param policy_class: the model's policy class.
    :param action_space: the model's action space.
    :raises ValueError: a ``MultiBinary`` action space, where ``RecurrentPPO``'s head has one logit per bit and the
        masked policy two.
    """
    masked = _MASKED_POLICIES.get(policy_class)
    if masked is None:
        return policy_class
    if isinstance(action_space, spaces.MultiBinary):
        raise ValueError(
            f"{policy_class.__name__} on {action_space} has one logit per bit, the masked policy two (one per "
            "choice, as MaskablePPO has them), so its weights cannot be masked: train a new MaskableRecurrentPPO, "
            "or load it with sb3_contrib.RecurrentPPO."
        )
    return masked


def _mask_reader(env: VecEnv) -> Callable[[Any, tuple[Any, Any] | None], Any]:
    """``read(obs, last_infos)``: the masks of the step's observation, where the env keeps them, in
    :func:`~torchrl_mask.torchrl.envs.vec_env_masks`' order: an ``action_masks()`` method (sb3-contrib's
    ``get_action_masks``), a Dict observation's ``"action_mask"`` entry, or the infos (the last step's, or the
    reset's where it ended an episode; ``last_infos`` None: the reset's).

    :param env: the training VecEnv, reset.
    :raises ValueError: none of these holds the masks.
    """
    if is_masking_supported(env):
        return lambda obs, last_infos: get_action_masks(env)
    obs_space = env.observation_space
    if isinstance(obs_space, spaces.Dict) and ACTION_MASK in obs_space.spaces:
        return lambda obs, last_infos: obs[ACTION_MASK]  # it stays in the observation, as on MaskablePPO's paths
    reset_infos = getattr(env, "reset_infos", None) or []
    if reset_infos and all(ACTION_MASK in info for info in reset_infos):
        infos_reader = VecEnvMasks(env, "info")
        every = np.ones(env.num_envs, dtype=bool)

        def from_infos(obs: Any, last_infos: tuple[Any, Any] | None) -> np.ndarray:
            infos, dones = last_infos if last_infos is not None else (env.reset_infos, every)
            return infos_reader.from_infos(infos, dones, env.reset_infos)

        return from_infos
    raise ValueError(
        "Environment does not support action masking. Consider using ActionMasker wrapper (an action_masks() "
        f"method), or give the env a Dict observation with an {ACTION_MASK!r} entry or infos with one."
    )
