"""Recording games as video: RGB frames, upscaled so a person can watch, to GIF or MP4.

GIFs are written by `gif.GifStream` (~1 ms a frame), MP4 by imageio-ffmpeg (which ships its
own ffmpeg). Frames are streamed to the file, so a long game needs no memory.
"""

from __future__ import annotations

import os
from pathlib import Path
from types import TracebackType
from typing import Any, BinaryIO

import numpy as np

from pong_mp.files import check_writable, file_io, through_link
from pong_mp.tools.gif import GifStream

FORMATS = (".gif", ".mp4")
FPS = 15  # frames per second: ALE plays 60 frames a second and a step is 4 of them


class VideoRecorder:
    """Writes RGB frames, upscaled `scale` times (nearest neighbour), to a GIF or MP4."""

    def __init__(
        self,
        path: Path,
        scale: int = 3,
        fps: int = FPS,
        stride: int = 1,
        max_frames: int | None = None,
    ) -> None:
        """Open `path`, whose suffix (.gif or .mp4) picks the format. One frame of every
        `stride` is kept, and at most `max_frames` are written."""
        import imageio.v2 as imageio

        path = Path(path)
        suffix = path.suffix.lower()
        if suffix not in FORMATS:
            raise ValueError(f"{path}: --record needs a .gif or .mp4 file")
        if scale < 1 or stride < 1 or (max_frames is not None and max_frames < 1):
            raise ValueError("scale, stride and max_frames must be >= 1")
        self.path = path
        self.scale = scale
        self.stride = stride
        self.max_frames = max_frames
        self.frames = 0  # written so far
        self.seen = 0  # offered so far, kept or not
        # Written beside the target and renamed into place when finished, so that a failed
        # or interrupted recording leaves no half video (nor damages an older one).
        self._target = through_link(path)  # a symlink is written through
        self._tmp = self._target.with_name(f".{path.stem}.{os.getpid()}.tmp{suffix}")
        self._gif_file: BinaryIO | None = None
        self._gif: GifStream | None = None
        self._writer: Any = None
        # A target that cannot be written is one FileError, seen by the check or on opening.
        check_writable(path, "a .gif or .mp4 file for --record")
        with file_io(path, "write"):  # a directory may refuse new files all the same
            if suffix == ".gif":
                self._gif_file = open(self._tmp, "wb")  # noqa: SIM115 (closed in close/abort)
                self._delay_ms = 1000 * stride / fps
            else:
                # yuv420p for players everywhere; 210x160 frames upscaled stay even-sized.
                self._writer = imageio.get_writer(
                    self._tmp,
                    fps=fps / stride,
                    codec="libx264",
                    pixelformat="yuv420p",
                    macro_block_size=2,
                    quality=8,
                )
        self._done = False

    def add(self, frame: np.ndarray) -> None:
        """Offer one RGB frame (H x W x 3 uint8); kept if the stride and the length allow."""
        self.seen += 1
        full = self.max_frames is not None and self.frames >= self.max_frames
        if (self.seen - 1) % self.stride or full:
            return
        if self._gif_file is not None:
            if self._gif is None:  # its size is the first frame's
                self._gif = GifStream(self._gif_file, *frame.shape[:2], self.scale, self._delay_ms)
            self._gif.add(frame)
        else:
            self._writer.append_data(frame.repeat(self.scale, axis=0).repeat(self.scale, axis=1))
        self.frames += 1

    def close(self) -> None:
        """Finish the file and move it into place (once; later calls do nothing)."""
        self._finish(keep=True)

    def abort(self) -> None:
        """Drop the recording, writing nothing to the target (once; then close does nothing)."""
        self._finish(keep=False)

    def _finish(self, keep: bool) -> None:
        if self._done:
            return
        self._done = True
        try:
            if self._gif_file is None:
                self._writer.close()
            else:
                try:
                    if self._gif is not None:
                        self._gif.close()
                finally:
                    self._gif_file.close()
            if keep:
                os.replace(self._tmp, self._target)
        except Exception:
            if keep:  # an abort drops the file anyway, whatever its writer says
                raise
        finally:
            self._tmp.unlink(missing_ok=True)

    def __enter__(self) -> VideoRecorder:
        return self

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self._finish(keep=kind is None)  # close, or abort on an exception
