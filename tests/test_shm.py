"""Shared-memory blocks: the versions they keep, their names, and the blocks a killed run
leaves behind."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from pong_mp import policy
from pong_mp.backends import RolloutSpec, make_backend
from pong_mp.backends.shm import (
    NAME_PREFIX,
    SHM_DIR,
    BlockShape,
    SharedGradient,
    SharedSums,
    SharedWeights,
    StaleWeightsError,
    map_sums,
    pid_namespace,
    remove_stale_blocks,
    start_resource_tracker,
)
from pong_mp.pg import PGWork
from tests.helpers import another_thread, new_blocks, pong_shm_blocks, signal_self

needs_linux_shm = pytest.mark.skipif(
    not pid_namespace() or not SHM_DIR.is_dir(),
    reason="needs /proc/self/ns/pid and /dev/shm (Linux)",
)


@pytest.mark.parametrize("value", [False, True])
def test_weights_keep_the_last_versions_written_and_workers_read_them_unchanged(
    value: bool, clean_system
) -> None:
    hidden = 8
    shape = BlockShape(policy.NetShape(hidden), width=2, value=value)
    params = {v: policy.init_params(shape.net, v, value) for v in (5, 6, 7)}
    if value:
        for version, flat in params.items():
            flat[-(hidden + 1) :] = version  # a head that is not the initial zeros
    owner = SharedWeights.create(shape)
    try:
        reader = SharedWeights.attach(owner.name, shape)
        try:
            assert reader.versions == []
            for version, flat in params.items():
                owner.write(flat, version)
            assert reader.versions == [6, 7]  # 5 went first: its slot was the oldest
            with pytest.raises(StaleWeightsError, match=r"hold versions \[6, 7\], not 5"):
                reader.read(5)
            for version in (6, 7):
                got = reader.read(version)
                want = policy.Weights32.from_params(params[version], policy.NetShape(hidden))
                assert np.array_equal(got.w1t, want.w1t) and np.array_equal(got.w2, want.w2)
                assert (got.value is None) == (not value)
                if value:
                    assert np.array_equal(got.value, want.value)
            with pytest.raises(ValueError, match="read-only"):
                reader.read(7).w2[0] = 1.0  # a worker cannot change what others read
        finally:
            reader.close()
    finally:
        owner.close()
        owner.unlink()


def test_weights_filled_in_their_room_are_published_without_a_copy(clean_system) -> None:
    shape = BlockShape(policy.NetShape(8), width=2)
    owner = SharedWeights.create(shape)
    try:
        reader = SharedWeights.attach(owner.name, shape)
        try:
            first = policy.init_params(shape.net, 1).astype(np.float32)
            owner.write(first, 1)
            room = owner.room()  # the oldest slot: empty here, its version taken back
            assert room.flags.writeable and room.dtype == np.float32
            assert reader.versions == [1]
            room[:] = 2.0
            owner.write(room, 2)
            assert reader.versions == [1, 2]
            assert np.all(reader.flat(2) == 2.0) and reader.flat(1).tobytes() == first.tobytes()
            owner.room()[:] = 3.0  # over version 1, which goes as the room is taken
            assert reader.versions == [2]
            owner.write(owner.room(), 3)
            assert reader.versions == [2, 3] and np.all(reader.flat(3) == 3.0)
            owner.write(first, 4)  # any other array is copied, as before
            assert reader.flat(4).tobytes() == first.tobytes()
        finally:
            reader.close()
    finally:
        owner.close()
        owner.unlink()


@pytest.mark.parametrize("width", [1, 2])
@pytest.mark.parametrize("value", [False, True])
def test_a_gradient_slot_holds_one_gradient_both_sides_see(
    value: bool, width: int, clean_system
) -> None:
    shape = BlockShape(policy.NetShape(8), width, value)
    owner = SharedGradient.create(shape)
    try:
        worker = SharedGradient.attach(owner.name, shape)
        try:
            assert len(owner.slots) == len(worker.slots) == width
            for slot in range(width):
                mine, theirs = owner.slots[slot], worker.slots[slot]
                assert len(mine) == len(theirs) == policy.param_count(policy.NetShape(8), value)
                theirs[:] = np.arange(len(theirs), dtype=np.float32) + slot
                assert np.array_equal(mine, np.arange(len(mine), dtype=np.float32) + slot)
            # Each slot is its own: writing the last left the others as they were.
            for slot in range(width):
                assert owner.slots[slot][0] == slot
            # Each has its own W1 row flags after the gradients, shared too, "not known" (0)
            # in a new block; writing them leaves the gradients as they were.
            rows = policy.NetShape(8).rows
            for slot in range(width):
                flags = worker.zeroed(slot)
                assert flags is not None and flags.width == 8 and len(flags.flags) == rows
                assert not owner.zeroed(slot).flags.any()
                flags.flags[:] = slot + 1
            for slot in range(width):
                assert (owner.zeroed(slot).flags == slot + 1).all()
                assert owner.slots[slot][0] == slot
        finally:
            worker.close()
    finally:
        owner.close()
        owner.unlink()


@needs_linux_shm
def test_mapped_sums_stay_readable_after_their_block_is_removed(clean_system) -> None:
    # A Ray node leader's float64 group sums, mapped by the driver on its machine: a sum
    # the trainer still holds outlives the leader's block.
    shape = BlockShape(policy.NetShape(8), 2)
    leader = SharedSums.create(shape)
    leader.slots[1][:] = np.arange(len(leader.slots[1])) / 3
    sums = map_sums(leader.name, shape)
    leader.close()
    leader.unlink()
    assert sums[1].dtype == np.float64 and not sums[1].flags.writeable
    assert np.array_equal(sums[1], np.arange(len(sums[1])) / 3)


def test_a_writer_attached_apart_leaves_the_block_to_its_creator(clean_system) -> None:
    # What a Ray driver does with its node leader's weights block: it writes, and its
    # resource tracker does not remove the block when the driver's mapping closes.
    shape = BlockShape(policy.NetShape(8))
    owner = SharedWeights.create(shape)
    try:
        driver = SharedWeights.attach_untracked(owner.name, shape)
        weights = np.arange(policy.param_count(policy.NetShape(8)), dtype=np.float32)
        driver.write(weights, 7)
        driver.close()
        assert owner.versions == [7] and np.array_equal(owner.flat(7), weights)
        assert (SHM_DIR / owner.name).exists()
    finally:
        owner.close()
        owner.unlink()


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
from pong_mp.backends.shm import BlockShape, SharedWeights
from pong_mp.policy import NetShape
block = SharedWeights.create(BlockShape(NetShape(16), 2))
print(block.name, os.getpgid(0), flush=True)
os.killpg(0, signal.SIGKILL)  # the run and its resource tracker, at once
"""


