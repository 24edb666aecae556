"""The versions of torch, TorchRL, tensordict, SB3 and sb3-contrib this package supports, checked at import.

torchrl_mask uses a few private names of these libraries (each listed, with where it is used, in
``tests/test_private_api.py``: torch's hook registries and ``_foreach`` ops, SB3's ``collect_rollouts`` state and
hooks, sb3-contrib's policy and recurrent-buffer hooks, TorchRL's collector internals), so a release outside the
tested range may break it in ways that only show up mid-training. The supported ranges are the package's own
requirements (``pyproject.toml``), read back from the installed metadata so that they are stated once; the check
reads version strings only and imports none of those libraries.
"""

from __future__ import annotations

import importlib.metadata
import os
import warnings
from collections.abc import Mapping

from packaging.requirements import Requirement
from packaging.version import InvalidVersion, Version

# The libraries whose private APIs or layouts the code relies on; the other requirements are ordinary ones.
CHECKED = ("torch", "torchrl", "tensordict", "stable-baselines3", "sb3-contrib", "gymnasium")
IGNORE_ENV = "TORCHRL_MASK_IGNORE_VERSIONS"


def supported_ranges() -> dict[str, str]:
    """The version specifier of each library in :data:`CHECKED`, from torchrl-mask's installed metadata.

    :return: e.g. ``{"torchrl": ">=0.14,<0.15", ...}``; empty when torchrl-mask runs from a source tree that was
        never installed (no metadata to read).
    """
    try:
        requires = importlib.metadata.requires("torchrl-mask") or []
    except importlib.metadata.PackageNotFoundError:
        return {}
    ranges = {}
    for line in requires:
        requirement = Requirement(line)
        name = requirement.name.lower().replace("_", "-")
        if requirement.marker is None and name in CHECKED:  # floor first: ">=0.14,<0.15"
            ranges[name] = ",".join(sorted(map(str, requirement.specifier), key=lambda spec: spec.startswith("<")))
    return ranges


def installed_versions() -> dict[str, str]:
    """The installed version of each library in :data:`CHECKED` that is installed (e.g. ``"2.13.0+cpu"``)."""
    versions = {}
    for name in CHECKED:
        try:
            versions[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            continue
    return versions


def unsupported(installed: Mapping[str, str], ranges: Mapping[str, str]) -> list[str]:
    """One line per installed library whose version lies outside its supported range.

    :param installed: library name -> installed version string.
    :param ranges: library name -> PEP 440 specifier, e.g. ``">=0.14,<0.15"``.
    :return: lines like ``"torchrl 0.15.0 (supported: <0.15,>=0.14)"``; empty when everything is supported.
    """
    problems = []
    for name, specifier in sorted(ranges.items()):
        if name not in installed:
            continue
        version = installed[name]
        try:
            supported = Requirement(f"{name}{specifier}").specifier.contains(Version(version), prereleases=True)
        except InvalidVersion:
            supported = False
        if not supported:
            problems.append(f"{name} {version} (supported: {specifier})")
    return problems


def check_versions(installed: Mapping[str, str] | None = None, ranges: Mapping[str, str] | None = None) -> None:
    """Refuse to import next to a library version outside the supported range.

    :param installed: library name -> version; the installed ones by default.
    :param ranges: library name -> specifier; torchrl-mask's own requirements by default.
    :raises ImportError: naming each library out of range, its supported range and the fix. With the environment
        variable ``TORCHRL_MASK_IGNORE_VERSIONS=1`` the same message is a ``RuntimeWarning`` instead.
    """
    problems = unsupported(
        installed_versions() if installed is None else installed, supported_ranges() if ranges is None else ranges
    )
    if not problems:
        return
    message = (
        "torchrl_mask does not support the installed " + ", ".join(problems) + ". It relies on private APIs of "
        "these libraries, so only the tested range is supported. Fix: pip install torchrl-mask again (pip then "
        f"picks supported versions), or set {IGNORE_ENV}=1 to import anyway at your own risk."
    )
    if os.environ.get(IGNORE_ENV) == "1":
        warnings.warn(message, RuntimeWarning, stacklevel=2)
        return
    raise ImportError(message)
