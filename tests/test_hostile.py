"""Hostile cases, one class at a time: signals at odd moments, stopped (not killed) processes,
exhausted shared memory, odd paths, one run directory reached by two paths, concurrent
readers, degenerate numbers and hostile input. Each must end in one line with the documented
exit code, lose nothing (a resume gives the bytes of a run never disturbed) and leave nothing
behind (no shared memory, no worker: the `clean_system` fixture)."""

from __future__ import annotations

import errno
import fcntl
import io
import json
import os
import pty
import re
import select
import shutil
import signal
import socket
import stat as stat_module
import subprocess
import sys
import time
import warnings
import zipfile
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest

from pong_mp import api, checkpoint, policy, signals
from pong_mp import config as config_module
from pong_mp.backends.base import RolloutSpec
from pong_mp.backends.local import LocalBackend
from pong_mp.backends.shm import SharedGradient, SharedMemoryFull
from pong_mp.batch_sum import BatchSum
from pong_mp.config import ConfigError, TrainConfig
from pong_mp.episode import EpisodeResult, EpisodeStats
from pong_mp.learner import NonFiniteError
from pong_mp.pg import PGWork
from pong_mp.progress import QuietReporter
from pong_mp.rundir import CONFIG_FILE, checkpoint_on_disk, open_run, where_it_stands
from pong_mp.signals import Interrupted, stop_signals_raise
from pong_mp.state import initial_state
from pong_mp.trainer import make_learner, run
from tests.fault_envs import CRASHING_PONG
from tests.helpers import (
    SignalsWhenDropped,
    apply,
    fake_spec,
    pong_mp,
    pong_mp_here,
    signal_self,
    start,
    train,
    workers_of,
)

GAME = {"points_to_win": 3}
FAKE = ["--env", "FakePong-v0", "--env-arg", "points_to_win=3", "--hidden", "8"]
RUN = [*FAKE, "--workers", "2", "--batch-size", "2", "--seed", "3", "--checkpoint-every", "1000"]


def wait_for(what: object, proc: subprocess.Popen, timeout: float = 120) -> None:
    """Block until `what()` is true; the process must stay alive meanwhile."""
    deadline = time.monotonic() + timeout
    while not what():  # type: ignore[operator]
        assert proc.poll() is None, proc.communicate()
        assert time.monotonic() < deadline, "it never happened"
        time.sleep(0.02)


def updates_logged(run_dir: Path) -> int:
    """The complete lines of run_dir's metrics.jsonl."""
    try:
        return (run_dir / "metrics.jsonl").read_bytes().count(b"\n")
    except OSError:
        return 0


def weights(run_dir: Path) -> bytes:
    """W1 and W2 of run_dir's checkpoint."""
    with np.load(run_dir / "checkpoint.npz", allow_pickle=False) as npz:
        return npz["W1"].tobytes() + npz["W2"].tobytes()


def undisturbed(tmp_path: Path, batches: int, seed: int = 3) -> bytes:
    """The weights of a run of RUN's options never disturbed (serial: the same bytes)."""
    run_dir = tmp_path / f"calm-{batches}"
    config = TrainConfig(
        env="FakePong-v0", env_kwargs=GAME, hidden=8, batch_size=2, seed=seed,
        backend="serial", batches=batches, run_dir=str(run_dir), tensorboard=False,
    )  # fmt: skip
    train(config, log=lambda line: None)
    return weights(run_dir)


def one_line(err: str) -> str:
    """The one line a command printed on stderr (asserting there is just one, and no
    traceback or warning of Python's)."""
    assert "Traceback" not in err and "Warning" not in err and "leaked" not in err, err
    lines = err.splitlines()
    assert len(lines) == 1, err
    return lines[0]


def env_module(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, name: str, source: str) -> None:
    """Write module `name` into tmp_path, where the commands this test starts import it."""
    (tmp_path / f"{name}.py").write_text(source)
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join((str(tmp_path), os.environ["PYTHONPATH"])))


# -- signals at odd moments ----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("signum", "to"),
    [
        (signal.SIGHUP, "run"),
        (signal.SIGHUP, "group"),
        (signal.SIGTERM, "group"),
        (signal.SIGINT, "run-then-group"),
    ],
    ids=["SIGHUP", "SIGHUP-to-group", "SIGTERM-to-group", "timeout-s-INT"],
)
def test_a_hangup_saves_the_last_update_and_resumes_exactly(
    tmp_path: Path, signum: int, to: str, clean_system
) -> None:
    run_dir = tmp_path / "R"
    proc = start("train", *RUN, "--run-dir", str(run_dir), group=True)
    wait_for(lambda: updates_logged(run_dir) >= 2, proc)
    if to != "group":
        os.kill(proc.pid, signum)
    if to != "run":
        # "run-then-group" is a clock stop by coreutils `timeout` (without --foreground):
        # one signal to the run and at once the same to its process group, so the run gets
        # it twice. The second is the same stop: it must not cut the save short.
        os.killpg(proc.pid, signum)
    _, err = proc.communicate(timeout=30)
    assert proc.returncode == 128 + signum, err
    reached = checkpoint.load(run_dir / "checkpoint.npz")[0].batch
    assert reached == updates_logged(run_dir) >= 2
    name = signal.Signals(signum).name
    assert one_line(err) == (
        f"pong-mp: stopped by {name}; checkpoint saved at update {reached} in {run_dir}, "
        "continue with --resume"
    )
    done = pong_mp("train", "--resume", "--run-dir", str(run_dir), "--batches", str(reached + 1))
    assert done.returncode == 0, done.stderr
    assert weights(run_dir) == undisturbed(tmp_path, reached + 1)


@pytest.mark.parametrize("after", ["checks", "workers"])
def test_ctrl_c_to_the_group_while_workers_start_is_one_true_line(
    tmp_path: Path, after: str, clean_system
) -> None:
    run_dir = tmp_path / "R"
    proc = start("train", *RUN, "--run-dir", str(run_dir), group=True)
    if after == "checks":
        # The lock is taken: the options and the run directory are being checked. (Earlier,
        # the signal would land in the interpreter's own imports, before pong-mp runs.)
        wait_for(lambda: (run_dir / ".lock").exists(), proc)
    else:
        wait_for(lambda: workers_of(proc.pid), proc)  # a worker is importing pong-mp
    os.killpg(proc.pid, signal.SIGINT)
    _, err = proc.communicate(timeout=30)
    assert proc.returncode == 130, err
    line = one_line(err.replace("KeyboardInterrupt", "Traceback"))
    # The line says what is on disk, whatever that is.
    # (The Ctrl-C races the start: it may land before or after config.json is written.)
    on_disk = checkpoint_on_disk(run_dir)
    if on_disk is not None:
        assert f"checkpoint saved at update {on_disk} in {run_dir}" in line
    elif (run_dir / CONFIG_FILE).exists():
        assert f"no checkpoint in {run_dir} yet; --resume starts the run" in line
    else:
        assert f"nothing was written in {run_dir}" in line  # a stop before the start


def test_a_stop_while_the_shared_memory_is_made_leaves_no_block(
    monkeypatch, clean_system
) -> None:
    # The signal's handler runs as a block is made and before the backend keeps it.
    make = SharedGradient.create

    def make_then_stop(shape: object) -> SharedGradient:
        block = make(shape)  # type: ignore[arg-type]
        signal_self(signal.SIGINT)
        return block

    monkeypatch.setattr(SharedGradient, "create", make_then_stop)
    backend = LocalBackend(fake_spec(workers=2))
    with stop_signals_raise(), pytest.raises(Interrupted):
        backend.start()
    assert backend.worker_pids() == []


def _stopped_inside_the_last_save(
    run_dir: Path, monkeypatch, first: Callable[[], None], again: Callable[[], None], **options
) -> Interrupted:
    """Train a small FakePong run until `first()` stops it once update 3 is logged (saved:
    update 2), with `again()` called inside the stop's save of update 3; how it stopped."""
    given = {
        "env": "FakePong-v0", "env_kwargs": GAME, "hidden": 8, "batch_size": 2,
        "checkpoint_every": 2, "tensorboard": False, **options,
    }  # fmt: skip

    class StopAtUpdate3:
        def banner(self, text: str) -> None: ...
        def close(self) -> None: ...
        def update(self, record: dict) -> None:
            if record["batch"] == 3:
                first()

    from pong_mp import trainer

    saves = trainer._save

    def save(run_dir: Path, state: object, config: object) -> None:
        if state.batch == 3:  # type: ignore[attr-defined]
            again()
        saves(run_dir, state, config)  # type: ignore[arg-type]

    monkeypatch.setattr(trainer, "_save", save)
    with pytest.raises(Interrupted) as stop, open_run(run_dir, False, given) as (config, state):
        run(config, state, reporter=StopAtUpdate3())
    return stop.value


