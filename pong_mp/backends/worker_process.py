"""The local backend's worker process: its main loop and the messages it exchanges with the
pool (`local.py`) over its own duplex pipe.

A worker (docs/how-it-works.md, 'The pool') attaches to the shared weights block and to its
own gradient slot, and does tasks with one EpisodeWorker until told to stop:

    coordinator -> worker   Play(version, task, slot) | Stop()
    worker -> coordinator   Ready() once set up (or Failed(None, traceback)), then
                            Done(stats, gradient, slot) or Failed(index, traceback) a task

The gradient never goes through the pipe: the worker writes it into its shared slot. With
--algo ppo a play gives no gradient: its data comes back in Done's statistics, and its
passes go out without it to the worker that keeps it (`kept.py`), with it to any other.
"""

from __future__ import annotations

import contextlib
import ctypes
import multiprocessing as mp
import os
import signal
import sys
import threading
import time
import traceback
from collections.abc import Callable, Iterator
from multiprocessing.connection import Connection
from multiprocessing.context import BaseContext
from multiprocessing.process import BaseProcess
from typing import Any, NamedTuple

from pong_mp.backends.base import RolloutSpec, prepare_worker_process
from pong_mp.backends.episode_worker import EpisodeWorker
from pong_mp.backends.shm import BlockShape, SharedGradient, SharedWeights, start_resource_tracker
from pong_mp.episode import EpisodeStats, Task

WORKER_IGNORES = (signal.SIGINT, signal.SIGHUP)
"""What workers ignore from their first instruction: a terminal sends these to the whole
process group, and the coordinator stops its workers itself, after saving."""


@contextlib.contextmanager
def worker_signals_blocked() -> Iterator[None]:
    """Inside, this thread holds back the signals workers ignore, and processes started here
    inherit that mask: a Ctrl-C while a worker imports finds it deaf, not in a traceback.
    What reaches this process meanwhile is taken by its handler (in another thread, or on
    leaving). multiprocessing's resource tracker is started first: it unblocks SIGINT in the
    thread that starts it, which a pool or a lock made inside would otherwise be."""
    start_resource_tracker()
    old = signal.pthread_sigmask(signal.SIG_BLOCK, WORKER_IGNORES)
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, old)


@contextlib.contextmanager
def main_file_hidden_unless_a_file() -> Iterator[None]:
    """Inside, a `__main__.__file__` that names no file (`<stdin>`: `python - < script.py`, a
    heredoc) is hidden: a spawned worker would run it again as a path and die. The worker
    then starts as under `python -c` or Jupyter, without the script, which it needs not."""
    main = sys.modules.get("__main__")
    path = getattr(main, "__file__", None)
    if not isinstance(path, str) or os.path.isfile(path):
        yield
        return
    del main.__file__  # type: ignore[union-attr]
    try:
        yield
    finally:
        main.__file__ = path  # type: ignore[union-attr]


def start_process(
    context: BaseContext,
    target: Callable[..., None],
    args: tuple[Any, ...],
    name: str | None = None,
    duplex: bool = False,
) -> tuple[BaseProcess, Connection]:
    """A daemon process of `context` started on target(conn, *args), `conn` its end of a new
    pipe; returns it and this end. It starts deaf to the terminal's signals
    (`worker_signals_blocked`), without a __main__ that names no file; a start that fails
    (OSError: a limit on processes or open files) leaves neither end open."""
    ours, theirs = context.Pipe(duplex=duplex)
    process = context.Process(target=target, name=name, args=(theirs, *args), daemon=True)
    try:
        with worker_signals_blocked(), main_file_hidden_unless_a_file():
            process.start()
    except BaseException:
        ours.close()
        raise
    finally:
        theirs.close()
    return process, ours


def how_it_ended(process: BaseProcess) -> str:
    """What ended `process`'s pipe: "died (exit code N)", waited for up to a second (a pipe
    closes a moment before its process exits), or "closed its pipe" where it lives on."""
    process.join(timeout=1.0)
    code = process.exitcode
    return "closed its pipe" if code is None else f"died (exit code {code})"


def ignore_in_worker() -> None:
    """In a worker: ignore what the coordinator handles (dropping any pending), unblocked."""
    for s in WORKER_IGNORES:
        signal.signal(s, signal.SIG_IGN)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, WORKER_IGNORES)


def stdout_to_stderr() -> None:
    """In a worker: what its env prints (from Python or compiled code) goes to stderr, so that
    a command's standard output (play's and bench's --json, train's progress) stays its own."""
    with contextlib.suppress(OSError):
        os.dup2(2, 1)


