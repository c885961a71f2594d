"""Versioned weights in one shared-memory block: the coordinator writes, workers read in place.

Layout: one slot per weights version kept (--policy-lag + 1), each a 64-byte header whose
first 8 bytes hold the version (int64), then the float32 weights (`policy.Weights32`),
64-byte aligned. The coordinator keeps the float64 master copy and writes one slot per
optimizer step, the oldest, in turn.

Blocks are named `pong-mp-<pid>-<pidns>-<random>`, so that a leak is easy to spot. Only the
creator unlinks; one killed together with its resource tracker cannot, so the local backend's
start removes the blocks of creators that are gone (`remove_stale_blocks`). The pid namespace
in the name keeps it from taking a live run's block where containers share /dev/shm only.

/dev/shm is a tmpfs of its own size (Docker's default is 64 MB) and its blocks are sparse: a
write into a page it has no room for kills the writer with SIGBUS. So every block is reserved
in full when it is made (`posix_fallocate`), and the local backend checks the room first.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import signal
from dataclasses import dataclass
from multiprocessing import shared_memory
from pathlib import Path
from typing import Self

import numpy as np

from pong_mp import policy
from pong_mp.backends.base import BackendUnavailable
from pong_mp.episode import ZeroRows
from pong_mp.files import pid_alive

HEADER_BYTES = 64
NAME_PREFIX = "pong-mp-"
SHM_DIR = Path("/dev/shm")  # where POSIX shared memory appears as files (Linux)


def pid_namespace() -> str:
    """This process's pid namespace as a hex inode number; "" where it cannot be read."""
    try:
        return format(os.stat("/proc/self/ns/pid").st_ino, "x")
    except OSError:
        return ""


def block_creator(name: str) -> tuple[int, str] | None:
    """The pid and pid namespace in a block's name; None for a name not written so."""
    parts = name.removeprefix(NAME_PREFIX).split("-")
    if not name.startswith(NAME_PREFIX) or len(parts) != 3 or not parts[0].isdigit():
        return None
    return int(parts[0]), parts[1]


def start_resource_tracker() -> None:
    """Start multiprocessing's resource tracker with SIGHUP blocked (it ignores SIGINT and
    SIGTERM itself): a tracker killed by a closed terminal would warn about blocks the
    coordinator unlinks itself a moment later. A blocked mask is inherited through exec, and
    this process keeps its handler meanwhile: a SIGHUP ignored meanwhile would be lost
    when another thread (a BLAS one) took it."""
    from multiprocessing import resource_tracker

    old = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGHUP})  # this thread's alone
    try:
        resource_tracker.ensure_running()
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, old)


def remove_stale_blocks(directory: Path = SHM_DIR) -> list[str]:
    """Unlink this user's blocks whose creator is gone, in this pid namespace; the names
    removed."""
    namespace = pid_namespace()
    if not namespace or not directory.is_dir():
        return []
    removed = []
    for path in directory.glob(f"{NAME_PREFIX}*"):
        creator = block_creator(path.name)
        if creator is None or creator[1] != namespace:
            continue
        pid = creator[0]
        with contextlib.suppress(OSError):
            if pid == os.getpid() or pid_alive(pid) or path.stat().st_uid != os.getuid():
                continue
            path.unlink()
            removed.append(path.name)
    return removed


class SharedMemoryFull(BackendUnavailable):
    """/dev/shm cannot hold the blocks a run needs; the message says how to give it more."""


def free_bytes(directory: Path = SHM_DIR) -> int | None:
    """Bytes free for this user in `directory`'s file system; None where it cannot tell."""
    try:
        stats = os.statvfs(directory)
    except OSError:
        return None
    return stats.f_bavail * stats.f_frsize


def _mb(size: int) -> str:
    return f"{size / 1e6:,.1f} MB" if size >= 100_000 else f"{size / 1e3:,.0f} kB"


def room_error(needed: int, what: str, free: int | None) -> SharedMemoryFull:
    """The error for a /dev/shm without room for `needed` bytes (`what` names them)."""
    has = "" if free is None else f" has {_mb(free)} free:"
    return SharedMemoryFull(
        f"{SHM_DIR}{has} too little shared memory for this run, which needs {_mb(needed)} "
        f"({what}); give it more (docker run --shm-size=1g; elsewhere, as root, mount -o "
        f"remount,size=1G {SHM_DIR}), or use fewer --workers"
    )