@pytest.mark.parametrize(
    "learner",
    [{"algo": "pg", "policy": "mlp", "entropy_drop_at": 0}, {"algo": "ppo"}],
    ids=["pg", "ppo"],
)
def test_a_stop_python_swallowed_in_a_finalizer_still_stops_the_run(
    tmp_path: Path, monkeypatch, learner: dict
) -> None:
    # A Ctrl-C whose handler runs inside a weakref callback of an import (as a run's first
    # batches import what they need) is only printed by Python; the run must stop anyway.
    from pong_mp import episode, pg, ppo

    given = {
        "env": "FakePong-v0", "env_kwargs": GAME, "hidden": 8, "batch_size": 2, "batches": 6,
        "backend": "serial", "tensorboard": False, **learner,
    }  # fmt: skip

    def make_tasks(seed: int, first: int, size: int, **kwargs: bool) -> list:
        if first == 4:  # the third batch's, after update 2
            SignalsWhenDropped(signal.SIGINT)
        return episode.make_tasks(seed, first, size, **kwargs)

    for module in (pg, ppo):  # where each learner makes its batches' tasks
        monkeypatch.setattr(module, "make_tasks", make_tasks)
    with pytest.raises(Interrupted) as stop, open_run(tmp_path, False, given) as (config, state):
        run(config, state, reporter=QuietReporter())
    assert stop.value.reached == 2
    assert checkpoint_on_disk(tmp_path) == 2


def _ctrl_c() -> None:
    raise Interrupted(signal.SIGINT)


def _sigint_to_self() -> None:
    signal_self(signal.SIGINT)


def test_a_second_signal_that_cuts_the_save_short_names_the_older_checkpoint(
    tmp_path: Path, monkeypatch
) -> None:
    run_dir = tmp_path / "R"
    stop = _stopped_inside_the_last_save(run_dir, monkeypatch, _ctrl_c, _ctrl_c, backend="serial")
    assert stop.reached == 3 and checkpoint_on_disk(run_dir) == 2
    assert where_it_stands(run_dir, stop.reached) == (
        f"the checkpoint in {run_dir} is at update 2 (update 3 was not saved and will be "
        "played again)",
        True,
    )


@pytest.mark.parametrize(
    ("window", "saved"), [(signals.REPEAT_SECONDS, 3), (0.0, 2)], ids=["same-stop", "second-stop"]
)
def test_a_signal_repeated_inside_the_last_save_is_the_same_stop_unless_late(
    tmp_path: Path, monkeypatch, window: float, saved: int, clean_system
) -> None:
    # Real signals through the trainer's handlers, the second inside the stop's save, as
    # `timeout -s INT` sends its group's copy. Within the window the save completes; past
    # it (window 0), the second signal cuts it short, and still nothing leaks (local
    # workers, shared memory).
    monkeypatch.setattr(signals, "REPEAT_SECONDS", window)
    run_dir = tmp_path / "R"
    stop = _stopped_inside_the_last_save(
        run_dir, monkeypatch, _sigint_to_self, _sigint_to_self, workers=2
    )
    assert stop.reached == 3 and checkpoint_on_disk(run_dir) == saved


def test_a_closed_stdout_stops_the_run_as_sigpipe_would(tmp_path: Path, clean_system) -> None:
    # pong-mp train | head -1: the reader goes once it has the banner.
    run_dir = tmp_path / "R"
    proc = start("train", *RUN, "--run-dir", str(run_dir))
    assert proc.stdout is not None
    assert proc.stdout.readline().startswith("pong-mp: FakePong-v0")
    proc.stdout.close()
    err = proc.stderr.read() if proc.stderr is not None else ""
    assert proc.wait(timeout=60) == 141, err
    reached = checkpoint.load(run_dir / "checkpoint.npz")[0].batch
    assert reached == updates_logged(run_dir)
    assert one_line(err) == (
        f"pong-mp: stopped by SIGPIPE (standard output closed); checkpoint saved at update "
        f"{reached} in {run_dir}, continue with --resume"
    )


def test_a_closed_stdout_stops_play_as_it_stops_a_run(tmp_path: Path, fake_checkpoint) -> None:
    # pong-mp play ... | head -1: the games stop, the recording's temp file goes, and the
    # status is SIGPIPE's, as for train (not a failed recording's 1).
    video = tmp_path / "games.gif"
    proc = start(
        "play", str(fake_checkpoint), "--episodes", "1000", "--record", str(video),
        "--max-frames", "50",
    )  # fmt: skip
    assert proc.stdout is not None and proc.stdout.readline().startswith("game 1: ")
    proc.stdout.close()
    err = proc.stderr.read() if proc.stderr is not None else ""
    assert proc.wait(timeout=60) == 141, err
    assert one_line(err) == "pong-mp: stopped by SIGPIPE (standard output closed)"
    assert list(tmp_path.iterdir()) == []


def _blocked_writing(pid: int) -> bool:
    """Whether process `pid` waits to write to a pipe (its kernel wait channel says so:
    pipe_write, or anon_pipe_write in newer kernels)."""
    try:
        return "pipe_write" in Path(f"/proc/{pid}/wchan").read_text()
    except OSError:
        return False


@pytest.mark.parametrize("command", ["train", "play"])
def test_a_stop_ends_a_command_whose_reader_stopped_reading(
    tmp_path: Path, fake_checkpoint, command: str
) -> None:
    # pong-mp train | less, the pager paused: the write blocks, and a stop that waited for
    # it to end would wait for ever (timeout's one SIGTERM, then its SIGKILL: the updates
    # since the last checkpoint lost).
    run_dir = tmp_path / "R"
    args = {
        "train": ["train", *RUN, "--batch-size", "1", "--checkpoint-every", "1000",
                  "--no-tensorboard", "--run-dir", str(run_dir)],
        "play": ["play", str(fake_checkpoint), "--episodes", "100000"],
    }[command]  # fmt: skip
    read_end, write_end = os.pipe()
    try:
        fcntl.fcntl(write_end, 1031, 4096)  # F_SETPIPE_SZ: full after a few dozen lines
        proc = subprocess.Popen(
            [sys.executable, "-m", "pong_mp", *args], stdout=write_end, stderr=subprocess.PIPE,
            text=True,
        )  # fmt: skip
        os.close(write_end)
        wait_for(lambda: _blocked_writing(proc.pid), proc)
        proc.send_signal(signal.SIGTERM)
        try:
            code = proc.wait(timeout=20)
        finally:
            if proc.poll() is None:
                proc.kill()
        err = proc.stderr.read() if proc.stderr is not None else ""
    finally:
        os.close(read_end)
    assert code == 143, err
    if command == "train":
        reached = checkpoint.load(run_dir / "checkpoint.npz")[0].batch
        assert reached == updates_logged(run_dir) > 0
        assert f"stopped by SIGTERM; checkpoint saved at update {reached}" in one_line(err)
    else:
        assert one_line(err) == "pong-mp: stopped by SIGTERM"


def test_a_full_stdout_mid_run_stops_it_saved_with_exit_code_1(tmp_path: Path) -> None:
    # `pong-mp train > log` where the disk fills up: the lines cannot be written; the run
    # stops at the update it is in, saved, as for a closed output (exit 1, not 141).
    class FullAtUpdate3:
        def banner(self, text: str) -> None: ...
        def close(self) -> None: ...
        def update(self, record: dict) -> None:
            if record["batch"] == 3:
                raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    given = {
        "env": "FakePong-v0", "env_kwargs": GAME, "hidden": 8, "batch_size": 2,
        "checkpoint_every": 2, "tensorboard": False, "backend": "serial",
    }  # fmt: skip
    with pytest.raises(Interrupted) as stop, open_run(tmp_path, False, given) as (config, state):
        run(config, state, reporter=FullAtUpdate3())
    assert stop.value.exit_code == 1 and stop.value.reached == 3
    assert str(stop.value) == "a full standard output (No space left on device)"
    assert checkpoint_on_disk(tmp_path) == 3


@pytest.mark.parametrize(
    "args", [["--version"], ["--help"], [], ["export"], ["play"], ["train"]],
    ids=["version", "help", "no-command", "export", "play", "train"],
)
def test_a_full_stdout_ends_any_command_in_one_line_with_exit_code_1(
    tmp_path: Path, fake_checkpoint, args: list[str]
) -> None:
    # `pong-mp ... > /dev/full`: a traceback from click's or pong-mp's first line; play's
    # said its env had failed.
    ending = ""
    if args == ["export"]:
        args = ["export", str(fake_checkpoint), str(tmp_path / "m.npz")]
    elif args == ["play"]:
        args = ["play", str(fake_checkpoint), "--episodes", "1"]
    elif args == ["train"]:
        args = ["train", *RUN, "--run-dir", str(tmp_path / "R")]
        ending = f"; nothing was written in {tmp_path / 'R'}"
    with open("/dev/full", "w") as full:
        done = subprocess.run(
            [sys.executable, "-m", "pong_mp", *args], stdout=full, stderr=subprocess.PIPE,
            text=True, timeout=60,
        )  # fmt: skip
    assert done.returncode == 1, done.stderr
    assert one_line(done.stderr) == (
        f"pong-mp: stopped by a full standard output (No space left on device){ending}"
    )
    assert not (tmp_path / "R").exists()


def _read_only_stdout() -> None:
    # `pong-mp ... 1</dev/null`: open, but every write fails with EBADF.
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 1)
    os.close(null)


