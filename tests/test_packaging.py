"""The package states its supported versions once, refuses others at import, and builds a wheel that works alone."""

from __future__ import annotations

import importlib.metadata
import os
import subprocess
import sys
import sysconfig
import venv
import zipfile
from pathlib import Path

import pytest
import tomllib
from packaging.requirements import Requirement

from torchrl_mask import _compat

REPO = Path(__file__).resolve().parents[1]


def _pyproject_requirements() -> dict[str, Requirement]:
    lines = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["dependencies"]
    return {Requirement(line).name: Requirement(line) for line in lines}


def test_checked_libraries_have_a_floor_and_a_ceiling_in_pyproject() -> None:
    requirements = _pyproject_requirements()
    for name in _compat.CHECKED:
        operators = {spec.operator for spec in requirements[name].specifier}
        # tensordict: no private name of it is used (tests/test_private_api.py), so its ceiling is torchrl's pin.
        needed = {">="} if name == "tensordict" else {">=", "<"}
        assert needed <= operators, f"{name} needs {needed}, has {requirements[name].specifier}"
    pinned = [
        Requirement(line) for line in importlib.metadata.requires("torchrl") or [] if line.startswith("tensordict")
    ]
    assert pinned and any(spec.operator == "<" for spec in pinned[0].specifier), "torchrl no longer caps tensordict"
    # SB3 2.9 itself needs torch>=2.8; a lower floor would promise what SB3 does not install.
    assert not requirements["torch"].specifier.contains("2.7.1")


def test_installed_metadata_states_the_same_ranges_as_pyproject() -> None:
    requirements = _pyproject_requirements()
    ranges = _compat.supported_ranges()
    assert set(ranges) == set(_compat.CHECKED), "reinstall the package (make setup): its metadata is stale"
    for name, specifier in ranges.items():
        assert Requirement(f"{name}{specifier}").specifier == requirements[name].specifier, name


def test_versions_outside_the_range_are_named_with_their_range() -> None:
    ranges = {"torchrl": ">=0.14,<0.15", "torch": ">=2.8,<3"}
    assert _compat.unsupported({"torchrl": "0.14.1", "torch": "2.13.0+cpu"}, ranges) == []
    assert _compat.unsupported({"torchrl": "0.15.0", "torch": "2.7.0"}, ranges) == [
        "torch 2.7.0 (supported: >=2.8,<3)",
        "torchrl 0.15.0 (supported: >=0.14,<0.15)",
    ]
    assert _compat.unsupported({"torchrl": "0.15.0.dev20261201"}, ranges) == [
        "torchrl 0.15.0.dev20261201 (supported: >=0.14,<0.15)"
    ]
    assert _compat.unsupported({"torchrl": "not-a-version"}, ranges) == [
        "torchrl not-a-version (supported: >=0.14,<0.15)"
    ]


def test_check_versions_raises_naming_the_fix_or_warns_when_told_to(monkeypatch: pytest.MonkeyPatch) -> None:
    ranges = {"tensordict": ">=0.14,<0.15"}
    _compat.check_versions({"tensordict": "0.14.3"}, ranges)  # in range: silent
    with pytest.raises(ImportError, match=r"tensordict 0\.16\.0 \(supported: >=0\.14,<0\.15\).*pip install"):
        _compat.check_versions({"tensordict": "0.16.0"}, ranges)
    monkeypatch.setenv(_compat.IGNORE_ENV, "1")
    with pytest.warns(RuntimeWarning, match="tensordict 0.16.0"):
        _compat.check_versions({"tensordict": "0.16.0"}, ranges)


def _python(code: str, cwd: Path, python: str = sys.executable, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [python, "-c", code], cwd=cwd, capture_output=True, text=True, timeout=300, env={**os.environ, **env}
    )


