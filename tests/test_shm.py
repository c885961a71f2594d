"""Shared-memory blocks: their names, and the blocks a killed run leaves behind."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from pong_mp.backends import RolloutSpec, make_backend
from pong_mp.backends.shm import NAME_PREFIX, SHM_DIR, pid_namespace, remove_stale_blocks
from tests.conftest import pong_shm_blocks

needs_linux_shm = pytest.mark.skipif(
    not pid_namespace() or not SHM_DIR.is_dir(),
    reason="needs /proc/self/ns/pid and /dev/shm (Linux)",
)


def _gone_pid() -> int:
    """The pid of a process that has exited (and been reaped)."""
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()
    return child.pid


@needs_linux_shm
def test_only_the_blocks_of_gone_creators_are_removed(tmp_path: Path) -> None:
    ns, gone = pid_namespace(), _gone_pid()
    stale = f"{NAME_PREFIX}{gone}-{ns}-0badf00d"
    kept = [
        f"{NAME_PREFIX}{os.getpid()}-{ns}-00000001",  # this process
        f"{NAME_PREFIX}{os.getppid()}-{ns}-00000002",  # a live process
        f"{NAME_PREFIX}{gone}-{int(ns, 16) + 1:x}-00000003",  # another pid namespace
        f"{NAME_PREFIX}{gone}-00000004",  # a name this version does not write
        f"{NAME_PREFIX}{gone}-{ns}",
        f"other-{gone}-{ns}-00000005",
    ]
    for name in [stale, *kept]:
        (tmp_path / name).write_bytes(b"\0" * 64)

    assert remove_stale_blocks(tmp_path) == [stale]
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(kept)


_KILLED_RUN = """
import os, signal, sys
from pong_mp.backends.shm import SharedWeights
block = SharedWeights.create(16, 2)
print(block.name, flush=True)
os.killpg(0, signal.SIGKILL)  # the run and its resource tracker, at once
"""


@needs_linux_shm
def test_a_local_start_removes_the_blocks_of_a_run_killed_with_its_tracker(
    clean_system,
) -> None:
    killed = subprocess.run(
        [sys.executable, "-c", _KILLED_RUN],
        capture_output=True,
        text=True,
        start_new_session=True,
        timeout=60,
    )
    name = killed.stdout.strip()
    try:
        assert killed.returncode == -9 and name.startswith(NAME_PREFIX), killed.stderr
        time.sleep(0.5)  # a tracker that outlived the kill would have unlinked it by now
        assert name in pong_shm_blocks(), "the kill left nothing to clean up"

        spec = RolloutSpec(
            env_id="FakePong-v0",
            hidden=16,
            gamma=0.99,
            workers=1,
            env_kwargs={"points_to_win": 2},
        )
        with make_backend("local", spec):
            blocks = pong_shm_blocks()
            assert name not in blocks
            assert any(b.startswith(f"{NAME_PREFIX}{os.getpid()}-") for b in blocks)
    finally:
        (SHM_DIR / name).unlink(missing_ok=True)