def _peerless_socket_stdout() -> None:
    # A datagram socket whose peer is gone: every write fails with ENOTCONN or ECONNREFUSED.
    mine, peer = socket.socketpair(socket.AF_UNIX, socket.SOCK_DGRAM)
    peer.close()
    os.dup2(mine.fileno(), 1)
    mine.close()


@pytest.mark.parametrize("command", ["--version", "export", "play", "train"])
@pytest.mark.parametrize("how", ["closed", "read-only", "peerless-socket"])
def test_a_stdout_closed_from_the_start_is_one_whose_reader_left(
    tmp_path: Path, fake_checkpoint, command: str, how: str
) -> None:
    # `pong-mp train >&-`: Python starts with no sys.stdout; train ended in a traceback, and
    # the other commands printed nowhere and exited 0. `1</dev/null` (read-only): a traceback
    # (OSError: Bad file descriptor), and play blamed its env.
    args = {
        "--version": ["--version"],
        "export": ["export", str(fake_checkpoint), str(tmp_path / "m.npz")],
        "play": ["play", str(fake_checkpoint), "--episodes", "1"],
        "train": ["train", *RUN, "--run-dir", str(tmp_path / "R")],
    }[command]
    done = subprocess.run(
        [sys.executable, "-m", "pong_mp", *args], stderr=subprocess.PIPE, text=True,
        timeout=60, preexec_fn={"closed": lambda: os.close(1), "read-only": _read_only_stdout,
                                "peerless-socket": _peerless_socket_stdout}[how],
    )  # fmt: skip
    assert done.returncode == 141, done.stderr
    if command == "export":  # written whole before its line
        assert checkpoint.load_policy(tmp_path / "m.npz")[1]["hidden"] == 8
    said = {"--version": "", "export": "",
            "play": "pong-mp: stopped by SIGPIPE (standard output closed)\n"}  # fmt: skip
    assert done.stderr == said.get(command, (
        f"pong-mp: stopped by SIGPIPE (standard output closed); nothing was written in "
        f"{tmp_path / 'R'}\n"
    ))
    assert not (tmp_path / "R").exists()


# -- stopped, not killed -------------------------------------------------------------------------


def test_a_stopped_coordinator_and_a_stopped_worker_change_nothing(
    tmp_path: Path, clean_system
) -> None:
    run_dir = tmp_path / "R"
    # In a session of its own: a process group holding a stopped process gets SIGHUP from the
    # kernel when it is orphaned, and that must not be the test suite's.
    proc = start(
        "train", *RUN, "--batches", "8", "--episode-timeout", "2", "--run-dir", str(run_dir),
        group=True,
    )
    wait_for(lambda: updates_logged(run_dir) >= 1, proc)
    os.kill(proc.pid, signal.SIGSTOP)  # Ctrl-Z: the workers wait, and must not leave
    time.sleep(1.5)
    workers = workers_of(proc.pid)
    assert len(workers) == 2
    os.kill(workers[0], signal.SIGSTOP)  # a stopped worker is a hung one
    os.kill(proc.pid, signal.SIGCONT)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 0, err
    # The message gives how long the worker was busy, which a loaded machine rounds past 2 s.
    assert "Traceback" not in err and re.search(r"hung for [2-9] s: replaced", err), err
    assert weights(run_dir) == undisturbed(tmp_path, 8)


# -- exhausted shared memory ---------------------------------------------------------------------


def _in_a_small_dev_shm(size: str, *args: str) -> subprocess.CompletedProcess:
    # `pong-mp ARGS` in a mount namespace of its own whose /dev/shm is a tmpfs of `size`.
    script = f'mount -t tmpfs -o size={size} tmpfs /dev/shm && exec "$0" -m pong_mp "$@"'
    return subprocess.run(
        ["unshare", "--mount", "--propagation", "private", "sh", "-c", script,
         sys.executable, *args],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip


@pytest.mark.parametrize("size", ["64k", "1m", "12m"])
def test_too_little_shared_memory_is_one_line_and_writes_nothing(
    tmp_path: Path, size: str
) -> None:
    if shutil.which("unshare") is None or os.geteuid() != 0:
        pytest.skip("a /dev/shm of its own needs root and unshare(1)")
    probe = _in_a_small_dev_shm("64k", "--version")
    if probe.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs on /dev/shm here: {probe.stderr.strip()}")
    run_dir = tmp_path / "R"
    # The defaults (200 hidden units on 5,776 conv features) and 2 workers: 13.9 MB of
    # weights and gradient slots.
    done = _in_a_small_dev_shm(
        size, "train", "--env", "FakePong-v0", "--workers", "2", "--run-dir", str(run_dir)
    )
    assert done.returncode == 2, done.stderr
    line = one_line(done.stderr)
    assert line.startswith("pong-mp: error: /dev/shm has ") and " free: " in line, line
    assert "needs 13.9 MB" in line and "docker run --shm-size" in line
    assert not run_dir.exists()


def test_a_dev_shm_with_room_for_one_gradient_slot_a_worker_trains_with_one(
    tmp_path: Path,
) -> None:
    # The actor-critic's slot a position of the batch and a second slot a worker (23.1 MB in
    # all here, either, with the weights) only save time: with 18 MB, each of the 2 workers
    # has one slot (13.9 MB).
    if shutil.which("unshare") is None or os.geteuid() != 0:
        pytest.skip("a /dev/shm of its own needs root and unshare(1)")
    run_dir = tmp_path / "R"
    done = _in_a_small_dev_shm(
        "18m", "train", "--env", "FakePong-v0", "--env-arg", "points_to_win=1", "--workers",
        "2", "--batches", "1", "--batch-size", "4", "-q", "--run-dir", str(run_dir),
    )
    if "cannot mount" in done.stderr or "unshare" in done.stderr:
        pytest.skip(f"cannot mount a tmpfs on /dev/shm here: {done.stderr.strip()}")
    assert done.returncode == 0, done.stderr
    assert (run_dir / "checkpoint.npz").exists()


def test_shared_memory_that_runs_out_while_reserved_leaves_nothing(
    monkeypatch, clean_system
) -> None:
    # The room was there when checked, and not when written (another process took it).
    from pong_mp.backends import local

    monkeypatch.setattr(local, "check_room", lambda needed, what: None)
    blocks = []

    def full(fd: int, offset: int, size: int) -> None:
        blocks.append(fd)
        if len(blocks) == 2:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(os, "posix_fallocate", full)
    spec = RolloutSpec("FakePong-v0", policy.NetShape(8), PGWork(0.99), workers=2, env_kwargs=GAME)
    backend = LocalBackend(spec)
    with pytest.raises(SharedMemoryFull, match=r"^/dev/shm has .* free: .* needs "):
        backend.start()
    assert backend.worker_pids() == []


def test_a_block_is_written_when_made_not_only_sized() -> None:
    # A sparse block would take its pages only when first written, and a /dev/shm without
    # them then kills the writer with SIGBUS: the room is taken at once.
    from pong_mp.backends.shm import BlockShape, SharedGradient

    block = SharedGradient.create(BlockShape(policy.NetShape(8), 2))
    try:
        allocated = os.stat(f"/dev/shm/{block.name}").st_blocks * 512
        assert allocated >= SharedGradient.size(BlockShape(policy.NetShape(8), 2))
    finally:
        block.close()
        block.unlink()


# -- odd paths, two paths to one run, concurrent readers ---------------------------------------


def test_one_run_reached_by_two_paths_and_read_while_it_trains(
    tmp_path: Path, clean_system
) -> None:
    real = tmp_path / "an odd dir ü %s {} -x"
    link = tmp_path / "link"
    link.symlink_to(real.name)
    proc = start("train", *RUN, "--checkpoint-every", "1", "--run-dir", str(real))
    wait_for(lambda: updates_logged(real) >= 1 and (real / "checkpoint.npz").exists(), proc)
    for other, resume in ((link, ["--resume"]), (real / ".." / real.name, [])):
        done = pong_mp_here("train", *RUN, *resume, "--run-dir", str(other))
        assert done.returncode == 2, done.stderr
        assert f"is in use by another trainer (pid {proc.pid})" in one_line(done.stderr)
    # Readers while it writes: the plot and the exported model are of whole files.
    done = pong_mp_here("plot", str(link), "-o", str(tmp_path / "p.png"))
    assert done.returncode == 0, done.stderr
    done = pong_mp_here("export", str(link), str(tmp_path / "m.npz"))
    assert done.returncode == 0, done.stderr
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=30)
    assert proc.returncode == 143, err
    reached = checkpoint.load(real / "checkpoint.npz")[0].batch
    done = pong_mp("train", "--resume", "--run-dir", str(link), "--batches", str(reached + 1))
    assert done.returncode == 0, done.stderr
    assert weights(real) == undisturbed(tmp_path, reached + 1)
    assert sorted(p.name for p in real.iterdir() if "tfevents" not in p.name) == [
        "checkpoint.npz", "config.json", "metrics.jsonl",
    ]  # fmt: skip


