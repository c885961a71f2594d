"""Stop signals as an exception in the coordinator, and a section they cannot split.

SIGINT (Ctrl-C), SIGTERM and SIGHUP (the terminal or SSH session closed: what a logout
sends, with SIGTERM from a session manager) all stop a run the same way: the last complete
update is saved, workers and shared memory go, and the process exits 128 + the signal's
number (130, 143, 129). A standard output closed under a run (`pong-mp train | head -1`)
stops it the same way, as SIGPIPE would (141).

A second stop signal cuts the stop short (a save that hangs on a slow disk), unless it comes
within REPEAT_SECONDS of the first: then it is the same stop arriving twice, as when coreutils
`timeout` (without --foreground) signals the run and then its whole process group.

Python runs a signal's handler between any two bytecodes of the main thread, including
those of a finalizer or a weakref callback (a module lock dropped by an import), where an
exception is only printed ("Exception ignored in ...") and the code goes on. A stop raised
there would be lost, and its repeat ignored: so it is kept, and raised again at the next
safe point (`raise_swallowed`) or when the handlers come out.
"""

from __future__ import annotations

import contextlib
import functools
import signal
import sys
import time
from collections.abc import Callable, Iterator
from types import FrameType

STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
WORKER_IGNORES = (signal.SIGINT, signal.SIGHUP)
"""What worker processes ignore from their first instruction on: a terminal sends these to
the whole process group, and the coordinator stops its workers itself, after saving."""


UnraisableHook = Callable[["sys.UnraisableHookArgs"], object]
"""What sys.unraisablehook holds (its argument's type is known to type checkers only)."""

REPEAT_SECONDS = 1.0
"""A stop signal this soon after the one that stopped the run is that stop again, not a
second one: a person who means to cut a stop short sees it hang first."""

_stopping_since: float | None = None
"""When the stop signal that raised last was handled (None: none since the handlers went
in): a run's handlers going in clear it, so a notebook's next run takes its first signal."""


class Interrupted(BaseException):
    """The user asked the run to stop (a stop signal, or its output was closed).

    A BaseException, as KeyboardInterrupt is: code that catches Exception (a logging
    handler, an env constructor's error) must not swallow a stop, above all since a repeat
    of the signal within REPEAT_SECONDS is ignored."""

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
    """The stop of a run whose standard output was closed (a pipe's reader gone, or the
    terminal hung up): handled as SIGPIPE, exit code 141."""
    return Interrupted(signal.SIGPIPE, "standard output closed")


def _stop(signum: int, at: float) -> Interrupted | None:
    """The stop signal `signum`, handled at `at`, as the Interrupted to raise; None if it
    repeats the stop under way."""
    global _stopping_since
    if _stopping_since is not None and at - _stopping_since < REPEAT_SECONDS:
        return None
    _stopping_since = at
    return Interrupted(signum)


_swallowed: Interrupted | None = None
"""A stop raised where Python only prints an exception (None: none since the handlers went
in), waiting for the next safe point."""


def _no_stop_yet() -> None:
    # Entered only before a command or a run starts, never while a stop unwinds.
    global _stopping_since, _swallowed
    _stopping_since = None
    _swallowed = None


def _keep_swallowed(chained: UnraisableHook, unraisable: sys.UnraisableHookArgs) -> None:
    # A stop is kept for raise_swallowed, not printed as a traceback; anything else goes to
    # the hook that was there before.
    global _swallowed
    if isinstance(unraisable.exc_value, Interrupted):
        if _swallowed is None:
            _swallowed = unraisable.exc_value
        return
    chained(unraisable)


def _keeping_stops(hook: UnraisableHook) -> UnraisableHook:
    """`hook` as a sys.unraisablehook that keeps a stop for raise_swallowed (itself, if it
    already does: a process that runs several commands does not stack them)."""
    if isinstance(hook, functools.partial) and hook.func is _keep_swallowed:
        return hook
    return functools.partial(_keep_swallowed, hook)


def raise_swallowed() -> None:
    """Raise the stop that a signal handled inside a finalizer or a weakref callback raised
    where Python could only print it, if there is one: called at safe points (each result
    that comes back to the trainer, each game played), so that such a stop is late, never
    lost."""
    global _swallowed
    stop, _swallowed = _swallowed, None
    if stop is not None:
        raise stop.with_traceback(None)


def _raise(signum: int, frame: FrameType | None) -> None:
    stop = _stop(signum, time.monotonic())
    if stop is not None:
        raise stop


def raise_stop_signals() -> None:
    """From now on, the stop signals raise Interrupted in the main thread: for a command
    that ends the process, so that no window is left in which Ctrl-C is Python's
    KeyboardInterrupt (restoring a handler on the way out would open one)."""
    _no_stop_yet()
    sys.unraisablehook = _keeping_stops(sys.unraisablehook)
    for s in STOP_SIGNALS:
        signal.signal(s, _raise)


@contextlib.contextmanager
def stop_signals_raise() -> Iterator[None]:
    """Inside, the stop signals raise Interrupted in the main thread (one stop's signal
    arriving twice within REPEAT_SECONDS raises once). A stop that Python swallowed
    inside and no safe point raised is raised on leaving; one swallowed under the
    process-wide handlers of `raise_stop_signals` before, on entering."""
    global _swallowed
    raise_swallowed()
    _no_stop_yet()
    hook = sys.unraisablehook
    sys.unraisablehook = _keeping_stops(hook)
    previous = {s: signal.signal(s, _raise) for s in STOP_SIGNALS}
    try:
        yield
        raise_swallowed()
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler)
        sys.unraisablehook = hook
        _swallowed = None  # raised, or overtaken by what unwinds: not the next run's


@contextlib.contextmanager
def stop_signals_deferred() -> Iterator[None]:
    """Inside, the stop signals are held back; the first (unless it repeats a stop under
    way) is raised on leaving.

    Used around the commit of an update (swap in the new weights, append its metrics line,
    maybe checkpoint) so that an interrupt lands before it or after it, never inside.
    """
    caught: list[tuple[int, float]] = []
    previous = {
        s: signal.signal(s, lambda signum, frame: caught.append((signum, time.monotonic())))
        for s in STOP_SIGNALS
    }
    try:
        yield
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler)
    for signum, at in caught:
        stop = _stop(signum, at)
        if stop is not None:
            raise stop


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
