"""``torch.optim.Adam``'s step as ``MaskablePPO.train`` runs it on the CPU: the same arithmetic, bit for bit, in
far fewer torch calls.

On the CPU, torch's Adam runs each stage of its step (``lerp_``, ``mul_``, ``addcmul_``, ``sqrt``, ``div_``,
``add_``, ``addcdiv_``) once per parameter tensor, foreach or not (the CPU foreach kernels loop over the
single-tensor ones). A policy's dozen small tensors make that about a hundred torch calls per minibatch, which
is most of the step's time. :func:`fast_adam` changes two things for the duration of a ``train()``:

- the two moment estimates of every parameter live in one flat buffer each (the optimizer's state holds views of
  them, so ``state_dict``, saving, loading and copies see ordinary Adam state), the gradients are copied into a
  third, and each stage but the last runs once over all parameters. The stages are element-wise, so each
  element goes through the same kernel with the same scalars as in torch's step; only the update itself runs
  per parameter (torch's ``_foreach_addcdiv_``), so the parameters are updated in place as torch updates them.
- where the flat step does not apply, torch's own step runs with ``foreach`` on (where the user left it unset):
  the same element-wise operations per tensor, with less Python.

The flat step applies to a stock ``torch.optim.Adam`` with one parameter group of contiguous CPU tensors of one
floating dtype, no hooks, and default options apart from ``lr``, ``betas`` and ``eps`` (no ``weight_decay``,
``amsgrad``, ``maximize``, ``foreach=False``, ``fused``, ``capturable`` or ``differentiable``), once torch's own
step has made the state (the first step of a new optimizer is torch's), and while every parameter has a gradient.

Example:
    >>> import torch
    >>> params = [torch.nn.Parameter(torch.ones(3)), torch.nn.Parameter(torch.zeros(2, 2))]
    >>> optimizer = torch.optim.Adam(params, lr=0.1)
    >>> with fast_adam(optimizer) as flat:
    ...     for _ in range(2):
    ...         for param in params:
    ...             param.grad = torch.ones_like(param)
    ...         optimizer.step()
    >>> flat
    True
    >>> params[0]
    Parameter containing:
    tensor([0.8000, 0.8000, 0.8000], requires_grad=True)
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import torch
from torch.optim import optimizer as _optimizer_module

__all__ = ["FlatAdamStep", "fast_adam"]

# Where torch keeps optimizer step hooks (private names). Should a release move them, the lookups below see
# "hooked" and torch's own step runs, never a step that would skip a hook.
_GLOBAL_STEP_HOOKS = ("_global_optimizer_pre_hooks", "_global_optimizer_post_hooks")
_STEP_HOOKS = ("_optimizer_step_pre_hooks", "_optimizer_step_post_hooks")

# The options the flat step reproduces; any other value falls back to torch's step.
_DEFAULT_OPTIONS = {
    "weight_decay": 0,
    "amsgrad": False,
    "maximize": False,
    "capturable": False,
    "differentiable": False,
    "decoupled_weight_decay": False,
}


class FlatAdamStep:
    """Adam's step for one optimizer over flat moment buffers (see the module docstring).

    Call it as the optimizer's ``step``: the first call binds the optimizer's state to the flat buffers, or runs
    torch's step where it cannot (no state yet, a parameter without a gradient).

    :param optimizer: a ``torch.optim.Adam`` that :meth:`applies` to.
    """

    def __init__(self, optimizer: torch.optim.Adam) -> None:
        self.optimizer = optimizer
        self.params: list[torch.Tensor] = list(optimizer.param_groups[0]["params"])
        self._bound = False
        self._grads = self._exp_avgs = self._exp_avg_sqs = self._denom = torch.empty(0)
        self._exp_avg_views: list[torch.Tensor] = []
        self._denom_views: list[torch.Tensor] = []
        self._steps: list[torch.Tensor] = []
        self._one = torch.tensor(1.0)

    @staticmethod
    def applies(optimizer: Any) -> bool:
        """Whether the flat step reproduces ``optimizer``'s own step (the module docstring's conditions).

        :param optimizer: the model's optimizer.
        :return: True for a stock Adam with supported settings and parameters.
        """
        if type(optimizer) is not torch.optim.Adam or len(optimizer.param_groups) != 1 or "step" in vars(optimizer):
            return False
        if any(getattr(optimizer, name, True) for name in _STEP_HOOKS):
            return False
        if any(getattr(_optimizer_module, name, True) for name in _GLOBAL_STEP_HOOKS):
            return False
        group = optimizer.param_groups[0]
        if group.get("foreach") is False or group.get("fused"):
            return False
        if any(group.get(name, default) != default for name, default in _DEFAULT_OPTIONS.items()):
            return False
        if any(isinstance(group[name], torch.Tensor) for name in ("lr", "eps")) or any(
            isinstance(beta, torch.Tensor) for beta in group["betas"]
        ):
            return False
        params = group["params"]
        dtype = params[0].dtype
        return all(
            p.device.type == "cpu" and p.dtype == dtype and p.dtype.is_floating_point and p.is_contiguous()
            for p in params
        )

    def _bind(self) -> bool:
        """Moves the moment estimates into flat buffers and the state onto views of them; False if the state is
        not there yet or the parameters' steps differ."""
        states = [self.optimizer.state.get(p) for p in self.params]
        if not all(
            state
            and {"step", "exp_avg", "exp_avg_sq"} <= state.keys()
            and all(state[key].shape == p.shape and state[key].dtype == p.dtype for key in ("exp_avg", "exp_avg_sq"))
            for p, state in zip(self.params, states, strict=True)
        ):
            return False
        steps = [state["step"] for state in states]  # type: ignore[index]
        if len({float(step) for step in steps}) != 1 or any(step.device.type != "cpu" for step in steps):
            return False
        self._exp_avgs, self._exp_avg_sqs = (
            torch.cat([state[key].reshape(-1) for state in states])  # type: ignore[index]
            for key in ("exp_avg", "exp_avg_sq")
        )
        self._exp_avg_views = self._views(self._exp_avgs)
        for state, exp_avg, exp_avg_sq in zip(states, self._exp_avg_views, self._views(self._exp_avg_sqs), strict=True):
            state["exp_avg"], state["exp_avg_sq"] = exp_avg, exp_avg_sq  # type: ignore[index]
        self._grads, self._denom = torch.empty_like(self._exp_avgs), torch.empty_like(self._exp_avgs)
        self._denom_views = self._views(self._denom)
        self._steps = steps
        self._bound = True
        return True

    def _views(self, flat: torch.Tensor) -> list[torch.Tensor]:
        """``flat`` ``(n_parameters,)`` cut into one view per parameter, in the parameter's shape."""
        views, offset = [], 0
        for param in self.params:
            views.append(flat[offset : offset + param.numel()].view(param.shape))
            offset += param.numel()
        return views

    @torch.no_grad()
    def __call__(self) -> None:
        """One Adam step on the parameters' gradients, bit for bit torch's."""
        grads = [p.grad for p in self.params]
        if any(g is None or g.is_sparse for g in grads) or not (self._bound or self._bind()):
            torch.optim.Adam.step(self.optimizer)
            self._bound = False  # torch's step may have left the parameters' step counts apart
            return
        group = self.optimizer.param_groups[0]
        beta1, beta2 = group["betas"]
        lr, eps = group["lr"], group["eps"]
        torch.cat([g.reshape(-1) for g in grads], out=self._grads)  # type: ignore[union-attr]
        # torch's _multi_tensor_adam, stage for stage, with one call per stage for all the parameters:
        torch._foreach_add_(self._steps, self._one, alpha=1.0)
        step = self._steps[0].item()
        self._exp_avgs.lerp_(self._grads, 1 - beta1)
        self._exp_avg_sqs.mul_(beta2)
        self._exp_avg_sqs.addcmul_(self._grads, self._grads, value=1 - beta2)
        step_size = (lr / (1 - beta1**step)) * -1
        torch.sqrt(self._exp_avg_sqs, out=self._denom)
        self._denom.div_((1 - beta2**step) ** 0.5)
        self._denom.add_(eps)
        torch._foreach_addcdiv_(self.params, self._exp_avg_views, self._denom_views, step_size)