def test_a_file_to_write_named_with_a_trailing_slash_is_refused(
    tmp_path: Path, fake_checkpoint
) -> None:
    # "out/" means a directory, to the user as to `cp`; a Path drops the slash, and the
    # file would be written as "out".
    run_dir = str(fake_checkpoint.parent)
    for args, param in [
        (["export", run_dir, f"{tmp_path}/model/"], "'MODEL.npz'"),
        (["plot", run_dir, "-o", f"{tmp_path}/plot.png/"], "'-o' / '--output'"),
        (["play", run_dir, "--episodes", "1", "--record", f"{tmp_path}/game.gif/"], "'--record'"),
    ]:
        done = pong_mp_here(*args)
        assert done.returncode == 2, done.stderr
        assert one_line(done.stderr) == (
            f"pong-mp: error: Invalid value for {param}: '{args[-1]}' ends with /: name a file,"
            " not a directory"
        )
    assert list(tmp_path.iterdir()) == []


def test_a_loop_of_symbolic_links_to_write_through_is_one_line(
    tmp_path: Path, fake_checkpoint
) -> None:
    # resolve() raises RuntimeError on a loop, and a rename would replace the link itself.
    (tmp_path / "a").symlink_to("b")
    (tmp_path / "b").symlink_to("a")
    (tmp_path / "a.npz").symlink_to("b.npz")
    (tmp_path / "b.npz").symlink_to("a.npz")
    source = str(fake_checkpoint.parent)
    for args, message in [
        (["train", "--fork-from", source, "--run-dir", f"{tmp_path}/a/run"],
         f"cannot create {tmp_path}/a/run: Too many levels of symbolic links"),
        (["export", source, f"{tmp_path}/a.npz"],
         f"cannot write {tmp_path}/a.npz: Too many levels of symbolic links"),
    ]:  # fmt: skip
        done = pong_mp_here(*args)
        assert done.returncode == 2, done.stderr
        assert one_line(done.stderr) == f"pong-mp: error: {message}"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a", "a.npz", "b", "b.npz"]
    assert os.readlink(tmp_path / "a") == "b" and os.readlink(tmp_path / "a.npz") == "b.npz"


def test_a_plot_or_recording_is_not_written_onto_a_fifo_or_a_run_file(
    tmp_path: Path, fake_checkpoint
) -> None:
    # As root, the rename replaced a FIFO or a device node (/dev/full) with a file, and a
    # link named x.png wrote a PNG over the run's checkpoint.npz it led to.
    run = tmp_path / "run"
    shutil.copytree(fake_checkpoint.parent, run)
    os.mkfifo(tmp_path / "fifo.png")
    (tmp_path / "evil.png").symlink_to(run / "checkpoint.npz")
    (tmp_path / "evil.gif").symlink_to(run / "config.json")
    before = {p.name: p.read_bytes() for p in run.iterdir() if p.is_file()}
    source = str(fake_checkpoint.parent)
    for args, message in [
        (["plot", source, "-o", str(tmp_path / "fifo.png")],
         f"{tmp_path}/fifo.png is not a regular file (a FIFO or a device); name a .png file"),
        (["plot", source, "-o", str(tmp_path / "evil.png")],
         f"{tmp_path}/evil.png leads to {run}/checkpoint.npz, which is not a .png file: "),
        (["play", source, "--record", str(tmp_path / "evil.gif")],
         f"{tmp_path}/evil.gif leads to {run}/config.json, which is not a .gif or .mp4 file"),
    ]:  # fmt: skip
        done = pong_mp_here(*args)
        assert done.returncode == 2, done.stderr
        assert one_line(done.stderr).startswith(f"pong-mp: error: {message}")
    assert {p.name: p.read_bytes() for p in run.iterdir() if p.is_file()} == before
    assert stat_module.S_ISFIFO(os.lstat(tmp_path / "fifo.png").st_mode)


# -- degenerate numbers --------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("option", "message"),
    [
        (["--lr", "1e308"], "--lr must be at most 1 "),
        (["--batch-size", "100000000"], "--batch-size must be at most 10,000 episodes"),
        (["--entropy-bonus", "1e308"], "--entropy-bonus must be between -10 and 10 "),
        (["--entropy-bonus", "-1e308"], "--entropy-bonus must be between -10 and 10 "),
        (["--entropy-drop-to", "1e308,0,0"], "--entropy-drop-to must be between -10 and 10"),
        (["--entropy-drop-at", "nan"], "--entropy-drop-at must be a finite number"),
        (["--episode-timeout", "1e-9"], "--episode-timeout must be at least 1 s"),
    ],
)
def test_options_that_cannot_make_progress_are_refused_in_one_line(
    tmp_path: Path, option: list[str], message: str
) -> None:
    run_dir = tmp_path / "R"
    done = pong_mp_here("train", *FAKE, *option, "--run-dir", str(run_dir))
    assert done.returncode == 2, done.stderr
    assert one_line(done.stderr).startswith(f"pong-mp: error: {message}")
    assert not run_dir.exists()


def test_an_update_that_overflows_prints_no_numpy_warning() -> None:
    # --lr 1 is allowed, and far too large: a gradient whose square overflows must be
    # applied or refused (NonFiniteError: one line, exit 1) without numpy's RuntimeWarnings.
    config = TrainConfig(hidden=8, lr=1.0, batch_size=1, algo="pg", policy="mlp")
    state = initial_state(config)
    summed = BatchSum(0, 1, np.empty(len(state.params)))
    grad = np.full(len(state.params), 1e30, dtype=np.float32)
    stats = EpisodeStats(0, -21.0, 100, 0.1, 50.0)
    summed.add(EpisodeResult(stats, grad))
    summed.total *= 1e250  # 1e280, a finite float64 whose square is beyond any float
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        try:
            new_state, _ = apply(make_learner(config), state, summed)
        except NonFiniteError:
            return
    assert np.isfinite(new_state.params).all()




# -- hostile input ----------------------------------------------------------------------------