def test_import_refuses_an_unsupported_torchrl_next_to_it(tmp_path: Path) -> None:
    # A distribution's metadata earlier on sys.path is what importlib.metadata reports: torchrl "0.15.0".
    (tmp_path / "torchrl-0.15.0.dist-info").mkdir()
    (tmp_path / "torchrl-0.15.0.dist-info" / "METADATA").write_text(
        "Metadata-Version: 2.1\nName: torchrl\nVersion: 0.15.0\n"
    )
    run = _python("import torchrl_mask", tmp_path, PYTHONPATH=str(tmp_path))
    assert run.returncode != 0
    assert "ImportError: torchrl_mask does not support the installed torchrl 0.15.0 (supported: >=0.14,<0.15)" in (
        run.stderr
    )
    warned = _python("import torchrl_mask", tmp_path, PYTHONPATH=str(tmp_path), **{_compat.IGNORE_ENV: "1"})
    assert warned.returncode == 0 and "RuntimeWarning" in warned.stderr, warned.stderr


EVERY_MODULE_UNDER_DEPRECATION_ERRORS = """
import importlib, pkgutil, warnings
import torchrl.collectors  # TorchRL's own DeprecationWarnings (its WeightUpdater classes), given by itself
warnings.simplefilter("error", DeprecationWarning)
import torchrl_mask
for module in pkgutil.walk_packages(torchrl_mask.__path__, "torchrl_mask."):
    if not module.name.endswith("__main__"):  # that one runs the command
        importlib.import_module(module.name)
print("imported", torchrl_mask.__file__)
"""


def test_importing_every_module_adds_no_deprecation_warning_to_torchrl_collectors_own() -> None:
    run = _python(EVERY_MODULE_UNDER_DEPRECATION_ERRORS, REPO)
    assert run.returncode == 0, run.stderr
    assert run.stdout.strip() == f"imported {REPO / 'torchrl_mask' / '__init__.py'}"


SMOKE = """
import torchrl_mask, sb3_contrib
from sb3_contrib.common.envs import InvalidActionEnvDiscrete
from torchrl_mask import MaskablePPO
assert torchrl_mask.__file__.startswith({prefix!r}), torchrl_mask.__file__
model = MaskablePPO("MlpPolicy", InvalidActionEnvDiscrete(dim=20, n_invalid_actions=10), n_steps=32, batch_size=16,
                    n_epochs=1, seed=0).learn(64)
assert model.num_timesteps == 64 and model.rollout_buffer.tensordict["action_mask"].dtype.is_floating_point is False
print("ok", torchrl_mask.__version__)
"""


@pytest.mark.slow  # starts processes: kept out of make test-fast
def test_wheel_installs_into_a_fresh_venv_and_learns(tmp_path: Path) -> None:
    build = subprocess.run(
        [sys.executable, "-m", "build", "--wheel", "--no-isolation", "--outdir", str(tmp_path / "dist"), str(REPO)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert build.returncode == 0, build.stdout[-2000:] + build.stderr[-2000:]
    (wheel,) = (tmp_path / "dist").glob("torchrl_mask-*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    assert "torchrl_mask/py.typed" in names and "torchrl_mask/_compat.py" in names
    assert not [name for name in names if name.startswith(("tests/", "docs/", "tutorials/", "benchmarks/"))]

    # A fresh venv holding only the wheel; the dependencies come from this venv's site-packages through a .pth
    # line (a folder named in a .pth is searched, but its own .pth files, e.g. the editable install's, do not run).
    env_dir = tmp_path / "venv"
    venv.create(env_dir, with_pip=False)
    python = str(env_dir / "bin" / "python")
    fresh_site = Path(
        _python("import sysconfig; print(sysconfig.get_path('purelib'))", tmp_path, python).stdout.strip()
    )
    (fresh_site / "deps.pth").write_text(sysconfig.get_path("purelib") + "\n")
    install = subprocess.run(
        [sys.executable, "-m", "pip", "--python", python, "install", "--no-deps", "--no-index", str(wheel)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert install.returncode == 0, install.stdout[-2000:] + install.stderr[-2000:]

    smoke = _python(SMOKE.format(prefix=str(fresh_site)), tmp_path, python)
    assert smoke.returncode == 0, smoke.stderr[-3000:]
    assert smoke.stdout.strip() == "ok 0.1.0"
    cli = subprocess.run([str(env_dir / "bin" / "torchrl-mask"), "--help"], capture_output=True, text=True, timeout=120)
    assert cli.returncode == 0 and "train" in cli.stdout, cli.stderr
