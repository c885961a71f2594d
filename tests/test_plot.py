"""`pong-mp plot`: a PNG of the learning curve and the speed, even of a running run."""

from __future__ import annotations

import json
from pathlib import Path

import imageio.v2 as imageio
import pytest

from pong_mp.tools.plot import (
    THRESHOLDS,
    PlotError,
    fork_origin,
    group_runs,
    milestones,
    paired_table,
    plot_run,
    range_table,
    read_metrics,
    settings_table,
    within_steps,
)
from tests.helpers import pong_mp, pong_mp_here


def _fake_run(
    run_dir: Path, updates: int = 30, partial: bool = False, per_point: float = 6, **config
) -> None:
    run_dir.mkdir()
    (run_dir / "config.json").write_text(
        json.dumps(
            {"env": "FakePong-v0", "batch_size": 10, "lr": 0.003, "hidden": 32, "seed": 7, **config}
        )
    )
    lines = [
        json.dumps(
            {
                "batch": b,
                "episodes": 10 * b,
                "steps": 3000,
                "reward_mean": -5 + b / 5,
                "running_reward": -5 + b / per_point,
                "seconds": 1.0,
                "steps_per_sec": 3000.0,
                "elapsed": float(b),
                "total_steps": 3000 * b,
            }
        )
        for b in range(1, updates + 1)
    ]
    text = "\n".join(lines) + "\n" + ('{"batch": 31, "epis' if partial else "")
    (run_dir / "metrics.jsonl").write_text(text)


def test_plot_of_a_run_that_is_still_writing(tmp_path: Path) -> None:
    _fake_run(tmp_path / "R", partial=True)
    assert len(read_metrics(tmp_path / "R")) == 30  # the half-written line is skipped
    done = pong_mp_here("plot", str(tmp_path / "R"), "-o", str(tmp_path / "curve.png"))
    assert done.returncode == 0, done.stderr
    image = imageio.imread(tmp_path / "curve.png")
    assert image.shape[0] >= 600 and image.shape[1] >= 800
    assert image[..., :3].std() > 10  # something is drawn


def test_plot_defaults_to_the_run_directory(tmp_path: Path) -> None:
    _fake_run(tmp_path / "R")
    out = plot_run(tmp_path / "R", tmp_path / "R" / "learning.png")
    assert out.stat().st_size > 10_000
    done = pong_mp("plot", str(tmp_path / "R"))  # in a process of its own, as users run it
    assert done.returncode == 0 and (tmp_path / "R" / "learning.png").exists()


def test_nothing_to_plot_is_one_line(tmp_path: Path) -> None:
    with pytest.raises(PlotError, match=r"no metrics\.jsonl"):
        read_metrics(tmp_path)
    done = pong_mp_here("plot", str(tmp_path / "missing"))
    assert done.returncode == 2 and done.stderr.count("\n") == 1
    assert "no metrics.jsonl" in done.stderr and "Traceback" not in done.stderr


def test_milestones_give_the_first_update_at_each_threshold(tmp_path: Path) -> None:
    _fake_run(tmp_path / "R")  # running reward -5 + b/6: reaches -5 at update 0, 0 at 30
    rows = {row["threshold"]: row for row in milestones(read_metrics(tmp_path / "R"))}
    assert rows[-5.0]["batch"] == 1 and rows[0.0]["batch"] == 30
    assert rows[0.0]["episodes"] == 300 and rows[0.0]["minutes"] == pytest.approx(0.5)
    done = pong_mp_here("plot", str(tmp_path / "R"), "--milestones")
    assert "| >= 0 | 30 | 300 |" in done.stdout and "| >= -5 | 1 | 10 |" in done.stdout


def test_runs_that_differ_only_by_seed_are_one_group(tmp_path: Path) -> None:
    _fake_run(tmp_path / "a0", seed=0, optimizer="adam", workers=2)
    _fake_run(
        tmp_path / "a1", seed=1, optimizer="adam", workers=1, backend="serial", tensorboard=False
    )
    _fake_run(tmp_path / "r0", seed=0, per_point=10)  # written before --optimizer: rmsprop
    runs = [(tmp_path / name, read_metrics(tmp_path / name)) for name in ("a0", "r0", "a1")]
    groups = group_runs(runs)
    assert [(g.label, [d.name for d, _ in g.runs]) for g in groups] == [
        ("optimizer adam", ["a0", "a1"]),
        ("optimizer rmsprop", ["r0"]),
    ]
    out = tmp_path / "compare.png"
    done = pong_mp_here("plot", *(str(d) for d, _ in runs), "-o", str(out), "--milestones")
    assert done.returncode == 0, done.stderr
    image = imageio.imread(out)
    assert image.shape[0] >= 700 and image[..., :3].std() > 10
    # One table per run, under its directory, then one per setting; r0 rises more slowly.
    assert done.stdout.count("| running reward |") == 4
    assert "| running reward | optimizer adam | optimizer rmsprop |" in done.stdout
    table_r0 = done.stdout.split(f"{tmp_path / 'r0'}:")[1].split("\n\n")[0]
    assert "| >= -5 | 1 | 10 | 3,000 |" in table_r0 and "| >= 0 | not yet" in table_r0


