"""The examples run as a user would run them: the notebook from top to bottom, the minimal
loop from the command line."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from tests.helpers import checkpoint_weights, pong_mp

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"
NOTEBOOK = EXAMPLES / "quickstart.ipynb"


def test_the_minimal_loop_ends_with_the_weights_of_pong_mp_train(tmp_path: Path) -> None:
    options = [
        "--env", "FakePong-v0", "--env-arg", "points_to_win=2", "--hidden", "8",
        "--batch-size", "3", "--lr", "3e-3", "--seed", "1",
    ]  # fmt: skip
    loop = subprocess.run(
        [sys.executable, str(EXAMPLES / "minimal_loop.py"), *options, "--updates", "3",
         "--out", str(tmp_path / "loop.npz")],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert loop.returncode == 0, loop.stderr
    lines = loop.stdout.splitlines()
    assert len(lines) == 3 and lines[-1].startswith("update    3 | episodes      9 | reward")
    run_dir = tmp_path / "run"
    train = pong_mp(
        "train", *options, "--preset", "pg", "--batches", "3", "--backend", "serial",
        "--run-dir", str(run_dir),
        "--no-tensorboard", "--quiet",
    )  # fmt: skip
    assert train.returncode == 0, train.stderr
    with np.load(tmp_path / "loop.npz") as npz:
        assert npz["W1"].tobytes() + npz["W2"].tobytes() == checkpoint_weights(run_dir)


@pytest.mark.slow
@pytest.mark.ale
def test_the_quickstart_notebook_runs(tmp_path: Path, clean_system) -> None:
    nbformat = pytest.importorskip("nbformat", reason="needs the test extras (nbformat)")
    nbclient = pytest.importorskip("nbclient", reason="needs the test extras (nbclient)")
    notebook = nbformat.read(NOTEBOOK, as_version=4)
    # The notebook as written, but for its number of updates: 3 of them show every cell at
    # work (a plot needs 2 points), and the learning tests show the learning.
    train_cell = next(cell for cell in notebook.cells if "batches=30," in cell.source)
    train_cell.source = train_cell.source.replace("batches=30,", "batches=3,")
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
    assert "3 updates, 30 episodes" in text
    assert "built-in AI" in text
    assert (tmp_path / "runs" / "notebook-fakepong" / "checkpoint.npz").exists()
    assert (tmp_path / "runs" / "notebook-fakepong" / "game.gif").stat().st_size > 10_000