def tree(root: Path) -> dict[str, bytes]:
    """Every file under `root` by its path, with its bytes: what "nothing written" compares."""
    return {str(p): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def claiming(path: Path, key: str, shape: tuple[int, ...]) -> None:
    """Rewrite the .npz `path` with a header for its array `key` that claims `shape` (a few
    bytes that may say petabytes), the bytes it held after it."""
    with zipfile.ZipFile(path) as archive:
        members = {info.filename: archive.read(info) for info in archive.infolist()}
    header = io.BytesIO()
    np.lib.format.write_array_header_1_0(
        header, {"descr": "<f8", "fortran_order": False, "shape": shape}
    )
    members[f"{key}.npy"] = header.getvalue() + members[f"{key}.npy"]
    with zipfile.ZipFile(path, "w") as archive:
        for name, data in members.items():
            archive.writestr(name, data)


def test_a_file_whose_header_claims_petabytes_is_one_line(tmp_path: Path, fake_checkpoint) -> None:
    # numpy allocates an array before it reads it: the claim is checked first, on the one
    # path every reader of a checkpoint or model takes.
    run_dir = tmp_path / "run"
    shutil.copytree(fake_checkpoint.parent, run_dir)
    model = checkpoint.export_model(run_dir, tmp_path / "model.npz")
    for path in (run_dir / "checkpoint.npz", model):
        claiming(path, "W1", (2**40, 6400))
    claim = "W1.npy claims float64 (1099511627776, 6400), 56,294,995,342,131,200 bytes, more than"
    before = tree(tmp_path)
    for args, name in [
        (["play", str(model)], model),
        (["play", str(run_dir)], run_dir / "checkpoint.npz"),
        (["export", str(run_dir), str(tmp_path / "out.npz")], run_dir / "checkpoint.npz"),
        (["train", "--resume", "--run-dir", str(run_dir)], run_dir / "checkpoint.npz"),
        (["train", "--fork-from", str(run_dir), "--run-dir", str(tmp_path / "fork")],
         run_dir / "checkpoint.npz"),
    ]:  # fmt: skip
        done = pong_mp_here(*args)
        assert done.returncode == 2, done.stderr
        assert one_line(done.stderr).startswith(
            f"pong-mp: error: {name}: damaged checkpoint ({claim}"
        )
    with pytest.raises(checkpoint.CheckpointError, match=re.escape(claim)):
        api.Agent.load(model)
    with pytest.raises(checkpoint.CheckpointError, match=re.escape(claim)):
        api.train(run_dir, resume=True, progress=False)
    claiming(run_dir / "checkpoint.npz", "batch", (2**60,))  # what a stop message reads
    assert checkpoint_on_disk(run_dir) is None
    before[str(run_dir / "checkpoint.npz")] = (run_dir / "checkpoint.npz").read_bytes()
    assert tree(tmp_path) == before


def test_a_claim_of_an_endless_dimension_beside_an_empty_one_is_one_line(
    tmp_path: Path, fake_checkpoint
) -> None:
    # (2**70, 0) claims no bytes, but numpy overflows as it counts the elements.
    model = checkpoint.export_model(fake_checkpoint, tmp_path / "model.npz")
    claiming(model, "W1", (2**70, 0))
    claim = "W1.npy claims float64 (1180591620717411303424, 0): no pong-mp array is that long"
    done = pong_mp_here("play", str(model))
    assert done.returncode == 2, done.stderr
    assert one_line(done.stderr) == f"pong-mp: error: {model}: damaged checkpoint ({claim})"
    with pytest.raises(checkpoint.CheckpointError, match=re.escape(claim)):
        api.Agent.load(model)


def test_members_pong_mp_never_writes_are_not_unpacked(tmp_path: Path, fake_checkpoint) -> None:
    # A few kilobytes of zip may unpack to hundreds of megabytes: only pong-mp's own arrays
    # are read from a file.
    import tracemalloc

    model = checkpoint.export_model(fake_checkpoint, tmp_path / "model.npz")
    padding = {"descr": "|u1", "fortran_order": False, "shape": (100 * 2**20,)}
    with (
        zipfile.ZipFile(model, "a", compression=zipfile.ZIP_DEFLATED) as archive,
        archive.open("padding.npy", "w", force_zip64=True) as member,
    ):
        np.lib.format.write_array_header_1_0(member, padding)
        for _ in range(100):
            member.write(bytes(2**20))
    assert model.stat().st_size < 1_000_000
    tracemalloc.start()
    try:
        api.Agent.load(model)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 20_000_000
    assert "padding" not in checkpoint.read_arrays(model)


def test_a_file_that_holds_an_array_twice_is_one_line(tmp_path: Path, fake_checkpoint) -> None:
    # A zip may name a member twice: numpy reads the last, other readers the first, so which
    # weights it holds is not clear.
    model = checkpoint.export_model(fake_checkpoint, tmp_path / "model.npz")
    zeros = io.BytesIO()
    np.save(zeros, np.zeros_like(checkpoint.read_arrays(model)["W2"]))
    with warnings.catch_warnings(), zipfile.ZipFile(model, "a") as archive:
        warnings.simplefilter("ignore")  # zipfile's "Duplicate name": the point here
        archive.writestr("W2.npy", zeros.getvalue())
    before = model.read_bytes()
    done = pong_mp_here("play", str(model))
    assert done.returncode == 2, done.stderr
    assert one_line(done.stderr) == (
        f"pong-mp: error: {model}: damaged checkpoint (it holds W2 twice)"
    )
    with pytest.raises(checkpoint.CheckpointError, match=re.escape("it holds W2 twice")):
        api.Agent.load(model)
    assert model.read_bytes() == before


def test_a_model_without_hidden_units_is_refused(tmp_path: Path, fake_checkpoint) -> None:
    model = checkpoint.export_model(fake_checkpoint, tmp_path / "model.npz")
    with np.load(model) as npz:
        arrays = dict(npz)
    arrays["W1"], arrays["W2"] = arrays["W1"][:0], arrays["W2"][:0]
    arrays["config"] = np.str_(json.dumps({**json.loads(str(arrays["config"])), "hidden": 0}))
    np.savez(model, **arrays)
    with pytest.raises(checkpoint.CheckpointError, match="W1 has 0 hidden units, not 1 to 4096"):
        api.Agent.load(model)


DEEP = "[" * 5000 + "]" * 5000
"""JSON nested 5000 deep: Python's parser recurses, and gives up near 1000."""


def test_json_nested_too_deep_is_one_line(tmp_path: Path, fake_checkpoint) -> None:
    deep = "JSON nested more than 32 levels deep"
    run_dir = tmp_path / "run"
    shutil.copytree(fake_checkpoint.parent, run_dir)
    config = json.loads((run_dir / CONFIG_FILE).read_text())
    (run_dir / CONFIG_FILE).write_text(json.dumps({**config, "env_kwargs": "X"}).replace(
        '"X"', DEEP
    ))  # fmt: skip
    logged = tmp_path / "logged"
    shutil.copytree(fake_checkpoint.parent, logged)
    (logged / "metrics.jsonl").write_text(DEEP + "\n")
    bad_config = f"{run_dir}/config.json: not a valid pong-mp config ({deep})"
    before = tree(tmp_path)
    for args, message in [
        (["train", "--resume", "--run-dir", str(run_dir)], bad_config),
        (["train", "--fork-from", str(run_dir), "--run-dir", str(tmp_path / "fork")],
         bad_config),
        (["plot", str(logged), "-o", str(tmp_path / "p.png")],
         f"{logged}/metrics.jsonl, line 1: damaged metrics record ({deep})"),
        (["train", *FAKE, "--env-arg", f"points_to_win={DEEP}", "--run-dir",
          str(tmp_path / "new")], f"Invalid value for --env-arg: points_to_win: {deep}"),
    ]:  # fmt: skip
        done = pong_mp_here(*args)
        assert done.returncode == 2, done.stderr
        assert one_line(done.stderr) == f"pong-mp: error: {message}"
    with pytest.raises(ConfigError, match=re.escape(bad_config)):
        api.train(run_dir, resume=True, progress=False)
    assert tree(tmp_path) == before


QUITS = """\
import sys

import gymnasium as gym

from pong_mp.envs.fake_pong import FakePong


class Quits(FakePong):
    def __init__(self, **kwargs):
        sys.exit(0)


gym.register(id="Quits-v0", entry_point=Quits)
"""
"""An env module whose env's constructor calls sys.exit."""


@pytest.mark.parametrize(
    ("source", "env", "message"),
    [
        ("raise RuntimeError('no emulator here')\n", "Pong-v0",
         "env id '{m}:Pong-v0': cannot import {m} (RuntimeError: no emulator here)"),
        ("def broken(:\n", "Pong-v0", "env id '{m}:Pong-v0': cannot import {m} (SyntaxError: "),
        ("import sys\nsys.exit(0)\n", "Pong-v0",
         "env id '{m}:Pong-v0': importing {m} called sys.exit(0)"),
        (QUITS, "Quits-v0", "{m}:Quits-v0 cannot be made with no --env-arg: it called sys.exit(0)"),
        ("class Odd(BaseException):\n    pass\nraise Odd('not an Exception')\n", "Pong-v0",
         "env id '{m}:Pong-v0': cannot import {m} (Odd: not an Exception)"),
        ("raise GeneratorExit('g')\n", "Pong-v0",
         "env id '{m}:Pong-v0': cannot import {m} (GeneratorExit: g)"),
        ("class Mute(Exception):\n    def __str__(self):\n        raise RuntimeError\nraise Mute\n",
         "Pong-v0", "env id '{m}:Pong-v0': cannot import {m} (Mute)"),
        (QUITS.replace("sys.exit(0)", "raise GeneratorExit('no game')").replace("Quits", "Ends"),
         "Ends-v0", "{m}:Ends-v0 cannot be made with no --env-arg: no game"),
    ],
    ids=["raises", "syntax_error", "sys_exit", "constructor_sys_exit", "base_exception",
         "generator_exit", "unprintable", "constructor_base_exception"],
)  # fmt: skip
def test_an_env_module_that_fails_is_one_line_before_any_worker(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    request: pytest.FixtureRequest,
    fake_checkpoint,
    clean_system,
    source: str,
    env: str,
    message: str,
) -> None:
    # The coordinator imports the module first: one that fails never reaches a worker, and
    # one that calls sys.exit does not end pong-mp with its status (0) and nothing said.
    module = f"hostile_env_{request.node.callspec.id}"
    env_module(tmp_path, monkeypatch, module, source)
    monkeypatch.syspath_prepend(tmp_path)  # for the API, in this process
    message = message.format(m=module)
    run_dir = tmp_path / "R"
    for args in (["train", "--run-dir", str(run_dir)], ["play", str(fake_checkpoint)]):
        done = pong_mp(*args, "--env", f"{module}:{env}")
        assert done.returncode == 2, done.stderr
        assert one_line(done.stderr).startswith(f"pong-mp: error: {message}")
    with pytest.raises(ConfigError, match=re.escape(message)):
        api.train(run_dir, env=f"{module}:{env}", progress=False)
    assert [p.name for p in tmp_path.iterdir() if p.name != "__pycache__"] == [f"{module}.py"]


MEANINGS = """\
import pathlib
import sys

import gymnasium as gym

from pong_mp.envs.fake_pong import FakePong


class Named(FakePong):
    def __init__(self, how="raise", **kwargs):
        super().__init__(**kwargs)
        self.how = how

    def get_action_meanings(self):
        if self.how == "raise":
            raise RuntimeError("no names here")
        if self.how == "exit":
            sys.exit(0)
        return None if self.how == "none" else ["NOOP"]

    def close(self):
        pathlib.Path(__file__).with_suffix(".closed").touch()


gym.register(id="Named-v0", entry_point=Named, disable_env_checker=True)
"""
"""An env module whose env's get_action_meanings fails as its `how` argument says, and whose
close leaves the file named_env.closed."""


@pytest.mark.parametrize(
    ("how", "said"),
    [
        ("raise", "failed: RuntimeError: no names here"),
        ("exit", "failed: it called sys.exit(0)"),
        ("none", "gave None, not a list of its actions' names"),
        ("short", "gave ['NOOP'], not a list of its actions' names"),
    ],
)
def test_an_env_whose_action_names_fail_is_one_line_and_closed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, fake_checkpoint: Path, how: str, said: str
) -> None:
    # Read outside any handler: a traceback, exit 1, the env never closed; sys.exit(0) ended
    # train and play with status 0 and nothing said.
    env_module(tmp_path, monkeypatch, "named_env", MEANINGS)
    closed = tmp_path / "named_env.closed"
    run_dir = tmp_path / "R"
    env = ["--env", "named_env:Named-v0", "--env-arg", f"how={how}"]
    for args in (["train", *env, "--run-dir", str(run_dir)], ["play", str(fake_checkpoint), *env]):
        done = pong_mp(*args)
        assert done.returncode == 2, done.stderr
        assert one_line(done.stderr).startswith(
            f"pong-mp: error: named_env:Named-v0's get_action_meanings() {said}"
        ), done.stderr
        assert closed.exists()
        closed.unlink()
    assert not run_dir.exists()


