"""Stop signals (SIGINT, SIGTERM, SIGHUP): handlers record them and `check_stop` raises
Interrupted where the code can stop (each result back at the trainer, each step played), never
in a finalizer, where Python would only print it. A handler that does not raise lets a blocked
select() go on (PEP 475), and a signal another thread takes (TensorBoard's, Ray's) does not
interrupt it at all: so the handlers come with `signal.set_wakeup_fd` on a pipe, written by the
C-level handler from any thread, that `wait` watches; what no fd wakes (Ray, a process pool)
waits in POLL_SECONDS slices. Only a repeat over REPEAT_SECONDS after the stop raises in its
handler, to cut a hanging save short; a sooner one is the same stop (coreutils `timeout`
signals the run, then its process group).
"""

from __future__ import annotations

import contextlib
import os
import signal
import time
from collections.abc import Iterator
from multiprocessing import connection

STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
REPEAT_SECONDS = 1.0  # one who means to cut a stop short sees it hang first
POLL_SECONDS = 0.25  # how long a wait that no signal wakes goes on before it checks

_stop: Interrupted | None = None  # recorded, not raised yet
_since: float | None = None  # when the stop came (None: none since the handlers went in)
_pipe = os.pipe()  # the wakeup fd's read and write ends
for _end in _pipe:
    os.set_blocking(_end, False)


class Interrupted(BaseException):
    """A stop the user asked for: a BaseException, as KeyboardInterrupt, past `except Exception`."""

    def __init__(self, signum: int, why: str = "") -> None:
        """A stop by signal `signum`; `why` says what stands for it (an output closed)."""
        super().__init__(signal.Signals(signum).name + (f" ({why})" if why else ""))
        self.signum = signum
        self.exit_code = 128 + signum  # the shell's convention for death by this signal
        self.reached: int | None = None  # the last update done; a second signal may cut its save


def output_closed() -> Interrupted:
    """The stop of a run whose standard output was closed: as SIGPIPE's, exit code 141."""
    return Interrupted(signal.SIGPIPE, "standard output closed")


def _record(signum: int, frame: object) -> None:
    global _stop, _since
    if _since is None:
        _stop, _since = Interrupted(signum), time.monotonic()
    elif time.monotonic() - _since >= REPEAT_SECONDS:
        _since = time.monotonic()
        raise Interrupted(signum)


def check_stop() -> None:
    """Raise the stop a signal recorded, if any, once: called at the safe points."""
    global _stop
    stop, _stop = _stop, None
    if stop is not None:
        raise stop


def wait(objects: list[connection.Connection | int], timeout: float | None) -> list[object]:
    """connection.wait on `objects`, woken by a stop signal (raised), or early for nothing."""
    with contextlib.suppress(BlockingIOError):
        os.read(_pipe[0], 4096)  # emptied: only a signal from now on wakes this wait
    check_stop()  # one that came before
    ready = connection.wait([*objects, _pipe[0]], timeout)
    check_stop()
    return [ready_one for ready_one in ready if ready_one != _pipe[0]]


def raise_stop_signals() -> None:
    """From now on, till the process ends, stop signals raise Interrupted at safe points."""
    global _stop, _since
    _stop = _since = None
    for s in STOP_SIGNALS:
        signal.signal(s, _record)
    signal.set_wakeup_fd(_pipe[1], warn_on_full_buffer=False)


@contextlib.contextmanager
def stop_signals_raise() -> Iterator[None]:
    """Inside, a stop signal raises Interrupted at the next safe point or on leaving (a late
    repeat at once); one recorded before, under `raise_stop_signals`, on entering."""
    global _stop, _since
    check_stop()
    _since = None  # a notebook's next run takes its first signal
    previous = {s: signal.signal(s, _record) for s in STOP_SIGNALS}
    fd = signal.set_wakeup_fd(_pipe[1], warn_on_full_buffer=False)
    try:
        yield
        check_stop()
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler)
        signal.set_wakeup_fd(fd)
        _stop = None  # raised, or overtaken by what unwinds: not the next run's