def test_forks_group_by_their_options_not_by_where_they_started(tmp_path: Path) -> None:
    _fake_run(tmp_path / "A", seed=0)  # a run from scratch
    _fake_run(tmp_path / "A-on", seed=0, fork_from="A")  # a fork of it with no new option
    _fake_run(tmp_path / "A-lr", seed=0, fork_from="A", lr=0.001)
    _fake_run(tmp_path / "B-lr", seed=1, fork_from="B", lr=0.001)  # another seed's fork
    runs = [(tmp_path / n, read_metrics(tmp_path / n)) for n in ("A", "A-on", "A-lr", "B-lr")]
    assert [(g.label, [d.name for d, _ in g.runs]) for g in group_runs(runs)] == [
        ("lr 0.003", ["A", "A-on"]),
        ("lr 0.001", ["A-lr", "B-lr"]),
    ]


def test_milestones_count_env_steps(tmp_path: Path) -> None:
    _fake_run(tmp_path / "R")
    rows = {row["threshold"]: row for row in milestones(read_metrics(tmp_path / "R"))}
    assert rows[0.0]["steps"] == 90_000 and rows[18.0]["batch"] is None


def test_bad_plot_input_is_one_line_and_writes_nothing(tmp_path: Path) -> None:
    _fake_run(tmp_path / "R")
    done = pong_mp_here("plot", str(tmp_path / "R"), "-o", str(tmp_path / "out.txt"))
    assert done.returncode == 2 and "name a .png file" in done.stderr
    assert done.stderr.count("\n") == 1 and not (tmp_path / "out.txt").exists()
    metrics = tmp_path / "R" / "metrics.jsonl"
    lines = metrics.read_text().splitlines()
    metrics.write_text("\n".join([lines[0], '{"batch": 2}', *lines[2:]]) + "\n")
    done = pong_mp_here("plot", str(tmp_path / "R"))
    assert done.returncode == 2 and done.stderr.count("\n") == 1
    assert "line 2: damaged metrics record (episodes must be a number" in done.stderr
    assert not (tmp_path / "R" / "learning.png").exists()


def test_a_null_running_reward_plots_as_a_gap(tmp_path: Path) -> None:
    _fake_run(tmp_path / "R")
    metrics = tmp_path / "R" / "metrics.jsonl"
    records = [json.loads(line) for line in metrics.read_text().splitlines()]
    records[0]["running_reward"] = None
    metrics.write_text("".join(json.dumps(r) + "\n" for r in records))
    done = pong_mp_here("plot", str(tmp_path / "R"), "--milestones")
    assert done.returncode == 0, done.stderr
    assert "| >= -5 | 2 | 20 |" in done.stdout  # update 1 has no running reward
    assert done.stderr == (
        f"pong-mp: note: {tmp_path / 'R'}: 1 update with a null running reward (no episode "
        "finished yet), drawn as a gap\n"
    )


def test_the_settings_table_averages_seeds_and_counts_those_that_reached(tmp_path: Path) -> None:
    _fake_run(tmp_path / "a0", seed=0, optimizer="adam")  # 0 reached at update 30
    _fake_run(tmp_path / "a1", seed=1, optimizer="adam", per_point=3)  # 0 reached at 15
    _fake_run(tmp_path / "r0", seed=0, per_point=10)  # never reaches 0
    runs = [(tmp_path / n, read_metrics(tmp_path / n)) for n in ("a0", "a1", "r0")]
    table = settings_table(runs)
    row = next(line for line in table.splitlines() if line.startswith("| >= 0 |"))
    # 30 and 15 updates of 3,000 steps: 0.09 and 0.045 M steps.
    assert row == "| >= 0 | 0.07 (0.04-0.09), 2/2 | not reached (0/1) |"


