"""Versioned weights in one shared-memory block: the coordinator writes, workers read in place.

Layout: a 64-byte header whose first 8 bytes hold the version (int64), then the float32
weights that episodes compute with (`policy.Weights32`: W1 transposed, then W2), 64-byte
aligned. The coordinator keeps the float64 master copy and writes this one once per update.
Blocks are named `pong-mp-<pid>-<random>` so that a leak is easy to spot in /dev/shm. Only
the creator unlinks.
"""

from __future__ import annotations

import contextlib
import os
import secrets
from multiprocessing import shared_memory

import numpy as np

from pong_mp import policy

HEADER_BYTES = 64
NAME_PREFIX = "pong-mp-"


class StaleWeightsError(RuntimeError):
    """A worker was asked for a weights version that is not the one in shared memory."""


class SharedWeights:
    """The float32 policy weights plus a version number in shared memory."""

    def __init__(self, shm: shared_memory.SharedMemory, hidden: int, owner: bool) -> None:
        """Wrap an open block; use `create` or `attach` instead of calling this."""
        self._shm = shm
        self._owner = owner
        self.hidden = hidden
        self._version = np.ndarray((1,), dtype=np.int64, buffer=shm.buf, offset=0)
        flat = np.ndarray(
            (policy.param_count(hidden),), dtype=np.float32, buffer=shm.buf, offset=HEADER_BYTES
        )
        w1t, w2 = policy.split(flat, hidden)
        if not owner:
            flat.flags.writeable = False
        self._weights = policy.Weights32(w1t, w2)

    @property
    def name(self) -> str:
        """The block's name, to pass to `attach` in another process."""
        return self._shm.name

    @classmethod
    def create(cls, hidden: int) -> SharedWeights:
        """A new block for a policy of `hidden` units, owned (and unlinked) by the caller."""
        name = f"{NAME_PREFIX}{os.getpid()}-{secrets.token_hex(4)}"
        size = HEADER_BYTES + 4 * policy.param_count(hidden)
        shm = shared_memory.SharedMemory(name=name, create=True, size=size)
        weights = cls(shm, hidden, owner=True)
        weights._version[0] = -1
        return weights

    @classmethod
    def attach(cls, name: str, hidden: int) -> SharedWeights:
        """Open an existing block read-only (spawned children share the creator's tracker)."""
        return cls(shared_memory.SharedMemory(name=name), hidden, owner=False)

    def write(self, params: np.ndarray, version: int) -> None:
        """Publish float64 `params` as `version` (coordinator only, while no one reads)."""
        w1t, w2 = policy.split(params, self.hidden)
        np.copyto(self._weights.w1t, w1t, casting="same_kind")
        np.copyto(self._weights.w2, w2, casting="same_kind")
        self._version[0] = version

    def read(self, version: int) -> policy.Weights32:
        """Read-only views of the weights; raises if they are not `version`."""
        current = int(self._version[0])
        if current != version:
            raise StaleWeightsError(f"shared weights are version {current}, expected {version}")
        return self._weights

    def close(self) -> None:
        """Drop this process's mapping (views into it must be gone)."""
        del self._version, self._weights
        self._shm.close()

    def unlink(self) -> None:
        """Remove the block from the system (creator only); safe to call twice."""
        with contextlib.suppress(FileNotFoundError):
            self._shm.unlink()


class SharedGradient:
    """One worker's gradient slot: the worker's backward pass writes into it, the
    coordinator reads it in place, so 5 MB never go through a pipe. Only the creator
    unlinks."""

    def __init__(self, shm: shared_memory.SharedMemory, hidden: int, owner: bool) -> None:
        """Wrap an open block; use `create` or `attach` instead of calling this."""
        self._shm = shm
        self._owner = owner
        self.array = np.ndarray((policy.param_count(hidden),), dtype=np.float32, buffer=shm.buf)

    @property
    def name(self) -> str:
        """The block's name, to pass to `attach` in another process."""
        return self._shm.name

    @classmethod
    def create(cls, hidden: int) -> SharedGradient:
        """A new slot for a policy of `hidden` units, owned (and unlinked) by the caller."""
        name = f"{NAME_PREFIX}{os.getpid()}-{secrets.token_hex(4)}"
        size = 4 * policy.param_count(hidden)
        return cls(shared_memory.SharedMemory(name=name, create=True, size=size), hidden, True)

    @classmethod
    def attach(cls, name: str, hidden: int) -> SharedGradient:
        """Open an existing slot (in the worker that writes it)."""
        return cls(shared_memory.SharedMemory(name=name), hidden, owner=False)

    def close(self) -> None:
        """Drop this process's mapping (views into it must be gone)."""
        del self.array
        self._shm.close()

    def unlink(self) -> None:
        """Remove the block from the system (creator only); safe to call twice."""
        with contextlib.suppress(FileNotFoundError):
            self._shm.unlink()