# -- an env that breaks as it plays --------------------------------------------------------------

BREAKS = """\
import sys

import gymnasium as gym

from pong_mp.envs.fake_pong import FakePong


class Breaks(FakePong):
    def __init__(self, how="raise", **kwargs):
        super().__init__(**kwargs)
        self.how = how

    def step(self, action):
        obs, reward, terminated, truncated, info = super().step(action)
        if self.how == "raise":
            raise RuntimeError("the paddle fell off")
        if self.how == "exit":
            sys.exit(0)
        if self.how == "none":
            obs = None
        if self.how == "unended":
            terminated = None
        if self.how == "inf" and reward:
            reward = float("inf")
        return obs, reward, terminated, truncated, info


gym.register(id="Breaks-v0", entry_point=Breaks, disable_env_checker=True)
"""
"""An env module whose env breaks as it plays, as its `how` argument says."""


@pytest.fixture
def breaking_env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    """The id of BREAKS's env, its module importable by the commands the test runs."""
    env_module(tmp_path, monkeypatch, "breaking_env", BREAKS)
    return "breaking_env:Breaks-v0"


@pytest.mark.parametrize(
    ("how", "message"),
    [
        ("raise", "RuntimeError: the paddle fell off"),
        ("exit", "it called sys.exit(0)"),
        ("none", "ValueError: the env gave None for a frame, not a uint8 array of (210, 160, 3)"),
        ("unended", "TypeError: the env gave None for terminated, not a bool"),  # played forever
    ],
)
def test_an_env_that_breaks_as_play_plays_it_is_one_line(
    breaking_env: str, fake_checkpoint, how: str, message: str
) -> None:
    # Not "recording to None failed", and not exit 0 with no result for sys.exit.
    done = pong_mp("play", str(fake_checkpoint), "--env", breaking_env, "--env-arg", f"how={how}")
    assert done.returncode == 1, done.stderr
    assert "Traceback" not in done.stderr
    # The line before it is the warning that the policy was trained on another env.
    assert done.stderr.splitlines()[-1].startswith(
        f"pong-mp: error: {breaking_env} failed while playing: {message}"
    ), done.stderr


@pytest.mark.parametrize("preset", ["ppo", "pg"])
def test_an_env_with_infinite_rewards_fails_the_update_in_one_line_without_warnings(
    tmp_path: Path, breaking_env: str, preset: str, clean_system
) -> None:
    # The workers' sums turn inf and nan: the coordinator's NonFiniteError says so, names the
    # rewards as the cause, and numpy's RuntimeWarnings, from the workers or the coordinator,
    # add nothing before it.
    run_dir = tmp_path / "R"
    done = pong_mp(
        "train", "--env", breaking_env, "--env-arg", "how=inf", "--preset", preset,
        *"--hidden 8 --workers 1 --batch-size 2 --batches 2 --run-dir".split(), str(run_dir),
    )  # fmt: skip
    assert done.returncode == 1, done.stderr
    assert one_line(done.stderr).startswith(
        "pong-mp: error: update 1: the summed gradient is not finite (episode 0's rewards sum to"
        " inf: the env's)"
    )


# -- closed pipes, long paths and empty names on every command ------------------------------------


@pytest.mark.parametrize(
    "args",
    [["--version"], ["--help"], ["train", "--help"], ["export"], []],
    ids=["version", "help", "train-help", "export", "no-command"],
)
def test_a_closed_stdout_ends_any_command_as_sigpipe_would(
    tmp_path: Path, fake_checkpoint, args: list[str]
) -> None:
    # click ends a broken pipe with exit 1 and nothing said; pong-mp's status for it is 141.
    if args == ["export"]:
        args = ["export", str(fake_checkpoint), str(tmp_path / "m.npz")]
    read, write = os.pipe()
    os.close(read)  # the reader is gone before the command writes: `pong-mp ... | true`
    try:
        done = subprocess.run(
            [sys.executable, "-m", "pong_mp", *args], stdout=write, stderr=subprocess.PIPE,
            text=True, timeout=60,
        )  # fmt: skip
    finally:
        os.close(write)
    assert done.returncode == 141, done.stderr
    assert done.stderr == ""
    if args[:1] == ["export"]:  # written whole before its line was printed
        assert checkpoint.load_policy(tmp_path / "m.npz")[1]["hidden"] == 8


def test_a_path_with_a_newline_is_named_on_one_line(tmp_path: Path, fake_checkpoint) -> None:
    # The error line printed the path as it is: two lines for one error.
    odd = tmp_path / "no\nsuch"
    for args, says in (
        (["play", str(odd)], f"{tmp_path}/no\\nsuch: no such checkpoint"),
        (["export", str(fake_checkpoint), str(odd / "m.npz")], "no\\nsuch"),
        (["train", "--fork-from", str(odd), "--run-dir", str(tmp_path / "F")], "no\\nsuch"),
        (["plot", str(tmp_path / "r\rx")], "r\\rx: no metrics.jsonl"),
    ):
        done = pong_mp_here(*args)
        assert done.returncode == 2, done.stderr
        assert says in one_line(done.stderr)
    assert sorted(p.name for p in tmp_path.iterdir()) == []


def test_a_path_too_long_for_the_file_system_is_one_line(tmp_path: Path, fake_checkpoint) -> None:
    long = tmp_path / ("a" * 300)
    model = tmp_path / "m.npz"
    for args in (
        ["train", *FAKE, "--run-dir", str(long)],
        ["train", "--resume", "--run-dir", str(long)],
        ["train", "--fork-from", str(long), "--run-dir", str(tmp_path / "F")],
        ["export", str(fake_checkpoint), f"{long}.npz"],
        ["export", str(long), str(model)],
        ["play", f"{long}.npz"],
        ["play", str(fake_checkpoint), "--record", f"{long}.gif"],
    ):
        done = pong_mp_here(*args)
        assert done.returncode == 2, done.stderr
        line = one_line(done.stderr)
        assert line.startswith(f"pong-mp: error: {str(long)[:40]}..."), line
        assert "path too long for the file system" in line
    assert list(tmp_path.iterdir()) == []


def test_an_empty_run_dir_is_refused_not_taken_for_the_current_directory(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "pong_mp", "train", *FAKE, "--run-dir", ""],
        capture_output=True, text=True, timeout=60, cwd=tmp_path,
    )  # fmt: skip
    assert done.returncode == 2, done.stderr
    assert one_line(done.stderr) == "pong-mp: error: --run-dir must name a directory"
    assert list(tmp_path.iterdir()) == []
    with pytest.raises(ValueError, match="--run-dir must name a directory"):
        api.train(" ", env="FakePong-v0", progress=False)


def test_an_empty_fork_from_is_refused_not_taken_for_the_current_directory(
    tmp_path: Path, fake_checkpoint: Path
) -> None:
    # `--fork-from "$SRC"` with SRC unset: the same line wherever it runs (it was "--fork-from
    # .: nothing to fork from" outside a run).
    shutil.copytree(fake_checkpoint.parent, tmp_path / "a run")
    (tmp_path / "no run").mkdir()
    for here in ("a run", "no run"):
        done = subprocess.run(
            [sys.executable, "-m", "pong_mp", "train", "--fork-from", "", "--run-dir", "../F"],
            capture_output=True, text=True, timeout=60, cwd=tmp_path / here,
        )  # fmt: skip
        assert done.returncode == 2, done.stderr
        assert one_line(done.stderr) == "pong-mp: error: --fork-from must name a run directory"
        assert not (tmp_path / "F").exists()



def test_a_fork_into_its_own_source_run_is_refused(tmp_path: Path, fake_checkpoint) -> None:
    source = fake_checkpoint.parent
    before = {path.name: path.read_bytes() for path in source.iterdir()}
    (tmp_path / "link").symlink_to(source)
    for run_dir in (source / "sub", tmp_path / "link" / "deeper" / "sub"):
        done = pong_mp_here("train", "--fork-from", str(source), "--run-dir", str(run_dir))
        assert done.returncode == 2, done.stderr
        assert f"is inside the run it forks from, {source}" in one_line(done.stderr)
    assert {path.name: path.read_bytes() for path in source.iterdir()} == before

