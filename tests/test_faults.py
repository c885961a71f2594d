"""Faults cost nothing: real kills and signals against a real `pong-mp` process."""

from __future__ import annotations

import os
import shlex
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from pong_mp import checkpoint
from tests.fault_envs import CRASHING_PONG, SLOW_PONG
from tests.helpers import (
    checkpoint_weights,
    new_blocks,
    pong_mp,
    pong_processes,
    pong_shm_blocks,
    proc_stat,
    start,
    stray_workers,
    workers_of,
)

FAKE = ["--env", "FakePong-v0", "--env-arg", "points_to_win=3", "--hidden", "16"]
SLOW = ["--env", SLOW_PONG, "--env-arg", "points_to_win=2", "--hidden", "8"]

# The ray runs are commands, each with its own Ray instance.
OWN_RAY = [pytest.mark.ray, pytest.mark.own_ray]


def wait_for_updates(proc: subprocess.Popen, run_dir: Path, count: int) -> None:
    """Block until metrics.jsonl holds `count` lines (the process must stay alive)."""
    metrics = run_dir / "metrics.jsonl"
    deadline = time.monotonic() + 120
    while not (metrics.exists() and metrics.read_text().count("\n") >= count):
        assert proc.poll() is None, proc.communicate()
        assert time.monotonic() < deadline, "no progress"
        time.sleep(0.02)


@pytest.mark.ale
def test_kill_9_of_a_worker_changes_nothing(tmp_path: Path, clean_system) -> None:
    args = (
        "train --env ALE/Pong-v5 --hidden 16 --channels 4 --workers 2 --batch-size 2 --batches 3 "
        "--seed 5"
    ).split()
    assert pong_mp(*args, "--run-dir", str(tmp_path / "calm")).returncode == 0
    proc = start(*args, "--run-dir", str(tmp_path / "killed"))
    wait_for_updates(proc, tmp_path / "killed", 1)
    victim = workers_of(proc.pid)[0]
    os.kill(victim, signal.SIGKILL)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 0, err
    assert "replaced" in err and "Traceback" not in err
    assert victim not in pong_processes()
    assert checkpoint_weights(tmp_path / "killed") == checkpoint_weights(tmp_path / "calm")


@pytest.mark.parametrize(
    ("signum", "code", "backend"),
    [
        (signal.SIGINT, 130, "local"),
        (signal.SIGTERM, 143, "local"),
        # Ray's driver takes SIGTERM for itself when it starts: the run must keep its own.
        # (It leaves SIGINT alone, whose handling is the local case's.)
        pytest.param(signal.SIGTERM, 143, "ray", marks=OWN_RAY),
    ],
)
def test_a_stop_signal_saves_and_exits_quickly(
    tmp_path: Path, signum: int, code: int, backend: str, clean_system
) -> None:
    if backend == "ray":
        pytest.importorskip("ray")
    proc = start(
        "train",
        *SLOW,
        *"--workers 2 --batch-size 2 --checkpoint-every 1000".split(),
        "--backend",
        backend,
        "--run-dir",
        str(tmp_path),
    )
    wait_for_updates(proc, tmp_path, 1)
    os.kill(proc.pid, signum)
    sent = time.monotonic()
    _, err = proc.communicate(timeout=30)
    assert time.monotonic() - sent < 10
    assert proc.returncode == code, err
    assert f"stopped by {signal.Signals(signum).name}" in err
    state, _ = checkpoint.load(tmp_path / "checkpoint.npz")
    assert state.batch == (tmp_path / "metrics.jsonl").read_text().count("\n") >= 1


