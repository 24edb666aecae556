"""sb3-contrib's LSTM actor-critic policies with action masks applied to the distribution after the LSTM.

The policies are sb3-contrib's ``RecurrentActorCriticPolicy`` (and its CNN and multi-input variants), unchanged
but for one hook: ``_get_action_dist_from_latent``, which ``forward``, ``evaluate_actions`` and
``get_distribution`` all call on the LSTM's (and MLP's) latent. With masks it returns :class:`MaskedDistribution`,
SB3's ``Distribution`` face of the package's one masked distribution,
:class:`~torchrl_mask.distributions.MaskedCategoricals` (bit for bit sb3-contrib's masked distributions). Without
masks it is SB3's own distribution, so that an unmasked run draws and learns exactly what sb3-contrib's
``RecurrentPPO`` does. Masks reach the hook as the ``action_masks=`` argument of ``forward``, ``evaluate_actions``,
``get_distribution`` and ``predict``, or, for ``RecurrentPPO``'s own rollout and training loops (which call the
policy without them), from the source that :meth:`MaskableRecurrentActorCriticPolicy.masks_from` sets for the
length of a ``with`` block.

>>> import numpy as np
>>> from gymnasium import spaces
>>> policy = MaskableRecurrentActorCriticPolicy(
...     spaces.Box(-1, 1, (3,)), spaces.Discrete(4), lambda _: 3e-4, lstm_hidden_size=8
... )
>>> actions, state = policy.predict(np.zeros((2, 3), np.float32), action_masks=np.array([[0, 0, 1, 0], [1, 0, 0, 0]]))
>>> actions.tolist(), state[0].shape
([2, 0], (1, 2, 8))
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import numpy as np
import torch as th
from gymnasium import spaces
from sb3_contrib.common.recurrent.policies import (
    RecurrentActorCriticCnnPolicy,
    RecurrentActorCriticPolicy,
    RecurrentMultiInputActorCriticPolicy,
)
from sb3_contrib.common.recurrent.type_aliases import RNNStates
from stable_baselines3.common.distributions import Distribution, MultiCategoricalDistribution
from stable_baselines3.common.torch_layers import BaseFeaturesExtractor
from torch import nn

from torchrl_mask.distributions import MaskedCategoricals
from torchrl_mask.rollout.masks import mask_spec

MaybeMasks = np.ndarray | th.Tensor | None


class MaskedDistribution(Distribution):
    """SB3's ``Distribution`` over one batch of masked logits, computed by
    :class:`~torchrl_mask.distributions.MaskedCategoricals` (what the LSTM policies' ``forward``,
    ``evaluate_actions`` and ``predict`` call: ``get_actions``, ``log_prob``, ``entropy``).

    :param action_space: a Discrete, MultiDiscrete or 1-D MultiBinary action space.
    """

    def __init__(self, action_space: spaces.Discrete | spaces.MultiDiscrete | spaces.MultiBinary) -> None:
        super().__init__()
        self.categoricals = MaskedCategoricals(mask_spec(action_space).groups)
        self._discrete = isinstance(action_space, spaces.Discrete)
        self.log_pmf: list[th.Tensor] = []
        self.mask: th.Tensor | None = None

    def proba_distribution_net(self, *args: Any, **kwargs: Any) -> nn.Module:
        """Not used: the policy's own ``action_net`` gives the logits."""
        raise NotImplementedError("MaskedDistribution takes the logits of the policy's own action_net.")

    def proba_distribution(self, action_logits: th.Tensor, action_masks: MaybeMasks = None) -> MaskedDistribution:
        """Hold the distribution of ``action_logits`` under ``action_masks``.

        :param action_logits: the action net's output, ``(batch, sum of the action dims)``.
        :param action_masks: bool (or 0/1) masks with ``batch * sum of the action dims`` entries, True legal; None
            unmasked.
        :return: self.
        """
        width = self.categoricals.width
        logits = action_logits.view(-1, width)
        self.mask = None
        if action_masks is not None:
            self.mask = th.as_tensor(action_masks, device=logits.device).reshape(logits.shape).to(th.bool)
        self.log_pmf = self.categoricals.log_pmf(logits, self.mask)
        return self

    def log_prob(self, actions: th.Tensor) -> th.Tensor:
        """:param actions: ``(batch,)`` (Discrete) or ``(batch, n_sub_actions)``.
        :return: the log-probabilities, ``(batch,)``."""
        return self.categoricals.log_prob(self.log_pmf, actions)

    def entropy(self) -> th.Tensor:
        """:return: the entropies, ``(batch,)`` (masked choices count zero)."""
        return self.categoricals.entropy(self.log_pmf, self.mask)

    def sample(self) -> th.Tensor:
        """:return: legal actions, ``(batch,)`` (Discrete) or ``(batch, n_sub_actions)``, int64."""
        return self._shaped(self.categoricals.sample(self.log_pmf))

    def mode(self) -> th.Tensor:
        """:return: each sub-action's most likely legal choice, shaped as :meth:`sample`."""
        return self._shaped(self.categoricals.sample(self.log_pmf, deterministic=True))

    def actions_from_params(self, action_logits: th.Tensor, deterministic: bool = False, **kwargs: Any) -> th.Tensor:
        """:param action_logits: as :meth:`proba_distribution` takes them.
        :param deterministic: the mode instead of a sample.
        :param kwargs: ``action_masks=``.
        :return: the actions."""
        return self.proba_distribution(action_logits, kwargs.get("action_masks")).get_actions(deterministic)

    def log_prob_from_params(self, action_logits: th.Tensor, **kwargs: Any) -> tuple[th.Tensor, th.Tensor]:
        """:param action_logits: as :meth:`proba_distribution` takes them.
        :param kwargs: ``action_masks=``.
        :return: sampled actions and their log-probabilities."""
        actions = self.actions_from_params(action_logits, **kwargs)
        return actions, self.log_prob(actions)

    def _shaped(self, actions: th.Tensor) -> th.Tensor:
        return actions[:, 0] if self._discrete else actions