@contextlib.contextmanager
def fast_adam(optimizer: Any) -> Iterator[bool]:
    """Within the block, a stock Adam on the CPU steps over flat buffers (:class:`FlatAdamStep`) or with
    ``foreach`` on, where either reproduces its own step bit for bit; anything else is left as it is.

    :param optimizer: the model's optimizer (any object).
    :return: (as the ``with`` target) whether the flat step was put in place.
    """
    groups = _unset_foreach_groups(optimizer)
    flat = FlatAdamStep.applies(optimizer)
    for group in groups:
        group["foreach"] = True
    if flat:
        optimizer.step = FlatAdamStep(optimizer)
    try:
        yield flat
    finally:
        for group in groups:
            group["foreach"] = None
        if flat:
            vars(optimizer).pop("step", None)


def _unset_foreach_groups(optimizer: Any) -> list[dict[str, Any]]:
    """The param groups of a torch ``Adam`` on CPU tensors whose ``foreach`` and ``fused`` are unset."""
    if type(optimizer) is not torch.optim.Adam:
        return []
    groups = [g for g in optimizer.param_groups if g.get("foreach") is None and not g.get("fused")]
    if any(g.get("differentiable") or g.get("capturable") for g in groups):
        return []
    if any(p.device.type != "cpu" for g in groups for p in g["params"]):
        return []
    return groups
