"""The site's home page shows code that runs as written."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]


@pytest.mark.slow
def test_the_memory_and_masks_example_on_the_home_page_runs_as_written(tmp_path: Path) -> None:
    page = (REPO / "docs" / "index.md").read_text()
    block = page.split("## Memory and masks")[1].split("```python\n")[1].split("```")[0]
    assert "MaskableRecurrentPPO" in block and "action_masks=" in block
    command = [sys.executable, "-W", "error::UserWarning", "-c", block]
    run = subprocess.run(command, capture_output=True, text=True, cwd=tmp_path, timeout=300, check=False)
    assert run.returncode == 0, run.stderr[-3000:]
