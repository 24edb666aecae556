"""torchrl_mask.fastpath.adam: the flat step learns torch's Adam parameters and state bit for bit, and stands aside
wherever it would not.

The reference is ``torch.optim.Adam`` with ``foreach=False``: the single-tensor step sb3-contrib's ``train()``
runs on the CPU. Parameters of odd sizes (one element, a few, not multiples of any vector width) and gradients
over eleven orders of magnitude make a difference in any element's arithmetic show.
"""

from __future__ import annotations

import contextlib
import copy
import io
from typing import Any

import pytest
import torch
from torch.optim.optimizer import register_optimizer_step_pre_hook

from torchrl_mask.fastpath.adam import FlatAdamStep, fast_adam

SHAPES = [(16, 5), (16,), (7, 16), (7,), (1, 16), (1,), (3,), (40, 33)]


def _initial(seed: int = 0) -> list[torch.Tensor]:
    generator = torch.Generator().manual_seed(seed)
    return [torch.randn(shape, generator=generator) for shape in SHAPES]


def _grads(steps: int, seed: int = 1) -> list[list[torch.Tensor]]:
    generator = torch.Generator().manual_seed(seed)
    return [[torch.randn(shape, generator=generator) * 10.0 ** (i % 12 - 8) for shape in SHAPES] for i in range(steps)]


def _train(optimizer: torch.optim.Adam, params: list[torch.nn.Parameter], grads: list[list[torch.Tensor]]) -> None:
    for i, step_grads in enumerate(grads):
        for param, grad in zip(params, step_grads, strict=True):
            param.grad = grad.clone()
        if i == len(grads) // 2:
            optimizer.param_groups[0]["lr"] *= 0.5  # as SB3's learning-rate schedule does between updates
        optimizer.step()


def _run(flat: bool, grads: list[list[torch.Tensor]], **kwargs: Any) -> tuple[list[torch.nn.Parameter], Any]:
    params = [torch.nn.Parameter(value) for value in _initial()]
    optimizer = torch.optim.Adam(params, lr=3e-4, eps=1e-5, **({"foreach": False} if not flat else {}), **kwargs)
    if flat:
        with fast_adam(optimizer) as swapped:
            assert swapped
            _train(optimizer, params, grads)
    else:
        _train(optimizer, params, grads)
    return params, optimizer


def assert_same_adam(ours: tuple[list[torch.nn.Parameter], Any], ref: tuple[list[torch.nn.Parameter], Any]) -> None:
    for mine, theirs in zip(ours[0], ref[0], strict=True):
        assert torch.equal(mine, theirs)
    state, ref_state = ours[1].state_dict()["state"], ref[1].state_dict()["state"]
    assert state.keys() == ref_state.keys()
    for index, entry in ref_state.items():
        for key, value in entry.items():
            assert torch.equal(state[index][key], value), (index, key)


@pytest.mark.parametrize("betas", [(0.9, 0.999), (0.5, 0.9)])
def test_flat_step_learns_torchs_parameters_and_state_bit_for_bit(betas: tuple[float, float]) -> None:
    grads = _grads(80)
    assert_same_adam(_run(True, grads, betas=betas), _run(False, grads, betas=betas))


def test_a_step_with_a_missing_gradient_is_torchs_and_the_next_ones_still_match() -> None:
    grads: list[list[Any]] = _grads(30)
    for i in (0, 12, 13):  # the first step (no state yet), then one parameter frozen for two steps
        grads[i] = [None if j == 2 else grad for j, grad in enumerate(grads[i])]

    def run(flat: bool) -> tuple[list[torch.nn.Parameter], Any]:
        params = [torch.nn.Parameter(value) for value in _initial()]
        optimizer = torch.optim.Adam(params, lr=3e-4, foreach=None if flat else False)
        with fast_adam(optimizer) if flat else contextlib.nullcontext():
            for step_grads in grads:
                for param, grad in zip(params, step_grads, strict=True):
                    param.grad = None if grad is None else grad.clone()
                optimizer.step()
        return params, optimizer

    ours, ref = run(True), run(False)
    assert_same_adam(ours, ref)
    # The frozen parameter's step count lags the others' by three.
    assert ours[1].state[ours[0][2]]["step"] == ours[1].state[ours[0][0]]["step"] - 3


