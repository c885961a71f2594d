"""What the policy sees, as sparse inputs: by default the non-zero pixels of binary(frame) -
binary(previous), the frame difference (INPUTS lists the other kinds).

A difference has ~29 non-zero pixels of 6400 (a random player's game of real Pong). An
input stream turns each observation into the indices and signs (+1/-1) of those pixels, as
cheaply as the env's observations allow:
- `BinaryInputs` for envs whose observations are RGB frames (FakePong, gymnasium's ALE):
  `binarize`, then compare;
- `PaletteInputs` for FastAtari: compare the raw palette indices and look up the colours of
  the few changed pixels only (a compiled loop).

With inputs "diff+paddle" both streams show one column as it is instead of its difference:
the agent's paddle, which a difference erases while it stands still (at a wall, or when
sticky actions hold it). ~8 more non-zero inputs a step; the weights keep their shape.

With inputs "frame+trail" a step shows the whole frame as it is (+1: both paddles and the
ball, standing or not) and the pixels that went dark since the previous frame (-1: where the
ball and a moving paddle were), so that motion stays visible: the frame, and where things
moved from, in one plane of the same size (two stacked frames would also tell a pixel that
just lit up from one that stayed lit). ~45 non-zero inputs a step; the weights keep their
shape. Both streams run one compiled loop then (`sparse.frame_trail`), which reads every
pixel through a 0/1 table: the palette's, or for frames already 0/1 the identity.
"""

from __future__ import annotations

from typing import Any, Protocol

import gymnasium as gym
import numpy as np

from pong_mp import sparse

INPUT_SIZE = 80 * 80
"""Length of one preprocessed frame: 80x80 pixels."""

INPUTS = ("diff", "diff+paddle", "frame+trail")
"""What the policy sees each step: the frame difference (Karpathy's), the difference with
PADDLE_COLUMN shown as it is now, or the frame as it is with the pixels that went dark."""

PADDLE_COLUMN = 71
"""The column of the 80x80 frame that "diff+paddle" shows as it is: the right half of the
agent's paddle (x = 142-143 of 160, in ALE Pong and FakePong). Column 70, its left half,
keeps the difference, and with it the paddle's motion."""

_COLUMN_PIXELS = np.arange(PADDLE_COLUMN, INPUT_SIZE, 80, dtype=np.int32)

ERASED = (144, 109, 0)
"""Red values set to 0 by preprocessing: ALE Pong's two backgrounds, and 0 itself."""


def binarize(frame: np.ndarray) -> np.ndarray:
    """An ALE RGB frame (210x160x3 uint8) -> 6400 uint8 of 0/1: crop, downsample, erase."""
    red = frame[35:195:2, ::2, 0]
    keep = (red != ERASED[0]) & (red != ERASED[1]) & (red != ERASED[2])
    return keep.view(np.uint8).ravel()


NO_PIXELS = np.zeros(0, dtype=np.int32)
NO_VALUES = np.zeros(0, dtype=np.float32)


class InputStream(Protocol):
    """Sparse inputs (frame differences, or another of INPUTS), one observation at a time."""

    def reset(self, obs: Any) -> None:
        """Start an episode at observation `obs` (its input is all zeros)."""

    def step(self, obs: Any) -> tuple[np.ndarray, np.ndarray]:
        """(int32 indices, float32 values) of the step's input: binary(obs) -
        binary(previous observation), or what INPUTS says; the arrays may be reused by the
        next step."""


def _signs(changed: np.ndarray, now: np.ndarray) -> np.ndarray:
    # At a changed pixel the difference is +1 where it is now on, -1 where it went off.
    return now[changed].astype(np.float32) * 2.0 - 1.0


_BINARY = np.arange(256, dtype=np.uint8)
"""The table of `sparse.show_column` and `sparse.frame_trail` for frames that are already 0/1
pixels."""


def _checked(inputs: str) -> str:
    if inputs not in INPUTS:
        raise ValueError(f"inputs must be one of {', '.join(INPUTS)}, not {inputs!r}")
    return inputs


