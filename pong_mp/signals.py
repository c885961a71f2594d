"""Stop signals (SIGINT, SIGTERM, SIGHUP). A handler records the stop, and `check_stop` raises
it as Interrupted at the safe points (each result back at the trainer, each step played), never
in a finalizer, where Python would only print it. A recorded stop lets a blocked select() go on
(PEP 475), and one that another thread takes (TensorBoard's, Ray's) never interrupts it, so
`wait` also watches the `signal.set_wakeup_fd` pipe, which the C handler writes from any thread;
what no fd wakes (Ray) waits in POLL_SECONDS slices. A repeat REPEAT_SECONDS after the
stop raises in its handler, to cut a hanging save short (a sooner one is the same stop:
`timeout` signals the run, then its group), as does a first stop inside `at_once` (the user's
env code, which may hang where no safe point comes). A signal ignored on the way in (`nohup`'s
SIGHUP, a background job's SIGINT) stays ignored; on the command line, one an env module
ignores does not (`keep_ignored`)."""

from __future__ import annotations

import contextlib
import os
import signal
import time
from collections.abc import Iterator
from multiprocessing import connection
from typing import Any

STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
REPEAT_SECONDS = 1.0  # one who means to cut a stop short sees it hang first
POLL_SECONDS = 0.25  # how long a wait that no signal wakes goes on before it checks

_stop: Interrupted | None = None  # recorded, not raised yet
_since: float | None = None  # when the stop came (None: none since the handlers went in)
_at_once = False  # inside at_once()
_kept: set[int] | None = None  # the signals ignored on the way in (None: those ignored now)
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


def _record(signum: int, frame: object) -> None:
    global _stop, _since
    if _since is None:
        _stop, _since = Interrupted(signum), time.monotonic()
        if _at_once:
            check_stop()
    elif time.monotonic() - _since >= REPEAT_SECONDS:
        _since = time.monotonic()
        raise Interrupted(signum)


def check_stop() -> None:
    """Raise the stop a signal recorded, if any, once: called at the safe points."""
    global _stop
    if _stop is not None:
        stop, _stop = _stop, None
        raise stop


@contextlib.contextmanager
def at_once() -> Iterator[None]:
    """Inside, a first stop signal raises in its handler (after one recorded before, raised on
    entering): around code with nothing to save that may block where no check comes."""
    global _at_once
    check_stop()
    outer, _at_once = _at_once, True
    try:
        yield
    finally:
        _at_once = outer


def wait(objects: list[connection.Connection | int], timeout: float | None) -> list[object]:
    """connection.wait on `objects`, woken by a stop signal (raised), or early for nothing."""
    with contextlib.suppress(BlockingIOError):
        os.read(_pipe[0], 4096)  # emptied: only a signal from now on wakes this wait
    check_stop()  # one that came before
    ready = connection.wait([*objects, _pipe[0]], timeout)
    check_stop()
    return [ready_one for ready_one in ready if ready_one != _pipe[0]]


def keep_ignored() -> None:
    """Keep ignored the stop signals ignored now, and only those: called as the command line
    starts, before an env module is imported, which must not make a run deaf by ignoring one."""
    global _kept
    _kept = {s for s in STOP_SIGNALS if signal.getsignal(s) == signal.SIG_IGN}


def raise_stop_signals() -> tuple[dict[signal.Signals, Any], int]:
    """From now on stop signals raise Interrupted at safe points: the handlers (of the signals
    not ignored on the way in) and the wakeup fd replaced."""
    now = {s for s in STOP_SIGNALS if signal.getsignal(s) == signal.SIG_IGN}
    taken = [s for s in STOP_SIGNALS if s not in (now if _kept is None else _kept)]
    previous = {s: signal.signal(s, _record) for s in taken}
    return previous, signal.set_wakeup_fd(_pipe[1], warn_on_full_buffer=False)


def ignore_stop_signals() -> Interrupted | None:
    """Ignore the stop signals taken (a process on its way out): the stop not raised, if any."""
    for s in (s for s in STOP_SIGNALS if signal.getsignal(s) == _record):
        signal.signal(s, signal.SIG_IGN)
    return _stop


@contextlib.contextmanager
def stop_signals_raise() -> Iterator[None]:
    """Inside, a stop signal raises Interrupted at the next safe point or on leaving (a late
    repeat at once); one recorded before, under `raise_stop_signals`, on entering."""
    global _stop, _since
    check_stop()
    _since = None  # a notebook's next run takes its first signal
    previous, fd = raise_stop_signals()
    try:
        yield
        check_stop()
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler)
        signal.set_wakeup_fd(fd)
        _stop = _since = None  # raised, or overtaken by what unwinds: not the next run's
