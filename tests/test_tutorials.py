"""The notebooks in tutorials/ are stored without outputs; the docs build executes them (tests/test_docs.py)."""

from __future__ import annotations

from pathlib import Path

import nbformat

TUTORIALS = sorted((Path(__file__).resolve().parents[1] / "tutorials").glob("*.ipynb"))


def test_tutorials_are_found_and_stored_without_outputs() -> None:
    assert len(TUTORIALS) >= 4
    for path in TUTORIALS:
        notebook = nbformat.read(path, as_version=4)
        code_cells = [cell for cell in notebook.cells if cell.cell_type == "code"]
        assert code_cells, path.name
        assert all(not cell.outputs and cell.execution_count is None for cell in code_cells), (
            f"{path.name} is stored with outputs; clear them before committing"
        )


def test_tutorials_write_no_files_into_the_working_folder() -> None:
    # A notebook runs with the working folder it is opened from; whatever it saves goes under a temporary folder.
    for path in TUTORIALS:
        for cell in nbformat.read(path, as_version=4).cells:
            if cell.cell_type == "code" and (".save(" in cell.source or "savefig(" in cell.source):
                assert "tempfile" in cell.source, f"{path.name} saves a file outside a temporary folder"