class BinaryInputs:
    """Inputs for envs with ALE-format RGB observations."""

    def __init__(self, inputs: str = "diff") -> None:
        """An idle stream of `inputs` (one of INPUTS); call reset first."""
        self._prev = np.zeros(INPUT_SIZE, dtype=np.uint8)
        self._trail = _checked(inputs) == "frame+trail"
        self._show = inputs == "diff+paddle"
        self._on = np.empty(INPUT_SIZE, dtype=np.uint8)  # what frame_trail writes: the frame
        self._idx = np.empty(INPUT_SIZE, dtype=np.int32)
        self._vals = np.empty(INPUT_SIZE, dtype=np.float32)

    def reset(self, obs: np.ndarray) -> None:
        """Remember the first frame."""
        self._prev = binarize(obs)

    def step(self, obs: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """The step's input: the changed pixels and their signs, or what INPUTS says."""
        cur = binarize(obs)
        if self._trail:
            # A 0/1 frame is a palette of its own (_BINARY): FastAtari's stream's loop.
            n = sparse.frame_trail(cur, _BINARY, self._prev, self._on, self._idx, self._vals)
            self._prev = cur
            return self._idx[:n], self._vals[:n]
        # A bool mask: ~8x faster than on ints. int32, as sparse's functions take.
        changed = np.flatnonzero(cur != self._prev).astype(np.int32)
        self._prev = cur
        signs = _signs(changed, cur)
        if not self._show:
            return changed, signs
        n = sparse.show_column(
            changed, signs, cur, _BINARY, PADDLE_COLUMN, 80, self._idx, self._vals
        )
        return self._idx[:n], self._vals[:n]


class PaletteInputs:
    """Inputs for FastAtari: only pixels whose palette index changed can change colour.

    The change of a pixel from palette index a to b is binary(b) - binary(a); with a table
    of those for the pairs met so far, a step is one pass of `sparse.palette_diff` over the
    frame (a pair not met yet is looked up through `env.binary`, which learns new colours
    from the screen). With "frame+trail" every pixel is shown, so each is read through the
    0/1 table of palette indices (`sparse.frame_trail`) instead.
    """

    def __init__(self, env: Any, inputs: str = "diff") -> None:
        """Look up colours through `env.binary` (FastAtari); `inputs` is one of INPUTS."""
        self._env = env
        self._trail = _checked(inputs) == "frame+trail"
        self._show = inputs == "diff+paddle"
        # A view that `env.binary` fills in; what the compiled loops read the 0/1 pixels
        # of the shown column ("diff+paddle") or of the whole frame ("frame+trail") through.
        self._table = env.table if self._show or self._trail else None
        self._column = PADDLE_COLUMN if self._show else -1
        self._prev = np.zeros(INPUT_SIZE, dtype=np.uint8)
        # The 0/1 pixels of the previous frame and of this one ("frame+trail"), in turn.
        self._prev_binary = np.zeros(INPUT_SIZE, dtype=np.uint8)
        self._now_binary = np.zeros(INPUT_SIZE, dtype=np.uint8)
        self._change = np.full((256, 256), sparse.UNSEEN, dtype=np.int8)
        self._idx = np.empty(INPUT_SIZE, dtype=np.int32)
        self._vals = np.empty(INPUT_SIZE, dtype=np.float32)

    def reset(self, obs: np.ndarray) -> None:
        """Remember the first frame and learn every colour in it."""
        self._prev = np.ascontiguousarray(obs).reshape(-1)
        self._prev_binary[:] = self._env.binary(self._prev)

    def step(self, obs: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """The pixels whose colour class changed, and their signs, or what INPUTS says
        (views that the next step overwrites)."""
        cur = np.ascontiguousarray(obs).reshape(-1)
        if self._trail:
            return self._frame_trail(cur)
        n = sparse.palette_diff(
            cur, self._prev, self._change, self._idx, self._vals, self._table, self._column
        )
        if n < 0:
            self._learn(cur)
            n = sparse.palette_diff(
                cur, self._prev, self._change, self._idx, self._vals, self._table, self._column
            )
        self._prev = cur
        return self._idx[:n], self._vals[:n]

    def _frame_trail(self, cur: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        # The whole frame is shown: every pixel's 0/1 value through the palette's table.
        table = self._table
        now = self._now_binary
        n = sparse.frame_trail(cur, table, self._prev_binary, now, self._idx, self._vals)
        if n < 0:
            self._env.binary(cur)  # learns the new colours from the screen
            n = sparse.frame_trail(cur, table, self._prev_binary, now, self._idx, self._vals)
        self._prev = cur
        self._prev_binary, self._now_binary = now, self._prev_binary
        return self._idx[:n], self._vals[:n]

    def _learn(self, cur: np.ndarray) -> None:
        moved = np.flatnonzero(cur != self._prev)
        before, now = self._prev[moved], cur[moved]
        # The previous colours were looked up (and learned) when they were on screen.
        self._change[before, now] = self._env.binary(now).astype(np.int8) - self._env.binary(
            before
        )
        if self._show:
            self._env.binary(cur[PADDLE_COLUMN::80])  # the shown column's colours


def input_stream(env: gym.Env, inputs: str = "diff") -> InputStream:
    """The cheapest stream of `inputs` (one of INPUTS) for this env."""
    unwrapped = env.unwrapped
    if hasattr(unwrapped, "binary"):
        return PaletteInputs(unwrapped, inputs)
    return BinaryInputs(inputs)
