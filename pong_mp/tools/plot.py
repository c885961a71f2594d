"""`pong-mp plot`: the learning curve and the speed of a run, as a PNG."""

from __future__ import annotations

import dataclasses
import json
import warnings
from dataclasses import MISSING, dataclass
from pathlib import Path
from typing import Any

import numpy as np

from pong_mp import config as cfg
from pong_mp import rundir
from pong_mp.config import REMOVED, TrainConfig, shown
from pong_mp.files import FileError, check_writable, read_file, write_atomic
from pong_mp.rundir import METRICS_FILE
from pong_mp.tools import markdown_table


class PlotError(ValueError):
    """The run directory has nothing to plot."""


def read_metrics(run_dir: Path) -> list[dict[str, Any]]:
    """The run's validated metrics records; PlotError if there are none or they are damaged."""
    path = rundir.metrics_file(run_dir)
    if not path.is_file():
        raise PlotError(f"{run_dir}: no {METRICS_FILE} (is it a pong-mp run directory?)")
    try:
        records = rundir.read_metrics(path)
    except (rundir.RunDirError, FileError) as exc:
        raise PlotError(str(exc)) from None
    if not records:
        raise PlotError(f"{path}: no update recorded yet")
    return records


def check_output(out: Path) -> None:
    """PlotError unless `out` is a .png file that can be written (checked before drawing)."""
    out = Path(out)
    if out.suffix.lower() != ".png":
        raise PlotError(f"{out}: the plot is written as PNG; name a .png file")
    try:
        check_writable(out, "a .png file")
    except FileError as exc:
        raise PlotError(str(exc)) from None


def _running(records: list[dict[str, Any]]) -> np.ndarray:
    # null (no episode yet) is drawn as a gap: as a float, None is nan
    return np.array([r["running_reward"] for r in records], dtype=float)


def read_config(run_dir: Path) -> dict[str, Any]:
    """The run's config.json as a dict; empty if missing or unreadable (the curve still shows)."""
    try:
        config = cfg.parse_json(read_file(Path(run_dir) / "config.json").decode("utf-8"))
    except (OSError, ValueError):
        return {}
    return config if isinstance(config, dict) else {}


def _title(run_dir: Path, records: list[dict[str, Any]]) -> str:
    config = read_config(run_dir)
    parts = [
        config.get("env", "?"),
        config.get("optimizer", "rmsprop"),
        f"batch {config.get('batch_size', '?')}",
        f"lr {config.get('lr', '?')}",
        f"H {config.get('hidden', '?')}",
        f"seed {config.get('seed', '?')}",
    ]
    last = records[-1]
    return (
        f"{Path(run_dir).name}: "
        + ", ".join(str(p) for p in parts)
        + f"\n{last['batch']} updates, {last['episodes']:,} episodes, "
        + f"{last.get('total_steps', 0):,} env steps"
    )


def _pyplot() -> Any:
    import matplotlib

    matplotlib.use("Agg")  # no display needed
    import matplotlib.pyplot as plt

    return plt


def _save(fig: Any, out: Path) -> Path:
    # Atomically (never half a file), returning `out`; the figure is closed whatever happens.
    # Numbers near the float's limits (a metrics file edited by hand, an env's rewards) overflow
    # matplotlib's axis arithmetic as it draws: a PlotError, not its warnings and traceback.
    try:
        with warnings.catch_warnings(), np.errstate(all="ignore"):
            warnings.simplefilter("ignore", RuntimeWarning)
            write_atomic(out, lambda fh: fig.savefig(fh, dpi=100, format="png"))
        return out
    except (ValueError, OverflowError) as exc:
        raise PlotError(
            f"cannot draw these metrics: numbers too large for a plot ({exc})"
        ) from None
    finally:
        _pyplot().close(fig)


def _steps(records: list[dict[str, Any]]) -> np.ndarray:
    # total_steps is in every record written by pong-mp; older files had only per-update steps.
    if all("total_steps" in r for r in records):
        return np.array([r["total_steps"] for r in records], dtype=float)
    return np.cumsum([r.get("steps", 0) for r in records], dtype=float)


def within_steps(
    records: list[dict[str, Any]],
    low: float | None,
    high: float | None,
    run_dir: Path,
    after_update: int | None = None,
) -> list[dict[str, Any]]:
    """The records with env steps in [low, high] (either end open) and after `after_update`,
    each with its `total_steps`; PlotError if none are."""
    steps = _steps(records)
    keep = np.ones(len(records), dtype=bool)
    if low is not None:
        keep &= steps >= low
    if high is not None:
        keep &= steps <= high
    if after_update is not None:
        keep &= np.array([r["batch"] > after_update for r in records], dtype=bool)
    if not keep.any():
        span = f"{low or 0:,.0f} to {'the end' if high is None else f'{high:,.0f}'} env steps"
        if after_update is not None:
            span += f" after update {after_update}"
        raise PlotError(f"{run_dir}: no update recorded from {span}")
    kept = zip(records, steps, keep, strict=True)
    return [{**r, "total_steps": float(s)} for r, s, k in kept if k]


