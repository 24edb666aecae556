"""``JobScorerPolicy``: MaskablePPO's policy for :class:`~torchrl_mask.scheduling.env.JobShopEnv`, scoring every job
with one network shared by all jobs, as a dispatching rule scores them.

A dispatching rule gives each job a priority from that job's own numbers (SPT its next duration, MWKR its work
left) and dispatches the best legal one. This policy learns such a rule: one small MLP reads a job's row of the
observation beside the mean of every job's embedding (what the shop looks like) and gives that job's logit; the
mask then keeps the legal ones (sb3-contrib's masked distribution). The value reads the mean and the maximum of
the jobs' embeddings. A flat MLP over all rows would have to learn the same rule once per job position; this one
learns it once, and its weights do not depend on the number of jobs.

Shapes: observation ``(batch, jobs, features)`` (SB3's ``FlattenExtractor`` hands it over flat, ``(batch, jobs *
features)``); per-job embedding ``(batch, jobs, hidden)``; logits ``(batch, jobs)``; value latent ``(batch, hidden)``.

Example:
    >>> from torchrl_mask import MaskablePPO
    >>> from torchrl_mask.scheduling import make_env
    >>> model = MaskablePPO(JobScorerPolicy, make_env("ft06"), policy_kwargs={"hidden": 32}, n_steps=36)
    >>> model.policy.mlp_extractor.latent_dim_pi, model.policy.action_net
    (6, Identity())
"""

from __future__ import annotations

import itertools
from typing import Any

import torch
from sb3_contrib.common.maskable.policies import MaskableActorCriticPolicy
from stable_baselines3.common.type_aliases import Schedule
from torch import nn

__all__ = ["JobScorer", "JobScorerPolicy"]


def _mlp(sizes: list[int]) -> nn.Sequential:
    layers: list[nn.Module] = []
    for size_in, size_out in itertools.pairwise(sizes):
        layers += [nn.Linear(size_in, size_out), nn.Tanh()]
    return nn.Sequential(*layers)


class JobScorer(nn.Module):
    """The policy's and the value's networks (SB3's ``mlp_extractor`` slot): per-job logits and a value latent.

    :param num_jobs: rows of the observation (the actions).
    :param num_features: columns of the observation.
    :param hidden: width of every layer.
    """

    def __init__(self, num_jobs: int, num_features: int, hidden: int) -> None:
        super().__init__()
        self.num_jobs, self.num_features = num_jobs, num_features
        self.latent_dim_pi, self.latent_dim_vf = num_jobs, hidden
        self.actor_embed = _mlp([num_features, hidden, hidden])
        self.actor_score = nn.Sequential(_mlp([2 * hidden, hidden]), nn.Linear(hidden, 1))
        self.critic_embed = _mlp([num_features, hidden, hidden])
        self.critic_head = _mlp([2 * hidden, hidden])

    def _rows(self, features: torch.Tensor) -> torch.Tensor:
        return features.reshape(-1, self.num_jobs, self.num_features)

    def forward_actor(self, features: torch.Tensor) -> torch.Tensor:
        """``(batch, jobs)`` logits from the flat observation ``(batch, jobs * features)``."""
        embedded = self.actor_embed(self._rows(features))
        shop = embedded.mean(dim=1, keepdim=True).expand_as(embedded)
        return self.actor_score(torch.cat([embedded, shop], dim=-1)).squeeze(-1)

    def forward_critic(self, features: torch.Tensor) -> torch.Tensor:
        """``(batch, hidden)`` value latent from the flat observation ``(batch, jobs * features)``."""
        embedded = self.critic_embed(self._rows(features))
        return self.critic_head(torch.cat([embedded.mean(dim=1), embedded.amax(dim=1)], dim=-1))

    def forward(self, features: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Both latents, as SB3's ``MlpExtractor`` returns them."""
        return self.forward_actor(features), self.forward_critic(features)


class JobScorerPolicy(MaskableActorCriticPolicy):
    """sb3-contrib's masked actor-critic policy with :class:`JobScorer` in place of the MLP extractor; the job
    scores are the logits (no action layer after them).

    :param observation_space: ``Box((jobs, features))``, :class:`~torchrl_mask.scheduling.env.JobShopEnv`'s.
    :param action_space: ``Discrete(jobs)``.
    :param lr_schedule: the learning rate schedule.
    :param hidden: width of the scorer's and the value's layers.
    :param kwargs: sb3-contrib's policy arguments (``ortho_init``, ``optimizer_kwargs``...; ``net_arch`` is unused).
    """

    def __init__(
        self, observation_space: Any, action_space: Any, lr_schedule: Schedule, hidden: int = 64, **kwargs: Any
    ) -> None:
        self.hidden = hidden
        super().__init__(observation_space, action_space, lr_schedule, **kwargs)

    def _build_mlp_extractor(self) -> None:
        rows, columns = self.observation_space.shape  # type: ignore[misc]
        self.mlp_extractor = JobScorer(rows, columns, self.hidden)  # type: ignore[assignment]

    def _build(self, lr_schedule: Schedule) -> None:
        # sb3-contrib's build (orthogonal init, value layer), then the scores become the logits: its action layer
        # is dropped, the scorer's last layer gets the small gain that layer would have had, and the optimizer is
        # made again over the parameters that remain.
        super()._build(lr_schedule)
        self.action_net = nn.Identity()
        scorer = self.mlp_extractor
        assert isinstance(scorer, JobScorer)
        if self.ortho_init:
            scorer.actor_score[-1].apply(lambda module: self.init_weights(module, gain=0.01))
        self.optimizer = self.optimizer_class(
            self.parameters(),
            lr=lr_schedule(1),  # type: ignore[call-arg]
            **self.optimizer_kwargs,
        )

    def _get_constructor_parameters(self) -> dict[str, Any]:
        return {**super()._get_constructor_parameters(), "hidden": self.hidden}