def test_rate_converts_env_steps_to_wall_time(tmp_path: Path) -> None:
    _fake_run(tmp_path / "a0", seed=0, optimizer="adam")  # 0 at update 30: 90,000 steps
    _fake_run(tmp_path / "a1", seed=1, optimizer="adam", per_point=3)  # 0 at 15: 45,000
    _fake_run(tmp_path / "r0", seed=0, per_point=10)
    done = pong_mp_here(
        "plot", *(str(tmp_path / n) for n in ("a0", "a1", "r0")), "-o", str(tmp_path / "c.png"),
        "--milestones", "--rate", "500",
    )
    assert done.returncode == 0, done.stderr
    # 90,000 steps at 500 steps/s: 3.0 min; the seeds' mean, 67,500 steps: 2.2 min (2.25).
    table_a0 = done.stdout.split(f"{tmp_path / 'a0'}:")[1].split("\n\n")[0]
    assert "| >= 0 | 30 | 300 | 90,000 | 0.5 min | 3.0 min |" in table_a0
    assert "| >= 18 | not yet | | | | |" in table_a0
    assert "| >= 0 | 0.07 (0.04-0.09), 2/2, 2.2 min | not reached (0/1) |" in done.stdout
    for rate in ("0", "1e-300", "1e308"):  # the last two printed 300-digit minutes
        bad = pong_mp_here("plot", str(tmp_path / "a0"), "--rate", rate)
        assert bad.returncode == 2 and bad.stderr.count("\n") == 1, bad.stderr


def test_a_run_named_twice_is_refused(tmp_path: Path) -> None:
    _fake_run(tmp_path / "a0", seed=0)
    (tmp_path / "same").symlink_to(tmp_path / "a0")
    for again in ("a0", "a0/", "same"):
        done = pong_mp_here("plot", str(tmp_path / "a0"), str(tmp_path / again))
        assert done.returncode == 2, done.stderr
        assert done.stderr == (
            f"pong-mp: error: {tmp_path / 'a0'} and {tmp_path / again.rstrip('/')} are the "
            "same run: name each once\n"
        )
    assert not (tmp_path / "compare.png").exists()


def test_a_plot_written_through_a_symlink_keeps_the_link(tmp_path: Path) -> None:
    _fake_run(tmp_path / "a0", seed=0)
    link = tmp_path / "latest.png"
    link.symlink_to(tmp_path / "a0.png")
    done = pong_mp_here("plot", str(tmp_path / "a0"), "-o", str(link))
    assert done.returncode == 0, done.stderr
    assert link.is_symlink() and (tmp_path / "a0.png").read_bytes()[:4] == b"\x89PNG"


def test_a_step_range_draws_only_its_updates(tmp_path: Path) -> None:
    _fake_run(tmp_path / "R")  # 3,000 steps an update
    records = read_metrics(tmp_path / "R")
    part = within_steps(records, 30_000, 45_000, tmp_path / "R")
    assert [r["batch"] for r in part] == [10, 11, 12, 13, 14, 15]
    assert [r["batch"] for r in within_steps(records, None, 6_000, tmp_path / "R")] == [1, 2]
    for r in records:  # a file written before total_steps existed: counted from its start
        del r["total_steps"]
    assert [r["total_steps"] for r in within_steps(records, 87_000, None, tmp_path)] == [
        87_000,
        90_000,
    ]
    with pytest.raises(PlotError, match="no update recorded from 91,000 to the end"):
        within_steps(records, 91_000, None, tmp_path)


def test_after_update_draws_the_updates_past_a_fork(tmp_path: Path) -> None:
    _fake_run(tmp_path / "R")  # updates 1-30, 3,000 steps each
    records = read_metrics(tmp_path / "R")
    assert [r["batch"] for r in within_steps(records, None, None, tmp_path, 27)] == [28, 29, 30]
    # With a step range too, an update must pass both.
    assert [r["batch"] for r in within_steps(records, None, 84_000, tmp_path, 26)] == [27, 28]
    with pytest.raises(PlotError, match="no update recorded from 0 to the end env steps after "
                       "update 30"):
        within_steps(records, None, None, tmp_path, 30)
    out = tmp_path / "fork.png"
    done = pong_mp_here("plot", str(tmp_path / "R"), "--after-update", "20", "-o", str(out),
                   "--milestones")
    assert done.returncode == 0, done.stderr
    assert f"| {tmp_path / 'R'} | 21-30 (10) | 30,000 |" in done.stdout
    out.unlink()
    late = pong_mp_here("plot", str(tmp_path / "R"), "--after-update", "30", "-o", str(out))
    assert late.returncode == 2 and late.stderr.count("\n") == 1, late.stderr
    assert "after update 30" in late.stderr and not out.exists()


