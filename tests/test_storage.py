"""The rollout TensorDict: layout, dtypes, device, and memory-mapped storage."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from gymnasium import spaces
from helpers import ACTION_SPACES, OBS_SPACES, assert_same_epochs, fill_pair, make_pair
from tensordict import TensorDict

from torchrl_mask import MaskableDictRolloutBuffer, MaskableRolloutBuffer


def test_storage_is_one_tensordict_in_collector_layout_with_torchrl_keys():
    buf = MaskableDictRolloutBuffer(5, OBS_SPACES["dict"], ACTION_SPACES["multidiscrete"], "cpu", n_envs=3)
    td = buf.tensordict
    assert isinstance(td, TensorDict) and td.batch_size == torch.Size([3, 5])
    expected = {
        ("observation", "image"): ((1, 6, 6), torch.uint8),
        ("observation", "vec"): ((4,), torch.float32),
        ("observation", "pos"): ((1,), torch.int64),
        "action": ((3,), torch.int64),
        "action_mask": ((9,), torch.bool),
        "is_init": ((1,), torch.bool),
        "state_value": ((1,), torch.float32),
        "action_log_prob": ((), torch.float32),
        ("next", "reward"): ((1,), torch.float32),
        ("next", "done"): ((1,), torch.bool),
        ("next", "terminated"): ((1,), torch.bool),
        ("next", "state_value"): ((1,), torch.float32),
        "advantage": ((1,), torch.float32),
        "value_target": ((1,), torch.float32),
    }
    assert set(td.keys(include_nested=True, leaves_only=True)) == set(expected)
    for key, (shape, dtype) in expected.items():
        assert td.get(key).shape == (3, 5, *shape), key
        assert td.get(key).dtype == dtype, key


def test_discrete_actions_are_stored_as_indices_and_read_by_sb3_with_a_trailing_one():
    buf = MaskableRolloutBuffer(4, OBS_SPACES["box"], ACTION_SPACES["discrete"], "cpu", n_envs=2)
    assert buf.tensordict["action"].shape == (2, 4)
    assert buf.actions.shape == (4, 2, 1)


def test_flat_env_major_view_is_sb3_contribs_flattened_order():
    ref, ours = make_pair(OBS_SPACES["box"], ACTION_SPACES["discrete"], buffer_size=4, n_envs=3)
    fill_pair(ref, ours, seed=0)
    flat = ours.tensordict.reshape(-1)
    np.testing.assert_array_equal(flat["observation"].numpy(), ref.swap_and_flatten(ref.observations))


def test_memmap_storage_gives_identical_minibatches_and_lives_in_files(tmp_path):
    ref, ours = make_pair(OBS_SPACES["dict"], ACTION_SPACES["discrete"], 6, 2, storage="memmap", memmap_dir=tmp_path)
    assert ours.tensordict.is_memmap()
    assert any(tmp_path.rglob("*.memmap"))
    fill_pair(ref, ours, seed=4)
    np.testing.assert_allclose(ours.returns, ref.returns, rtol=1e-5, atol=1e-5)
    assert_same_epochs(ref, ours, batch_size=5, seed=9)


def test_memmap_on_an_accelerator_or_unknown_storage_is_refused():
    with pytest.raises(ValueError, match="use 'memory' or 'memmap'"):
        MaskableRolloutBuffer(2, OBS_SPACES["box"], ACTION_SPACES["discrete"], "cpu", storage="disk")  # type: ignore[arg-type]


@pytest.mark.parametrize("storage", ["memory", "memmap"])
@pytest.mark.parametrize("gather", ["numpy", "torch"])
@pytest.mark.parametrize("leaf_bytes", [0, 1 << 40])
def test_minibatches_are_identical_whichever_gather_path_is_taken(monkeypatch, tmp_path, leaf_bytes, gather, storage):
    import torchrl_mask.rollout.minibatches as minibatches

    monkeypatch.setattr(minibatches, "PER_EPOCH_SLICE_BYTES", leaf_bytes)
    ref, ours = make_pair(
        OBS_SPACES["dict"],
        ACTION_SPACES["multibinary"],
        buffer_size=7,
        n_envs=3,
        storage=storage,
        memmap_dir=tmp_path if storage == "memmap" else None,
    )
    fill_pair(ref, ours, seed=1)
    # On the host get() gathers with numpy; "torch" takes the accelerator's path (index_select) on the CPU.
    ours._rollout.host = gather == "numpy"
    assert_same_epochs(ref, ours, batch_size=4, seed=2)


@pytest.mark.parametrize("gather", ["numpy", "torch"])
def test_a_minibatch_the_caller_dropped_is_freed_while_the_epoch_goes_on(monkeypatch, gather):
    import weakref

    import torchrl_mask.rollout.minibatches as minibatches

    monkeypatch.setattr(minibatches, "PER_EPOCH_SLICE_BYTES", 0)  # every leaf gathered per minibatch, as images are
    buf = MaskableDictRolloutBuffer(64, OBS_SPACES["dict"], ACTION_SPACES["discrete"], "cpu", n_envs=2)
    ref, _ = make_pair(OBS_SPACES["dict"], ACTION_SPACES["discrete"], 64, 2)
    fill_pair(ref, buf, seed=0)
    buf._rollout.host = gather == "numpy"
    epoch = buf.get(batch_size=8)
    first = weakref.ref(next(epoch).observations["image"])  # a large leaf: gathered per minibatch
    second = next(epoch)
    assert second.observations["image"].shape == (8, 1, 6, 6)
    assert first() is None  # nothing inside get() holds on to an earlier minibatch


@pytest.mark.gpu
def test_cuda_storage_never_leaves_the_device_and_matches_sb3_contrib():
    ref, _ = make_pair(OBS_SPACES["dict"], ACTION_SPACES["discrete"], buffer_size=6, n_envs=2)
    ours = MaskableDictRolloutBuffer(6, OBS_SPACES["dict"], ACTION_SPACES["discrete"], "cuda", 0.9, 0.97, 2)
    fill_pair(ref, ours, seed=3)
    assert all(t.device.type == "cuda" for t in ours.tensordict.values(include_nested=True, leaves_only=True))
    np.random.seed(0)
    ref_batch = next(ref.get(5))
    np.random.seed(0)
    our_batch = next(ours.get(5))
    assert our_batch.actions.device.type == "cuda"
    torch.testing.assert_close(our_batch.returns.cpu(), ref_batch.returns, rtol=1e-5, atol=1e-5)


def test_two_buffers_given_the_same_memmap_dir_never_share_files(tmp_path):
    small = MaskableRolloutBuffer(
        4, OBS_SPACES["box"], ACTION_SPACES["discrete"], "cpu", n_envs=2, storage="memmap", memmap_dir=tmp_path
    )
    large = MaskableRolloutBuffer(
        6, OBS_SPACES["box"], ACTION_SPACES["discrete"], "cpu", n_envs=3, storage="memmap", memmap_dir=tmp_path
    )
    ref, _ = make_pair(OBS_SPACES["box"], ACTION_SPACES["discrete"], buffer_size=4, n_envs=2)
    fill_pair(ref, small, seed=0)
    before = small.tensordict.clone()
    large.tensordict.apply_(lambda tensor: tensor.fill_(1))
    assert (small.tensordict == before).all()
    assert small.tensordict.saved_path != large.tensordict.saved_path


def test_a_memmap_folder_goes_with_its_buffer_and_a_named_folder_stays(tmp_path):
    import gc

    buf = MaskableRolloutBuffer(
        4,
        OBS_SPACES["box"],
        ACTION_SPACES["discrete"],
        "cpu",
        n_envs=2,
        storage="memmap",
        memmap_dir=tmp_path / "rollouts",
    )
    (tmp_path / "rollouts" / "mine.txt").write_text("the user's")
    (folder,) = [path for path in (tmp_path / "rollouts").iterdir() if path.is_dir()]
    assert any(folder.rglob("*.memmap"))
    del buf
    gc.collect()
    assert not folder.exists()
    assert [path.name for path in (tmp_path / "rollouts").iterdir()] == ["mine.txt"]


@pytest.mark.slow  # starts processes: kept out of make test-fast
def test_default_memmap_folders_are_removed_at_exit_also_after_maskableppo_load(tmp_path):
    import os
    import subprocess
    import sys
    import textwrap

    script = textwrap.dedent(
        """
        import sys
        import gymnasium as gym
        from torchrl_mask import MaskablePPO

        kwargs = {"storage": "memmap"}
        model = MaskablePPO("MlpPolicy", gym.make("Taxi-v4"), n_steps=16, rollout_buffer_kwargs=kwargs)
        model.save(sys.argv[1])
        loaded = [MaskablePPO.load(sys.argv[1]) for _ in range(2)]  # kept alive until the interpreter exits
        print(sum(m.rollout_buffer.tensordict.is_memmap() for m in (model, *loaded)))
        """
    )
    temp = tmp_path / "tmp"
    temp.mkdir()
    run = subprocess.run(
        [sys.executable, "-c", script, str(tmp_path / "model.zip")],
        env={**os.environ, "TMPDIR": str(temp)},
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert run.returncode == 0, run.stderr
    assert run.stdout.split() == ["3"]
    assert [path.name for path in temp.iterdir() if path.name.startswith("torchrl_mask")] == []


@pytest.mark.parametrize("storage", ["memory", "memmap"])
def test_new_storage_is_zero_with_all_allowed_masks_as_sb3_contribs_reset_leaves_it(storage, tmp_path):
    garbage = torch.full((1 << 20,), 7, dtype=torch.uint8)  # freed memory a new allocation may reuse
    del garbage
    buf = MaskableDictRolloutBuffer(
        5,
        OBS_SPACES["dict"],
        ACTION_SPACES["multidiscrete"],
        "cpu",
        n_envs=3,
        storage=storage,
        memmap_dir=tmp_path if storage == "memmap" else None,
    )
    ref, _ = make_pair(OBS_SPACES["dict"], ACTION_SPACES["multidiscrete"], buffer_size=5, n_envs=3)
    masks = buf.tensordict.get("action_mask")
    assert masks.all()
    np.testing.assert_array_equal(buf.action_masks, ref.action_masks)
    for key, leaf in buf.tensordict.items(include_nested=True, leaves_only=True):
        if key != "action_mask":
            assert not leaf.any(), key


def _vm_flags(address: int) -> set[str]:
    """The kernel's flags of the memory mapping holding ``address`` (``VmFlags`` in /proc/self/smaps)."""
    inside = False
    with open("/proc/self/smaps") as f:
        for line in f:
            head = line.split(maxsplit=1)[0]
            if "-" in head and not head.endswith(":"):
                start, end = (int(bound, 16) for bound in head.split("-"))
                inside = start <= address < end
            elif inside and head == "VmFlags:":
                return set(line.split()[1:])
    raise AssertionError(f"no mapping holds address {address:#x}")