# A second Ctrl-C within signals.REPEAT_SECONDS is the same stop (a double tap, or
# `timeout`'s copy to the group): the stop saves as for one. Later ones: test_hostile.
@pytest.mark.parametrize("gap", [0.0, 0.05, 0.3])
def test_a_quick_second_ctrl_c_is_the_same_stop_and_leaks_nothing(
    tmp_path: Path, gap: float, clean_system
) -> None:
    # Long episodes: the first Ctrl-C lands in the middle of the first batch.
    proc = start(
        "train", "--env", SLOW_PONG, *"--env-arg delay=0.01 --hidden 8".split(),
        *"--workers 2 --batch-size 2 --run-dir".split(),
        str(tmp_path),
    )
    deadline = time.monotonic() + 60
    while len(workers_of(proc.pid)) < 2:
        assert time.monotonic() < deadline and proc.poll() is None
        time.sleep(0.05)
    time.sleep(1.0)  # the workers are now inside their first episodes
    os.kill(proc.pid, signal.SIGINT)
    time.sleep(gap)
    if proc.poll() is None:
        os.kill(proc.pid, signal.SIGINT)
    sent = time.monotonic()
    _, err = proc.communicate(timeout=30)
    assert time.monotonic() - sent < 5
    assert proc.returncode == 130, err
    assert "Traceback" not in err
    assert checkpoint.load(tmp_path / "checkpoint.npz")[0].batch == 0  # saved, not cut short


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM])
def test_a_stop_signal_to_play_leaves_no_half_recording(
    fake_checkpoint: Path, tmp_path: Path, signum: int
) -> None:
    target = tmp_path / "game.gif"
    proc = start("play", str(fake_checkpoint), "--episodes", "100000", "--record", str(target))
    deadline = time.monotonic() + 60
    while not list(tmp_path.glob(".game.*")):  # the recording is being written
        assert time.monotonic() < deadline and proc.poll() is None, proc.communicate()
        time.sleep(0.05)
    os.kill(proc.pid, signum)
    _, err = proc.communicate(timeout=30)
    assert proc.returncode == 128 + signum
    assert err == f"pong-mp: stopped by {signal.Signals(signum).name}\n"
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("ignored", [signal.SIGHUP, signal.SIGINT])
def test_a_run_started_with_a_stop_signal_ignored_goes_on_through_it(
    tmp_path: Path, ignored: int, clean_system
) -> None:
    # `nohup pong-mp train ...` ignores the terminal's hangup; a shell script's `... &`, SIGINT.
    proc = subprocess.Popen(
        [sys.executable, "-m", "pong_mp", "train", *FAKE, "--run-dir", str(tmp_path)],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        preexec_fn=lambda: signal.signal(ignored, signal.SIG_IGN),
    )
    try:
        wait_for_updates(proc, tmp_path, 1)
        os.kill(proc.pid, ignored)
        wait_for_updates(proc, tmp_path, 3)  # still training
        os.kill(proc.pid, signal.SIGTERM)
        _, err = proc.communicate(timeout=30)
    finally:
        proc.kill()
    assert proc.returncode == 143, err
    assert err.splitlines()[-1].startswith("pong-mp: stopped by SIGTERM; checkpoint saved")


# The moment a command is done, Python puts back the default handlers as it finalizes: a
# stop there killed it by the signal without a word. atexit's functions run in that window.
_LATE_STOP = """
import atexit, os, signal, sys
signum = getattr(signal, sys.argv.pop(1))
atexit.register(lambda: os.kill(os.getpid(), signum))
from pong_mp.cli import main
main(prog_name="pong-mp")
"""


@pytest.mark.parametrize("name", ["SIGINT", "SIGTERM", "SIGHUP"])
@pytest.mark.parametrize("args, code", [(["play", "--help"], 0), (["play", "no.npz"], 2)])
def test_a_stop_signal_as_a_command_exits_leaves_its_exit_as_it_was(
    name: str, args: list[str], code: int
) -> None:
    done = subprocess.run(
        [sys.executable, "-c", _LATE_STOP, name, *args], capture_output=True, text=True
    )
    assert done.returncode == code, done.stderr
    assert "Traceback" not in done.stderr and "Exception" not in done.stderr