@pytest.mark.parametrize("value", ["NaN", "Infinity", "-Infinity", "1e400"])
def test_an_env_arg_beyond_json_numbers_is_a_word_never_a_nan_in_config_json(
    tmp_path: Path, value: str
) -> None:
    # Python's json reads NaN, Infinity and 1e400 (as inf) and writes them back as NaN and
    # Infinity, which no other JSON reader takes: here they stay the words they were typed.
    run_dir = tmp_path / "R"
    done = pong_mp_here(
        "train", *FAKE, "--env-arg", f"points_to_win={value}", "--run-dir", str(run_dir)
    )
    assert done.returncode == 2, done.stderr
    assert one_line(done.stderr).startswith(
        f"pong-mp: error: FakePong-v0 cannot be made with points_to_win='{value}'"
    )
    assert not run_dir.exists()
    with pytest.raises(ValueError, match=r"not a JSON number|beyond a float's range"):
        config_module.parse_json(f'{{"lr": {value}}}')


def test_a_keyboard_interrupt_from_an_env_module_is_a_stop_in_one_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Python's own KeyboardInterrupt, where pong-mp's handlers are not in place yet: click
    # would print an empty line before its own ending.
    env_module(tmp_path, monkeypatch, "interrupting_env", "raise KeyboardInterrupt\n")
    run_dir = tmp_path / "R"
    done = pong_mp("train", "--env", "interrupting_env:Pong-v0", "--run-dir", str(run_dir))
    assert done.returncode == 130, done.stderr
    assert one_line(done.stderr) == "pong-mp: stopped by SIGINT"
    assert not run_dir.exists()


ODD_ENV = """
import pathlib, threading, time
import gymnasium as gym
from pong_mp.envs.fake_pong import FakePong

HOW = pathlib.Path(__file__).with_suffix(".how").read_text()

def hang():
    pathlib.Path(__file__).with_suffix(".hung").touch()
    time.sleep(3600)

class Odd(FakePong):
    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        if HOW == "hang-make":
            hang()

    def step(self, action):
        if HOW == "hang-step":
            hang()
        if HOW == "print":
            print("stepped")
        return super().step(action)

if HOW == "hang-import":
    hang()
if HOW == "thread":
    threading.Thread(target=time.sleep, args=(3600,), name="forever").start()
if HOW == "print":
    print("imported")
gym.register(id="Odd-v0", entry_point=Odd, disable_env_checker=True, order_enforce=False)
"""
"""An env module that misbehaves in its own process, as the file odd_env.how says."""


def odd_env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, how: str) -> list[str]:
    """ODD_ENV as `how` says, importable by the commands the test starts: their --env."""
    env_module(tmp_path, monkeypatch, "odd_env", ODD_ENV)
    (tmp_path / "odd_env.how").write_text(how)
    return ["--env", "odd_env:Odd-v0", "--env-arg", "points_to_win=1"]


def odd_command(
    command: str, tmp_path: Path, model: Path, env: list[str], *train_args: str
) -> list[str]:
    """`play` of one game with `model` (--json), `bench --compare-envs` of one round, or
    `train` of one small update into tmp_path/R with `train_args`, on `env`."""
    if command == "play":
        return ["play", str(model), *env, "--episodes", "1", "--json"]
    if command == "bench":  # which steps the env in its own process too
        return ["bench", "--compare-envs", *env[:2], "--seconds", "1", "--rounds", "1"]
    return ["train", *env, *train_args, "--batches", "1", "--batch-size", "2", "--hidden", "8",
            "--channels", "4", "-q", "--run-dir", str(tmp_path / "R")]


@pytest.mark.parametrize("command", ["play", "train", "bench"])
@pytest.mark.parametrize("where", ["import", "make", "step"])
def test_an_env_that_hangs_in_this_process_ends_at_the_first_stop_signal(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, fake_checkpoint: Path, command: str,
    where: str, clean_system,
) -> None:
    # A hang in the user's code, where no check of the stop comes: `timeout` or a service
    # manager sends one SIGTERM, and the command must end on it (not on a second one).
    env = odd_env(tmp_path, monkeypatch, f"hang-{where}")
    proc = start(*odd_command(command, tmp_path, fake_checkpoint, env, "--backend", "serial"))
    wait_for((tmp_path / "odd_env.hung").exists, proc)
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=30)
    assert proc.returncode == 143, err
    assert "Traceback" not in err and err.splitlines()[-1].startswith(
        "pong-mp: stopped by SIGTERM"
    ), err
    if command == "train" and where != "step":
        assert not (tmp_path / "R").exists()  # refused before anything was written


def test_a_stop_while_play_reads_its_file_ends_it_at_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A file of many members takes minutes to read (200,000 empty ones: a minute), with no
    # step of play's to stop at.
    from click.testing import CliRunner

    from pong_mp import cli

    def slow_read(path: Path) -> None:
        os.kill(os.getpid(), signal.SIGTERM)
        time.sleep(30)
        raise AssertionError("the stop did not end the read")

    monkeypatch.setattr(cli, "load_policy", slow_read)
    started = time.monotonic()
    result = CliRunner().invoke(cli.main, ["play", str(tmp_path / "model.npz")])
    assert result.exit_code == 143 and time.monotonic() - started < 10, result.output


@pytest.mark.parametrize("command", ["play", "train"])
def test_a_thread_an_env_module_leaves_running_does_not_hold_the_exit(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, fake_checkpoint: Path, command: str,
    clean_system,
) -> None:
    # Python waits at exit for every thread not marked daemon, with the stop signals ignored
    # by then: the finished command would hang for good.
    env = odd_env(tmp_path, monkeypatch, "thread")
    args = odd_command(command, tmp_path, fake_checkpoint, env, "--backend", "serial")
    done = pong_mp(*args, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stderr.splitlines()[-1] == (
        "pong-mp: warning: left 1 thread(s) that pong-mp did not start (an env's?) and that "
        "had not ended 5 s after the command: forever"
    ), done.stderr
    if command == "play":
        assert json.loads(done.stdout)["games"] == 1  # what it printed, all flushed
    else:
        assert checkpoint.load(tmp_path / "R" / "checkpoint.npz")[0].batch == 1


@pytest.mark.parametrize("command", ["play", "train"])
def test_what_an_env_module_prints_stays_out_of_the_commands_output(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, fake_checkpoint: Path, command: str,
    clean_system,
) -> None:
    # play --json's report alone on stdout; a worker's env prints to stderr (bench's too).
    env = odd_env(tmp_path, monkeypatch, "print")
    done = pong_mp(*odd_command(command, tmp_path, fake_checkpoint, env, "--workers", "1"))
    assert done.returncode == 0, done.stderr
    if command == "play":
        assert json.loads(done.stdout)["games"] == 1
        assert "imported" in done.stderr
    assert "stepped" in done.stderr and "stepped" not in done.stdout


SPEAKS = """\
import gymnasium as gym

from pong_mp.envs.fake_pong import FakePong

for line in range(10000):
    print("imported", line)
gym.register(id="Speaks-v0", entry_point=FakePong, disable_env_checker=True)
"""
"""An env module that prints more than a pipe's buffer as it is imported."""


@pytest.mark.parametrize("command", ["play", "train"])
def test_an_env_module_that_prints_to_a_closed_stdout_stops_as_sigpipe_would(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, fake_checkpoint: Path, command: str
) -> None:
    # `pong-mp train --env speaks:Speaks-v0 | head -1`: the module's print met the closed
    # pipe, and its BrokenPipeError was taken for a module that cannot be imported (exit 2).
    env_module(tmp_path, monkeypatch, "speaks", SPEAKS)
    run_dir = tmp_path / "R"
    args = {"play": ["play", str(fake_checkpoint), "--episodes", "1"],
            "train": ["train", "--hidden", "8", "--batches", "1", "--run-dir", str(run_dir)]}
    read, write = os.pipe()
    os.close(read)  # the reader is gone before the module prints
    try:
        done = subprocess.run(
            [sys.executable, "-m", "pong_mp", *args[command], "--env", "speaks:Speaks-v0"],
            stdout=write, stderr=subprocess.PIPE, text=True, timeout=60,
        )  # fmt: skip
    finally:
        os.close(write)
    assert done.returncode == 141, done.stderr
    ending = f"; nothing was written in {run_dir}" if command == "train" else ""
    assert one_line(done.stderr) == f"pong-mp: stopped by SIGPIPE (standard output closed){ending}"
    assert not run_dir.exists()


DEAF = """\
import signal

import gymnasium as gym

from pong_mp.envs.fake_pong import FakePong

signal.signal(signal.SIGINT, signal.SIG_IGN)
signal.signal(signal.SIGTERM, signal.SIG_IGN)
gym.register(id="Deaf-v0", entry_point=FakePong, disable_env_checker=True)
"""
"""An env module that ignores Ctrl-C and SIGTERM as it is imported."""


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT])
def test_an_env_module_that_ignores_the_stop_signals_leaves_the_run_stoppable(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, signum: int, clean_system
) -> None:
    # Ignored on the way in is judged as pong-mp starts: the module's SIG_IGN, set as the
    # coordinator imported it, made the run deaf to kill and Ctrl-C.
    env_module(tmp_path, monkeypatch, "deaf_env", DEAF)
    run_dir = tmp_path / "R"
    args = [*RUN, "--env", "deaf_env:Deaf-v0", "--batches", "1000", "--run-dir", str(run_dir)]
    proc = start("train", *args)
    wait_for(lambda: updates_logged(run_dir) >= 1, proc)
    proc.send_signal(signum)
    _, err = proc.communicate(timeout=30)
    assert proc.returncode == 128 + signum, err
    reached = checkpoint.load(run_dir / "checkpoint.npz")[0].batch
    assert one_line(err) == (
        f"pong-mp: stopped by {signal.Signals(signum).name}; checkpoint saved at update "
        f"{reached} in {run_dir}, continue with --resume"
    )


