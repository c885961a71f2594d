"""The example notebook runs from top to bottom, as a user would run it."""

from __future__ import annotations

from pathlib import Path

import pytest

nbformat = pytest.importorskip("nbformat", reason="needs the test extras (nbformat)")
nbclient = pytest.importorskip("nbclient", reason="needs the test extras (nbclient)")

NOTEBOOK = Path(__file__).resolve().parents[1] / "examples" / "quickstart.ipynb"


@pytest.mark.slow
@pytest.mark.ale
def test_the_quickstart_notebook_runs(tmp_path: Path, clean_system) -> None:
    notebook = nbformat.read(NOTEBOOK, as_version=4)
    client = nbclient.NotebookClient(
        notebook, timeout=240, kernel_name="python3", resources={"metadata": {"path": tmp_path}}
    )
    client.execute()
    outputs = [
        out.get("text", "")
        for cell in notebook.cells
        if cell.cell_type == "code"
        for out in cell.get("outputs", [])
    ]
    text = "".join(outputs)
    assert "30 updates, 300 episodes" in text
    assert "built-in AI" in text
    assert (tmp_path / "runs" / "notebook-fakepong" / "checkpoint.npz").exists()
    assert (tmp_path / "runs" / "notebook-fakepong" / "game.gif").stat().st_size > 10_000