def test_sigterm_to_bench_stops_its_workers_and_leaks_nothing(clean_system) -> None:
    proc = start("bench", "--env", "FakePong-v0", "--workers", "2", "--seconds", "5")
    deadline = time.monotonic() + 60
    while len(workers_of(proc.pid)) < 2:  # the training measurement has started
        assert time.monotonic() < deadline and proc.poll() is None, proc.communicate()
        time.sleep(0.05)
    os.kill(proc.pid, signal.SIGTERM)
    _, err = proc.communicate(timeout=30)
    assert proc.returncode == 143
    assert err == "pong-mp: stopped by SIGTERM\n"


def test_ctrl_c_while_workers_start(tmp_path: Path, clean_system) -> None:
    proc = start("train", *FAKE, "--workers", "2", "--run-dir", str(tmp_path))
    # Once the run directory is made, the workers are being spawned and set up their envs.
    # (Waiting for it rather than a fixed time keeps the signal out of the interpreter's own
    # imports on a loaded machine: a KeyboardInterrupt there is Python's, before any of
    # pong-mp runs.)
    deadline = time.monotonic() + 60
    while not (tmp_path / "config.json").exists():
        assert proc.poll() is None, proc.communicate()
        assert time.monotonic() < deadline, "the run directory was never made"
        time.sleep(0.01)
    os.kill(proc.pid, signal.SIGINT)
    _, err = proc.communicate(timeout=30)
    assert proc.returncode == 130, err
    assert "Traceback" not in err and err.count("\n") == 1


def test_workers_exit_when_the_coordinator_is_killed(tmp_path: Path) -> None:
    before = pong_shm_blocks()
    proc = start(
        "train",
        *SLOW,
        *"--workers 2 --batch-size 2 --checkpoint-every 1".split(),
        "--run-dir",
        str(tmp_path),
    )
    # Two updates logged: the first one's checkpoint is certainly written (a commit logs
    # its update, then saves).
    wait_for_updates(proc, tmp_path, 2)
    workers = workers_of(proc.pid)
    assert len(workers) == 2
    proc.kill()
    proc.communicate(timeout=30)
    deadline = time.monotonic() + 10
    while (set(workers) & pong_processes() or new_blocks(before)) and (
        time.monotonic() < deadline
    ):
        time.sleep(0.1)
    assert not set(workers) & pong_processes(), "orphan workers"
    # Python's resource tracker unlinks the block once the workers are gone.
    assert not new_blocks(before), "leaked shared memory"
    state, _ = checkpoint.load(tmp_path / "checkpoint.npz")  # still whole
    assert state.batch >= 1


@pytest.mark.parametrize("run", ["this", "another"])
def test_the_leak_check_leaves_another_test_runs_workers_to_it(run: str) -> None:
    # A process named as a worker, under two shells: neither its parent nor its grandparent
    # runs pong-mp or pytest, as under a Ray node's leader. Its name is built in the code, so
    # that no command line above it holds it.
    code = "import ctypes, time; ctypes.CDLL(None).prctl(15, b'pong' + b'-mp-worker-9', 0, 0, 0)"
    inner = f"{shlex.quote(sys.executable)} -c {shlex.quote(code + '; time.sleep(60)')}; true"
    env = dict(os.environ)
    if run == "another":
        env["PONG_MP_TEST_RUN"] = "another"  # as in bin/test's other phase, beside this one
    before = pong_processes()
    shells = subprocess.Popen(
        ["sh", "-c", f"sh -c {shlex.quote(inner)} & wait"], env=env, start_new_session=True
    )

    def stand_in() -> set[int]:
        # Of the new workers, those of the shells' session: the test's own, not those that
        # another test process (bin/test's other phase) may start meanwhile.
        found = set()
        for pid in pong_processes() - before:
            stat = proc_stat(pid)
            if stat is not None and int(stat[3]) == shells.pid:
                found.add(pid)
        return found

    try:
        deadline = time.monotonic() + 30
        while not stand_in() and time.monotonic() < deadline:
            time.sleep(0.05)
        worker = stand_in()
        assert len(worker) == 1, "the stand-in worker did not start"
        assert (worker <= stray_workers()) == (run == "this")
    finally:
        os.killpg(shells.pid, signal.SIGKILL)
        shells.wait()