def _minutes(records: list[dict[str, Any]]) -> np.ndarray:
    return np.array([r.get("elapsed", np.nan) for r in records], dtype=float) / 60


def plot_run(run_dir: Path, out: Path, records: list[dict[str, Any]] | None = None) -> Path:
    """Write a PNG of one run's reward by env steps and steps/s by wall time; returns `out`.
    `records`: the run's metrics (read here if not given)."""
    plt = _pyplot()
    if records is None:
        records = read_metrics(run_dir)
    steps = _steps(records) / 1e6
    fig, (top, bottom) = plt.subplots(2, 1, figsize=(10, 7.5), constrained_layout=True)
    rewards = [r["reward_mean"] for r in records]
    top.plot(
        steps, rewards, ".", ms=3, alpha=0.4, color="tab:gray", label="mean reward of each update"
    )
    top.plot(steps, _running(records), color="tab:blue", lw=2, label="running reward")
    top.set(xlabel="env steps (millions)", ylabel="reward per game")
    top.grid(alpha=0.3)
    top.legend(loc="upper left")
    bottom.plot(_minutes(records), [r["steps_per_sec"] for r in records], color="tab:green")
    bottom.set(xlabel="wall time in updates (minutes)", ylabel="env steps per second")
    bottom.set_ylim(bottom=0)
    bottom.grid(alpha=0.3)
    fig.suptitle(_title(Path(run_dir), records))
    return _save(fig, Path(out))


NOT_ALGORITHM = frozenset(
    {f.name for f in dataclasses.fields(TrainConfig) if f.name not in cfg.ALGORITHM_FIELDS}
    | {"seed", "fork_from", *cfg.RECORD_KEYS}
)
"""Config fields that do not make runs different settings (a fork that changes nothing is its
run's setting): runs differing only in these are seeds of one, drawn as one mean curve."""


@dataclass
class RunGroup:
    """Runs of one setting (the same config but for seeds and how they were run)."""

    label: str  # what sets it apart from the others, e.g. "optimizer adam"
    runs: list[tuple[Path, list[dict[str, Any]]]]


def group_runs(runs: list[tuple[Path, list[dict[str, Any]]]]) -> list[RunGroup]:
    """Runs grouped by setting, in order, each labelled by the config values that differ
    between the groups (or its directory's name)."""
    settings: dict[str, list[tuple[Path, list[dict[str, Any]]]]] = {}
    configs: dict[str, dict[str, Any]] = {}
    defaults = {
        f.name: f.default for f in dataclasses.fields(TrainConfig) if f.default is not MISSING
    }
    for run_dir, records in runs:
        stored = read_config(run_dir)
        # A config written before an option existed ran as older runs did; an option pong-mp
        # no longer has sets a run apart only at another value than the one it now has.
        stored = {**defaults, **cfg.OLDER_RUN_DEFAULTS, **stored} if stored else {}
        stored = {k: v for k, v in stored.items() if k not in REMOVED} | cfg.removed_values(stored)
        stored.update(cfg.drop_options(stored))  # a drop stored as one number or as a list
        for name in cfg.idle_drop_values(stored):
            stored.pop(name, None)  # values without points decide nothing
        config = {k: v for k, v in stored.items() if k not in NOT_ALGORITHM}
        key = json.dumps(config, sort_keys=True, default=str) if config else str(run_dir)
        settings.setdefault(key, []).append((run_dir, records))
        configs[key] = config
    names = sorted({name for config in configs.values() for name in config})
    differing = [
        name
        for name in names
        if len({json.dumps(c.get(name), default=str) for c in configs.values()}) > 1
    ]
    groups = []
    for key, members in settings.items():
        config = configs[key]
        label = ", ".join(
            f"{name} {shown(v) if isinstance(v := config.get(name), tuple) else v}"
            for name in differing
        )
        groups.append(RunGroup(label or members[0][0].name, members))
    return groups


def _on_grid(
    curves: list[tuple[np.ndarray, np.ndarray]], points: int = 400
) -> tuple[np.ndarray, np.ndarray]:
    # Every curve on one grid up to where the shortest ends: a mean compares like with like.
    end = min(float(np.nanmax(x)) for x, _ in curves)
    start = max(float(np.nanmin(x)) for x, _ in curves)
    grid = np.linspace(start, end, points)
    return grid, np.array([np.interp(grid, x, y) for x, y in curves])


