"""What ``learn(collector=...)`` refuses before anything runs, and how it lets a refused collector go: a shut-down
collector, off-policy distributed ones, a ``RayCollector`` that yields no batch, a policy module over another
policy. :class:`~torchrl_mask.algorithms.collector_source.CollectorRollout` calls these.
"""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING, Any, NoReturn, TypeGuard

from torchrl.collectors import BaseCollector

from torchrl_mask.torchrl.policy import MaskablePolicyModule
from torchrl_mask.torchrl.workers import shutdown as shutdown_collector

if TYPE_CHECKING:
    from sb3_contrib import MaskablePPO
    from torchrl.collectors.distributed import RayCollector

__all__ = ["more_frames", "refuse_collector", "refuse_policy", "release_refused", "was_shut_down"]


def release_refused(collector: BaseCollector, refusal: Exception) -> NoReturn:
    """Raise ``refusal``, learn()'s refusal of ``collector``; a ``RayCollector`` is shut down first, and the
    message says so. Its actors hold the cluster's resources (a CPU each, by default): left running, they would
    keep the corrected collector's actors from ever being scheduled, and its first batch would wait forever.

    :param collector: the refused collector.
    :param refusal: the error that refuses it.
    :raises Exception: ``refusal``, or for a ``RayCollector`` the same type with the release added to its message.
    """
    if not (_is_ray(collector) and collector.remote_collectors):
        raise refusal
    shutdown_collector(collector)
    if type(refusal) not in (TypeError, ValueError, RuntimeError):
        raise refusal
    raise type(refusal)(
        f"{refusal} learn() has shut this RayCollector down (collector.shutdown()): its Ray actors are killed and "
        "their resources free for the corrected collector."
    ) from None


def _is_distributed(collector: BaseCollector, name: str) -> bool:
    """Whether ``collector`` is TorchRL's distributed collector class ``name``. Looked up where the user's import
    put it, as only a collector of a class already imported can exist: importing ``torchrl.collectors.distributed``
    here would add its DeprecationWarnings (it defines TorchRL's deprecated WeightUpdater classes) to every
    ``import torchrl_mask``."""
    found = getattr(sys.modules.get("torchrl.collectors.distributed"), name, None)
    return isinstance(found, type) and isinstance(collector, found)


def _is_ray(collector: BaseCollector) -> TypeGuard[RayCollector]:
    return _is_distributed(collector, "RayCollector")


def more_frames(collector: BaseCollector) -> str:
    """How to create ``collector`` so that it gives every batch learn() asks for.

    :param collector: the collector given to ``learn``.
    :return: the advice, one sentence.
    """
    if _is_ray(collector):
        return "create the RayCollector with total_frames of at least total_timesteps (e.g. 1 << 40)."
    return "create it with total_frames=-1 (or at least total_timesteps)."


def was_shut_down(collector: BaseCollector) -> bool:
    """Whether TorchRL's ``shutdown()`` ran on ``collector``: its envs and workers are gone for good.

    :param collector: any TorchRL collector.
    :return: True once it was shut down.
    """
    if _is_ray(collector):  # shutdown() kills its remote collectors and empties the list
        return collector.num_collectors > 0 and not collector.remote_collectors
    # Collector and the multi-process collectors set `closed`; DistributedCollector sets `_shutdown`.
    return bool(getattr(collector, "closed", False) or getattr(collector, "_shutdown", False))


def refuse_collector(collector: BaseCollector) -> None:
    """Refuse a collector that cannot give on-policy batches to learn(), naming the one to use.

    :param collector: the collector given to ``learn``.
    :raises RuntimeError: it was shut down.
    :raises TypeError: it is off-policy by one update (``DistributedSyncCollector``, ``RayCollector(sync=False)``
        over several remote collectors).
    :raises ValueError: a ``RayCollector`` whose ``total_frames`` gives no batch.
    """
    if was_shut_down(collector):
        raise RuntimeError(
            f"The {type(collector).__name__} has been shut down (learn() shuts its collector down when it ends, "
            "unless shutdown=False, and a RayCollector it refuses; or collector.shutdown() was called): its envs "
            "and workers are gone. Create a "
            "new collector, or pass shutdown=False to the learn() whose collector a later learn() continues."
        )
    if _is_distributed(collector, "DistributedSyncCollector"):
        raise TypeError(
            "DistributedSyncCollector collects each batch before the last update's weights reach its workers "
            "(off-policy by one update) and has no update_policy_weights_(); use "
            "torchrl.collectors.distributed.DistributedCollector(..., sync=True) for on-policy batches."
        )
    if _is_ray(collector):
        if collector.total_frames <= 0:
            raise ValueError(
                f"RayCollector(total_frames={collector.total_frames}) yields no batch (it collects while its frames "
                f"are below total_frames, and -1 does not mean endless there): {more_frames(collector)}"
            )
        if not collector._sync and collector.num_collectors > 1:
            raise TypeError(
                f"RayCollector(sync=False) over {collector.num_collectors} remote collectors hands each batch from one "
                "of them, collected while the learner trained (off-policy by one update, and consecutive rollouts "
                "from different envs): create it with sync=True, one batch from every remote collector per rollout."
            )


def refuse_policy(shipped: Any, model: MaskablePPO) -> None:
    """Refuse a collector whose policy is not a MaskablePolicyModule over ``model.policy``.

    :param shipped: the collector's policy (None for a ``policy_factory``: nothing to check here).
    :param model: the model that learns.
    :raises TypeError: not a ``MaskablePolicyModule``.
    :raises ValueError: a ``MaskablePolicyModule`` over another policy.
    """
    if shipped is None:  # a policy_factory: built in each worker, nothing to look at here
        return
    if not isinstance(shipped, MaskablePolicyModule):
        raise TypeError(
            f"The collector runs a {type(shipped).__name__}, not a MaskablePolicyModule: learn() needs the actions "
            "drawn under the masks by this model's policy, with their log-probabilities and values, and sends that "
            "policy's weights to the collector. Build the collector with MaskablePolicyModule(model.policy)."
        )
    if shipped.policy is not model.policy:
        raise ValueError(
            "The collector runs a MaskablePolicyModule over another policy than this model's: its actions and "
            "log-probabilities would not be this model's, and the weights learn() trains would never reach it. "
            "Build the collector with MaskablePolicyModule(model.policy) of the model that learns."
        )