def test_flat_state_saves_loads_and_copies_as_ordinary_adam_state() -> None:
    grads = _grads(40)
    params, optimizer = _run(True, grads[:20])
    ref = _run(False, grads[:20])
    assert_same_adam((params, optimizer), ref)
    # A saved and reloaded optimizer, and a deep copy of params and optimizer, carry on as torch's does.
    buffer = io.BytesIO()
    torch.save(optimizer.state_dict(), buffer)
    buffer.seek(0)
    loaded_params = [torch.nn.Parameter(p.detach().clone()) for p in params]
    loaded = torch.optim.Adam(loaded_params, lr=3e-4, eps=1e-5)
    loaded.load_state_dict(torch.load(buffer))
    twin_params, twin = copy.deepcopy((params, optimizer))
    for run_params, run_optimizer in ((params, optimizer), (loaded_params, loaded), (twin_params, twin)):
        with fast_adam(run_optimizer):
            _train(run_optimizer, run_params, grads[20:])
    _train(ref[1], ref[0], grads[20:])
    for run in ((params, optimizer), (loaded_params, loaded), (twin_params, twin)):
        assert_same_adam(run, ref)


@pytest.mark.parametrize(
    "case",
    [
        "weight_decay",
        "amsgrad",
        "maximize",
        "foreach off",
        "two groups",
        "float64 and float32",
        "step hook",
        "global step hook",
        "lr scheduler",
        "sgd",
    ],
)
def test_other_optimizers_and_options_keep_their_own_step(case: str) -> None:
    params = [torch.nn.Parameter(value) for value in _initial()]
    kwargs: dict[str, Any] = {
        "weight_decay": {"weight_decay": 0.01},
        "amsgrad": {"amsgrad": True},
        "maximize": {"maximize": True},
        "foreach off": {"foreach": False},
    }.get(case, {})
    if case == "float64 and float32":
        params[0] = torch.nn.Parameter(params[0].double())
    groups: Any = [{"params": params[:3]}, {"params": params[3:]}] if case == "two groups" else params
    optimizer: Any = torch.optim.SGD(params, lr=0.1) if case == "sgd" else torch.optim.Adam(groups, **kwargs)
    if case == "step hook":
        optimizer.register_step_post_hook(lambda *args: None)
    elif case == "lr scheduler":  # torch's schedulers wrap the optimizer's step to count its calls
        torch.optim.lr_scheduler.StepLR(optimizer, step_size=10)
    hook = register_optimizer_step_pre_hook(lambda *args: None) if case == "global step hook" else None
    try:
        assert not FlatAdamStep.applies(optimizer)
        with fast_adam(optimizer) as flat:
            assert not flat
            assert "step" not in vars(optimizer) or case == "lr scheduler"
            if case == "foreach off":
                assert optimizer.param_groups[0]["foreach"] is False
            elif case != "sgd":
                assert {group["foreach"] for group in optimizer.param_groups} == {True}
    finally:
        if hook is not None:
            hook.remove()
    assert ("step" in vars(optimizer)) == (case == "lr scheduler")
    assert all(group.get("foreach") in (None, False) for group in optimizer.param_groups)


def test_foreach_adam_learns_the_single_tensor_parameters_bit_for_bit() -> None:
    """The fallback: torch's foreach step (put on where the flat one does not apply) is its single-tensor one."""
    grads = _grads(50)
    learned = []
    for foreach in (False, True):
        params = [torch.nn.Parameter(value) for value in _initial()]
        optimizer = torch.optim.Adam(params, lr=3e-4, eps=1e-5, weight_decay=0.01, foreach=foreach)
        _train(optimizer, params, grads)
        learned.append((params, optimizer))
    assert_same_adam(*learned)