def test_a_large_host_leaf_gets_the_huge_page_advice_numpy_gives_its_own_arrays():
    # numpy advises transparent huge pages for arrays of 4 MiB and more (VmFlags "hg"), torch's allocator does
    # not; get()'s image row gathers run faster from such a leaf, so the host storage is allocated by numpy.
    space = spaces.Dict({"image": spaces.Box(0, 255, (3, 64, 64), np.uint8)})
    buf = MaskableDictRolloutBuffer(128, space, spaces.Discrete(4), "cpu", n_envs=8)  # a 12 MiB image leaf
    leaf = buf.tensordict.get(("observation", "image"))
    numpys = np.empty(leaf.numel(), dtype=np.uint8)
    inside = 1 << 20  # well inside the advised range (the first page of an allocation holds malloc's header)
    assert ("hg" in _vm_flags(leaf.data_ptr() + inside)) == ("hg" in _vm_flags(numpys.ctypes.data + inside))
    torchs = torch.empty(leaf.numel(), dtype=torch.uint8)
    if "hg" in _vm_flags(numpys.ctypes.data + inside):  # where numpy advises: ours differs from torch's own
        assert "hg" in _vm_flags(leaf.data_ptr() + inside) and "hg" not in _vm_flags(torchs.data_ptr() + inside)