class MaskableRecurrentActorCriticPolicy(RecurrentActorCriticPolicy):
    """sb3-contrib's ``RecurrentActorCriticPolicy`` (``MlpLstmPolicy``) that masks its action distribution.

    Takes sb3-contrib's arguments unchanged (``lstm_hidden_size``, ``n_lstm_layers``, ``shared_lstm``,
    ``enable_critic_lstm``, ...). Masks apply to ``Discrete``, ``MultiDiscrete`` and 1-D ``MultiBinary`` action spaces
    (a ``MultiBinary`` head has two logits per bit, as in ``MaskablePPO``).

    :param args: positional arguments of ``RecurrentActorCriticPolicy``.
    :param kwargs: keyword arguments of ``RecurrentActorCriticPolicy``.
    """

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        maskable = isinstance(self.action_space, spaces.Discrete | spaces.MultiDiscrete | spaces.MultiBinary)
        self.masked_action_dist = MaskedDistribution(self.action_space) if maskable else None  # type: ignore[arg-type]
        self._mask_source: Callable[[], MaybeMasks] | None = None
        self._action_masks: MaybeMasks = None

    def make_features_extractor(self) -> BaseFeaturesExtractor:
        """SB3's features extractor, its ``features_dim`` a Python int.

        Overridden because SB3 gives a NumPy integer for a MultiDiscrete observation space, which the ``nn.LSTM``
        sb3-contrib builds on it refuses (sb3-contrib's own ``RecurrentPPO`` fails there).

        :return: the extractor.
        """
        extractor = super().make_features_extractor()
        extractor._features_dim = int(extractor.features_dim)
        return extractor

    @contextmanager
    def masks_from(self, source: Callable[[], MaybeMasks]) -> Iterator[None]:
        """Within the block, ``forward`` and ``evaluate_actions`` called without masks take ``source()``'s.

        ``RecurrentPPO``'s rollout and training loops call the policy without masks; this is how
        :class:`~torchrl_mask.MaskableRecurrentPPO` gives them theirs without copying those loops.

        :param source: called once per such call for its masks, ``(batch, sum of the action dims)``.
        """
        previous, self._mask_source = self._mask_source, source
        try:
            yield
        finally:
            self._mask_source = previous

    @contextmanager
    def _masked(self, action_masks: MaybeMasks, from_source: bool = False) -> Iterator[None]:
        # Masks given here, else those of an enclosing call (predict -> get_distribution), else the source's.
        if action_masks is None:
            action_masks = self._action_masks
        if action_masks is None and from_source and self._mask_source is not None:
            action_masks = self._mask_source()
        if action_masks is not None and self.masked_action_dist is None:
            raise ValueError(
                f"action masks need a Discrete, MultiDiscrete or MultiBinary action space, not {self.action_space}"
            )
        previous, self._action_masks = self._action_masks, action_masks
        try:
            yield
        finally:
            self._action_masks = previous

    def _build(self, lr_schedule: Callable[[float], float]) -> None:
        # Overridden for MultiBinary only: two logits per bit, as sb3-contrib's masked Bernoulli (MaskablePPO's)
        # lays them out, so that each bit can be masked; SB3's MultiCategorical over [2] * n has that head.
        if isinstance(self.action_space, spaces.MultiBinary):
            self.action_dist = MultiCategoricalDistribution([2] * int(np.prod(self.action_space.shape)))
        super()._build(lr_schedule)

    def _get_action_dist_from_latent(self, latent_pi: th.Tensor) -> Distribution:
        # The hook every method below reaches after the LSTM: the masked distribution when masks are set.
        if self._action_masks is None or self.masked_action_dist is None:
            return super()._get_action_dist_from_latent(latent_pi)
        return self.masked_action_dist.proba_distribution(self.action_net(latent_pi), self._action_masks)

    def forward(  # type: ignore[override]
        self,
        obs: th.Tensor,
        lstm_states: RNNStates,
        episode_starts: th.Tensor,
        deterministic: bool = False,
        action_masks: MaybeMasks = None,
    ) -> tuple[th.Tensor, th.Tensor, th.Tensor, RNNStates]:
        """sb3-contrib's ``forward`` with masks: actions, values, log-probs and the next LSTM states.

        :param obs: observations, shape ``(n_envs, *obs_shape)``.
        :param lstm_states: the LSTM states, each ``(n_lstm_layers, n_envs, lstm_hidden_size)``.
        :param episode_starts: 1.0 where an episode starts, shape ``(n_envs,)``.
        :param deterministic: take the most likely legal action.
        :param action_masks: masks, shape ``(n_envs, sum of the action dims)``; None: the :meth:`masks_from` source's.
        :return: actions ``(n_envs, *action_shape)``, values ``(n_envs, 1)``, log-probs ``(n_envs,)``, states.
        """
        with self._masked(action_masks, from_source=True):
            return super().forward(obs, lstm_states, episode_starts, deterministic)

    def evaluate_actions(  # type: ignore[override]
        self,
        obs: th.Tensor,
        actions: th.Tensor,
        lstm_states: RNNStates,
        episode_starts: th.Tensor,
        action_masks: MaybeMasks = None,
    ) -> tuple[th.Tensor, th.Tensor, th.Tensor]:
        """sb3-contrib's ``evaluate_actions`` with masks: values, log-probs and entropies of ``actions``.

        :param obs: padded sequences, shape ``(n_seq * max_length, *obs_shape)``.
        :param actions: the actions, shape ``(n_seq * max_length,)`` (Discrete) or ``(..., n_dims)``.
        :param lstm_states: the states at each sequence's start, each ``(n_lstm_layers, n_seq, hidden)``.
        :param episode_starts: 1.0 where an episode starts, shape ``(n_seq * max_length,)``.
        :param action_masks: masks, shape ``(n_seq * max_length, sum of the action dims)``; None: the
            :meth:`masks_from` source's.
        :return: values ``(batch, 1)``, log-probs ``(batch,)``, entropies ``(batch,)``.
        """
        with self._masked(action_masks, from_source=True):
            return super().evaluate_actions(obs, actions, lstm_states, episode_starts)

    def get_distribution(  # type: ignore[override]
        self,
        obs: th.Tensor,
        lstm_states: tuple[th.Tensor, th.Tensor],
        episode_starts: th.Tensor,
        action_masks: MaybeMasks = None,
    ) -> tuple[Distribution, tuple[th.Tensor, ...]]:
        """sb3-contrib's ``get_distribution`` with masks: the actor's distribution and next LSTM state.

        :param obs: observations, shape ``(n_envs, *obs_shape)``.
        :param lstm_states: the actor's LSTM state, each ``(n_lstm_layers, n_envs, lstm_hidden_size)``.
        :param episode_starts: 1.0 where an episode starts, shape ``(n_envs,)``.
        :param action_masks: masks, shape ``(n_envs, sum of the action dims)``, or None.
        :return: the distribution and the actor's next LSTM state.
        """
        with self._masked(action_masks):
            return super().get_distribution(obs, lstm_states, episode_starts)

    def predict(
        self,
        observation: np.ndarray | dict[str, np.ndarray],
        state: tuple[np.ndarray, ...] | None = None,
        episode_start: np.ndarray | None = None,
        deterministic: bool = False,
        action_masks: MaybeMasks = None,
    ) -> tuple[np.ndarray, tuple[np.ndarray, ...] | None]:
        """sb3-contrib's recurrent ``predict`` with masks.

        :param observation: observations, shape ``(n_envs, *obs_shape)`` or one ``obs_shape``.
        :param state: the LSTM state ``predict`` returned last, each ``(n_lstm_layers, n_envs, hidden)``.
        :param episode_start: True where an episode starts, shape ``(n_envs,)``.
        :param deterministic: take the most likely legal action.
        :param action_masks: masks, shape ``(n_envs, sum of the action dims)``, or None.
        :return: the actions and the next LSTM state.
        """
        with self._masked(action_masks):
            return super().predict(observation, state, episode_start, deterministic)


class MaskableRecurrentActorCriticCnnPolicy(MaskableRecurrentActorCriticPolicy, RecurrentActorCriticCnnPolicy):
    """sb3-contrib's ``CnnLstmPolicy`` that masks its action distribution.

    :param args: positional arguments of ``RecurrentActorCriticCnnPolicy``.
    :param kwargs: keyword arguments of ``RecurrentActorCriticCnnPolicy``.
    """


class MaskableRecurrentMultiInputActorCriticPolicy(
    MaskableRecurrentActorCriticPolicy, RecurrentMultiInputActorCriticPolicy
):
    """sb3-contrib's ``MultiInputLstmPolicy`` that masks its action distribution.

    :param args: positional arguments of ``RecurrentMultiInputActorCriticPolicy``.
    :param kwargs: keyword arguments of ``RecurrentMultiInputActorCriticPolicy``.
    """