def plot_runs(runs: list[tuple[Path, list[dict[str, Any]]]], out: Path) -> Path:
    """Write a PNG comparing runs' running reward by env steps and by wall time: each seed a
    thin line, a setting's seeds one mean curve with its min-max spread where they all are."""
    plt = _pyplot()
    groups = group_runs(runs)
    # One legend for both panels, below them: a long one inside an axes covers the curves.
    height = 8 + 0.22 * len(groups)
    fig, axes = plt.subplots(2, 1, figsize=(10, height), layout="constrained")
    axis_of = (
        (axes[0], lambda recs: _steps(recs) / 1e6, "env steps (millions)"),
        (axes[1], _minutes, "wall time in updates (minutes)"),
    )
    for number, group in enumerate(groups):
        color = f"C{number % 10}"
        for ax, x_of, _ in axis_of:
            curves = [(x_of(recs), _running(recs)) for _, recs in group.runs]
            curves = [
                (x[ok], y[ok])
                for x, y in curves
                for ok in [np.isfinite(x) & np.isfinite(y)]
                if ok.sum() > 1
            ]
            if not curves:
                continue
            if len(curves) == 1:
                ax.plot(*curves[0], color=color, lw=2, label=f"{group.label} (1 run)")
                continue
            for x, y in curves:  # every seed in full, thin; the mean where they all are
                ax.plot(x, y, color=color, lw=0.8, alpha=0.45)
            grid, ys = _on_grid(curves)
            ax.fill_between(grid, ys.min(axis=0), ys.max(axis=0), color=color, alpha=0.2)
            label = f"{group.label} (mean of {len(curves)} seeds, min-max shaded)"
            ax.plot(grid, ys.mean(axis=0), color=color, lw=2, label=label)
    entries = {}
    for ax, _, xlabel in axis_of:
        ax.set(xlabel=xlabel, ylabel="running reward")
        ax.grid(alpha=0.3)
        for handle, label in zip(*ax.get_legend_handles_labels(), strict=True):
            entries.setdefault(label, handle)
    if entries:
        fig.legend(
            list(entries.values()), list(entries), loc="outside lower center", fontsize="small"
        )
    fig.suptitle(f"{len(runs)} runs in {len(groups)} setting{'s' * (len(groups) != 1)}")
    return _save(fig, Path(out))


THRESHOLDS = (-20.0, -15.0, -10.0, -5.0, 0.0, 5.0, 10.0, 15.0, 18.0, 20.0)


def milestones(
    records: list[dict[str, Any]], thresholds: tuple[float, ...] = THRESHOLDS
) -> list[dict[str, Any]]:
    """For each threshold, the first update whose running reward reached it (or None)."""
    steps, running = _steps(records), _running(records)
    rows = []
    for threshold in thresholds:
        reached = np.flatnonzero(running >= threshold)  # never where it is null (nan)
        at = int(reached[0]) if len(reached) else None
        hit = records[at] if at is not None else {}
        rows.append(
            {
                "threshold": threshold,
                "batch": hit.get("batch"),
                "episodes": hit.get("episodes"),
                "steps": None if at is None else int(steps[at]),
                "minutes": None if at is None else hit.get("elapsed", float("nan")) / 60,
            }
        )
    return rows


def minutes_at(steps: float, rate: float) -> str:
    """Env steps as wall time at a training rate in steps/s, e.g. "3.3 min"."""
    return f"{steps / rate / 60:.1f} min"


def milestones_table(
    records: list[dict[str, Any]], title: str | None = None, rate: float | None = None
) -> str:
    """The milestones as a Markdown table, under `title`; with `rate` (steps/s), a column of
    the wall time their env steps take at it."""
    head = "running reward | update | episodes | env steps | wall time"
    head += f" | at {rate:,.0f} steps/s" if rate else ""
    lines = []
    for row in milestones(records):
        if row["batch"] is None:
            lines.append(f">= {row['threshold']:g} | not yet | | |" + " |" * bool(rate))
        else:
            at = f" | {minutes_at(row['steps'], rate)}" if rate else ""
            lines.append(
                f">= {row['threshold']:g} | {row['batch']} | {row['episodes']:,} | "
                f"{row['steps']:,} | {row['minutes']:.1f} min" + at
            )
    return markdown_table(head, lines, [f"{title}:"] if title else [])