def check_room(needed: int, what: str) -> None:
    """Raise SharedMemoryFull unless /dev/shm (where it is a directory) has `needed` bytes
    free (`what` names them)."""
    free = free_bytes() if SHM_DIR.is_dir() else None
    if free is not None and free < needed:
        raise room_error(needed, what, free)


class StaleWeightsError(RuntimeError):
    """A worker was asked for a weights version that is not the one in shared memory."""


@dataclass(frozen=True)
class BlockShape:
    """A block's size: a network of shape `net` (with a value head if `value`), `width`
    times: the weights versions a SharedWeights keeps, or a SharedGradient's slots."""

    net: policy.NetShape
    width: int = 1
    value: bool = False


class _Block:
    """A named shared-memory block; subclasses size it and map their arrays on it."""

    def __init__(self, shm: shared_memory.SharedMemory, shape: BlockShape, owner: bool) -> None:
        """Wrap an open block; use `create` or `attach` instead of calling this."""
        self._shm = shm
        self.shape = shape

    @staticmethod
    def size(shape: BlockShape) -> int:
        """Bytes the block needs."""
        raise NotImplementedError

    @property
    def name(self) -> str:
        """The block's name, to pass to `attach` in another process."""
        return self._shm.name

    @classmethod
    def create(cls, shape: BlockShape) -> Self:
        """A new block, owned (and unlinked) by the caller, its memory reserved in full.
        Raises OSError (ENOSPC where /dev/shm has no room), leaving no block."""
        size = cls.size(shape)
        # Named by the prefix, the creator's pid and pid namespace, and a random part.
        name = f"{NAME_PREFIX}{os.getpid()}-{pid_namespace() or '0'}-{secrets.token_hex(4)}"
        shm = shared_memory.SharedMemory(name=name, create=True, size=size)
        reserve = getattr(os, "posix_fallocate", None)  # Linux; elsewhere sized only
        if reserve is not None:
            try:
                # Written now, not sized only: a page found missing later would be a SIGBUS.
                reserve(shm._fd, 0, size)
            except OSError:
                shm.close()
                with contextlib.suppress(FileNotFoundError):
                    shm.unlink()
                raise
        return cls(shm, shape, owner=True)

    @classmethod
    def attach(cls, name: str, shape: BlockShape) -> Self:
        """Open an existing block (spawned children share the creator's resource tracker)."""
        return cls(shared_memory.SharedMemory(name=name), shape, owner=False)

    @classmethod
    def attach_untracked(cls, name: str, shape: BlockShape) -> Self:
        """Open an existing block made by an unrelated process (a Ray driver opening its
        node's leader's), as a writer. This process's resource tracker is told to forget it
        (Python 3.11 tracks what it attaches, and would remove the block when this process
        ends): its creator's removes it."""
        from multiprocessing import resource_tracker

        start_resource_tracker()  # as the local backend's: one that outlives a hangup
        shm = shared_memory.SharedMemory(name=name)
        resource_tracker.unregister(shm._name, "shared_memory")  # type: ignore[attr-defined]
        return cls(shm, shape, owner=True)

    def close(self) -> None:
        """Drop this process's mapping: the arrays mapped on it go first."""
        self.__dict__.pop("_views", None)
        self.__dict__.pop("_zeroed", None)
        self._shm.close()

    def unlink(self) -> None:
        """Remove the block from the system (creator only); safe to call twice."""
        with contextlib.suppress(FileNotFoundError):
            self._shm.unlink()


