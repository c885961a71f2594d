"""Versioned weights in one shared-memory block: the coordinator writes, workers read in place.

Layout: a 64-byte header whose first 8 bytes hold the version (int64), then the flat float64
parameters, 64-byte aligned. Blocks are named `pong-mp-<pid>-<random>` so that a leak is easy
to spot in /dev/shm. Only the creator unlinks.
"""

from __future__ import annotations

import contextlib
import os
import secrets
from multiprocessing import shared_memory

import numpy as np

HEADER_BYTES = 64
NAME_PREFIX = "pong-mp-"


class StaleWeightsError(RuntimeError):
    """A worker was asked for a weights version that is not the one in shared memory."""


class SharedWeights:
    """A flat float64 parameter vector plus a version number in shared memory."""

    def __init__(self, shm: shared_memory.SharedMemory, size: int, owner: bool) -> None:
        """Wrap an open block; use `create` or `attach` instead of calling this."""
        self._shm = shm
        self._owner = owner
        self.size = size
        self._version = np.ndarray((1,), dtype=np.int64, buffer=shm.buf, offset=0)
        self._params = np.ndarray((size,), dtype=np.float64, buffer=shm.buf, offset=HEADER_BYTES)
        if not owner:
            self._params.flags.writeable = False

    @property
    def name(self) -> str:
        """The block's name, to pass to `attach` in another process."""
        return self._shm.name

    @classmethod
    def create(cls, size: int) -> SharedWeights:
        """A new zeroed block for `size` parameters, owned (and later unlinked) by the caller."""
        name = f"{NAME_PREFIX}{os.getpid()}-{secrets.token_hex(4)}"
        shm = shared_memory.SharedMemory(name=name, create=True, size=HEADER_BYTES + 8 * size)
        weights = cls(shm, size, owner=True)
        weights._version[0] = -1
        return weights

    @classmethod
    def attach(cls, name: str, size: int) -> SharedWeights:
        """Open an existing block read-only (spawned children share the creator's tracker)."""
        return cls(shared_memory.SharedMemory(name=name), size, owner=False)

    def write(self, params: np.ndarray, version: int) -> None:
        """Publish `params` as `version` (coordinator only, while no worker is reading)."""
        self._params[:] = params
        self._version[0] = version

    def read(self, version: int) -> np.ndarray:
        """A read-only view of the parameters; raises if they are not `version`."""
        current = int(self._version[0])
        if current != version:
            raise StaleWeightsError(f"shared weights are version {current}, expected {version}")
        return self._params

    def close(self) -> None:
        """Drop this process's mapping (views into it must be gone)."""
        del self._version, self._params
        self._shm.close()

    def unlink(self) -> None:
        """Remove the block from the system (creator only); safe to call twice."""
        with contextlib.suppress(FileNotFoundError):
            self._shm.unlink()
