"""Shared fixtures: a clean /dev/shm and process table after every test that asks for it."""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from pong_mp.backends.shm import block_creator, pid_namespace

SHM = Path("/dev/shm")

# Ray, where tests start it, must not try to send usage reports from a machine without a
# network.
os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")

METRIC_FIELDS = frozenset(
    {"batch", "episodes", "steps", "reward_mean", "running_reward", "seconds", "steps_per_sec"}
)
"""Fields every metrics.jsonl line must have: the contract in DESIGN.md."""


def pong_shm_blocks() -> set[str]:
    """Names of pong-mp shared-memory blocks that exist now."""
    if not SHM.is_dir():
        return set()
    return {p.name for p in SHM.iterdir() if p.name.startswith("pong-mp-")}


def pong_processes() -> set[int]:
    """Pids of live processes whose OS name is pong-mp-worker-* (zombies excluded)."""
    pids = set()
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            status = (entry / "status").read_text()
        except OSError:
            continue
        fields = dict(line.split(":", 1) for line in status.splitlines() if ":" in line)
        if fields.get("Name", "").strip().startswith("pong-mp-worker") and not fields.get(
            "State", ""
        ).strip().startswith("Z"):
            pids.add(int(entry.name))
    return pids


def _parent(pid: int) -> int:
    try:
        return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])
    except (OSError, ValueError, IndexError):
        return 0


def _runs_pong_mp(pid: int) -> bool:
    try:
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
        return b"pong_mp" in cmdline or b"pong-mp" in cmdline  # python -m, or the script
    except OSError:
        return False


def stray_workers() -> set[int]:
    """Workers that nothing will clean up: children of this test process, or orphans (their
    parent is not a pong-mp coordinator). Workers of other pong-mp runs are not counted."""
    return {
        pid
        for pid in pong_processes()
        if _parent(pid) == os.getpid() or not _runs_pong_mp(_parent(pid))
    }


def _other_runs_block(name: str) -> bool:
    """Whether a block belongs to another pong-mp run on this machine (its creator is alive,
    runs pong-mp, and is neither this test process nor its child), which a test must not be
    blamed for: training in the background while the tests run is normal."""
    creator = block_creator(name)
    if creator is None or creator[1] != pid_namespace():
        return False
    pid = creator[0]
    return pid != os.getpid() and _parent(pid) != os.getpid() and _runs_pong_mp(pid)


def new_blocks(before: set[str]) -> set[str]:
    """The pong-mp blocks that exist now and not in `before`, other runs' left out."""
    return {name for name in pong_shm_blocks() - before if not _other_runs_block(name)}


def wait_until_clean(before_shm: set[str], timeout: float = 10.0) -> tuple[set[str], set[int]]:
    """Wait up to `timeout` s for new shm blocks and worker processes to vanish; the leftovers
    (other runs' blocks and workers are not counted)."""
    deadline = time.monotonic() + timeout
    while True:
        shm = new_blocks(before_shm)
        procs = stray_workers()
        if (not shm and not procs) or time.monotonic() > deadline:
            return shm, procs
        time.sleep(0.1)


@pytest.fixture
def clean_system() -> Iterator[None]:
    """Fails the test if it leaves pong-mp shared memory or worker processes behind."""
    before = pong_shm_blocks()
    yield
    shm, procs = wait_until_clean(before)
    assert not shm, f"leaked shared memory: {shm}"
    assert not procs, f"orphan worker processes: {procs}"


@pytest.fixture(scope="session")
def fake_checkpoint(tmp_path_factory) -> Path:
    """checkpoint.npz of a one-update FakePong run (2-point games, 8 hidden units)."""
    from pong_mp.config import TrainConfig
    from pong_mp.trainer import train

    run_dir = tmp_path_factory.mktemp("fake-run")
    config = TrainConfig(
        env="FakePong-v0",
        env_kwargs={"points_to_win": 2},
        backend="serial",
        batch_size=2,
        batches=1,
        hidden=8,
        run_dir=str(run_dir),
    )
    train(config, log=lambda line: None)
    return run_dir / "checkpoint.npz"
