"""`pong-mp plot`: the learning curve and the speed of a run, as a PNG."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np


class PlotError(ValueError):
    """The run directory has nothing to plot."""


def read_metrics(run_dir: Path) -> list[dict[str, Any]]:
    """The run's metrics records; a line being written right now (or cut off) is skipped."""
    path = Path(run_dir) / "metrics.jsonl"
    if not path.is_file():
        raise PlotError(f"{run_dir}: no metrics.jsonl (is it a pong-mp run directory?)")
    records = []
    for line in path.read_text().splitlines():
        try:
            record = json.loads(line)
        except ValueError:
            continue
        if isinstance(record, dict) and "batch" in record:
            records.append(record)
    if not records:
        raise PlotError(f"{path}: no update recorded yet")
    return records


def _title(run_dir: Path, records: list[dict[str, Any]]) -> str:
    try:
        config = json.loads((Path(run_dir) / "config.json").read_text())
    except (OSError, ValueError):
        config = {}
    parts = [
        config.get("env", "?"),
        f"batch {config.get('batch_size', '?')}",
        f"lr {config.get('lr', '?')}",
        f"H {config.get('hidden', '?')}",
        f"seed {config.get('seed', '?')}",
    ]
    last = records[-1]
    return (
        f"{Path(run_dir).name}: "
        + ", ".join(str(p) for p in parts)
        + f"\n{last['batch']} updates, {last['episodes']:,} episodes"
    )


def plot_run(run_dir: Path, out: Path, records: list[dict[str, Any]] | None = None) -> Path:
    """Write a PNG of reward against episodes and of steps/s against time; returns `out`.

    `records` are the run's metrics as `read_metrics` gives them, read here if not given.
    """
    import matplotlib

    matplotlib.use("Agg")  # no display needed
    import matplotlib.pyplot as plt

    if records is None:
        records = read_metrics(run_dir)
    episodes = np.array([r["episodes"] for r in records])
    hours = np.array([r.get("elapsed", np.nan) for r in records]) / 3600
    fig, (top, bottom) = plt.subplots(2, 1, figsize=(10, 7.5), constrained_layout=True)
    top.plot(
        episodes,
        [r["reward_mean"] for r in records],
        ".",
        ms=3,
        alpha=0.4,
        color="tab:gray",
        label="mean reward of each update",
    )
    top.plot(
        episodes,
        [r["running_reward"] for r in records],
        color="tab:blue",
        lw=2,
        label="running reward",
    )
    top.set_xlabel("episodes")
    top.set_ylabel("reward per game")
    top.grid(alpha=0.3)
    top.legend(loc="upper left")
    bottom.plot(hours * 60, [r["steps_per_sec"] for r in records], color="tab:green")
    bottom.set_xlabel("wall time in updates (minutes)")
    bottom.set_ylabel("env steps per second")
    bottom.set_ylim(bottom=0)
    bottom.grid(alpha=0.3)
    fig.suptitle(_title(Path(run_dir), records))
    fig.savefig(out, dpi=100)
    plt.close(fig)
    return Path(out)


THRESHOLDS = (-20.0, -15.0, -10.0, -5.0, 0.0)


def milestones(
    records: list[dict[str, Any]], thresholds: tuple[float, ...] = THRESHOLDS
) -> list[dict[str, Any]]:
    """For each threshold, the first update whose running reward reached it (or None)."""
    rows = []
    for threshold in thresholds:
        hit = next((r for r in records if r["running_reward"] >= threshold), None)
        rows.append(
            {
                "threshold": threshold,
                "batch": hit and hit["batch"],
                "episodes": hit and hit["episodes"],
                "steps": hit and hit.get("total_steps"),
                "minutes": hit and hit.get("elapsed", float("nan")) / 60,
            }
        )
    return rows


def milestones_table(records: list[dict[str, Any]]) -> str:
    """The milestones as a Markdown table."""
    lines = [
        "| running reward | update | episodes | env steps | wall time |",
        "|---|---|---|---|---|",
    ]
    for row in milestones(records):
        if row["batch"] is None:
            lines.append(f"| >= {row['threshold']:g} | not yet | | | |")
        else:
            steps = "?" if row["steps"] is None else f"{row['steps']:,}"
            lines.append(
                f"| >= {row['threshold']:g} | {row['batch']} | {row['episodes']:,} | "
                f"{steps} | {row['minutes']:.1f} min |"
            )
    return "\n".join(lines)
