"""The run directory under misuse: one trainer at a time, full and read-only disks, litter
after kills, runs killed early, damaged or hand-edited files. Each case must give one line,
the documented exit code, no traceback, and lose nothing."""

from __future__ import annotations

import errno
import json
import lzma
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from pong_mp import checkpoint, files, rundir
from pong_mp.checkpoint import CheckpointError
from pong_mp.config import REMOVED, ConfigError, RemovedOptionError, without_removed
from pong_mp.files import MAX_READ_BYTES, FileError
from pong_mp.rundir import (
    LOCK_FILE,
    METRICS_FILE,
    PACKED_METRICS_FILE,
    MetricsLog,
    RunDirError,
    RunLock,
    keep_metrics_until,
    metrics_file,
    prepare_run,
    read_metrics,
    remove_stale_temps,
)
from pong_mp.state import TrainState, with_policy_lag
from tests.fault_envs import SLOW_PONG
from tests.helpers import fake_config, pong_mp, pong_mp_here, train

SMALL = "--env FakePong-v0 --env-arg points_to_win=2 --batch-size 2 --hidden 8 --workers 1"


def _train(run_dir: Path, *extra: str) -> subprocess.CompletedProcess:
    return pong_mp("train", *SMALL.split(), "--run-dir", str(run_dir), *extra)


def _refused(run_dir: Path, *extra: str) -> subprocess.CompletedProcess:
    # _train for input refused before any work starts: in this process (pong_mp_here).
    return pong_mp_here("train", *SMALL.split(), "--run-dir", str(run_dir), *extra)


def _one_line_error(done: subprocess.CompletedProcess, code: int, *words: str) -> None:
    assert done.returncode == code, (done.returncode, done.stderr)
    assert "Traceback" not in done.stderr + done.stdout
    errors = [line for line in done.stderr.splitlines() if line.startswith("pong-mp: error: ")]
    assert len(errors) == 1, done.stderr
    for word in words:
        assert word in errors[0], errors[0]


def _run_files(directory: Path) -> list[str]:
    # Everything but TensorBoard's event files (one per start of the trainer).
    return sorted(p.name for p in directory.iterdir() if "tfevents" not in p.name)


def _snapshot(directory: Path) -> dict[str, bytes]:
    # A link by where it leads: it may lead nowhere.
    return {
        p.name: os.readlink(p).encode() if p.is_symlink() else p.read_bytes()
        for p in sorted(directory.iterdir())
    }


# -- one trainer per run directory ------------------------------------------------------------


