"""The benchmark page's charts are drawn from its data files, and the page shows each one."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from torchrl_mask.bench import charts

REPO = Path(__file__).resolve().parents[1]
DATA = REPO / "docs" / "data"


def _pixels(path: Path) -> np.ndarray:
    with Image.open(path) as image:
        return np.asarray(image.convert("RGB"))


def test_draw_all_writes_every_chart_from_the_docs_data_as_the_page_shows_it(tmp_path: Path) -> None:
    written = charts.draw_all(DATA, tmp_path / "img")

    assert sorted(path.name for path in written) == sorted(charts.CHARTS)
    for path in written:
        pixels = _pixels(path)
        assert pixels.shape[0] >= 400 and pixels.shape[1] >= 900, f"{path.name}: {pixels.shape}"
        assert len(np.unique(pixels.reshape(-1, 3), axis=0)) > 20, f"{path.name} is blank"
        assert (REPO / "docs" / "img" / path.name).is_file(), f"draw docs/img/{path.name}"


def test_every_chart_and_data_file_is_on_the_benchmarks_page() -> None:
    page = (REPO / "docs" / "benchmarks.md").read_text()
    for name, (files, _) in charts.CHARTS.items():
        assert f"](img/{name})" in page, f"docs/benchmarks.md does not show img/{name}"
        for file in files:
            assert f"data/{file}" in page, f"docs/benchmarks.md does not name data/{file}"


def test_each_data_file_names_the_command_that_measured_it() -> None:
    for name in charts.FIELDS:
        data = charts.load(DATA / name)
        commands = [data["command"], *(run["command"] for run in data.get("runs", []))]
        assert all(re.match(r"torchrl-mask bench\b", command) for command in commands), name


def test_a_data_file_without_a_field_its_chart_reads_is_refused_naming_it(tmp_path: Path) -> None:
    data = json.loads((DATA / "masking_cost.json").read_text())
    del data["cells"][3]["floor_over_ppo"]
    (tmp_path / "masking_cost.json").write_text(json.dumps(data))

    with pytest.raises(ValueError, match=r"masking_cost.json: cells\[3\] lacks 'floor_over_ppo'"):
        charts.load(tmp_path / "masking_cost.json")


def test_main_says_which_data_file_is_missing_in_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    for name in charts.FIELDS:
        if name != "learn.json":
            shutil.copy(DATA / name, tmp_path / name)

    with pytest.raises(SystemExit) as exit_info:
        charts.main([str(tmp_path), str(tmp_path / "img")])

    assert exit_info.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "missing learn.json" in err[0]
    assert not (tmp_path / "img").exists()  # nothing drawn before every file is there
