"""TorchRL side: the SB3 policy as a TensorDictModule, MaskablePPO learning from a collector.

The masked envs (every mask convention as a bool ``"action_mask"`` entry) are in :mod:`torchrl_mask.envs`,
re-exported here.

sb3-contrib steps its envs in lockstep with the learner and fetches each step's masks with an extra
``env_method("action_masks")`` round trip. Here TorchRL's collectors run the envs *and* a copy of the policy in
worker processes (or on other machines), deliver the mask in each step's TensorDict, and hand whole rollouts
to the learner (:func:`learn_from_collector`); MaskablePPO's policy, loss, callbacks and logger are
sb3-contrib's own. A worker that dies or an env that raises ends in :class:`CollectorFailed` within seconds
(:mod:`torchrl_mask.workers`).

The flow::

    gymnasium env --masked_gym_env--> TorchRL env with "action_mask"
        --Collector / MultiSyncCollector / DistributedCollector (runs MaskablePolicyModule)--> batch
        --MaskablePolicyModule.add_next_state_value--> batch with ("next", "state_value")
        --MaskableRolloutBuffer.extend--> rollout with GAE --model.train()--> new weights --> collector

Example:
    >>> import gymnasium as gym
    >>> from torchrl.collectors import Collector
    >>> from torchrl_mask import MaskablePPO
    >>> from torchrl_mask import MaskablePolicyModule, learn_from_collector, masked_gym_env
    >>> model = MaskablePPO("MlpPolicy", gym.make("Taxi-v4"), n_steps=32, batch_size=32, n_epochs=1)
    >>> collector = Collector(lambda: masked_gym_env(gym.make("Taxi-v4")), MaskablePolicyModule(model.policy),
    ...                       frames_per_batch=32)
    >>> model = learn_from_collector(model, collector, total_timesteps=64)
    >>> model.num_timesteps
    64
"""

from __future__ import annotations

import copy
from collections.abc import Sequence
from typing import Any, NamedTuple, TypeVar

import torch
from gymnasium import spaces
from sb3_contrib.common.maskable.distributions import make_masked_proba_distribution
from sb3_contrib.common.maskable.policies import MaskableActorCriticPolicy
from stable_baselines3.common.callbacks import BaseCallback
from stable_baselines3.common.torch_layers import MlpExtractor
from stable_baselines3.common.type_aliases import MaybeCallback
from tensordict import TensorDictBase
from tensordict.nn import InteractionType, TensorDictModule, skip_existing
from tensordict.nn.probabilistic import interaction_type
from tensordict.utils import NestedKey
from torch import nn
from torchrl.collectors import BaseCollector
from torchrl.collectors.distributed import DistributedSyncCollector

from torchrl_mask import storage as st
from torchrl_mask.buffers import MaskableRolloutBuffer
from torchrl_mask.envs import ActionMaskInInfo, ActionMaskInObservation, MaskSource, masked_gym_env
from torchrl_mask.masks import mask_spec
from torchrl_mask.workers import CollectorFailed, guarded
from torchrl_mask.workers import shutdown as shutdown_collector

__all__ = [
    "ActionMaskInInfo",
    "ActionMaskInObservation",
    "CollectorFailed",
    "MaskSource",
    "MaskablePolicyModule",
    "default_observation_keys",
    "learn_from_collector",
    "masked_gym_env",
]

ACTION_MASK = st.ACTION_MASK
EPISODE_REWARD = ("next", "episode_reward")
STEP_COUNT = ("next", "step_count")

_Model = TypeVar("_Model")


# ----------------------------------------------------------------------------------------- the policy


def default_observation_keys(observation_space: spaces.Space) -> list[NestedKey]:
    """Where a TorchRL env keeps each leaf of an observation space, in the space's leaf order.

    :param observation_space: the SB3 model's observation space.
    :return: ``["observation"]`` for a non-Dict space; the Dict's key paths (nested keys for nested Dicts),
        which is where TorchRL's ``GymWrapper`` puts them.
    """
    paths = st.observation_leaves(observation_space)
    return [(path if len(path) > 1 else path[0]) if path else st.OBSERVATION for path in paths]


