"""Pack the committed records of docs/runs: metrics.jsonl and train.log compressed with xz.

    .venv/bin/python scripts/pack_records.py [RECORD_DIR ...]   # default: every record

A record's metrics.jsonl becomes metrics.jsonl.xz, which `pong-mp plot`, the tests and the
scripts read through `pong_mp.rundir.metrics_file` and `read_metrics` as they read a live
run's metrics.jsonl. Two things make it smaller than xz alone, and neither loses what the
records promise (every field equal to a remade run's but the timings and `workers`):

- timings are rounded to the millisecond (`TIMINGS`): their later digits are the clock's
  noise, and a remade run's timings differ anyway;
- a fork's first lines, the copy of the run it was forked from, are stored once: its file
  starts with a `lines_of` reference to that record where the lines are the same.

Every packed file is read back and compared with the lines it replaces, byte for byte,
before the plain files are removed. A live run keeps writing plain metrics.jsonl.
"""

from __future__ import annotations

import json
import lzma
import os
import sys
from pathlib import Path

from pong_mp.rundir import (
    CONFIG_FILE,
    LINES_OF,
    METRICS_FILE,
    PACKED_METRICS_FILE,
    metrics_bytes,
    metrics_file,
)

RUNS = Path(__file__).resolve().parent.parent / "docs" / "runs"
LOG_FILE = "train.log"
TIMINGS = {"seconds": 3, "update_seconds": 3, "elapsed": 3, "time": 3, "steps_per_sec": 1}
"""Decimals kept of each timing field: milliseconds, and a tenth of a step a second."""
PRESET = 9 | lzma.PRESET_EXTREME


def rounded_lines(data: bytes) -> list[bytes]:
    """The metrics lines of `data`, each as the trainer writes it, with TIMINGS rounded."""
    lines = []
    for raw in data.splitlines():
        if not raw.strip():
            continue
        record = json.loads(raw)
        for name, decimals in TIMINGS.items():
            if isinstance(record.get(name), float):
                record[name] = round(record[name], decimals)
        lines.append((json.dumps(record) + "\n").encode())
    return lines


def records_by_name(root: Path) -> dict[str, Path]:
    """Every record directory under `root`, by its name (a fork names its source so)."""
    return {path.parent.name: path.parent for path in sorted(root.rglob(CONFIG_FILE))}


def packed_bytes(record: Path, lines: list[bytes], known: dict[str, list[bytes]]) -> bytes:
    """What metrics.jsonl.xz holds before compression: `lines`, or a `lines_of` reference
    to the record this one was forked from and the lines after those they share."""
    source = json.loads((record / CONFIG_FILE).read_text()).get("fork_from")
    names = records_by_name(RUNS)
    origin = names.get(Path(source).name) if source else None
    if origin is None or origin.name not in known:
        return b"".join(lines)
    theirs = known[origin.name]
    shared = 0
    while shared < min(len(lines), len(theirs)) and lines[shared] == theirs[shared]:
        shared += 1
    if shared == 0:
        return b"".join(lines)  # its copy differs (a timing of a remade source): keep it
    through = json.loads(lines[shared - 1])["batch"]
    link = {LINES_OF: os.path.relpath(origin, record), "through_batch": through}
    return (json.dumps(link) + "\n").encode() + b"".join(lines[shared:])


def pack(records: list[Path]) -> None:
    """Pack `records` (their sources first), checking each packed file reads back whole."""
    known = {}
    for record in sorted(records_by_name(RUNS).values()):
        known[record.name] = rounded_lines(metrics_bytes(metrics_file(record)))
    wanted = {record.resolve() for record in records}
    for record in _sources_first(list(records_by_name(RUNS).values())):
        if record.resolve() not in wanted or not (record / METRICS_FILE).exists():
            continue
        lines = known[record.name]
        packed = record / PACKED_METRICS_FILE
        packed.write_bytes(lzma.compress(packed_bytes(record, lines, known), preset=PRESET))
        assert metrics_bytes(packed) == b"".join(lines), f"{packed} does not read back"
        (record / METRICS_FILE).unlink()
        log = record / LOG_FILE
        if log.exists():
            log.with_name(LOG_FILE + ".xz").write_bytes(
                lzma.compress(log.read_bytes(), preset=PRESET)
            )
            log.unlink()
        print(f"packed {record.relative_to(RUNS.parent.parent)}")


def _sources_first(records: list[Path]) -> list[Path]:
    # A fork's packed file refers to its source's, which must read back first.
    names = {record.name: record for record in records}
    order: list[Path] = []

    def visit(record: Path, depth: int = 0) -> None:
        if record in order or depth > len(records):
            return
        source = json.loads((record / CONFIG_FILE).read_text()).get("fork_from")
        if source and Path(source).name in names:
            visit(names[Path(source).name], depth + 1)
        order.append(record)

    for record in sorted(records):
        visit(record)
    return order


def main(argv: list[str]) -> int:
    """Pack the records named in `argv`, or every record under docs/runs."""
    records = [Path(arg) for arg in argv] or list(records_by_name(RUNS).values())
    pack(records)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
