"""The repository stays light: no tracked file over 2 MB but the shipped model."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
LIMIT = 2_000_000
"""Bytes a tracked file may hold: records are configs, metrics and commands, not weights."""
ALLOWED = {"models/pong.npz"}
"""The shipped agent, the one large file the repository carries."""
RUNS_LIMIT = 2_700_000
"""Bytes docs/runs/ may hold in all. The rest of the repository is about 7.5 MB (the shipped
model 4.6 of it), and a clone holds each file about twice (its checkout and its packed
history): under this limit a shallow clone stays under 20 MB on disk (`git clone --depth 1`
measured 19.7 MB, `du -sb`, with 2.66 MB of records). Records are packed
(scripts/pack_records.py) to stay under it as they come; past it, pack older ones together
or move them out, but a clone over 20 MB is not an option."""


def _git(repo: Path, *args: str, stdin: str | None = None) -> str:
    return subprocess.run(
        ["git", "-C", str(repo), *args], input=stdin, capture_output=True, text=True, check=True
    ).stdout


def tracked_sizes(repo: Path) -> dict[str, int]:
    """Size in bytes of every file in `repo`'s index (what the next commit holds), by path."""
    entries = [line.split("\t", 1) for line in _git(repo, "ls-files", "-s").splitlines()]
    blobs = [(meta.split()[1], path) for meta, path in entries]
    checked = _git(repo, "cat-file", "--batch-check", stdin="".join(b + "\n" for b, _ in blobs))
    sizes = [int(line.split()[2]) for line in checked.splitlines()]
    return {path: size for (_, path), size in zip(blobs, sizes, strict=True)}


def _checkout_root() -> Path:
    if shutil.which("git") is None:
        pytest.skip("git is not installed")
    done = subprocess.run(
        ["git", "-C", str(ROOT), "rev-parse", "--show-toplevel"], capture_output=True, text=True
    )
    if done.returncode != 0 or Path(done.stdout.strip()).resolve() != ROOT:
        pytest.skip("not run from a git checkout of pong-mp")
    return ROOT


def test_no_tracked_file_over_2_mb_but_the_shipped_model() -> None:
    sizes = tracked_sizes(_checkout_root())
    assert "pyproject.toml" in sizes  # the listing works
    large = {path: size for path, size in sizes.items() if size > LIMIT and path not in ALLOWED}
    assert large == {}, f"tracked files over {LIMIT:,} bytes: {large}"


def test_the_records_stay_small() -> None:
    sizes = tracked_sizes(_checkout_root())
    runs = sum(size for path, size in sizes.items() if path.startswith("docs/runs/"))
    assert runs > 0  # the listing sees them
    assert runs <= RUNS_LIMIT, f"docs/runs/ holds {runs:,} bytes, over {RUNS_LIMIT:,}"


MACHINE_PATH = re.compile(r"(?<![\w.~-])/(?:tmp|home|root|Users|work|private|var/folders)/")
"""An absolute path of the machine a record or a doc was made on: a reader has none of it."""


def test_records_and_docs_name_no_path_of_the_machine_that_made_them() -> None:
    root = _checkout_root()
    found = []
    texts = [
        path
        for path in tracked_sizes(root)
        if (path.startswith(("docs/", "scripts/", "examples/")) or path == "README.md")
        and path.endswith((".md", ".json", ".jsonl", ".py", ".txt"))
    ]
    for path in texts:
        for number, line in enumerate((root / path).read_text().splitlines(), 1):
            if MACHINE_PATH.search(line):
                found.append(f"{path}:{number}: {line.strip()}")
    assert not found, "machine paths (use one relative to the checkout):\n" + "\n".join(found)


def test_the_listing_sees_a_large_file(tmp_path: Path) -> None:
    if shutil.which("git") is None:
        pytest.skip("git is not installed")
    _git(tmp_path, "init", "-q")
    (tmp_path / "small.txt").write_text("records\n")
    (tmp_path / "weights.npz").write_bytes(bytes(LIMIT + 1))
    _git(tmp_path, "add", "small.txt", "weights.npz")
    assert tracked_sizes(tmp_path) == {"small.txt": 8, "weights.npz": LIMIT + 1}
