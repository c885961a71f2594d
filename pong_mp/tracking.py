"""TensorBoard event files in the run directory: `tensorboard --logdir runs` shows every run.

Events are framed by tensorboardX's `RecordWriter` but written in the coordinator's own
thread, so that a full disk is one FileError like any other run file (a background writer
thread would die with a traceback). The x axis is env steps, which does not depend on the
machine. metrics.jsonl stays the contract; these files are for watching.
"""

from __future__ import annotations

import contextlib
import socket
import time
from pathlib import Path
from typing import Any

from pong_mp.files import file_io

SCALARS = {
    "reward/running": "running_reward",
    "reward/batch_mean": "reward_mean",
    "speed/steps_per_sec": "steps_per_sec",
    "progress/episodes": "episodes",
    "progress/updates": "batch",
    "update/seconds": "seconds",
    "update/play_seconds": "play_seconds",
    "update/coordinator_seconds": "update_seconds",
    "update/grad_norm": "grad_norm",
    "update/weight_norm": "weight_norm",
    "update/step_norm": "step_norm",
    "update/lr": "lr",
    "policy/entropy": "entropy",
}
"""TensorBoard tag -> metrics field, for each update."""


class TensorBoardLog:
    """Appends one event per update to a new event file in `run_dir`."""

    def __init__(self, run_dir: Path, purge_from: int | None = None) -> None:
        """Open a new event file; `purge_from` (on resume: the checkpoint's env steps + 1) has
        TensorBoard drop older files' events from that step on, as they are played again."""
        from tensorboardX.proto.event_pb2 import Event, SessionLog
        from tensorboardX.record_writer import RecordWriter

        self._event = Event
        # TensorBoard's prefix; nanoseconds, lest a resume within a second overwrite the last
        # file (TensorBoard reads event files in the order of their names).
        name = f"events.out.tfevents.{time.time_ns()}.{socket.gethostname()}.pong-mp"
        self.path = Path(run_dir) / name
        with file_io(self.path, "write"):
            self._writer = RecordWriter(str(self.path))
            self._write(Event(wall_time=time.time(), file_version="brain.Event:2"))
            if purge_from is not None:
                start = SessionLog(status=SessionLog.START)
                self._write(Event(wall_time=time.time(), step=purge_from, session_log=start))

    def _write(self, event: Any) -> None:
        self._writer.write(event.SerializeToString())
        self._writer.flush()

    def write(self, record: dict[str, Any]) -> None:
        """One update's scalars, at its env step count. Raises FileError."""
        from tensorboardX.proto.summary_pb2 import Summary

        values = [
            Summary.Value(tag=tag, simple_value=float(record[key]))
            for tag, key in SCALARS.items()
            if record.get(key) is not None
        ]
        event = self._event(
            wall_time=record.get("time", time.time()),
            step=int(record["total_steps"]),
            summary=Summary(value=values),
        )
        with file_io(self.path, "write"):
            self._write(event)

    def close(self) -> None:
        """Close the file; nothing is lost by a failure here (every event was flushed)."""
        with contextlib.suppress(OSError):
            self._writer.close()

