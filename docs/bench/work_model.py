"""Where a run's wall time went on many workers, from its work shares: the play's and the
rounds' waits for the longest episode, and what equal work per worker would leave.

Reads a run's metrics (`metrics.jsonl` or a committed record's `metrics.jsonl.xz`) and
the work shares of the same run's updates (`work_shares.py`, made on any machine: the
run's bytes, so its episodes, are the same on any worker count). For each update, with
one episode a worker, the play waits for the longest episode and each round of passes for
the largest share, so it fits by least squares over the updates

    play_seconds           = a + b * longest episode
    seconds - play_seconds = c + d * sum over the rounds of their largest share

and prints JSON: the fits (with R squared); the run's wall time split into the fixed
parts, the work of the mean episode and the waits for the longest (the barrier); the rate
that the same fits give with every worker's work equal (the mean episode in place of the
longest), and with the mean episode's work alone (no fixed parts either): projections, not
measurements.

    python docs/bench/work_model.py RECORD_DIR SHARES.jsonl --raw STEPS_PER_SEC
"""

from __future__ import annotations

import argparse
import json
import lzma
from pathlib import Path
from typing import Any

import numpy as np


def _shares(path: Path) -> list[dict[str, Any]]:
    # work_shares.py's lines, as it wrote them or packed with xz.
    raw = lzma.decompress(path.read_bytes()) if path.suffix == ".xz" else path.read_bytes()
    return [json.loads(line) for line in raw.decode().splitlines() if line.strip()]


def _fit(x: np.ndarray, y: np.ndarray) -> tuple[float, float, float]:
    """Intercept, slope and R squared of y on x."""
    slope, intercept = np.polyfit(x, y, 1)
    residual = y - (intercept + slope * x)
    return float(intercept), float(slope), float(1 - residual.var() / y.var())


def model(record: Path, shares: Path, raw: float | None) -> dict[str, Any]:
    """The fits and the split of `record`'s wall time (see the module)."""
    from pong_mp.rundir import metrics_file, read_metrics  # a fork's packed lines too

    metrics = read_metrics(metrics_file(record))
    work = _shares(shares)[: len(metrics)]
    metrics = metrics[: len(work)]
    for row, update in zip(metrics, work, strict=True):
        if row["steps"] != sum(update["play"]):
            raise SystemExit(f"update {row['batch']}: the shares are not of this run's episodes")
    workers = metrics[0]["workers"]
    if any(len(update["play"]) > workers for update in work):
        raise SystemExit("the model takes one episode a worker at most")
    longest = np.array([max(u["play"]) for u in work], float)
    mean = np.array([np.mean(u["play"]) for u in work], float)
    round_max = np.array([sum(max(r) for r in u["rounds"]) for u in work], float)
    round_mean = np.array([sum(np.mean(r) for r in u["rounds"]) for u in work], float)
    play = np.array([m["play_seconds"] for m in metrics])
    learn = np.array([m["seconds"] for m in metrics]) - play
    a, b, r2_play = _fit(longest, play)
    c, d, r2_learn = _fit(round_max, learn)
    total = float(play.sum() + learn.sum())
    equal = float((a + b * mean).sum() + (c + d * round_mean).sum())
    steps = sum(m["steps"] for m in metrics)
    split = {
        "play, fixed per update": a * len(metrics) / total,
        "play, the mean episode": float((b * mean).sum()) / total,
        "play, waiting for the longest": float((b * (longest - mean)).sum()) / total,
        "rounds, the mean share": float((d * round_mean).sum()) / total,
        "rounds, waiting for the largest share": float((d * (round_max - round_mean)).sum())
        / total,
        "rounds, fixed per update (coordinator, pipes)": c * len(metrics) / total,
    }
    # Of the rounds' fixed part, the coordinator's sums and steps (its own clock).
    coordinator = sum(m["update_seconds"] for m in metrics) / total
    work_alone = float((b * mean).sum() + (d * round_mean).sum())
    out: dict[str, Any] = {
        "record": str(record),
        "updates": len(metrics),
        "workers": workers,
        "fit_play": {"seconds": a, "us_per_step_of_longest": 1e6 * b, "r2": r2_play},
        "fit_rounds": {"seconds": c, "us_per_step_of_largest_share": 1e6 * d, "r2": r2_learn},
        "seconds": total,
        "longest_over_mean": float(longest.sum() / mean.sum()),
        "shares_of_wall_time": {k: round(v, 3) for k, v in split.items()},
        "coordinator_share_of_wall_time": round(coordinator, 3),
        "steps_per_sec": steps / total,
        "steps_per_sec_equal_work": steps / equal,
        "steps_per_sec_work_alone": steps / work_alone,
    }
    if raw:
        out["raw"] = raw
        for name in ("", "_equal_work", "_work_alone"):
            out["ratio" + name] = out["steps_per_sec" + name] / raw
    return out


def main() -> None:
    """Print the model of one record as JSON."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("record", type=Path)
    parser.add_argument("shares", type=Path)
    parser.add_argument("--raw", type=float, help="the raw emulator's steps/s, as many processes")
    args = parser.parse_args()
    print(json.dumps(model(args.record, args.shares, args.raw), indent=2))


if __name__ == "__main__":
    main()