@pytest.mark.parametrize(
    ("where", "failed"),
    [
        (("--workers", "1"), "failed 3 times in a worker"),
        (("--backend", "serial"), "failed 3 times"),
    ],
)
@pytest.mark.parametrize(
    ("mode", "error"),
    [
        ("raise", "RuntimeError: CrashingPong: planned failure in episode"),
        ("exit", "SystemExit: 0"),  # once a silent exit 0 (serial), or a worker lost
    ],
)
def test_an_episode_that_keeps_failing_stops_the_run_cleanly(
    where: tuple[str, str], failed: str, mode: str, error: str, tmp_path: Path, clean_system
) -> None:
    # One worker, or this process: its env fails from its third episode on, so update 1
    # completes and update 2 fails three times in a row (the first try and two retries).
    crash = "crash_episodes=" + str(list(range(2, 50)))
    done = pong_mp(
        "train",
        "--env",
        CRASHING_PONG,
        "--env-arg",
        crash,
        "--env-arg",
        f'mode="{mode}"',
        "--env-arg",
        "points_to_win=2",
        "--hidden",
        "8",
        *where,
        "--batch-size",
        "2",
        "--batches",
        "5",
        "--checkpoint-every",
        "1",
        "--run-dir",
        str(tmp_path),
    )
    assert done.returncode == 1
    assert f"pong-mp: error: episode 2 {failed};" in done.stderr
    assert done.stderr.count("Traceback") == 1  # the env's, after the line; none of pong-mp's
    assert "retrying (1/2)" in done.stderr and "retrying (2/2)" in done.stderr
    # The worker's own traceback, for the user to debug the env.
    assert error in done.stderr
    state, _ = checkpoint.load(tmp_path / "checkpoint.npz")
    assert state.batch == 1 and state.episodes == 2


def test_resume_through_the_cli_is_bit_identical(tmp_path: Path, clean_system) -> None:
    args = ["train", *FAKE, "--workers", "2", "--batch-size", "3", "--seed", "9"]
    assert pong_mp(*args, "--batches", "4", "--run-dir", str(tmp_path / "straight")).returncode == 0
    assert pong_mp(*args, "--batches", "2", "--run-dir", str(tmp_path / "split")).returncode == 0
    done = pong_mp(
        *"train --resume --batches 4 --workers 1 --run-dir".split(),
        str(tmp_path / "split"),
    )
    assert done.returncode == 0, done.stderr
    assert "resuming at update 2" in done.stdout
    assert checkpoint_weights(tmp_path / "split") == checkpoint_weights(tmp_path / "straight")
    metrics = (tmp_path / "split" / "metrics.jsonl").read_text().splitlines()
    assert len(metrics) == 4


@pytest.mark.parametrize("backend", ["local", pytest.param("ray", marks=OWN_RAY)])
def test_a_run_stopped_and_continued_takes_no_worker_for_hung(
    tmp_path: Path, backend: str, clean_system
) -> None:
    # Ctrl-Z, then `fg` later than --episode-timeout: the time stopped is no episode's. The
    # local workers are stopped with the coordinator; Ray's actors, in processes of their
    # own, play on and wait.
    if backend == "ray":
        pytest.importorskip("ray")
    proc = start(
        "train", *SLOW, *"--workers 2 --batch-size 2 --batches 3 --episode-timeout 2".split(),
        "--env-arg", "delay=0.002", "--backend", backend, "--run-dir", str(tmp_path),
    )
    wait_for_updates(proc, tmp_path, 1)
    group = [proc.pid, *workers_of(proc.pid)]
    for pid in group:
        os.kill(pid, signal.SIGSTOP)
    time.sleep(5)
    for pid in reversed(group):
        os.kill(pid, signal.SIGCONT)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 0, err
    assert "hung" not in err and "replaced" not in err, err