def _start_slow_run(run_dir: Path) -> subprocess.Popen:
    # SlowPong dawdles every step: the run is still going while the test pokes at it.
    return subprocess.Popen(
        [
            sys.executable, "-m", "pong_mp", "train", "--env", SLOW_PONG,
            "--env-arg", "delay=0.002", "--env-arg", "points_to_win=3", "--batch-size", "2",
            "--hidden", "8", "--workers", "1", "--checkpoint-every", "1", "--run-dir",
            str(run_dir),
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )


def _wait_for(path: Path, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while not path.exists():
        assert time.monotonic() < deadline, f"{path} never appeared"
        time.sleep(0.05)


def test_a_second_trainer_is_refused_and_a_killed_one_leaves_no_lock(
    tmp_path: Path, clean_system
) -> None:
    run_dir = tmp_path / "R"
    first = _start_slow_run(run_dir)
    try:
        _wait_for(run_dir / "checkpoint.npz")
        for extra in ([], ["--resume"]):
            done = _refused(run_dir, "--batches", "1", *extra)
            _one_line_error(done, 2, f"{run_dir} is in use by another trainer (pid {first.pid})")
        assert first.poll() is None  # the first trainer goes on
        before = len(read_metrics(run_dir / "metrics.jsonl"))
        deadline = time.monotonic() + 60
        while len(read_metrics(run_dir / "metrics.jsonl")) < before + 2:
            assert time.monotonic() < deadline
            time.sleep(0.05)
    finally:
        first.send_signal(signal.SIGKILL)
        first.wait()
    # The kernel dropped the dead trainer's lock: the run resumes.
    state, _ = checkpoint.load(run_dir / "checkpoint.npz")
    done = pong_mp(
        "train", "--run-dir", str(run_dir), "--resume", "--batches", str(state.batch + 1)
    )
    assert done.returncode == 0, done.stderr
    batches = [r["batch"] for r in read_metrics(run_dir / "metrics.jsonl")]
    assert batches == list(range(1, state.batch + 2))  # nothing lost, nothing twice
    assert not (run_dir / LOCK_FILE).exists()


def test_the_lock_is_exclusive_and_names_its_holder(tmp_path: Path) -> None:
    held = rf"in use by another trainer \(pid {os.getpid()}\)"
    with RunLock(tmp_path), pytest.raises(RunDirError, match=held):
        RunLock(tmp_path).acquire()
    with RunLock(tmp_path):  # released: free again
        pass
    assert list(tmp_path.iterdir()) == []


def test_a_failed_start_leaves_no_directory(tmp_path: Path) -> None:
    run_dir = tmp_path / "a" / "b"
    lock = RunLock(run_dir).acquire()
    lock.release(remove_if_unused=True)
    assert not (tmp_path / "a").exists()


# -- full and read-only disks -----------------------------------------------------------------


@pytest.fixture
def mount_tmpfs(tmp_path: Path) -> Iterator:
    """mount_tmpfs(size) -> a fresh tmpfs of that size; skips where mounting is not allowed."""
    mounted: list[Path] = []

    def make(size: str) -> Path:
        mnt = tmp_path / f"mnt{len(mounted)}"
        mnt.mkdir()
        if shutil.which("mount") is None or os.geteuid() != 0:
            pytest.skip("mounting a tmpfs needs root and mount(8)")
        done = subprocess.run(
            ["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(mnt)],
            capture_output=True,
            text=True,
        )
        if done.returncode != 0:
            pytest.skip(f"cannot mount a tmpfs here: {done.stderr.strip()}")
        mounted.append(mnt)
        return mnt

    yield make
    for mnt in mounted:
        subprocess.run(["umount", "-l", str(mnt)], check=False)


def test_a_full_disk_keeps_the_last_good_checkpoint(mount_tmpfs, clean_system) -> None:
    # hidden 32: a checkpoint is 3.3 MB, so the first fits and the second, written beside
    # it before the rename, does not.
    run_dir = mount_tmpfs("5m") / "R"
    done = pong_mp(
        "train", *SMALL.replace("--hidden 8", "--hidden 32").split(), "--checkpoint-every", "1",
        "--batches", "5", "--run-dir", str(run_dir),
    )
    _one_line_error(done, 1, f"cannot write {run_dir}/checkpoint.npz", "No space left on device")
    assert "the last good checkpoint" in done.stderr
    state, _ = checkpoint.load(run_dir / "checkpoint.npz")
    assert state.batch == 1
    assert _run_files(run_dir) == ["checkpoint.npz", "config.json", "metrics.jsonl"]
    # no temp file, no lock
    assert (run_dir / "metrics.jsonl").read_bytes().endswith(b"\n")
    assert [r["batch"] for r in read_metrics(run_dir / "metrics.jsonl")] == [1, 2]



def test_export_and_plot_onto_a_full_disk_exit_1_and_leave_no_file(
    tmp_path: Path, mount_tmpfs
) -> None:
    # The disk refused the write: the machine's state (exit 1), not bad input (2).
    run_dir = tmp_path / "R"
    assert _train(run_dir, "--batches", "2").returncode == 0
    full = mount_tmpfs("16k")
    for args, out in (
        (("export", str(run_dir)), full / "agent.npz"),
        (("plot", str(run_dir), "--output"), full / "learning.png"),
    ):
        done = pong_mp(*args, str(out))
        _one_line_error(done, 1, f"cannot write {out}", "No space left on device")
        assert list(full.iterdir()) == []

def test_a_read_only_run_directory_is_one_line(mount_tmpfs, clean_system) -> None:
    mnt = mount_tmpfs("50m")
    run_dir = mnt / "R"
    assert _train(run_dir, "--batches", "1").returncode == 0
    before = _snapshot(run_dir)
    subprocess.run(["mount", "-o", "remount,ro", str(mnt)], check=True)
    done = _refused(run_dir, "--resume", "--batches", "2")
    _one_line_error(done, 2, f"cannot create {run_dir}/{LOCK_FILE}", "Read-only file system")
    assert _snapshot(run_dir) == before
    done = _refused(mnt / "new", "--batches", "1")
    _one_line_error(done, 2, f"cannot create {mnt / 'new'}", "Read-only file system")
    done = pong_mp_here("plot", str(run_dir), "-o", str(mnt / "p.png"))  # refused before the work
    _one_line_error(done, 2, f"cannot write {mnt / 'p.png'}", "read-only file system")


def test_an_immutable_run_directory_is_one_line(tmp_path: Path) -> None:
    run_dir = tmp_path / "R"
    assert _train(run_dir, "--batches", "1").returncode == 0
    if subprocess.run(["chattr", "+i", str(run_dir)], capture_output=True).returncode != 0:
        pytest.skip("chattr +i is not allowed here")
    try:
        before = _snapshot(run_dir)
        done = _refused(run_dir, "--resume", "--batches", "2")
        _one_line_error(done, 2, f"cannot create {run_dir}/{LOCK_FILE}")
        assert _snapshot(run_dir) == before
    finally:
        subprocess.run(["chattr", "-i", str(run_dir)], check=False)


def test_an_atomic_write_that_fails_leaves_no_temp_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    target = tmp_path / "f.txt"
    target.write_text("old")

    def no_space(fd: int) -> None:
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(files.os, "fsync", no_space)
    with pytest.raises(FileError, match=rf"cannot write {target}: No space left on device"):
        files.write_text_atomic(target, "new")
    assert [p.name for p in tmp_path.iterdir()] == ["f.txt"] and target.read_text() == "old"


def test_an_atomic_write_through_a_symlink_keeps_the_link(tmp_path: Path) -> None:
    # As `cp` does: a rename onto the link's own name would replace the link with a file.
    (tmp_path / "out").mkdir()
    link = tmp_path / "latest.txt"
    link.symlink_to(tmp_path / "out" / "f.txt")  # dangling: its target is written new
    for text in ("one", "two"):
        files.write_text_atomic(link, text)
        assert link.is_symlink() and (tmp_path / "out" / "f.txt").read_text() == text
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == ["f.txt"]


def test_a_metrics_write_that_fails_is_cut_back_off(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "metrics.jsonl"
    log = MetricsLog(path)
    record = {"batch": 1, "episodes": 2, "steps": 3, "reward_mean": 0.0, "running_reward": 0.0,
              "seconds": 1.0, "steps_per_sec": 3.0}
    log.write(record)
    real_write = log._fh.write
    # The disk takes half the line, then is full.
    monkeypatch.setattr(log._fh, "write", lambda data: real_write(data[: len(data) // 2]))
    with pytest.raises(FileError, match="No space left on device"):
        log.write({**record, "batch": 2})
    log.close()
    assert read_metrics(path) == [record] and path.read_bytes().endswith(b"}\n")


def test_a_checkpoint_that_cannot_be_written_ends_the_run_with_its_file_named(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, clean_system
) -> None:
    real_replace = files.os.replace
    calls = {"n": 0}

    def fail_second_checkpoint(src, dst):
        if str(dst).endswith("checkpoint.npz"):
            calls["n"] += 1
            if calls["n"] == 2:
                raise OSError(errno.EIO, os.strerror(errno.EIO))
        return real_replace(src, dst)

    monkeypatch.setattr(files.os, "replace", fail_second_checkpoint)
    config = fake_config(
        tmp_path, backend="serial", batch_size=2, batches=4, hidden=8, checkpoint_every=1
    )
    failed = rf"cannot write {tmp_path}/checkpoint.npz: Input/output error"
    with pytest.raises(FileError, match=failed):
        train(config, log=lambda line: None)
    assert calls["n"] == 2  # not tried again on the way out
    assert checkpoint.load(tmp_path / "checkpoint.npz")[0].batch == 1
    assert _run_files(tmp_path) == ["checkpoint.npz", "config.json", "metrics.jsonl"]


# -- litter and early kills -------------------------------------------------------------------


def _dead_pid() -> int:
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()
    return child.pid


def test_temp_files_of_dead_writers_are_removed_at_the_next_start(
    tmp_path: Path, clean_system
) -> None:
    run_dir = tmp_path / "R"
    assert _train(run_dir, "--batches", "1").returncode == 0
    dead = run_dir / f".checkpoint.npz.{_dead_pid()}.tmp"
    dead.write_bytes(b"x" * 1000)
    old_style = run_dir / ".config.json.tmp"
    old_style.write_text("{")
    alive = run_dir / f".model.npz.{os.getppid()}.tmp"  # a writer that is still running
    alive.write_bytes(b"y")
    users = [run_dir / ".notes.tmp", run_dir / ".draft.v2.tmp"]  # not pong-mp's: kept
    for path in users:
        path.write_text("mine")
    assert _train(run_dir, "--resume", "--batches", "2").returncode == 0
    assert not dead.exists() and not old_style.exists() and alive.exists()
    assert all(path.read_text() == "mine" for path in users)
    assert remove_stale_temps(run_dir) == []


def test_a_run_killed_before_its_first_checkpoint_resumes_from_its_start(
    tmp_path: Path, clean_system
) -> None:
    whole, killed = tmp_path / "whole", tmp_path / "killed"
    assert _train(whole, "--batches", "2").returncode == 0
    assert _train(killed, "--batches", "2").returncode == 0
    # As a SIGKILL before the first checkpoint leaves it: config.json and a cut-off line.
    (killed / "checkpoint.npz").unlink()
    (killed / "metrics.jsonl").write_text('{"batch": 1, "epis')
    done = _train(killed, "--batches", "1")
    _one_line_error(done, 2, "already holds a run", "--resume")
    done = pong_mp("train", "--run-dir", str(killed), "--resume", "--batches", "2")
    assert done.returncode == 0, done.stderr
    assert checkpoint.load(killed / "checkpoint.npz")[0].params.tobytes() == (
        checkpoint.load(whole / "checkpoint.npz")[0].params.tobytes()
    )
    assert [r["batch"] for r in read_metrics(killed / "metrics.jsonl")] == [1, 2]


def test_a_record_is_not_trained_again_over_its_own_files(
    tmp_path: Path, finished_run: Path
) -> None:
    # A committed record (docs/runs) keeps its config and packed metrics, and no checkpoint:
    # a resume would start it anew inside the record and rewrite its config.json.
    record = tmp_path / "record"
    record.mkdir()
    shutil.copy(finished_run / "config.json", record)
    (record / PACKED_METRICS_FILE).write_bytes(
        lzma.compress((finished_run / METRICS_FILE).read_bytes())
    )
    before = {p.name: p.read_bytes() for p in record.iterdir()}
    done = pong_mp_here("train", "--resume", "--run-dir", str(record), "--batches", "2")
    _one_line_error(done, 2, f"{record} is a record (metrics.jsonl.xz)", "a new --run-dir")
    # One given a checkpoint (remade in place) is not continued inside the record either.
    shutil.copy(finished_run / "checkpoint.npz", record)
    with pytest.raises(RunDirError, match="is a record"):
        prepare_run(record, True, {"batches": 2}, build_env=False)
    (record / "checkpoint.npz").unlink()
    assert {p.name: p.read_bytes() for p in record.iterdir()} == before


# -- damaged and hand-edited files ------------------------------------------------------------


@pytest.fixture(scope="module")
def finished_run(tmp_path_factory) -> Path:
    """A one-update FakePong run directory, to copy and damage."""
    run_dir = tmp_path_factory.mktemp("run") / "R"
    assert _train(run_dir, "--batches", "1").returncode == 0
    return run_dir


def _copy_with_config(run: Path, run_dir: Path, changes: dict[str, object]) -> Path:
    # A copy of `run` in `run_dir` whose config.json has `changes`, as a hand edit would.
    shutil.copytree(run, run_dir)
    config = json.loads((run_dir / "config.json").read_text())
    (run_dir / "config.json").write_text(json.dumps({**config, **changes}))
    return run_dir


@pytest.mark.parametrize(
    ("key", "value", "message"),
    [
        ("lr", "0.001", 'lr must be a number, not "0.001"'),
        ("seed", None, "seed must be a whole number, not null"),
        ("batch_size", 2.0, "batch_size must be a whole number, not 2.0"),
        ("env", 7, "env must be a string, not 7"),
        ("env_kwargs", [1], "env_kwargs must be a JSON object, not [1]"),
        ("hidden", True, "hidden must be a whole number, not true"),
        ("workers", -3, "--workers must be >= 1"),
        ("decay_rate", float("nan"), "--decay-rate must be a finite number"),
        ("env_kwargs", {"points_to_win": float("inf")}, "--env-arg values must be JSON"),
        ("surprise", 1, "unknown config keys: surprise"),
        ("lr_drop_at", "4e6", 'lr_drop_at must be a number or a list of numbers, not "4e6"'),
        ("entropy_drop_at", [1e6, "2e6"], "entropy_drop_at must be a number or a list of"),
        ("entropy_drop_at", [1e6, 2e6], "--entropy-drop-to needs one value for each"),
        ("lr", 10**400, "lr must be a number, not 1000"),  # past float's range
        ("entropy_drop_at", [10**400], "entropy_drop_at must be a number or a list of"),
    ],
)
def test_a_hand_edited_config_is_refused_and_nothing_is_touched(
    tmp_path: Path, finished_run: Path, key: str, value: object, message: str
) -> None:
    run_dir = _copy_with_config(finished_run, tmp_path / "R", {key: value})
    before = _snapshot(run_dir)
    done = pong_mp_here("train", "--run-dir", str(run_dir), "--resume", "--batches", "3")
    _one_line_error(done, 2, f"{run_dir}/config.json: not a valid pong-mp config", message)
    assert _snapshot(run_dir) == before


def _with_removed_option(
    finished_run: Path, tmp_path: Path, key: str, value: object
) -> tuple[Path, Path]:
    """finished_run's checkpoint and a model file of it, whose configs give `key` = value."""
    with np.load(finished_run / "checkpoint.npz") as npz:
        arrays = dict(npz)
    arrays["config"] = np.str_(json.dumps({**json.loads(str(arrays["config"])), key: value}))
    np.savez(tmp_path / "checkpoint.npz", **arrays)
    model = {k: arrays[k].astype(np.float32) for k in ("W1", "W2", "conv") if k in arrays}
    np.savez(tmp_path / "model.npz", **model, config=arrays["config"])
    return tmp_path / "checkpoint.npz", tmp_path / "model.npz"


@pytest.mark.parametrize(
    ("key", "kept", "other"),
    [
        ("conv_layers", 1, 2),
        ("noop_margin", 0.0, 1.0),
        ("inputs", "diff", "frame+trail"),
        ("lr_half_life", 0.0, 8e6),
        ("advantage", "episode", "batch"),
        ("gae_lambda", 0.95, 0.8),
        ("clip", 0.1, 0.2),
        ("value_coef", 0.5, 1.0),
        ("max_grad_norm", 0.5, 0.0),
        ("gamma", 0.99, 0.995),
        ("baseline", "none", "value"),
    ],
)
def test_a_config_of_an_option_pong_mp_no_longer_has_is_read_at_its_one_value_alone(
    tmp_path: Path, finished_run: Path, key: str, kept: object, other: object
) -> None:
    # Records made before an option was removed name it: at the value it now always has
    # they are read; at another they need the code of the commit that last had it. What
    # the commands make of it: the test below, for one option.
    commit = REMOVED[key][1]
    stored = json.loads((finished_run / "config.json").read_text())
    assert without_removed({**stored, key: kept}) == stored
    flag = "--" + key.replace("_", "-")
    with pytest.raises(RemovedOptionError, match=f"made with {flag} .*commit {commit}"):
        without_removed({**stored, key: other})
    for path in _with_removed_option(finished_run, tmp_path, key, other):
        with pytest.raises(checkpoint.CheckpointError, match=f"made with {flag} .*{commit}"):
            checkpoint.load_policy(path)


def test_a_run_of_an_option_pong_mp_no_longer_has_resumes_at_its_one_value_alone(
    tmp_path: Path, finished_run: Path
) -> None:
    key, kept, other = "gamma", 0.99, 0.995
    commit = REMOVED[key][1]
    run_dir = _copy_with_config(finished_run, tmp_path / "kept", {key: kept})
    done = pong_mp("train", "--run-dir", str(run_dir), "--resume", "--batches", "2")
    assert done.returncode == 0, done.stderr
    assert key not in json.loads((run_dir / "config.json").read_text())
    run_dir = _copy_with_config(finished_run, tmp_path / "other", {key: other})
    before = _snapshot(run_dir)
    done = pong_mp("train", "--run-dir", str(run_dir), "--resume", "--batches", "3")
    _one_line_error(
        done, 2, f"{run_dir}/config.json: this run was made with --gamma ", f"commit {commit}"
    )
    assert _snapshot(run_dir) == before
    # Its checkpoint, and a model file of it, are refused the same way.
    for path in _with_removed_option(finished_run, tmp_path, key, other):
        done = pong_mp("play", str(path), "--episodes", "1")
        _one_line_error(done, 2, "made with --gamma ", commit)


def test_config_json_names_the_commit_of_the_code_that_ran(finished_run: Path) -> None:
    from pong_mp.rundir import code_commit

    stored = json.loads((finished_run / "config.json").read_text())["commit"]
    assert stored == code_commit()
    head = subprocess.run(
        ["git", "-C", str(Path(__file__).parent), "rev-parse", "HEAD"],
        capture_output=True, text=True,
    )
    if head.returncode != 0:
        assert stored is None  # not a git checkout: nothing to name
    else:
        assert stored in (head.stdout.strip(), head.stdout.strip() + "-dirty")


def test_a_drop_stored_as_one_number_resumes_as_that_drop(
    tmp_path: Path, finished_run: Path
) -> None:
    # Runs stored before a drop could have several points hold each as one number.
    config = json.loads((finished_run / "config.json").read_text())
    assert all(isinstance(config[name], list) for name in ("entropy_drop_at", "lr_drop_at"))
    as_numbers = {"entropy_drop_at": 1e9, "entropy_drop_to": -0.03, "lr_drop_at": 0.0,
                  "lr_drop_to": 3e-4}  # fmt: skip
    run_dir = _copy_with_config(finished_run, tmp_path / "R", as_numbers)
    done = pong_mp("train", "--run-dir", str(run_dir), "--resume", "--batches", "2",
                   "--entropy-drop-at", "1e9", "--lr-drop-at", "0")  # fmt: skip
    assert done.returncode == 0, done.stderr
    config = json.loads((run_dir / "config.json").read_text())
    assert (config["entropy_drop_at"], config["entropy_drop_to"]) == ([1e9], [-0.03])
    assert (config["lr_drop_at"], config["lr_drop_to"]) == ([], [3e-4])
    resume = ("train", "--run-dir", str(run_dir), "--resume", "--entropy-drop-at")
    _one_line_error(pong_mp_here(*resume, "2e9"), 2, "with --entropy-drop-at 1e9, not 2e9:")
    # A point that :g would round is shown whole, so that the two differ.
    done = pong_mp_here(*resume, "1000000001")
    _one_line_error(done, 2, "with --entropy-drop-at 1e9, not 1000000001.0:")


@pytest.mark.parametrize(
    "damage",
    [b"\xff\xfe not utf-8\n", b"[1, 2]\n", b'{"batch": 1}\n', b'{"batch": "1"}\n', b"10**400"],
)
def test_damaged_metrics_are_refused_by_plot_and_set_aside_by_resume(
    tmp_path: Path, finished_run: Path, damage: bytes
) -> None:
    run_dir = tmp_path / "R"
    shutil.copytree(finished_run, run_dir)
    metrics = run_dir / "metrics.jsonl"
    if damage == b"10**400":  # a whole record, but with a count past a float's range
        first = json.loads(metrics.read_bytes().splitlines()[0])
        damage = (json.dumps({**first, "steps": 10**400}) + "\n").encode()
    metrics.write_bytes(damage + metrics.read_bytes())
    before = _snapshot(run_dir)
    done = pong_mp_here("plot", str(run_dir), "--milestones")
    _one_line_error(done, 2, f"{metrics}, line 1: damaged metrics record")
    assert _snapshot(run_dir) == before
    # The log is a record, the checkpoint the state: a resume goes on.
    done = pong_mp("train", "--run-dir", str(run_dir), "--resume", "--batches", "3")
    assert done.returncode == 0 and "Traceback" not in done.stderr, done.stderr
    aside = run_dir / "metrics.jsonl.damaged"
    assert done.stderr == f"pong-mp: {metrics}: damaged line 1 (" + done.stderr.split("(", 1)[1]
    assert f"moved to {aside}\n" in done.stderr and done.stderr.count("\n") == 1
    assert aside.read_bytes() == damage
    assert [r["batch"] for r in read_metrics(metrics)] == [1, 2, 3]


def test_a_metrics_line_cut_off_by_a_crash_is_skipped(tmp_path: Path) -> None:
    path = tmp_path / "metrics.jsonl"
    record = {"batch": 1, "episodes": 2, "steps": 3, "reward_mean": 0.5, "running_reward": None,
              "seconds": 1.0, "steps_per_sec": 3.0}
    path.write_bytes(json.dumps(record).encode() + b'\n{"batch": 2, "ep\xc3')
    assert read_metrics(path) == [record]
    assert read_metrics(tmp_path / "missing.jsonl") == []


def _record(batch: int) -> dict:
    return {"batch": batch, "episodes": 2 * batch, "steps": 3, "reward_mean": 0.5,
            "running_reward": 0.25 * batch, "seconds": 1.0, "steps_per_sec": 3.0}


def _lines(*batches: int) -> bytes:
    return b"".join(json.dumps(_record(b)).encode() + b"\n" for b in batches)


def test_a_log_that_lacks_updates_of_the_checkpoint_is_named_and_left_alone(
    tmp_path: Path,
) -> None:
    # Removed or cut short by hand: the run goes on (the checkpoint is the state), and says
    # which updates its log will never show.
    path = tmp_path / METRICS_FILE
    assert keep_metrics_until(path, 0) is None
    assert keep_metrics_until(path, 2) == f"{path}: updates 1 to 2 have no record in it"
    path.write_bytes(_lines(1, 4, 5))
    assert keep_metrics_until(path, 6) == f"{path}: updates 2 to 3, 6 have no record in it"
    assert path.read_bytes() == _lines(1, 4, 5)
    assert keep_metrics_until(path, 5) == f"{path}: updates 2 to 3 have no record in it"
    path.write_bytes(_lines(1, 2, 3))
    assert keep_metrics_until(path, 3) is None
    assert keep_metrics_until(path, 2) is None and path.read_bytes() == _lines(1, 2)


def test_a_packed_record_reads_as_its_metrics_jsonl_with_the_lines_it_shares(
    tmp_path: Path,
) -> None:
    # A committed record is xz-compressed, and a fork's copy of its source's lines is stored
    # once, as a reference; the readers get the file the trainer wrote.
    source, fork, live = tmp_path / "group" / "source", tmp_path / "fork", tmp_path / "live"
    for run_dir in (source, fork, live):
        run_dir.mkdir(parents=True)
    (source / PACKED_METRICS_FILE).write_bytes(lzma.compress(_lines(1, 2, 3)))
    link = json.dumps({"lines_of": "../group/source", "through_batch": 2}).encode()
    (fork / PACKED_METRICS_FILE).write_bytes(lzma.compress(link + b"\n" + _lines(3, 4)))
    (live / METRICS_FILE).write_bytes(_lines(1))
    (live / PACKED_METRICS_FILE).write_bytes(lzma.compress(_lines(1, 2)))
    assert read_metrics(metrics_file(source)) == [_record(b) for b in (1, 2, 3)]
    assert read_metrics(metrics_file(fork)) == [_record(b) for b in (1, 2, 3, 4)]
    assert metrics_file(live) == live / METRICS_FILE  # a live run's own file comes first
    assert metrics_file(tmp_path) == tmp_path / METRICS_FILE
    done = pong_mp("plot", str(fork), "-o", str(tmp_path / "fork.png"))
    assert done.returncode == 0 and (tmp_path / "fork.png").stat().st_size > 0, done.stderr


@pytest.mark.parametrize(
    ("content", "problem"),
    [
        (b"not xz", "damaged xz file"),
        (lzma.compress(b'{"lines_of": "../gone", "through_batch": 2}\n'), "which is missing"),
        (lzma.compress(b'{"lines_of": ".", "through_batch": 2}\n'), "references in a row"),
        (lzma.compress(b'{"lines_of": 3}\n'), "needs a directory and through_batch"),
        # Cut short: the stream's end is missing.
        (lzma.compress(b'{"batch": 1}\n' * 100)[:-20], "it ends before its stream does"),
    ],
)
def test_a_damaged_packed_record_is_named(tmp_path: Path, content: bytes, problem: str) -> None:
    run_dir = tmp_path / "R"
    run_dir.mkdir()
    (run_dir / PACKED_METRICS_FILE).write_bytes(content)
    with pytest.raises(RunDirError, match=problem) as raised:
        read_metrics(metrics_file(run_dir))
    assert str(run_dir / PACKED_METRICS_FILE) in str(raised.value)


def test_hidden_units_are_bounded_before_memory_runs_out(tmp_path: Path) -> None:
    done = _refused(tmp_path / "R", "--hidden", "1000000")
    _one_line_error(done, 2, "--hidden must be between 1 and 4096")
    assert not (tmp_path / "R").exists()


@pytest.mark.parametrize(
    ("env", "points", "target", "reachable"),
    [
        ("ALE/Pong-v5", None, 99.0, False),
        ("ALE/Pong-v5", None, -21.5, False),
        ("ALE/Pong-v5", None, 21.0, True),
        ("FakePong-v0", None, 22.0, False),
        ("FakePong-v0", 5, 6.0, False),
        ("FakePong-v0", 5, -5.0, True),
        ("tests.fault_envs:SlowPong-v0", None, 99.0, True),  # the user's env: not known
    ],
)
def test_a_target_reward_no_game_can_score_is_refused(
    tmp_path: Path, env: str, points: int | None, target: float, reachable: bool
) -> None:
    # A typo (99 for 19) would train forever; a target below what any game scores would
    # stop after the first update.
    given = {"env": env, "target_reward": target, "env_kwargs": {}}
    if points is not None:
        given["env_kwargs"] = {"points_to_win": points}
    if reachable:
        assert prepare_run(tmp_path / "R", False, given, build_env=False)[0].target_reward == target
        return
    with pytest.raises(ConfigError) as refused:
        prepare_run(tmp_path / "R", False, given, build_env=False)
    most = 21 if points is None else points
    assert str(refused.value) == (
        f"--target-reward {target:g} is out of reach: a game of {env} scores between -{most} "
        f"and +{most}"
    )
    assert not (tmp_path / "R").exists()


def test_a_checkpoint_with_the_wrong_optimizer_state_is_named(
    tmp_path: Path, finished_run: Path
) -> None:
    optimizer = json.loads((finished_run / "config.json").read_text())["optimizer"]
    other = {"adam": "rmsprop", "rmsprop": "adam"}[optimizer]
    run_dir = _copy_with_config(finished_run, tmp_path / "R", {"optimizer": other})
    done = pong_mp_here("train", "--run-dir", str(run_dir), "--resume", "--batches", "3")
    _one_line_error(done, 2, f"its optimizer state does not fit --optimizer {other}")
    assert np.load(run_dir / "checkpoint.npz")["batch"] == 1


def test_a_policy_lag_change_keeps_the_newest_weights_in_flight() -> None:
    params = np.arange(4.0)
    older, newer = np.full(4, 1.0, np.float32), np.full(4, 2.0, np.float32)
    state = TrainState(params=params, cache=np.zeros(4), batch=9, lagged=(older, newer))

    def lagged(lag: int) -> list[list[float]]:
        return [w.tolist() for w in with_policy_lag(state, lag).lagged]

    assert lagged(2) == [older.tolist(), newer.tolist()]
    assert lagged(1) == [newer.tolist()] and lagged(0) == []
    assert lagged(4) == [older.tolist()] * 3 + [newer.tolist()]  # the oldest known, repeated
    grown = with_policy_lag(TrainState(params=params, cache=np.zeros(4), batch=9), 2).lagged
    assert [w.dtype for w in grown] == [np.float32] * 2
    assert [w.tolist() for w in grown] == [params.tolist()] * 2


@pytest.mark.parametrize(
    ("edit", "mismatch"),
    [
        ({"algo": "ppo"}, "algo 'pg', config.json says 'ppo'"),
        ({"algo": "ppo", "policy": "conv", "channels": 2}, "policy 'mlp', config.json says 'conv'"),
        # Trained on 2-point games: resumed on the default's 21 without a word.
        ({"env_kwargs": {}}, "env_kwargs {'points_to_win': 2}, config.json says {}"),
    ],
)
def test_a_checkpoint_whose_network_is_not_the_configs_is_refused(
    tmp_path: Path, fake_checkpoint: Path, edit: dict, mismatch: str
) -> None:
    # Its weights would not fit the run's network (a copied checkpoint, a hand-edited
    # config.json): refused before anything is written, not a traceback midway.
    run_dir = tmp_path / "R"
    shutil.copytree(fake_checkpoint.parent, run_dir)
    config = json.loads((run_dir / "config.json").read_text())
    (run_dir / "config.json").write_text(json.dumps({**config, **edit}))
    before = _snapshot(run_dir)
    for resume, given in ((True, {}), (False, {"fork_from": str(run_dir)})):
        target = run_dir if resume else tmp_path / "fork"
        with pytest.raises(CheckpointError, match=f"belongs to another run \\({mismatch}\\)"):
            prepare_run(target, resume, given, build_env=False)
    assert _snapshot(run_dir) == before and not (tmp_path / "fork").exists()


@pytest.mark.parametrize("link", ["gone.npz", "checkpoint.npz"])  # dangling; a loop
def test_a_checkpoint_link_that_leads_nowhere_is_no_start_again(
    tmp_path: Path, fake_checkpoint: Path, link: str
) -> None:
    # Taken for "stopped before its first checkpoint", the run was trained again from its
    # start over its records, its checkpoint written through the link.
    run_dir = tmp_path / "R"
    shutil.copytree(fake_checkpoint.parent, run_dir)
    (run_dir / "checkpoint.npz").unlink()
    (run_dir / "checkpoint.npz").symlink_to(link)
    before = _snapshot(run_dir)
    done = pong_mp_here("train", "--run-dir", str(run_dir), "--resume", "--batches", "3")
    _one_line_error(done, 2, "checkpoint.npz: a symbolic link that leads to no file")
    assert _snapshot(run_dir) == before and not (run_dir / "gone.npz").exists()
    # Nor is a directory that holds only such a link free for a new run.
    (tmp_path / "N").mkdir()
    (tmp_path / "N" / "checkpoint.npz").symlink_to(link)
    _one_line_error(_refused(tmp_path / "N"), 2, "already holds a run (checkpoint.npz)")


def test_a_fork_around_the_run_it_forks_from_is_refused(
    tmp_path: Path, fake_checkpoint: Path
) -> None:
    # Removing the fork would remove its source with it, as for a fork inside its source.
    source = tmp_path / "outer" / "R"
    shutil.copytree(fake_checkpoint.parent, source)
    done = pong_mp_here("train", "--fork-from", str(source), "--run-dir", str(tmp_path / "outer"))
    _one_line_error(done, 2, f"is around the run it forks from, {source}")
    assert sorted(p.name for p in (tmp_path / "outer").iterdir()) == ["R"]


def test_a_metrics_log_larger_than_any_run_writes_is_refused_unread(
    tmp_path: Path, finished_run: Path
) -> None:
    # Read whole, 8 GB was a MemoryError traceback (or the machine's memory) for plot,
    # --resume and --fork-from. A sparse file: no disk used.
    run_dir = tmp_path / "R"
    shutil.copytree(finished_run, run_dir)
    os.truncate(run_dir / "metrics.jsonl", MAX_READ_BYTES + 1)
    before = _snapshot_sizes(run_dir)
    for args in (
        ("plot", str(run_dir), "-o", str(tmp_path / "p.png")),
        ("train", "--resume", "--run-dir", str(run_dir), "--batches", "3"),
        ("train", "--fork-from", str(run_dir), "--run-dir", str(tmp_path / "F")),
    ):
        _one_line_error(pong_mp_here(*args), 2, "1,073,741,825 bytes, more than pong-mp writes")
    assert _snapshot_sizes(run_dir) == before and not (tmp_path / "F").exists()


def _snapshot_sizes(directory: Path) -> dict[str, int]:
    return {p.name: p.stat().st_size for p in sorted(directory.iterdir())}


def test_a_packed_record_that_unpacks_past_what_is_read_whole_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A few kB may unpack to gigabytes (a MemoryError): unpacked only as far as the limit.
    monkeypatch.setattr(rundir, "MAX_READ_BYTES", 1000)
    run_dir = tmp_path / "R"
    run_dir.mkdir()
    (run_dir / PACKED_METRICS_FILE).write_bytes(lzma.compress(b"\n" * 100_000))
    with pytest.raises(RunDirError, match="unpacks to more than 1,000 bytes"):
        read_metrics(metrics_file(run_dir))