def test_the_range_table_gives_the_drawn_updates_mean_reward(tmp_path: Path) -> None:
    _fake_run(tmp_path / "R")  # reward_mean -5 + b / 5, 3,000 steps an update
    part = within_steps(read_metrics(tmp_path / "R"), 30_000, 45_000, tmp_path / "R")
    table = range_table([(tmp_path / "R", part)]).splitlines()
    assert len(table) == 4
    # Updates 10-15: rewards -3.0 ... -2.0, mean -2.5; halves 10-12 and 13-15; 18,000 steps;
    # 0.2 points an update of 3,000 steps climbs 66.67 points per million steps.
    assert table[3] == (
        f"| {tmp_path / 'R'} | 10-15 (6) | 18,000 | -2.50 | -2.80 | -2.20 | +66.67 | -2.50 |"
    )
    single = range_table([(tmp_path / "R", part[:1])]).splitlines()
    assert single[3] == f"| {tmp_path / 'R'} | 10-10 (1) | 3,000 | -3.00 |  | -3.00 |  | -3.33 |"


def _shift_rewards(run_dir: Path, after: int, even: float, odd: float) -> None:
    # A fork's own batches: its records up to `after` are the control's, later ones differ.
    records = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    for r in records:
        if r["batch"] > after:
            r["reward_mean"] += even if r["batch"] % 2 == 0 else odd
    (run_dir / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))


def test_the_paired_table_compares_forks_update_by_update(tmp_path: Path) -> None:
    _fake_run(tmp_path / "C")  # reward_mean -5 + b / 5 for updates 1-30
    _fake_run(tmp_path / "F", updates=26)
    _shift_rewards(tmp_path / "F", 4, 0.5, -0.1)  # 0.5 above C on even updates, 0.1 below
    _fake_run(tmp_path / "other", per_point=3)  # another running reward at update 4
    runs = [
        (tmp_path / n, within_steps(read_metrics(tmp_path / n), None, None, tmp_path, 4))
        for n in ("C", "F", "other")
    ]
    origins = [fork_origin(read_metrics(tmp_path / n), 4) for n in ("C", "F", "other")]
    assert origins[0] == origins[1] != origins[2]
    table = paired_table(runs, origins).splitlines()
    # Updates 5-26 in common (22): 11 even, 11 odd, mean +0.2; blocks 5-14 and 15-24 both
    # average +0.2, so the standard error is 0.
    assert table[3] == f"| {tmp_path / 'F'} | 5-26 (22) | +0.20 | 0.00 |"
    assert table[4] == f"| {tmp_path / 'other'} | not a fork of the same update: not paired |  |  |"
    one_block = paired_table([runs[0], (runs[1][0], runs[1][1][:12])], origins[:2])
    assert one_block.splitlines()[3] == f"| {tmp_path / 'F'} | 5-16 (12) | +0.20 |  |"
    assert fork_origin(read_metrics(tmp_path / "F"), 27) is None
    done = pong_mp_here(
        "plot", str(tmp_path / "C"), str(tmp_path / "F"), "--after-update", "4", "--milestones",
        "-o", str(tmp_path / "forks.png"),
    )
    assert done.returncode == 0, done.stderr
    assert f"| {tmp_path / 'F'} | 5-26 (22) | +0.20 | 0.00 |" in done.stdout


def test_plot_of_a_step_range_and_its_bad_input(tmp_path: Path) -> None:
    _fake_run(tmp_path / "A")
    _fake_run(tmp_path / "B", updates=10, seed=8)
    out = tmp_path / "late.png"
    done = pong_mp_here(
        "plot",
        str(tmp_path / "A"),
        str(tmp_path / "B"),
        "--min-steps",
        "15e3",
        "--max-steps",
        "60000",
        "-o",
        str(out),
        "--milestones",
    )
    assert done.returncode == 0, done.stderr
    assert imageio.imread(out).shape[2] in (3, 4)
    # Milestones cover whole runs: before the range and after it.
    assert "| >= -5 | 1 | 10 | 3,000 |" in done.stdout
    assert "| >= 0 | 30 | 300 | 90,000 |" in done.stdout
    # The drawn updates' own table: A's 5-20, B's 5-10.
    assert f"| {tmp_path / 'A'} | 5-20 (16) |" in done.stdout
    assert f"| {tmp_path / 'B'} | 5-10 (6) |" in done.stdout
    assert "update by update" not in done.stdout  # a step range does not say they are forks
    whole = pong_mp_here("plot", str(tmp_path / "A"), "-o", str(out), "--milestones")
    assert whole.returncode == 0 and "the drawn updates" not in whole.stdout
    for args, message in [
        (("--min-steps", "5e4", "--max-steps", "5e4"), "must be below --max-steps"),
        (("--min-steps", "4e4"), "B: no update recorded from 40,000 to the end env steps"),
    ]:
        out.unlink(missing_ok=True)
        done = pong_mp_here("plot", str(tmp_path / "A"), str(tmp_path / "B"), *args, "-o", str(out))
        assert done.returncode == 2 and done.stderr.count("\n") == 1, done.stderr
        assert message in done.stderr and not out.exists()


