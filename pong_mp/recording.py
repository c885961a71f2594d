"""Recording games as video: RGB frames, upscaled so a person can watch, to GIF or MP4.

imageio writes both: GIF through Pillow, MP4 through imageio-ffmpeg, which ships its own
ffmpeg binary in the wheel. Frames are streamed to the file, so a long game needs no memory.
"""

from __future__ import annotations

import os
from pathlib import Path
from types import TracebackType
from typing import Any

import numpy as np

FORMATS = (".gif", ".mp4")
FPS = 15
"""Frames per second: ALE plays 60 frames a second and a step is 4 of them."""


class VideoRecorder:
    """Writes RGB frames, upscaled `scale` times (nearest neighbour), to a GIF or MP4."""

    def __init__(self, path: Path, scale: int = 3, fps: int = FPS) -> None:
        """Open `path`, whose suffix (.gif or .mp4) picks the format."""
        import imageio.v2 as imageio

        path = Path(path)
        suffix = path.suffix.lower()
        if suffix not in FORMATS:
            raise ValueError(f"{path}: --record needs a .gif or .mp4 file")
        if scale < 1:
            raise ValueError("scale must be >= 1")
        if path.is_dir():
            raise ValueError(f"{path} is a directory; --record needs a .gif or .mp4 file")
        if not path.parent.is_dir():
            raise ValueError(f"{path}: no directory {path.parent}")
        if not os.access(path.parent, os.W_OK) or (path.exists() and not os.access(path, os.W_OK)):
            raise ValueError(f"cannot write {path}: permission denied")
        self.path = path
        self.scale = scale
        self.frames = 0
        options: dict[str, Any]
        if suffix == ".gif":
            options = {"mode": "I", "duration": 1000 / fps, "loop": 0}
        else:
            # yuv420p for players everywhere; 210x160 frames upscaled stay even-sized.
            options = {
                "fps": fps,
                "codec": "libx264",
                "pixelformat": "yuv420p",
                "macro_block_size": 2,
                "quality": 8,
            }
        # Written beside the target and renamed into place when finished, so that a failed
        # or interrupted recording leaves no half video (nor damages an older one).
        self._tmp = path.with_name(f".{path.stem}.{os.getpid()}.tmp{suffix}")
        self._writer = imageio.get_writer(self._tmp, **options)
        self._done = False

    def add(self, frame: np.ndarray) -> None:
        """Append one RGB frame (H x W x 3 uint8)."""
        big = frame.repeat(self.scale, axis=0).repeat(self.scale, axis=1)
        self._writer.append_data(big)
        self.frames += 1

    def close(self) -> None:
        """Finish the file and move it into place (once; later calls do nothing)."""
        if self._done:
            return
        self._done = True
        try:
            self._writer.close()
            os.replace(self._tmp, self.path)
        finally:
            self._tmp.unlink(missing_ok=True)

    def abort(self) -> None:
        """Drop the recording: nothing is written to the target (once; then close does
        nothing)."""
        if self._done:
            return
        self._done = True
        try:
            self._writer.close()
        except Exception:  # the writer failed already; its file is dropped either way
            pass
        finally:
            self._tmp.unlink(missing_ok=True)

    def __enter__(self) -> VideoRecorder:
        return self

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        if kind is None:
            self.close()
        else:
            self.abort()