# sb3-contrib's MaskableCategorical sets the logits of masked choices to this before normalising them.
_MASKED_LOGIT = -1e8


def _sample(logits: torch.Tensor, mask: torch.Tensor, deterministic: bool) -> tuple[torch.Tensor, torch.Tensor]:
    """One masked categorical per row: the action ``(B, 1)`` and its log-probability ``(B, 1)``.

    Sampling is the exponential race (``argmax(p / E)``, ``E ~ Exp(1)``), an exact draw from ``p`` in three small
    ops where ``torch.multinomial`` validates its input first (two to four times the cost on one row). Masked
    choices are kept out explicitly (they would need ``p = 0`` and ``E = 0`` together to win, but never can).

    :param logits: masked logits ``(B, n)``.
    :param mask: ``(B, n)`` bool, True where the choice is allowed; at least one per row.
    :param deterministic: take the most likely choice instead of sampling.
    """
    log_pmf = logits.log_softmax(-1)
    probs = log_pmf.exp()
    if deterministic:
        action = probs.argmax(-1, keepdim=True)
    else:
        race = torch.where(mask, probs / torch.empty_like(probs).exponential_(), -1.0)
        action = race.argmax(-1, keepdim=True)
    return action, log_pmf.gather(-1, action)


class _PlainLayers(NamedTuple):
    """The torch layers a stock ``MlpExtractor`` policy runs, in order: actor and critic MLPs and the two heads."""

    pi: list[nn.Module]
    vf: list[nn.Module]
    value: list[nn.Module]
    action: list[nn.Module]
    containers: list[nn.Module]


def _sequence(module: nn.Module) -> list[nn.Module] | None:
    """The layers ``module`` applies one after the other, if all are torch's own leaf layers; else None."""
    layers = list(module) if type(module) is nn.Sequential else [module]
    plain = all(
        type(layer).__module__.startswith("torch.nn.modules.") and next(layer.children(), None) is None
        for layer in layers
    )
    return layers if plain else None


def _hooked(plain: _PlainLayers) -> bool:
    """Whether a forward hook is registered on any of the layers, their containers, or globally."""
    if nn.modules.module._global_forward_hooks or nn.modules.module._global_forward_pre_hooks:
        return True
    return any(
        module._forward_hooks or module._forward_pre_hooks
        for group in (plain.pi, plain.vf, plain.value, plain.action, plain.containers)
        for module in group
    )


def _through(layers: list[nn.Module], x: torch.Tensor) -> torch.Tensor:
    """``x`` through each layer's ``forward`` (what ``nn.Module.__call__`` does when nothing is hooked)."""
    for layer in layers:
        x = layer.forward(x)
    return x


