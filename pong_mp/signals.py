"""SIGINT and SIGTERM as an exception in the coordinator, and a section they cannot split."""

from __future__ import annotations

import contextlib
import signal
from collections.abc import Iterator
from types import FrameType

STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM)


class Interrupted(Exception):
    """The user asked the run to stop (Ctrl-C or SIGTERM)."""

    def __init__(self, signum: int) -> None:
        super().__init__(signal.Signals(signum).name)
        self.signum = signum
        self.saved_batch: int | None = None
        """The update whose state was saved on the way out (set by the trainer)."""

    @property
    def exit_code(self) -> int:
        """The shell convention for death by this signal: 128 + its number."""
        return 128 + self.signum


def _raise(signum: int, frame: FrameType | None) -> None:
    raise Interrupted(signum)


@contextlib.contextmanager
def stop_signals_raise() -> Iterator[None]:
    """Inside, SIGINT and SIGTERM raise Interrupted in the main thread."""
    previous = {s: signal.signal(s, _raise) for s in STOP_SIGNALS}
    try:
        yield
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler)


@contextlib.contextmanager
def stop_signals_deferred() -> Iterator[None]:
    """Inside, SIGINT and SIGTERM are held back; the first one is raised on leaving.

    Used around the commit of an update (swap in the new weights, append its metrics line,
    maybe checkpoint) so that an interrupt lands before it or after it, never inside.
    """
    caught: list[int] = []
    previous = {
        s: signal.signal(s, lambda signum, frame: caught.append(signum)) for s in STOP_SIGNALS
    }
    try:
        yield
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler)
    if caught:
        raise Interrupted(caught[0])