def _group_gone(group: int, timeout: float = 10.0) -> bool:
    # Whether process group `group` has no live process left (zombies aside) within timeout.
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        live = False
        for stat in Path("/proc").glob("[0-9]*/stat"):
            try:
                fields = stat.read_text().rsplit(")", 1)[1].split()
            except (OSError, IndexError):
                continue
            live = live or (int(fields[2]) == group and fields[0] != "Z")
        if not live:
            return True
        time.sleep(0.05)
    return False


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
    name, _, group = killed.stdout.strip().partition(" ")
    try:
        assert killed.returncode == -9 and name.startswith(NAME_PREFIX), killed.stderr
        # The kill took the run's resource tracker too, so only a pong-mp start can remove
        # the block now: this test's, or that of a test run beside it (pytest-xdist, or
        # bin/test's other phase).
        assert _group_gone(int(group)), "the run's resource tracker outlived the kill"
        if not (os.environ.get("PYTEST_XDIST_WORKER") or os.environ.get("PONG_MP_TESTS_BESIDE")):
            assert name in pong_shm_blocks(), "the kill left nothing to clean up"

        spec = RolloutSpec(
            env_id="FakePong-v0",
            shape=policy.NetShape(16),
            learner=PGWork(0.99),
            workers=1,
            env_kwargs={"points_to_win": 2},
        )
        with make_backend("local", spec):
            blocks = pong_shm_blocks()
            assert name not in blocks
            assert any(b.startswith(f"{NAME_PREFIX}{os.getpid()}-") for b in blocks)
    finally:
        (SHM_DIR / name).unlink(missing_ok=True)


_OTHER_RUN = """
import sys
from pong_mp.backends.shm import BlockShape, SharedWeights
from pong_mp.policy import NetShape
block = SharedWeights.create(BlockShape(NetShape(16), 1))
print(block.name, flush=True)
sys.stdin.read()  # until the test closes the pipe
block.unlink()
"""


@needs_linux_shm
def test_the_leak_check_blames_a_test_for_its_own_blocks_not_another_runs() -> None:
    # Another pong-mp process that is not the test's child: started through a shell that
    # exits at once, as a training run in another terminal would be.
    before = pong_shm_blocks()
    reader, writer = os.pipe()
    try:
        with subprocess.Popen(
            ["sh", "-c", 'exec 3<&0; "$1" -c "$0" <&3 &', _OTHER_RUN, sys.executable],
            stdin=reader,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        ) as shell:
            os.close(reader)
            other = shell.stdout.readline().strip()
            error = "" if other else shell.stderr.read()
        assert other, error
        assert other in pong_shm_blocks() - before
        assert new_blocks(before) == set()  # another run's block is not this test's leak
        own = SharedWeights.create(BlockShape(policy.NetShape(16), 1))
        try:
            assert new_blocks(before) == {own.name}
        finally:
            own.close()
            own.unlink()
    finally:
        os.close(writer)
    deadline = time.monotonic() + 30
    while other in pong_shm_blocks() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert other not in pong_shm_blocks()


_TRACKER_OUTLIVES_A_HANGUP = """
import os, signal, time
from multiprocessing import resource_tracker
from pong_mp.backends.shm import start_resource_tracker
start_resource_tracker()
pid = resource_tracker._resource_tracker._pid
time.sleep(0.5)  # its own start done
os.kill(pid, signal.SIGHUP)
time.sleep(0.5)
print(os.waitpid(pid, os.WNOHANG)[0] == 0)
"""


def test_the_resource_tracker_outlives_a_hangup() -> None:
    # Killed by a closed terminal, it would warn about blocks the coordinator unlinks itself.
    done = subprocess.run(
        [sys.executable, "-c", _TRACKER_OUTLIVES_A_HANGUP], capture_output=True, text=True,
        timeout=60,
    )
    assert (done.returncode, done.stdout) == (0, "True\n"), done.stderr


def test_a_hangup_while_the_resource_tracker_starts_is_kept(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # The tracker starts with SIGHUP blocked, not ignored: a SIGHUP that another thread
    # (numpy's BLAS threads) took while it was ignored was dropped, and the run went on.
    from multiprocessing import resource_tracker

    from pong_mp import signals

    def ensure_running() -> None:
        signal_self(signal.SIGHUP, settle=0.2)  # the other thread takes it

    monkeypatch.setattr(resource_tracker, "ensure_running", ensure_running)
    with another_thread(), pytest.raises(signals.Interrupted) as stop, signals.stop_signals_raise():
        start_resource_tracker()
        signals.check_stop()
    assert stop.value.signum == signal.SIGHUP