class _SB3Forward(nn.Module):
    """Calls a MaskableActorCriticPolicy on tensors with any leading batch dims (none, ``(n,)``, ``(n, T)``)."""

    def __init__(self, policy: MaskableActorCriticPolicy) -> None:
        super().__init__()
        self.policy = policy
        leaves = st.observation_leaves(policy.observation_space)
        self._paths = list(leaves)
        self._shapes = [tuple(space.shape or ()) for space in leaves.values()]
        self._action_shape = tuple(policy.action_space.shape or ())
        spec = mask_spec(policy.action_space)
        self._mask_size = spec.size
        self._groups = list(spec.groups)
        # sb3-contrib's own forward(), inlined for its stock policies: the same masked categorical per sub-action
        # (logits of masked choices set to -1e8, then normalised), without building torch.distributions objects,
        # which cost more than the network itself on one row. A policy subclass that changes either method runs
        # its own forward().
        self._inline = (
            type(policy).forward is MaskableActorCriticPolicy.forward
            and type(policy)._get_action_dist_from_latent is MaskableActorCriticPolicy._get_action_dist_from_latent
        )
        self._plain: _PlainLayers | bool | None = False  # found on the first call (False: not looked for yet)

    @torch.no_grad()
    def forward(self, *inputs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        *observations, mask = inputs
        batch = mask.shape[:-1]
        obs = self._observation(observations)
        rows = mask.reshape(-1, self._mask_size)
        deterministic = interaction_type() in (InteractionType.DETERMINISTIC, InteractionType.MODE)
        if self._inline:
            actions, values, log_prob = self._masked_forward(obs, rows.to(torch.bool), deterministic)
        else:
            actions, values, log_prob = self.policy(obs, deterministic=deterministic, action_masks=rows)
        return actions.reshape((*batch, *self._action_shape)), log_prob.reshape(batch), values.reshape((*batch, 1))

    def _masked_forward(
        self, obs: Any, mask: torch.Tensor, deterministic: bool
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """``MaskableActorCriticPolicy.forward``: actions ``(B, n_groups)``, values ``(B, 1)``, log-probs ``(B,)``."""
        policy = self.policy
        features: Any = policy.extract_features(obs)
        pi_features, vf_features = (features, features) if policy.share_features_extractor else features
        plain = self._plain_layers()
        if plain is not None and not _hooked(plain):
            latent_pi, latent_vf = _through(plain.pi, pi_features), _through(plain.vf, vf_features)
            values = _through(plain.value, latent_vf)
            logits = _through(plain.action, latent_pi)
        else:
            if policy.share_features_extractor:
                latent_pi, latent_vf = policy.mlp_extractor(features)
            else:
                latent_pi = policy.mlp_extractor.forward_actor(pi_features)
                latent_vf = policy.mlp_extractor.forward_critic(vf_features)
            values = policy.value_net(latent_vf)
            logits = policy.action_net(latent_pi)
        logits = logits.masked_fill(~mask, _MASKED_LOGIT)
        if len(self._groups) == 1:  # Discrete: no split and concatenation (a few us each on one row)
            action, log_prob = _sample(logits, mask, deterministic)
            return action, values, log_prob[:, 0]
        actions, log_probs = [], []
        for group_logits, group_mask in zip(
            logits.split(self._groups, dim=-1), mask.split(self._groups, dim=-1), strict=True
        ):
            action, log_prob = _sample(group_logits, group_mask, deterministic)
            actions.append(action)
            log_probs.append(log_prob)
        return torch.cat(actions, dim=-1), values, torch.cat(log_probs, dim=-1).sum(-1)

    def _plain_layers(self) -> _PlainLayers | None:
        """A stock ``MlpExtractor`` and heads of torch's own layers, run without ``nn.Module.__call__``'s dispatch
        (about 5 us a layer, half the network's time on one row; measured), or None for anything else."""
        if self._plain is False:
            policy = self.policy
            extractor = policy.mlp_extractor
            modules = [extractor.policy_net, extractor.value_net, policy.value_net, policy.action_net]
            parts = [_sequence(module) for module in modules] if type(extractor) is MlpExtractor else [None]
            found = [part for part in parts if part is not None]
            self._plain = None
            if len(found) == len(modules):
                pi, vf, value, action = found
                self._plain = _PlainLayers(pi, vf, value, action, [extractor, *modules[:2]])
        return self._plain if isinstance(self._plain, _PlainLayers) else None

    def _observation(self, leaves: Sequence[torch.Tensor]) -> Any:
        flat = [leaf.reshape(-1, *shape) for leaf, shape in zip(leaves, self._shapes, strict=True)]
        if self._paths == [()]:
            return flat[0]
        nested: dict[str, Any] = {}
        for path, leaf in zip(self._paths, flat, strict=True):
            node = nested
            for key in path[:-1]:
                node = node.setdefault(key, {})
            node[path[-1]] = leaf
        return nested

    def value(self, leaves: Sequence[torch.Tensor]) -> torch.Tensor:
        return self.policy.predict_values(self._observation(leaves))

    def __getstate__(self) -> dict[str, Any]:
        # What a worker process receives: the policy without its optimizer, and with a fresh action
        # distribution (SB3 keeps the last one, whose logits carry the autograd graph of the last update and
        # cannot cross a process boundary). The learner's policy is left as it is.
        state = self.__dict__.copy()
        state["_plain"] = False  # found again, on the worker's own modules
        shipped = copy.copy(self.policy)
        shipped.__dict__ = {k: v for k, v in self.policy.__dict__.items() if k != "optimizer"}
        shipped.action_dist = make_masked_proba_distribution(self.policy.action_space)
        state["_modules"] = {**state["_modules"], "policy": shipped}
        return state


class MaskablePolicyModule(TensorDictModule):
    """An sb3-contrib ``MaskableActorCriticPolicy`` as a TorchRL policy.

    Reads the observation and ``"action_mask"`` and writes, under TorchRL's keys, ``"action"`` (shape
    ``(*B,)`` for Discrete, ``(*B, k)`` for MultiDiscrete/MultiBinary), ``"action_log_prob"`` ``(*B,)`` and
    ``"state_value"`` ``(*B, 1)``, for any batch dims ``B`` (an unbatched env step included). It samples
    (``deterministic=False``) unless TorchRL's exploration type is ``DETERMINISTIC`` or ``MODE``. It holds the
    policy itself, so a ``Collector`` in the learner's process runs the trained weights, and multi-process and
    distributed collectors copy it to their workers and take new weights through
    ``collector.update_policy_weights_()``.

    :param policy: the model's policy (``model.policy``).
    :param observation_keys: the env's key for each leaf of ``policy.observation_space``, in leaf order; None
        means ``"observation"``, or the Dict's keys (see :func:`default_observation_keys`).
    :param mask_key: the env's mask entry, bool ``(*B, mask_dims)``.

    Example:
        >>> import gymnasium as gym, torch
        >>> from tensordict import TensorDict
        >>> from sb3_contrib import MaskablePPO
        >>> policy = MaskablePPO("MlpPolicy", gym.make("Taxi-v4")).policy
        >>> td = TensorDict({"observation": torch.tensor([3, 7]),
        ...                  "action_mask": torch.tensor([[1, 0, 0, 0, 0, 0]] * 2, dtype=torch.bool)}, [2])
        >>> MaskablePolicyModule(policy)(td)["action"].tolist()
        [0, 0]
    """

    def __init__(
        self,
        policy: MaskableActorCriticPolicy,
        observation_keys: Sequence[NestedKey] | None = None,
        mask_key: NestedKey = ACTION_MASK,
    ) -> None:
        if not isinstance(policy, MaskableActorCriticPolicy):
            raise TypeError(
                f"MaskablePolicyModule needs sb3-contrib's MaskableActorCriticPolicy (model.policy of a "
                f"MaskablePPO), got {type(policy).__name__}."
            )
        keys = (
            list(observation_keys)
            if observation_keys is not None
            else default_observation_keys(policy.observation_space)
        )
        n_leaves = len(st.observation_leaves(policy.observation_space))
        if len(keys) != n_leaves:
            raise ValueError(
                f"observation_keys has {len(keys)} keys, but the policy's observation space has {n_leaves} leaves: "
                "give one env key per leaf, in the space's order."
            )
        super().__init__(
            _SB3Forward(policy),
            in_keys=[*keys, mask_key],
            out_keys=[st.ACTION, st.LOG_PROB, st.VALUE],
        )
        self.observation_keys: list[NestedKey] = keys

    def forward(self, tensordict: TensorDictBase, *args: Any, **kwargs: Any) -> TensorDictBase:
        """Write the action, its log-probability and the state value into ``tensordict``; see the class.

        :param tensordict: the step(s): observation keys and the mask, batch dims ``B``.
        :param args: passed to ``TensorDictModule.forward`` (which then does the work).
        :param kwargs: passed to ``TensorDictModule.forward`` (e.g. ``tensordict_out``).
        :return: ``tensordict``, with ``"action"``, ``"action_log_prob"`` and ``"state_value"`` set.
        """
        if args or kwargs or not isinstance(tensordict, TensorDictBase) or skip_existing():
            return super().forward(tensordict, *args, **kwargs)
        # A collector's call, once per step: the keys in, the module, the keys out. TensorDictModule's forward
        # (dispatch, skip-existing and strict-key wrappers) cost 60-120 us more per call on one row here.
        outputs = self.module(*[tensordict.get(key) for key in self.in_keys])
        for key, tensor in zip(self.out_keys_source, outputs, strict=True):
            tensordict.set(key, tensor)
        return tensordict

    def _write_to_tensordict(
        self,
        tensordict: TensorDictBase,
        tensors: list[torch.Tensor],
        tensordict_out: TensorDictBase | None = None,
        out_keys: Sequence[NestedKey] | None = None,
    ) -> TensorDictBase:
        # TensorDictModule passes each output through TensorDict.from_any, which looks up optional packages
        # on every call (about 0.5 ms per step on a small CPU); the outputs here are plain tensors.
        out = tensordict if tensordict_out is None else tensordict_out
        for key, tensor in zip(self.out_keys_source if out_keys is None else out_keys, tensors, strict=True):
            out.set(key, tensor)
        return out

    @property
    def policy(self) -> MaskableActorCriticPolicy:
        """The wrapped sb3-contrib policy."""
        return self.module.policy

    @torch.no_grad()
    def add_next_state_value(self, batch: TensorDictBase) -> TensorDictBase:
        """Write ``("next", "state_value")``, ``V`` of ``("next", observation)``, where GAE reads it.

        GAE needs ``V(s_{t+1})`` at every step that did not terminate. Inside an episode it is the next step's
        ``"state_value"``, already in the batch; the policy runs only where an episode was truncated (the final
        observation) and on each env's last step, in one batched call. Terminated steps get 0.

        :param batch: a collector batch ``(n_envs, T)`` or flat ``(T,)`` with the observation, ``"state_value"``,
            ``("next", observation)``, ``("next", "done")`` and ``("next", "terminated")``.
        :return: ``batch``, with ``("next", "state_value")`` ``(*B, 1)`` float32 set in place.
        """
        flat = batch.ndim == 1
        rows = batch.unsqueeze(0) if flat else batch
        value = rows.get(st.VALUE)
        done = rows.get(st.NEXT_DONE)
        terminated = rows.get(st.NEXT_TERMINATED)
        next_value = torch.zeros_like(value)
        next_value[:, :-1] = value[:, 1:]
        need = done & ~terminated
        need[:, -1] = ~terminated[:, -1]
        need = need[..., 0]
        if bool(need.any()):
            leaves = [
                rows.get(("next", *((key,) if isinstance(key, str) else key)))[need] for key in self.observation_keys
            ]
            self.policy.set_training_mode(False)
            computed = self.module.value(leaves).to(next_value)
            next_value[need] = computed.reshape(-1, 1)
        next_value[terminated] = 0.0
        rows.set(st.NEXT_VALUE, next_value)
        if flat:
            batch.set(st.NEXT_VALUE, next_value[0])
        return batch


# -------------------------------------------------------------------------------------------- learning


def learn_from_collector(
    model: _Model,
    collector: BaseCollector,
    total_timesteps: int,
    callback: MaybeCallback = None,
    log_interval: int = 1,
    tb_log_name: str = "MaskablePPO",
    reset_num_timesteps: bool = True,
    progress_bar: bool = False,
    *,
    observation_keys: Sequence[NestedKey] | None = None,
    reward_key: NestedKey = st.NEXT_REWARD,
    shutdown: bool = True,
) -> _Model:
    """MaskablePPO's ``learn``, with the rollouts from a TorchRL collector instead of the model's VecEnv.

    Each iteration takes one batch from the collector, computes ``("next", "state_value")`` with the model's
    policy, fills ``model.rollout_buffer`` with :meth:`~torchrl_mask.MaskableRolloutBuffer.extend` (GAE with
    TorchRL's truncation handling), runs sb3-contrib's own ``model.train()``, and sends the new weights to the
    collector (``collector.update_policy_weights_()``), so the next batch is collected with them. SB3's
    ``_setup_learn``, callbacks, logger and progress bar are used as ``learn`` uses them: ``on_step`` runs once
    per collected step of all envs (``buffer_size`` times per batch), after the batch is in. ``model.env`` is
    used for its spaces and SB3's bookkeeping only; it is not stepped.

    The collector must run :class:`MaskablePolicyModule` over ``model.policy`` with ``total_frames=-1`` or at
    least ``total_timesteps``. Each batch ``(n_envs, T)`` (or flat ``(T,)`` from one env, or ``(workers, envs, T)``
    from workers that each run a batched env such as a ``SerialEnv``) is one rollout; the
    model's rollout buffer is re-made with that shape on the first batch (its class and
    ``rollout_buffer_kwargs`` kept), so ``n_steps`` is the collector's ``T``.

    The collector is shut down at the end, also on an error or a ``KeyboardInterrupt``, unless ``shutdown`` is
    False. A failure in collection (a dead worker, an env that raised) is raised as :class:`CollectorFailed`.

    :param model: a :class:`torchrl_mask.MaskablePPO` (sb3-contrib's works too, with our buffer class).
    :param collector: a TorchRL collector. On-policy (each batch collected with the weights just trained, as
        the tests check): ``Collector``, ``MultiSyncCollector``, ``DistributedCollector(sync=True)``.
        ``MultiAsyncCollector`` works but each batch is one worker's, gathered while the learner trained: it
        lags the weights by one update (PPO's clipping absorbs a little of that).
    :param total_timesteps: env steps to train on, counted as SB3 counts them.
    :param callback: SB3 callback(s), as for ``learn``.
    :param log_interval: iterations between logger dumps.
    :param tb_log_name: name of the TensorBoard run.
    :param reset_num_timesteps: start ``num_timesteps`` from 0 (else continue the count).
    :param progress_bar: SB3's progress bar (tqdm and rich).
    :param observation_keys: the batch key of each observation leaf, as for :class:`MaskablePolicyModule`;
        None takes them from the collector's :class:`MaskablePolicyModule` (else the default keys).
    :param reward_key: where the reward is in the batch, ``(*B, 1)``.
    :param shutdown: shut the collector down when done.
    :return: the model.
    :raises CollectorFailed: collection failed; the collector is shut down.
    :raises TypeError: the model's rollout buffer is not a :class:`~torchrl_mask.MaskableRolloutBuffer`, or the
        collector is a ``DistributedSyncCollector`` (its batches lag the weights by one update).

    Worker processes on this machine (``MultiSyncCollector``; each worker runs its env and a policy copy):

    .. code-block:: python

        def make_env():  # runs in the worker
            torch.set_num_threads(1)
            return masked_gym_env(gym.make("Taxi-v4"))

        model = MaskablePPO("MlpPolicy", gym.make("Taxi-v4"))
        collector = MultiSyncCollector([make_env] * 2, MaskablePolicyModule(model.policy), frames_per_batch=2048)
        learn_from_collector(model, collector, total_timesteps=100_000)  # n_steps = 2048 / 2 per env

    Several machines (TorchRL's ``DistributedCollector`` over ``torch.distributed``): the learner runs this
    script; each env factory runs as a worker job on the cluster, which connects back to the learner's host on
    ``tcp_port`` (open it between the nodes). ``launcher="submitit"`` starts the workers as SLURM jobs; with
    ``launcher="mp"`` they are local processes (what the tests run, on loopback).

    .. code-block:: python

        from torchrl.collectors.distributed import DistributedCollector

        collector = DistributedCollector(
            [make_env] * 8,  # 8 workers, one env each
            MaskablePolicyModule(model.policy),
            frames_per_batch=8 * 256,  # one batch: (8, 256)
            total_frames=1 << 40,  # must divide by the workers; learn_from_collector stops at total_timesteps
            sync=True,  # one batch from every worker per iteration: on-policy
            backend="gloo",
            launcher="submitit",
            slurm_kwargs={"slurm_partition": "cpu", "slurm_cpus_per_task": 2, "timeout_min": 240},
            tcp_port="10003",
        )
        learn_from_collector(model, collector, total_timesteps=10_000_000)
    """
    algo: Any = model
    if isinstance(collector, DistributedSyncCollector):
        raise TypeError(
            "DistributedSyncCollector collects each batch before the last update's weights reach its workers "
            "(measured: off-policy by one update) and has no update_policy_weights_(); use "
            "torchrl.collectors.distributed.DistributedCollector(..., sync=True) for on-policy batches."
        )
    if not isinstance(algo.rollout_buffer, MaskableRolloutBuffer):
        raise TypeError(
            f"learn_from_collector needs torchrl_mask's rollout buffer (it has extend()); the model has "
            f"{type(algo.rollout_buffer).__name__}. Use torchrl_mask.MaskablePPO."
        )
    if observation_keys is None:
        shipped = getattr(collector, "policy", None)
        observation_keys = shipped.observation_keys if isinstance(shipped, MaskablePolicyModule) else None
    module = MaskablePolicyModule(algo.policy, observation_keys=observation_keys)
    try:
        total, sb3_callback = algo._setup_learn(
            total_timesteps, callback, reset_num_timesteps, tb_log_name, progress_bar
        )
        sb3_callback.on_training_start(locals(), globals())
        batches = iter(collector)
        episode_starts: torch.Tensor | None = None
        iteration = 0
        while algo.num_timesteps < total:
            sb3_callback.on_rollout_start()
            batch = guarded(lambda: next(batches), collector, "collecting a batch")
            if batch.ndim == 1:
                batch = batch.unsqueeze(0)
            elif batch.ndim > 2:  # workers that each run a batched env: (workers, envs, T) -> (workers * envs, T)
                batch = batch.reshape(-1, batch.shape[-1])
            if episode_starts is None:
                episode_starts = torch.ones(batch.shape[0], dtype=torch.bool)
            module.add_next_state_value(batch)
            buffer = _buffer_for(algo, batch.shape[0], batch.shape[1])
            buffer.reset()
            buffer.extend(batch, module.observation_keys, reward_key, episode_starts=episode_starts)
            episode_starts = batch.get(st.NEXT_DONE)[:, -1, 0].cpu()
            continue_training = _step_callbacks(algo, sb3_callback, batch)
            _record_episodes(algo, batch)
            if not continue_training:
                break
            sb3_callback.update_locals(locals())
            sb3_callback.on_rollout_end()
            iteration += 1
            algo._update_current_progress_remaining(algo.num_timesteps, total)
            if log_interval is not None and iteration % log_interval == 0:
                algo.dump_logs(iteration)
            algo.train()
            guarded(collector.update_policy_weights_, collector, "sending the new weights")
        sb3_callback.on_training_end()
    finally:
        if shutdown:
            shutdown_collector(collector)
    return model


def _buffer_for(algo: Any, n_envs: int, steps: int) -> MaskableRolloutBuffer:
    """The model's rollout buffer, re-made once if the collector's batch shape differs from it."""
    buffer: MaskableRolloutBuffer = algo.rollout_buffer
    if (buffer.n_envs, buffer.buffer_size) != (n_envs, steps):
        buffer = type(buffer)(
            steps,
            algo.observation_space,
            algo.action_space,
            device=algo.device,
            gamma=algo.gamma,
            gae_lambda=algo.gae_lambda,
            n_envs=n_envs,
            **(algo.rollout_buffer_kwargs or {}),
        )
        algo.rollout_buffer = buffer
    return buffer


def _step_callbacks(algo: Any, callback: BaseCallback, batch: TensorDictBase) -> bool:
    """Advance ``num_timesteps`` and call ``on_step`` once per collected step of all envs, as ``learn`` does."""
    n_envs, steps = batch.shape
    dones = batch.get(st.NEXT_DONE)[..., 0].cpu().numpy()
    infos: list[dict[str, Any]] = [{} for _ in range(n_envs)]
    for t in range(steps):
        algo.num_timesteps += n_envs
        callback.update_locals({"dones": dones[:, t], "infos": infos, "n_steps": t})
        if not callback.on_step():
            return False
    return True


def _record_episodes(algo: Any, batch: TensorDictBase) -> None:
    """Feed finished episodes' return and length to SB3's ``ep_info_buffer`` (``rollout/ep_rew_mean``)."""
    rewards = batch.get(EPISODE_REWARD, None)
    lengths = batch.get(STEP_COUNT, None)
    if rewards is None or lengths is None or algo.ep_info_buffer is None:
        return
    done = batch.get(st.NEXT_DONE)[..., 0]
    for reward, length in zip(rewards[done].reshape(-1).tolist(), lengths[done].reshape(-1).tolist(), strict=True):
        algo.ep_info_buffer.append({"r": reward, "l": int(length)})
    algo._episode_num += int(done.sum())
