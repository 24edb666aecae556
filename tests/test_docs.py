"""The documentation site builds with no warnings, and its API pages cover every public module."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
PUBLIC_MODULES = sorted(path.stem for path in (REPO / "torchrl_mask").glob("*.py") if not path.stem.startswith("_"))


def test_every_public_module_has_an_api_page_in_the_nav() -> None:
    nav = (REPO / "mkdocs.yml").read_text()
    for module in PUBLIC_MODULES:
        page = REPO / "docs" / "reference" / f"{module}.md"
        assert page.read_text().strip() == f"::: torchrl_mask.{module}", f"{page} should render torchrl_mask.{module}"
        assert f"reference/{module}.md" in nav, f"docs/reference/{module}.md is not in mkdocs.yml's nav"


@pytest.mark.slow
def test_mkdocs_strict_build_renders_the_api_reference(tmp_path: Path) -> None:
    site = tmp_path / "site"
    run = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(site)],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=600,
        env={**os.environ, "NO_MKDOCS_2_WARNING": "1"},
    )
    assert run.returncode == 0, run.stdout + run.stderr
    page = (site / "reference" / "buffers" / "index.html").read_text()
    for text in ("MaskableDictRolloutBuffer", "Parameters:", "Raises:", "Source code in", "buffer_size"):
        assert text in page, text
    assert ":class:" not in page.split("Source code in")[0]  # Sphinx roles are rendered, not shown raw
    how = (site / "how-it-works" / "index.html").read_text()
    assert 'class="mermaid"' in how  # the data-flow diagram