class SharedWeights(_Block):
    """Float32 policy weights in shared memory: the last `width` versions written."""

    def __init__(self, shm: shared_memory.SharedMemory, shape: BlockShape, owner: bool) -> None:
        """Map each slot's version and weights (read-only unless this process owns them)."""
        super().__init__(shm, shape, owner)
        net, value = shape.net, shape.value
        self._views: list[tuple[np.ndarray, np.ndarray, policy.Weights32]] = []
        for slot in range(shape.width):
            offset = slot * self.slot_size(net, value)
            version = np.ndarray((1,), dtype=np.int64, buffer=shm.buf, offset=offset)
            flat = np.ndarray((net.size(value),), np.float32, shm.buf, offset + HEADER_BYTES)
            if owner:
                version[0] = _NO_VERSION
            else:
                flat.flags.writeable = False
            self._views.append((version, flat, policy.Weights32.from_flat32(flat, net)))
        self._written = 0  # versions written so far: the next goes in slot _written % width

    @staticmethod
    def slot_size(net: policy.NetShape, value: bool = False) -> int:
        """Bytes of one slot: the header, then the float32 weights, rounded up to 64."""
        return -(-(HEADER_BYTES + 4 * net.size(value)) // 64) * 64

    @staticmethod
    def size(shape: BlockShape) -> int:
        """`shape.width` slots."""
        return shape.width * SharedWeights.slot_size(shape.net, shape.value)

    def room(self) -> np.ndarray:
        """The slot the next `write` goes into, its version taken back: a writer that fills
        it itself and then writes it spares the copy (coordinator only, as `write`)."""
        stamp, flat, _ = self._views[self._written % self.shape.width]
        stamp[0] = _NO_VERSION
        return flat

    def write(self, params: np.ndarray, version: int) -> None:
        """Publish flat `params` as `version`, over the oldest version kept (coordinator only;
        no episode may still be playing that one); `params` may be `room()` itself."""
        stamp, flat, _ = self._views[self._written % self.shape.width]
        stamp[0] = _NO_VERSION
        if params is not flat:
            np.copyto(flat, params, casting="same_kind")
        stamp[0] = version
        self._written += 1

    def read(self, version: int) -> policy.Weights32:
        """Read-only views of the weights of `version`; raises if no slot holds it."""
        return self._slot(version)[2]

    def flat(self, version: int) -> np.ndarray:
        """The flat float32 weights of `version`, a view; raises if no slot holds it."""
        return self._slot(version)[1]

    def _slot(self, version: int) -> tuple[np.ndarray, np.ndarray, policy.Weights32]:
        for slot in self._views:
            if int(slot[0][0]) == version:
                return slot
        raise StaleWeightsError(f"shared weights hold versions {self.versions}, not {version}")

    @property
    def versions(self) -> list[int]:
        """The versions the slots hold now, in increasing order."""
        return sorted(int(stamp[0]) for stamp, _, _ in self._views if stamp[0] != _NO_VERSION)


_NO_VERSION = np.iinfo(np.int64).min  # a slot not written yet (versions may be negative)


class SharedGradient(_Block):
    """One worker's gradient slots: the worker writes one, the coordinator reads it in place
    (5 MB never go through a pipe); with two, it writes the next while the last is read.
    After the slots, each slot's flags of the W1 rows it holds as +0.0 (`zeroed`): a new
    block's are 0, "not known"."""

    DTYPE: type[np.floating] = np.float32
    FLAGS = True  # whether the slots have W1 row flags after them

    def __init__(self, shm: shared_memory.SharedMemory, shape: BlockShape, owner: bool) -> None:
        """Map the flat gradients and their flags."""
        super().__init__(shm, shape, owner)
        flat = np.ndarray((self.length(shape),), dtype=self.DTYPE, buffer=shm.buf)
        self._views = list(flat.reshape(shape.width, -1))  # a slot a row
        self._zeroed: list[ZeroRows | None] = [None] * shape.width
        if self.FLAGS:  # a slot's flags a row
            flags = np.ndarray((shape.width, shape.net.rows), np.uint8, shm.buf, flat.nbytes)
            self._zeroed = [ZeroRows(row, shape.net.hidden) for row in flags]

    @staticmethod
    def length(shape: BlockShape) -> int:
        """Numbers in `shape.width` flat gradients."""
        return shape.net.size(shape.value) * shape.width

    @classmethod
    def size(cls, shape: BlockShape) -> int:
        """`shape.width` flat gradients' bytes, and their flags'."""
        flags = shape.width * shape.net.rows if cls.FLAGS else 0
        return np.dtype(cls.DTYPE).itemsize * cls.length(shape) + flags

    @property
    def slots(self) -> list[np.ndarray]:
        """The gradients, flat (DTYPE), a slot each."""
        return self._views

    def zeroed(self, slot: int) -> ZeroRows | None:
        """Slot `slot`'s flags of the W1 rows it holds as +0.0 (None without flags)."""
        return self._zeroed[slot]


class SharedSums(SharedGradient):
    """A Ray node leader's float64 group sums, a slot per group of a batch, which the driver
    on the same machine reads in place (not through Ray's object store)."""

    DTYPE = np.float64
    FLAGS = False


def map_sums(name: str, shape: BlockShape) -> list[np.ndarray]:
    """Read-only views of the slots of a SharedSums block that another process made (a Ray
    driver reading its node leader's), mapped apart from it: they stay valid while they are
    held, after the block is removed too, and no resource tracker hears of them."""
    flat = np.memmap(SHM_DIR / name, SharedSums.DTYPE, "r", shape=(SharedSums.length(shape),))
    return list(flat.reshape(shape.width, -1))
