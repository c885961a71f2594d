"""What `pong-mp train` prints: a live line on a terminal, clean lines elsewhere."""

from __future__ import annotations

import io
import re
from pathlib import Path

import pytest
from tqdm import tqdm

from pong_mp.progress import (
    BarReporter,
    LineReporter,
    QuietReporter,
    bar_layout,
    format_postfix,
    format_update,
    make_reporter,
)
from tests.helpers import pong_mp

RECORD = {
    "batch": 3,
    "episodes": 30,
    "steps": 900,
    "reward_mean": -20.3,
    "running_reward": -20.78,
    "seconds": 0.3,
    "steps_per_sec": 3133.4,
}
ARGS = "train --env FakePong-v0 --env-arg points_to_win=2 --hidden 8 --workers 2".split()


def test_piped_output_is_plain_lines_without_control_characters(
    tmp_path: Path, clean_system
) -> None:
    done = pong_mp(*ARGS, "--batch-size", "2", "--batches", "3", "--run-dir", str(tmp_path))
    assert done.returncode == 0, done.stderr
    assert not re.search(r"[\x00-\x08\x0b-\x1f\x7f]", done.stdout)
    lines = done.stdout.splitlines()
    assert len(lines) == 5 and lines[1].startswith("batch      1 | episodes       2")


def test_quiet_prints_only_the_summary(tmp_path: Path, clean_system) -> None:
    done = pong_mp(
        *ARGS, "--batch-size", "2", "--batches", "2", "--quiet", "--run-dir", str(tmp_path)
    )
    assert done.returncode == 0
    assert done.stdout.splitlines() == [done.stdout.strip()]
    assert done.stdout.startswith("pong-mp: done: 2 updates")


def test_the_line_format() -> None:
    assert format_update(RECORD) == (
        "batch      3 | episodes      30 | reward  -20.30 | running  -20.78 |   3,133 steps/s"
    )
    lines: list[str] = []
    reporter = LineReporter(lines.append)
    reporter.banner("hello")
    reporter.update(RECORD)
    assert lines == ["hello", format_update(RECORD)]


class _Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_a_terminal_gets_one_live_line_with_an_eta() -> None:
    stream = _Terminal()
    reporter = make_reporter(False, 2, 5, stream)
    assert isinstance(reporter, BarReporter)
    reporter.update(RECORD)
    reporter.close()
    text = stream.getvalue()
    assert "\r" in text and "3/5 updates" in text  # redrawn in place, from update 2 of 5
    assert "running -20.78" in text and "3,133 steps/s" in text and "<" in text  # ETA



@pytest.mark.parametrize("total", [None, 100_000])
def test_the_status_line_fits_80_columns(total: int | None) -> None:
    record = {**RECORD, "running_reward": -20.777, "steps_per_sec": 123_456.0}
    line = tqdm.format_meter(
        99_999, total, 3600 * 99, ncols=80, bar_format=bar_layout(total),
        postfix=format_postfix(record),
    )
    assert len(line) <= 80 and line.endswith("123,456 steps/s]"), line


def test_an_open_ended_bar_counts_updates_with_a_space() -> None:
    stream = _Terminal()
    reporter = make_reporter(False, 23, None, stream)
    reporter.update(RECORD)
    reporter.close()
    assert "update 24 [" in stream.getvalue() and "24update" not in stream.getvalue()


def test_reporter_choice() -> None:
    assert isinstance(make_reporter(True, 0, None, _Terminal()), QuietReporter)
    assert isinstance(make_reporter(False, 0, None, io.StringIO()), LineReporter)
