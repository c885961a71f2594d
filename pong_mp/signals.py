"""Stop signals: recorded when they come, raised as Interrupted where the code can stop.

SIGINT (Ctrl-C), SIGTERM and SIGHUP (a closed terminal or SSH session) stop a run alike, as
a closed standard output does (141): the last complete update is saved, workers and shared
memory go, and the process exits 128 + the signal's number. A repeat more than
REPEAT_SECONDS after the stop cuts it short (a save hanging on a slow disk); a sooner one is
that stop again, as coreutils `timeout` signals the run and then its whole process group.

A handler only records the stop; `check_stop` raises it at safe points (each result back at
the trainer, each step played), so a stop never lands inside a finalizer, where Python could
only print it, nor between a shared-memory block's making and its keeping. Under PEP 475 a
handler that does not raise lets a blocked select() go on, and a signal taken by another
thread (TensorBoard's writer, Ray's) never interrupts the main thread's wait: so the handlers
come with `signal.set_wakeup_fd` on a pipe, written by the C-level handler from any thread,
which `wait` watches. What no fd can wake (Ray, a process pool) waits in POLL_SECONDS slices.
Only a repeat raises from its handler: the run is already stopping, and cutting that short
is the point.
"""

from __future__ import annotations

import contextlib
import os
import signal
import time
from collections.abc import Iterator
from multiprocessing import connection
from types import FrameType
from typing import Any

STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
WORKER_IGNORES = (signal.SIGINT, signal.SIGHUP)
"""What workers ignore from their first instruction: a terminal sends these to the whole
process group, and the coordinator stops its workers itself, after saving."""
REPEAT_SECONDS = 1.0
"""A stop signal this soon after the stop is that stop again: a person who means to cut a
stop short sees it hang first."""
POLL_SECONDS = 0.25
"""The longest a wait that no signal wakes goes on before it looks for a stop."""

_stop: Interrupted | None = None  # recorded, not raised yet
_since: float | None = None  # when the stop came (None: none since the handlers went in)
_pipe: tuple[int, int] | None = None  # the wakeup fd's read and write ends


class Interrupted(BaseException):
    """The user asked the run to stop (a stop signal, or its output was closed): a
    BaseException, as KeyboardInterrupt, so that `except Exception` cannot swallow it."""

    def __init__(self, signum: int, why: str = "") -> None:
        """A stop by signal `signum`; `why` says what stands for it (an output closed)."""
        name = signal.Signals(signum).name
        super().__init__(f"{name} ({why})" if why else name)
        self.signum = signum
        self.reached: int | None = None
        """The last update the run completed (set by the trainer; None: it never started).
        What is on disk may be older: a second signal can cut the last save short."""

    @property
    def exit_code(self) -> int:
        """The shell convention for death by this signal: 128 + its number."""
        return 128 + self.signum


def output_closed() -> Interrupted:
    """The stop of a run whose standard output was closed: as SIGPIPE's, exit code 141."""
    return Interrupted(signal.SIGPIPE, "standard output closed")


def _record(signum: int, frame: FrameType | None) -> None:
    global _stop, _since
    now = time.monotonic()
    if _since is None:
        _stop, _since = Interrupted(signum), now
    elif now - _since >= REPEAT_SECONDS:
        _since = now
        raise Interrupted(signum)


def check_stop() -> None:
    """Raise the stop a signal recorded, if any, once: called at the safe points."""
    global _stop
    stop, _stop = _stop, None
    if stop is not None:
        raise stop


def _wakeup() -> tuple[int, int]:
    """The wakeup pipe's read and write ends (made on first use), emptied."""
    global _pipe
    if _pipe is None:
        _pipe = os.pipe()
        for end in _pipe:
            os.set_blocking(end, False)
    with contextlib.suppress(BlockingIOError):
        os.read(_pipe[0], 4096)
    return _pipe


def wait(objects: list[Any], timeout: float | None) -> list[Any]:
    """multiprocessing.connection.wait on `objects`, woken by a stop signal, which it raises
    (it may also return early with nothing ready)."""
    fd = _wakeup()[0]
    check_stop()  # after the emptying: a stop recorded before it is not slept through
    ready = connection.wait([*objects, fd], timeout)
    check_stop()
    return [ready_one for ready_one in ready if ready_one != fd]


def _handle() -> tuple[dict[int, Any], int]:
    previous = {s: signal.signal(s, _record) for s in STOP_SIGNALS}
    return previous, signal.set_wakeup_fd(_wakeup()[1], warn_on_full_buffer=False)


def raise_stop_signals() -> None:
    """From now on, stop signals raise Interrupted at safe points: for a command that ends
    the process, so that no window is left where Ctrl-C is Python's KeyboardInterrupt."""
    global _stop, _since
    _stop = _since = None
    _handle()


@contextlib.contextmanager
def stop_signals_raise() -> Iterator[None]:
    """Inside, a stop signal raises Interrupted at the next safe point or on leaving (a
    late repeat at once); one recorded before, under `raise_stop_signals`, on entering."""
    global _stop, _since
    check_stop()
    _since = None  # a notebook's next run takes its first signal
    previous, fd = _handle()
    try:
        yield
        check_stop()
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler)
        signal.set_wakeup_fd(fd)
        _stop = None  # raised, or overtaken by what unwinds: not the next run's


@contextlib.contextmanager
def worker_signals_blocked() -> Iterator[None]:
    """Inside, this thread holds back the signals workers ignore, and processes started
    here inherit that mask through exec: a Ctrl-C to the process group while a worker
    imports finds it deaf, not in a traceback. What reaches this process meanwhile is
    delivered on leaving."""
    old = signal.pthread_sigmask(signal.SIG_BLOCK, WORKER_IGNORES)
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, old)


def ignore_in_worker() -> None:
    """In a worker process: ignore what the coordinator handles for it (a pending one is
    dropped), and take signals again."""
    for s in WORKER_IGNORES:
        signal.signal(s, signal.SIG_IGN)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, WORKER_IGNORES)


def start_resource_tracker() -> None:
    """Start multiprocessing's resource tracker with SIGHUP ignored (it already ignores SIGINT
    and SIGTERM): a closed terminal hangs up the whole process group, and a tracker killed
    then would print warnings about blocks the coordinator unlinks itself a moment later.
    An ignored disposition is the one thing a process inherits through exec."""
    import threading
    from multiprocessing import resource_tracker

    if threading.current_thread() is not threading.main_thread():
        resource_tracker.ensure_running()  # only the main thread may set dispositions
        return
    previous = signal.signal(signal.SIGHUP, signal.SIG_IGN)
    try:
        resource_tracker.ensure_running()
    finally:
        signal.signal(signal.SIGHUP, previous)
