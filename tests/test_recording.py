"""`pong-mp play --record`: videos a person can watch, with one frame per step played."""

from __future__ import annotations

import os
import re
from pathlib import Path

import imageio.v2 as imageio
import numpy as np
import pytest

from pong_mp.files import FileError
from pong_mp.tools.recording import VideoRecorder
from tests.helpers import pong_mp, pong_mp_here


def _steps(stdout: str) -> int:
    return sum(int(n.replace(",", "")) for n in re.findall(r"\(([\d,]+) steps\)", stdout))


@pytest.mark.parametrize("suffix", [".gif", ".mp4"])
def test_record_writes_one_upscaled_frame_per_step(
    fake_checkpoint: Path, tmp_path: Path, suffix: str
) -> None:
    video = tmp_path / f"game{suffix}"
    done = pong_mp(
        "play", str(fake_checkpoint), "--episodes", "2", "--record", str(video), "--scale", "2"
    )
    assert done.returncode == 0, done.stderr
    steps = _steps(done.stdout)
    assert steps > 20 and f"recorded {steps:,} frames to {video}" in done.stdout
    reader = imageio.get_reader(video)
    try:
        count = reader.count_frames() if suffix == ".mp4" else reader.get_length()
        frame = reader.get_data(count // 2)
    finally:
        reader.close()
    assert count == steps
    assert frame.shape[:2] == (420, 320)  # 210x160, twice
    # Real frames: mostly FakePong's brown background, with paddles and ball on it.
    assert np.mean(np.abs(frame[200, :, :3].astype(int) - [144, 72, 17]).sum(axis=1) < 40) > 0.8


def test_record_refuses_other_formats(fake_checkpoint: Path, tmp_path: Path) -> None:
    done = pong_mp_here("play", str(fake_checkpoint), "--record", str(tmp_path / "game.avi"))
    assert done.returncode == 2 and done.stderr.count("\n") == 1
    assert "needs a .gif or .mp4 file" in done.stderr
    assert not (tmp_path / "game.avi").exists()


def test_a_file_the_directory_refuses_is_named_by_its_own_path(tmp_path: Path) -> None:
    # The check passes (a writable directory), but the file beside the target cannot be made:
    # here a directory has its name; on /proc, say, the system refuses it.
    (tmp_path / f".game.{os.getpid()}.tmp.gif").mkdir()
    with pytest.raises(FileError, match=r"^cannot write \S*game\.gif: Is a directory$"):
        VideoRecorder(tmp_path / "game.gif")
    assert not (tmp_path / "game.gif").exists()


def test_recorder_upscales_without_blurring(tmp_path: Path) -> None:
    frame = np.zeros((210, 160, 3), dtype=np.uint8)
    frame[100, 50] = [236, 236, 236]
    with VideoRecorder(tmp_path / "one.gif", scale=3) as recorder:
        recorder.add(frame)
    assert recorder.frames == 1
    out = imageio.imread(tmp_path / "one.gif")
    assert out.shape[:2] == (630, 480)
    assert out[300:303, 150:153].min() > 200 and out[303, 150].max() < 20


def test_a_recording_through_a_symlink_keeps_the_link(tmp_path: Path) -> None:
    link = tmp_path / "latest.gif"
    link.symlink_to(tmp_path / "game.gif")
    with VideoRecorder(link) as recorder:
        recorder.add(np.zeros((210, 160, 3), dtype=np.uint8))
    assert link.is_symlink() and imageio.imread(tmp_path / "game.gif").shape[:2] == (630, 480)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["game.gif", "latest.gif"]


def test_gif_frames_decode_to_exactly_the_frames_given(tmp_path: Path) -> None:
    from pong_mp.envs import make_env

    env = make_env("FakePong-v0", points_to_win=1, render_mode="rgb_array")
    env.reset(seed=0)
    frames = [env.render()]
    for i in range(60):
        env.step(2 if i % 5 < 2 else 3)
        frames.append(env.render())
    frames.append(frames[-1].copy())  # a frame where nothing moved
    with VideoRecorder(tmp_path / "g.gif", scale=2) as recorder:
        for frame in frames:
            recorder.add(frame)
    decoded = imageio.mimread(tmp_path / "g.gif")
    assert len(decoded) == len(frames)
    for got, want in zip(decoded, frames, strict=True):
        assert np.array_equal(np.asarray(got)[::2, ::2, :3], want)


def test_stride_and_length_choose_the_clip(fake_checkpoint: Path, tmp_path: Path) -> None:
    video = tmp_path / "clip.gif"
    done = pong_mp(
        "play", str(fake_checkpoint), "--episodes", "1", "--record", str(video),
        "--frame-stride", "3", "--max-frames", "10", "--scale", "1",
    )
    assert done.returncode == 0, done.stderr
    assert _steps(done.stdout) > 30  # the game was played to its end
    assert "recorded 10 frames" in done.stdout
    assert len(imageio.mimread(video)) == 10
    full = tmp_path / "full.mp4"
    done = pong_mp(
        "play", str(fake_checkpoint), "--episodes", "1", "--record", str(full),
        "--frame-stride", "2",
    )
    steps = _steps(done.stdout)
    reader = imageio.get_reader(full)
    try:
        assert reader.count_frames() == (steps + 1) // 2
    finally:
        reader.close()


def test_a_stride_past_what_a_gif_can_hold_is_refused_before_a_game(
    fake_checkpoint: Path, tmp_path: Path
) -> None:
    # 1,000 steps (67 s) a frame is the most; more would overflow a GIF's frame delay.
    video = tmp_path / "clip.gif"
    done = pong_mp(
        "play", str(fake_checkpoint), "--record", str(video), "--frame-stride", "40000",
    )
    assert done.returncode == 2, done.stderr
    assert done.stderr.startswith("pong-mp: error: Invalid value for '--frame-stride'")
    assert done.stdout == "" and list(tmp_path.iterdir()) == []