def range_table(runs: list[tuple[Path, list[dict[str, Any]]]]) -> str:
    """A Markdown table of what each run's drawn updates scored: mean reward per update, over
    each half, its least-squares climb per M steps, and the last running reward (which
    carries the run's past: the mean is the figure to compare forks by)."""
    lines = []
    for run_dir, records in runs:
        rewards = np.array([r["reward_mean"] for r in records], dtype=float)
        parts = np.split(rewards, [len(rewards) // 2])
        halves = [f"{part.mean():+.2f}" if len(part) else "" for part in parts]
        played = records[-1]["total_steps"] - records[0]["total_steps"] + records[0]["steps"]
        steps = np.array([r["total_steps"] for r in records], dtype=float) / 1e6
        climb = f"{np.polyfit(steps, rewards, 1)[0]:+.2f}" if np.ptp(steps) > 0 else ""
        last = records[-1]["running_reward"]
        lines.append(
            f"{run_dir} | {records[0]['batch']}-{records[-1]['batch']} ({len(records)}) | "
            f"{played:,.0f} | {rewards.mean():+.2f} | {halves[0]} | {halves[1]} | {climb} | "
            + ("" if last is None else f"{last:+.2f}")
        )
    head = (
        "run | updates | env steps | mean reward per update | first half | second half | "
        "climb per M steps | running reward at the last"
    )
    title = "the drawn updates: mean reward per update (of each batch's mean)"
    return markdown_table(head, lines, [title])


# Two forks' batches differ alike for a while: the standard error comes from blocks' means.
PAIR_BLOCK = 10

# What two runs' records of one update share if they are forks of its checkpoint.
FORK_FIELDS = ("batch", "episodes", "total_steps", "reward_mean", "running_reward")


def fork_origin(records: list[dict[str, Any]], update: int) -> dict[str, Any] | None:
    """The fields of FORK_FIELDS in the run's record of `update`; None if it has none."""
    found = next((r for r in records if r["batch"] == update), None)
    return None if found is None else {name: found.get(name) for name in FORK_FIELDS}


def paired_table(
    runs: list[tuple[Path, list[dict[str, Any]]]], origins: list[dict[str, Any] | None]
) -> str:
    """A Markdown table of each later run's mean difference from the first run's batches,
    update by update, with its standard error from blocks of PAIR_BLOCK updates; a run
    whose `fork_origin` is not the first's is not paired (forks of one checkpoint play the
    same seeds, so pairs are far less noisy than separate means)."""
    first_dir, first = runs[0]
    control = {r["batch"]: r["reward_mean"] for r in first}
    lines = []
    for (run_dir, records), origin in zip(runs[1:], origins[1:], strict=True):
        if origin is None or origin != origins[0]:
            lines.append(f"{run_dir} | not a fork of the same update: not paired |  | ")
            continue
        common = [r for r in records if r["batch"] in control]
        if not common:
            lines.append(f"{run_dir} | none |  | ")
            continue
        diffs = np.array([r["reward_mean"] - control[r["batch"]] for r in common], dtype=float)
        blocks = len(diffs) // PAIR_BLOCK
        error = ""
        if blocks >= 2:
            means = diffs[: blocks * PAIR_BLOCK].reshape(blocks, PAIR_BLOCK).mean(axis=1)
            error = f"{means.std(ddof=1) / np.sqrt(blocks):.2f}"
        lines.append(
            f"{run_dir} | {common[0]['batch']}-{common[-1]['batch']} ({len(common)}) | "
            f"{diffs.mean():+.2f} | {error}"
        )
    title = (
        f"against {first_dir}, update by update: mean difference of the batches' mean reward "
        f"(standard error from blocks of {PAIR_BLOCK} updates)"
    )
    head = "run | common updates | mean difference per update | standard error"
    return markdown_table(head, lines, [title])


def settings_table(runs: list[tuple[Path, list[dict[str, Any]]]], rate: float | None = None) -> str:
    """Env steps to each running reward per setting: the mean over the seeds that reached it,
    their range and count; with `rate` (steps/s), the mean's wall time at it."""
    groups = group_runs(runs)
    # The env steps each run of each group took to each threshold (None: not reached).
    taken = [[[row["steps"] for row in milestones(recs)] for _, recs in g.runs] for g in groups]
    lines = []
    for index, threshold in enumerate(THRESHOLDS):
        cells = []
        for group in taken:
            steps = [run[index] for run in group if run[index] is not None]
            seeds = len(group)
            if not steps:
                cells.append(f"not reached (0/{seeds})")
                continue
            millions = np.array(steps) / 1e6
            spread = f" ({millions.min():.2f}-{millions.max():.2f})" if len(steps) > 1 else ""
            at = f", {minutes_at(float(np.mean(steps)), rate)}" if rate else ""
            cells.append(f"{millions.mean():.2f}{spread}, {len(steps)}/{seeds}{at}")
        lines.append(f">= {threshold:g} | " + " | ".join(cells))
    title = (
        "env steps (millions) to each running reward, per setting: mean (min-max), seeds "
        "that reached it" + (f", minutes at {rate:,.0f} steps/s" if rate else "")
    )
    return markdown_table(["running reward", *(g.label for g in groups)], lines, [title])
