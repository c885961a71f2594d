"""A streaming GIF writer for game frames: few colours, small changes from frame to frame.

A general writer quantises and compresses every whole frame (~40 ms for a 3x Atari frame).
Game frames hold a handful of exact colours and only the ball and paddles move, so this one
maps colours through a lookup table to one global palette (written into its reserved place
at the end), and has Pillow compress only the rectangle that changed.
"""

from __future__ import annotations

from typing import BinaryIO

import numpy as np

MAX_COLORS = 256
_UNSEEN = -1


class GifStream:
    """Writes RGB frames (H x W x 3 uint8, all the same size) to an open binary file."""

    def __init__(self, fh: BinaryIO, height: int, width: int, scale: int, delay_ms: float) -> None:
        """Write the header of a looping GIF of `height` x `width` frames shown `scale` times
        larger, `delay_ms` apart."""
        self._fh = fh
        self._scale = scale
        self._delay = max(2, round(delay_ms / 10))  # most viewers treat < 2 as 10
        self._lut = np.full(1 << 24, _UNSEEN, dtype=np.int16)
        self._palette = np.zeros((MAX_COLORS, 3), dtype=np.uint8)
        self._colors = 0
        self._previous: np.ndarray | None = None
        size = (width * scale, height * scale)
        fh.write(b"GIF89a")
        # Logical screen: global colour table of 256 entries (flag 0x80, size bits 7).
        fh.write(size[0].to_bytes(2, "little") + size[1].to_bytes(2, "little") + b"\xf7\x00\x00")
        self._palette_at = fh.tell()
        fh.write(bytes(3 * MAX_COLORS))  # filled in by close()
        fh.write(b"\x21\xff\x0bNETSCAPE2.0\x03\x01\x00\x00\x00")  # loop forever

    def _indices(self, frame: np.ndarray) -> np.ndarray:
        key = (
            (frame[..., 0].astype(np.int32) << 16)
            | (frame[..., 1].astype(np.int32) << 8)
            | frame[..., 2].astype(np.int32)
        )
        index = self._lut[key]
        if (index == _UNSEEN).any():
            for color in np.unique(key[index == _UNSEEN]).tolist():
                self._lut[color] = self._new_color(color)
            index = self._lut[key]
        return index.astype(np.uint8)

    def _new_color(self, color: int) -> int:
        rgb = np.array([(color >> 16) & 255, (color >> 8) & 255, color & 255])
        if self._colors < MAX_COLORS:
            self._palette[self._colors] = rgb
            self._colors += 1
            return self._colors - 1
        # More colours than a GIF holds: the nearest one already in the palette.
        distance = np.square(self._palette.astype(int) - rgb).sum(axis=1)
        return int(np.argmin(distance))

    def add(self, frame: np.ndarray) -> None:
        """Append one frame: only the rectangle that differs from the previous frame."""
        from PIL import GifImagePlugin, Image

        index = self._indices(frame)
        # The first frame whole, each later one's rectangle that changed.
        changed = np.ones(index.shape, bool) if self._previous is None else index != self._previous
        rows, cols = np.flatnonzero(changed.any(axis=1)), np.flatnonzero(changed.any(axis=0))
        if len(rows):
            top, bottom, left, right = rows[0], rows[-1] + 1, cols[0], cols[-1] + 1
        else:  # nothing moved: a 1-pixel frame that repeats what is there
            top, bottom, left, right = 0, 1, 0, 1
        self._previous = index
        s = self._scale
        patch = index[top:bottom, left:right].repeat(s, axis=0).repeat(s, axis=1)
        image = Image.fromarray(np.ascontiguousarray(patch), mode="P")
        # Graphic control: keep the previous frame under this one (disposal 1), the delay.
        self._fh.write(b"\x21\xf9\x04\x04" + self._delay.to_bytes(2, "little") + b"\x00\x00")
        offset = (int(left) * s, int(top) * s)
        for chunk in GifImagePlugin.getdata(image, offset=offset):
            self._fh.write(chunk)

    def close(self) -> None:
        """Write the trailer and the palette; the file stays open (the caller owns it)."""
        self._fh.write(b"\x3b")
        end = self._fh.tell()
        self._fh.seek(self._palette_at)
        self._fh.write(self._palette.tobytes())
        self._fh.seek(end)
