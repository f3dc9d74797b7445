"""Every tutorial in notebooks/ executes cleanly on the CPU path (nbclient, a real kernel)."""

from __future__ import annotations

from pathlib import Path

import nbformat
import pytest
from nbclient import NotebookClient

NOTEBOOKS = sorted((Path(__file__).parents[2] / "notebooks").glob("*.ipynb"))


def test_the_tutorials_are_there():
    names = [path.name for path in NOTEBOOKS]
    assert names[0] == "00-quickstart.ipynb" and len(names) >= 6


@pytest.mark.integration
@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda path: path.stem)
def test_the_notebook_runs_without_errors(path, tmp_path, monkeypatch):
    monkeypatch.setenv("DTRAIN_RUN_STORE", str(tmp_path / "runs"))
    notebook = nbformat.read(path, as_version=4)
    client = NotebookClient(
        notebook, timeout=600, kernel_name="python3", resources={"metadata": {"path": tmp_path}}
    )
    client.execute()  # raises CellExecutionError on the first failing cell
    outputs = [output for cell in notebook.cells for output in cell.get("outputs", [])]
    assert not [output for output in outputs if output.get("output_type") == "error"]
    # The runs the notebook made are in the store it was given, all ended.
    runs = list((tmp_path / "runs").iterdir())
    assert runs