def test_a_plot_that_fails_while_writing_leaves_the_old_file(tmp_path: Path, monkeypatch) -> None:
    import errno

    import matplotlib.figure

    from pong_mp.files import FileError

    def half_then_full(self, fh, **kwargs) -> None:
        fh.write(b"\x89PNG half")
        raise OSError(errno.ENOSPC, "No space left on device")

    _fake_run(tmp_path / "R")
    out = tmp_path / "R" / "learning.png"
    out.write_bytes(b"the old plot")
    monkeypatch.setattr(matplotlib.figure.Figure, "savefig", half_then_full)
    with pytest.raises(FileError, match="No space left on device"):
        plot_run(tmp_path / "R", out)
    assert out.read_bytes() == b"the old plot"
    assert sorted(p.name for p in out.parent.iterdir()) == [
        "config.json", "learning.png", "metrics.jsonl"
    ]


def test_a_drop_stored_as_a_number_or_as_a_list_is_one_setting(tmp_path: Path) -> None:
    _fake_run(tmp_path / "old", seed=0, entropy_drop_at=4e6, entropy_drop_to=-0.03)
    _fake_run(tmp_path / "new", seed=1, entropy_drop_at=[4e6], entropy_drop_to=[-0.03])
    _fake_run(tmp_path / "two", seed=0, entropy_drop_at=[4e6, 6.3e6], entropy_drop_to=[-0.03, 0])
    runs = [(tmp_path / n, read_metrics(tmp_path / n)) for n in ("old", "new", "two")]
    assert [(g.label, [d.name for d, _ in g.runs]) for g in group_runs(runs)] == [
        ("entropy_drop_at 4e6, entropy_drop_to -0.03", ["old", "new"]),
        ("entropy_drop_at 4e6,6.3e6, entropy_drop_to -0.03,0", ["two"]),
    ]


def test_a_drop_without_points_is_no_setting_whatever_its_values(tmp_path: Path) -> None:
    # Runs stored before the drop's default changed keep its old values, unused.
    _fake_run(tmp_path / "old", seed=0, entropy_drop_at=[], entropy_drop_to=[-0.1])
    _fake_run(tmp_path / "new", seed=1, entropy_drop_at=[], entropy_drop_to=[-0.03, 0])
    _fake_run(tmp_path / "drop", seed=0, entropy_drop_at=[4e6], entropy_drop_to=[-0.1])
    runs = [(tmp_path / n, read_metrics(tmp_path / n)) for n in ("old", "new", "drop")]
    assert [[d.name for d, _ in g.runs] for g in group_runs(runs)] == [["old", "new"], ["drop"]]


def test_the_milestones_help_names_every_threshold_it_marks() -> None:
    shown = " ".join(pong_mp_here("plot", "--help").stdout.split())
    for threshold in THRESHOLDS:
        assert (f"{threshold:+g}" if threshold else " 0,") in shown, threshold


def test_numbers_at_the_float_limit_are_one_line_not_matplotlibs_traceback(
    tmp_path: Path,
) -> None:
    # A hand-edited metrics file (or an env whose rewards are huge): matplotlib's axis
    # arithmetic overflows as it draws.
    _fake_run(tmp_path / "R", updates=3)
    metrics = tmp_path / "R" / "metrics.jsonl"
    records = [json.loads(line) for line in metrics.read_text().splitlines()]
    for record, value in zip(records, (-1e308, 1e308, -1e308), strict=True):
        record["running_reward"] = value
    metrics.write_text("".join(json.dumps(r) + "\n" for r in records))
    done = pong_mp_here("plot", str(tmp_path / "R"), "-o", str(tmp_path / "p.png"))
    assert done.returncode == 2, done.stderr
    assert done.stderr.startswith("pong-mp: error: cannot draw these metrics: numbers too large")
    assert len(done.stderr.splitlines()) == 1, done.stderr
    assert not (tmp_path / "p.png").exists()
