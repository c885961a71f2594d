"""What the policy sees, as sparse inputs: the non-zero pixels of binary(frame) -
binary(previous), the frame difference (docs/how-it-works.md, 'Input').

An input stream turns each observation into the indices and signs (+1/-1) of those pixels,
as cheaply as the env's observations allow:
- `BinaryInputs` for envs whose observations are RGB frames (FakePong, gymnasium's ALE):
  `binarize`, then compare;
- `PaletteInputs` for FastAtari: compare the raw palette indices and look up the colours of
  the few changed pixels only (a compiled loop).
"""

from __future__ import annotations

from typing import Any, Protocol

import gymnasium as gym
import numpy as np

from pong_mp import sparse

INPUT_SIZE = 80 * 80  # length of one preprocessed frame: 80x80 pixels

FRAME_SHAPE = (210, 160, 3)
"""An observation pong-mp learns from: ALE's RGB frame of Pong (FakePong's is the same)."""

ERASED = (144, 109, 0)
"""Red values set to 0 by preprocessing: ALE Pong's two backgrounds, and 0 itself."""


def binarize(frame: np.ndarray) -> np.ndarray:
    """An ALE RGB frame (210x160x3 uint8) -> 6400 uint8 of 0/1: crop, downsample, erase."""
    red = frame[35:195:2, ::2, 0]
    keep = (red != ERASED[0]) & (red != ERASED[1]) & (red != ERASED[2])
    return keep.view(np.uint8).ravel()


def _frame(obs: Any) -> np.ndarray:
    """`obs`, if it is a uint8 frame of FRAME_SHAPE: the crop would take any frame at least
    195 rows tall and 2 wide, and compare any numbers with the erased colours, and learn from
    the wrong pixels without a word."""
    shape, dtype = getattr(obs, "shape", None), getattr(obs, "dtype", None)
    if shape != FRAME_SHAPE or dtype != np.uint8:
        what = f"a {dtype} array of shape {shape}" if shape is not None else repr(obs)[:40]
        raise ValueError(f"the env gave {what} for a frame, not a uint8 array of {FRAME_SHAPE}")
    # A subclass's arithmetic is its own: a masked array's difference was a float64 array.
    return obs if type(obs) is np.ndarray else np.asarray(obs)


NO_PIXELS = np.zeros(0, dtype=np.int32)
NO_VALUES = np.zeros(0, dtype=np.float32)


class InputStream(Protocol):
    """Sparse frame differences, one observation at a time."""

    def reset(self, obs: Any) -> None:
        """Start an episode at observation `obs` (its input is all zeros)."""

    def step(self, obs: Any) -> tuple[np.ndarray, np.ndarray]:
        """(int32 indices, float32 values) of binary(obs) - binary(previous observation);
        the arrays may be reused by the next step."""


class BinaryInputs:
    """Inputs for envs with ALE-format RGB observations."""

    def __init__(self) -> None:
        """An idle stream: call reset first."""
        self._prev = np.zeros(INPUT_SIZE, dtype=np.uint8)

    def reset(self, obs: np.ndarray) -> None:
        """Remember the first frame."""
        self._prev = binarize(_frame(obs))

    def step(self, obs: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """The changed pixels and their signs."""
        cur = binarize(_frame(obs))
        # A bool mask: ~8x faster than on ints. int32, as sparse's functions take.
        changed = np.flatnonzero(cur != self._prev).astype(np.int32)
        self._prev = cur
        # At a changed pixel the difference is +1 where it is now on, -1 where it went off.
        return changed, cur[changed].astype(np.float32) * 2.0 - 1.0


class PaletteInputs:
    """Inputs for FastAtari: only pixels whose palette index changed can change colour.

    The change of a pixel from palette index a to b is binary(b) - binary(a): with a table of
    those for the pairs met so far, a step is one pass of `sparse.palette_diff` over the
    frame (a new pair is looked up through `env.binary`, which learns colours from the screen).
    """

    def __init__(self, env: Any) -> None:
        """Look up colours through `env.binary` (FastAtari)."""
        self._env = env
        self._prev = np.zeros(INPUT_SIZE, dtype=np.uint8)
        self._change = np.full((256, 256), sparse.UNSEEN, dtype=np.int8)
        self._idx = np.empty(INPUT_SIZE, dtype=np.int32)
        self._vals = np.empty(INPUT_SIZE, dtype=np.float32)

    def reset(self, obs: np.ndarray) -> None:
        """Remember the first frame and learn every colour in it."""
        self._prev = np.ascontiguousarray(obs).reshape(-1)
        self._env.binary(self._prev)

    def step(self, obs: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """The pixels whose colour class changed, and their signs (views that the next
        step overwrites)."""
        cur = np.ascontiguousarray(obs).reshape(-1)
        n = sparse.palette_diff(cur, self._prev, self._change, self._idx, self._vals)
        if n < 0:  # a change not in the table yet: learn those of the pixels that moved
            moved = np.flatnonzero(cur != self._prev)
            before, now = self._prev[moved], cur[moved]
            # The previous colours were looked up (and learned) when they were on screen.
            binary = self._env.binary
            self._change[before, now] = binary(now).astype(np.int8) - binary(before)
            n = sparse.palette_diff(cur, self._prev, self._change, self._idx, self._vals)
        self._prev = cur
        return self._idx[:n], self._vals[:n]


def input_stream(env: gym.Env) -> InputStream:
    """The cheapest input stream for this env."""
    unwrapped = env.unwrapped
    return PaletteInputs(unwrapped) if hasattr(unwrapped, "binary") else BinaryInputs()