def test_an_env_that_fails_as_it_closes_is_one_line(
    tmp_path: Path, fake_checkpoint: Path, clean_system
) -> None:
    env = ["--env", CRASHING_PONG, "--env-arg", "crash_episodes=[]", "--env-arg",
           "points_to_win=1"]  # fmt: skip
    run_dir = tmp_path / "R"
    # Refused by the check that makes and closes it, before anything starts.
    for args in (
        ["train", *env, "--env-arg", "close_fails=everywhere", "--run-dir", str(run_dir)],
        ["play", str(fake_checkpoint), *env, "--env-arg", "close_fails=everywhere"],
    ):
        done = pong_mp(*args)
        assert done.returncode == 2, done.stderr
        assert one_line(done.stderr).endswith(
            "failed as it was closed: RuntimeError('CrashingPong: planned failure as it closes')"
        )
        assert not run_dir.exists()
    # In the workers, as they leave after the run: a warning line each, and the run is done.
    done = pong_mp(
        "train", *env, "--env-arg", "close_fails=in_workers", "--workers", "2", "--batches", "1",
        "--batch-size", "2", "--hidden", "8", "--channels", "4", "-q", "--run-dir", str(run_dir),
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert "Traceback" not in done.stderr
    assert sorted(done.stderr.splitlines()[-2:]) == [
        f"pong-mp: warning: pong-mp-worker-{n}'s env failed as it was closed: "
        "RuntimeError('CrashingPong: planned failure as it closes')"
        for n in (0, 1)
    ], done.stderr


def test_a_fifo_in_a_run_directory_is_refused_not_waited_on(
    tmp_path: Path, fake_checkpoint
) -> None:
    # Reading a FIFO blocks until a writer comes, and a first stop signal interrupts no read.
    run_dir = tmp_path / "R"
    shutil.copytree(fake_checkpoint.parent, run_dir)
    metrics = (run_dir / "metrics.jsonl").read_bytes()
    for name in ("metrics.jsonl", "config.json"):  # a config.json named, not taken for missing
        (run_dir / name).unlink()
        os.mkfifo(run_dir / name)
        for args in (["--resume"], ["--fork-from", str(run_dir)]):
            target = run_dir if args == ["--resume"] else tmp_path / "F"
            done = pong_mp("train", *args, "--run-dir", str(target), timeout=60)
            assert done.returncode == 2, done.stderr
            assert one_line(done.stderr) == (
                f"pong-mp: error: cannot read {run_dir}/{name}: not a regular file (a FIFO or "
                "a device)"
            )
        assert not (tmp_path / "F").exists()
        if name == "metrics.jsonl":
            (run_dir / name).unlink()
            (run_dir / name).write_bytes(metrics)
    # plot reads config.json for its title only: drawn without it.
    done = pong_mp("plot", str(run_dir), "-o", str(tmp_path / "p.png"), timeout=60)
    assert done.returncode == 0, done.stderr
    assert (tmp_path / "p.png").stat().st_size > 0


def test_a_path_stdout_cannot_encode_is_escaped(tmp_path: Path) -> None:
    # PYTHONIOENCODING=ascii (or a C locale's stdout) and a run directory named in Unicode:
    # the banner was a UnicodeEncodeError traceback.
    run_dir = tmp_path / "r\u00fcn"
    done = pong_mp(
        "train", *FAKE, "--workers", "1", "--batch-size", "1", "--batches", "1",
        "--no-tensorboard", "--run-dir", str(run_dir),
        env={**os.environ, "PYTHONIOENCODING": "ascii"},
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert "r\\xfcn" in done.stdout.splitlines()[0]
    assert checkpoint.load(run_dir / "checkpoint.npz")[0].batch == 1


def test_an_error_line_does_not_echo_megabytes(tmp_path: Path) -> None:
    # The value is said back in the line: 100,000 digits were 100 kB of one line.
    done = pong_mp_here(
        "train", "--env", "FakePong-v0", "--env-arg", "points_to_win=" + "9" * 100_000,
        "--run-dir", str(tmp_path / "R"),
    )  # fmt: skip
    assert done.returncode == 2, done.stderr
    line = one_line(done.stderr)
    assert line.startswith("pong-mp: error: FakePong-v0 cannot be made with points_to_win=")
    assert len(line) < 2_100 and " characters)... " in line


def test_a_terminal_gone_stops_a_run_that_shows_its_bar(tmp_path: Path) -> None:
    # The terminal's window closed without a SIGHUP reaching the run: writes fail with EIO,
    # which tqdm swallows. The run trained on to its end unseen, then exited 141 silently.
    run_dir = tmp_path / "R"
    master, terminal = pty.openpty()
    proc = subprocess.Popen(
        [sys.executable, "-m", "pong_mp", "train", *RUN, "--batches", "200", "--run-dir",
         str(run_dir)],
        stdin=subprocess.DEVNULL, stdout=terminal, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    os.close(terminal)
    shown = b""
    try:
        # The banner's whole line, above the bar: a terminal gone before its newline is
        # written is a stop before the first update, which leaves no checkpoint.
        while not re.search(rb"pong-mp: FakePong-v0[^\n]*\n", shown):
            assert select.select([master], [], [], 60)[0], shown
            shown += os.read(master, 4096)
    finally:
        os.close(master)
    code = proc.wait(timeout=120)
    err = proc.stderr.read() if proc.stderr is not None else ""
    assert code == 141, err
    reached = checkpoint.load(run_dir / "checkpoint.npz")[0].batch
    assert reached == updates_logged(run_dir) < 200
    assert one_line(err).startswith("pong-mp: stopped by SIGPIPE (standard output closed)")


UNSEEN = """\
import sys

import gymnasium as gym

from pong_mp.envs.fake_pong import FakePong

sys.stdout = None
gym.register(id="Unseen-v0", entry_point=FakePong, disable_env_checker=True)
"""
"""An env module that sets sys.stdout to None as it is imported."""


def test_an_env_module_that_sets_stdout_to_none_is_a_closed_stdout(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The progress lines' reporter took None for a stream: an AttributeError traceback.
    env_module(tmp_path, monkeypatch, "unseen", UNSEEN)
    run_dir = tmp_path / "R"
    done = pong_mp("train", "--env", "unseen:Unseen-v0", "--hidden", "8", "--batches", "1",
                   "--run-dir", str(run_dir))  # fmt: skip
    assert done.returncode == 141, done.stderr
    assert one_line(done.stderr) == (
        f"pong-mp: stopped by SIGPIPE (standard output closed); nothing was written in {run_dir}"
    )


MUTED = """\
import sys

import gymnasium as gym

sys.stderr = None


def _refuse(**kwargs):
    raise ValueError("no such table")


gym.register(id="Muted-v0", entry_point=_refuse, disable_env_checker=True)
"""
"""An env module that sets sys.stderr to None as it is imported, and whose env cannot be made."""


def test_an_env_module_that_sets_stderr_to_none_still_gets_its_error_said(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The error line went to None: exit 2 with nothing said.
    env_module(tmp_path, monkeypatch, "muted", MUTED)
    done = pong_mp("train", "--env", "muted:Muted-v0", "--batches", "1",
                   "--run-dir", str(tmp_path / "R"))  # fmt: skip
    assert done.returncode == 2, done.stderr
    assert one_line(done.stderr).startswith("pong-mp: error: muted:Muted-v0 cannot be made")
    assert "no such table" in done.stderr


def test_a_quiet_run_whose_last_line_meets_a_closed_stdout_says_so(tmp_path: Path) -> None:
    # -q writes one line, the summary, at the end: to a closed stdout, exit 141 in silence.
    run_dir = tmp_path / "R"
    done = subprocess.run(
        [sys.executable, "-m", "pong_mp", "train", *RUN, "--batches", "2", "-q",
         "--no-tensorboard", "--run-dir", str(run_dir)],
        stderr=subprocess.PIPE, text=True, timeout=120, preexec_fn=lambda: os.close(1),
    )  # fmt: skip
    assert done.returncode == 141, done.stderr
    assert one_line(done.stderr).startswith(
        "pong-mp: stopped by SIGPIPE (standard output closed) at its last line; done: 2 updates"
    )
    assert checkpoint.load(run_dir / "checkpoint.npz")[0].batch == updates_logged(run_dir) == 2