def exit_with_parent(parent_pid: int) -> None:
    """In a child process: end it within a second of the death (even by SIGKILL) of its
    parent, `parent_pid`, from a thread; a process deep in an episode would not see its pipe
    close."""
    threading.Thread(target=_exit_when_orphaned, args=(parent_pid,), daemon=True).start()


def _exit_when_orphaned(parent_pid: int) -> None:
    while True:
        time.sleep(0.5)
        if os.getppid() != parent_pid:
            os._exit(1)


def _set_os_process_name(name: str) -> None:
    # So that ps, top and our leak checks see "pong-mp-worker-" (Linux keeps 15 bytes).
    if sys.platform.startswith("linux"):
        with contextlib.suppress(OSError, AttributeError):
            ctypes.CDLL(None).prctl(15, name.encode()[:15], 0, 0, 0)  # 15 = PR_SET_NAME


class Ready(NamedTuple):
    """Worker -> coordinator: set up, waiting for episodes."""


class Done(NamedTuple):
    """Worker -> coordinator: a task was done; its gradient, if any, is in slot `slot`."""

    stats: EpisodeStats
    gradient: bool  # whether the slot holds a gradient (`Task.gradient`)
    slot: int = 0


class Failed(NamedTuple):
    """Worker -> coordinator: setting up (index None) or an episode raised."""

    index: int | None
    traceback: str  # the worker's, formatted


class Play(NamedTuple):
    """Coordinator -> worker: do `task` with weights `version`, its gradient into `slot`."""

    version: int  # checked against shared memory
    task: Task
    slot: int = 0


class Stop(NamedTuple):
    """Coordinator -> worker: close the env and exit."""


def gradient_slots(spec: RolloutSpec) -> int:
    """Each worker's gradient slots, where /dev/shm has room: two with the actor-critic,
    whose short passes come back to back (the next is sent while the coordinator reads the
    last one's gradient); one otherwise."""
    return 2 if spec.value_head else 1


def block_shapes(spec: RolloutSpec, slots: int = 1) -> tuple[BlockShape, BlockShape]:
    """The shapes of the weights block and of each worker's gradient block (`slots` slots),
    for the coordinator that creates them and the workers that attach."""
    value = spec.value_head
    return BlockShape(spec.shape, spec.lag + 1, value), BlockShape(spec.shape, slots, value)


def worker_main(
    conn: Connection,
    spec: RolloutSpec,
    weights_name: str,
    grad_name: str,
    parent_pid: int,
    slots: int = 1,
) -> None:
    """Loop of one worker (messages in the module's docstring); its gradient block has
    `slots` slots. The env is closed on every exit path."""
    ignore_in_worker()
    stdout_to_stderr()
    _set_os_process_name(mp.current_process().name)
    exit_with_parent(parent_pid)
    worker = EpisodeWorker(spec, keep=True)
    weights = None
    grad = None
    try:
        prepare_worker_process()
        try:
            weights_shape, grad_shape = block_shapes(spec, slots)
            weights = SharedWeights.attach(weights_name, weights_shape)
            grad = SharedGradient.attach(grad_name, grad_shape)
            worker.open()
        except Exception:
            conn.send(Failed(None, traceback.format_exc()))
            return
        conn.send(Ready())
        while True:
            message: Play | Stop = conn.recv()
            if isinstance(message, Stop):
                return
            slot = message.slot
            try:
                result = worker.play(
                    weights.read(message.version), message.task, grad.slots[slot],
                    grad.zeroed(slot),
                )
            except BaseException:  # the env's, even sys.exit: this process ignores Ctrl-C
                conn.send(Failed(message.task.index, traceback.format_exc()))
            else:
                # The gradient, if any, is in the shared slot.
                conn.send(Done(result.stats, result.grad is not None, slot))
    except (EOFError, BrokenPipeError, ConnectionResetError):
        pass  # the coordinator is gone: nothing left to do
    finally:
        try:
            worker.close()
        except Exception as exc:  # the user's env, on the way out: a line, not a traceback
            name = mp.current_process().name
            line = f"pong-mp: warning: {name}'s env failed as it was closed: {exc!r}\n"
            with contextlib.suppress(OSError):
                os.write(2, line.encode())  # in one write: other workers write theirs too
        for block in (weights, grad):
            if block is not None:
                block.close()
        conn.close()
