"""What `pong-mp train` shows while it runs: a live line on a terminal, plain lines in logs."""

from __future__ import annotations

import errno
import os
import signal
import sys
from collections.abc import Callable
from typing import IO, Any, Protocol

from pong_mp.files import DISK_FULL
from pong_mp.signals import Interrupted, at_once


class Reporter(Protocol):
    """Receives the run's banner and each update's metrics record."""

    def banner(self, text: str) -> None:
        """The line that says what the run is."""

    def update(self, record: dict[str, Any]) -> None:
        """One update is done."""

    def close(self) -> None:
        """The run is over (whatever the reason)."""


_GONE = frozenset({errno.EIO, errno.ENOTCONN, errno.ECONNREFUSED})
"""A hung-up terminal's error; a socket's whose peer went (a datagram socket's)."""


def output_gone(exc: OSError) -> bool:
    """Whether a failed write means the output is gone: its reader, a hung-up terminal, a
    socket's peer, or a descriptor not open for writing (`1</dev/null`, or closed under
    pong-mp): nothing written to it can arrive."""
    gone = isinstance(exc, BrokenPipeError | ConnectionResetError) or exc.errno in _GONE
    return gone or (exc.errno == errno.EBADF and exc.filename is None)


def output_full(exc: OSError) -> bool:
    """Whether a failed write of standard output (no file named) met a full disk or quota:
    `pong-mp train > log` where the disk filled up."""
    return exc.filename is None and exc.errno in DISK_FULL


def output_closed() -> Interrupted:
    """The stop of a run whose standard output was closed: as SIGPIPE's, exit code 141."""
    return Interrupted(signal.SIGPIPE, "standard output closed")


def refused_output(exc: OSError) -> Interrupted:
    """The stop of a run whose standard output refused its lines (a full disk): as a closed
    one, but exit code 1, that of a run the disk failed."""
    stop = output_closed()
    stop.args, stop.exit_code = (f"a full standard output ({exc.strerror})",), 1
    return stop


def output_stop(exc: OSError) -> Interrupted | None:
    """The stop a failed write of standard output calls for: its reader gone (exit 141) or
    its disk full (exit 1); None for any other failure, which is no stop."""
    if output_full(exc):
        return refused_output(exc)
    return output_closed() if output_gone(exc) else None


def format_update(record: dict[str, Any]) -> str:
    """One readable line for an update's metrics record."""
    return (
        f"batch {record['batch']:>6} | episodes {record['episodes']:>7} | "
        f"reward {record['reward_mean']:>7.2f} | running {record['running_reward']:>7.2f} | "
        f"{record['steps_per_sec']:>7,.0f} steps/s"
    )


class LineReporter(Reporter):
    """Plain lines, one per update: for logs, pipes and CI (no control characters); its close
    (Reporter's) has nothing to finish."""

    def __init__(self, write: Callable[[str], None] = print) -> None:
        """Print through `write`."""
        self._write = write

    def banner(self, text: str) -> None:
        """Print the banner."""
        self._write(text)

    def update(self, record: dict[str, Any]) -> None:
        """Print the update's line."""
        self._write(format_update(record))


class QuietReporter(Reporter):
    """Prints nothing (--quiet): errors and the final summary come from the CLI."""


def format_postfix(record: dict[str, Any]) -> str:
    """An update's running reward and speed for a status bar (fits 80 columns with it)."""
    running = record["running_reward"]
    running_text = "n/a" if running is None else f"{running:.2f}"
    return f"running {running_text}, {record['steps_per_sec']:,.0f} steps/s"


def bar_layout(total: int | None) -> str:
    """tqdm's bar_format for a run of `total` updates (None: open-ended)."""
    if total is None:
        return "update {n_fmt} [{elapsed}{postfix}]"
    return "{n_fmt}/{total_fmt} updates |{bar}| [{elapsed}<{remaining}{postfix}]"


class _Watched:
    """A stream that keeps the first error a write or flush raised (tqdm swallows EIO)."""

    def __init__(self, stream: IO[str]) -> None:
        """Watch `stream`."""
        self._stream = stream
        self.failed: OSError | None = None

    def write(self, text: str) -> int:
        """Write `text`, keeping what failed."""
        return self._kept(lambda: self._stream.write(text))

    def flush(self) -> None:
        """Flush, keeping what failed."""
        self._kept(self._stream.flush)

    def _kept(self, call: Callable[[], Any]) -> Any:
        try:
            return call()
        except OSError as exc:
            self.failed = self.failed or exc
            raise

    def __getattr__(self, name: str) -> Any:
        return getattr(self._stream, name)


class BarReporter:
    """One live status line (tqdm) with an ETA when the number of updates is known."""

    def __init__(
        self, start: int, total: int | None, stream: IO[str], notebook: bool = False
    ) -> None:
        """A bar from update `start` to `total` (None: open-ended) on `stream`; `notebook`:
        tqdm.auto's Jupyter widget where one can be shown."""
        if notebook:
            from tqdm.auto import tqdm
        else:
            from tqdm import tqdm

        self._stream = _Watched(stream)
        # A terminal that reports no size (script, some CI ptys) would hide tqdm's bar.
        try:
            known = min(os.get_terminal_size(stream.fileno())) > 0  # columns and lines
        except (OSError, ValueError, AttributeError):
            known = False
        fallback = {} if known or notebook else {"ncols": 100, "nrows": 24}
        self._bar = tqdm(
            total=total,
            initial=start,
            file=self._stream,
            dynamic_ncols=known,
            smoothing=0.1,
            leave=True,
            bar_format=bar_layout(total),
            **fallback,
        )

    def banner(self, text: str) -> None:
        """Print the banner above the bar."""
        self._bar.write(text, file=self._stream)

    def update(self, record: dict[str, Any]) -> None:
        """Advance the bar and show the update's figures."""
        self._bar.set_postfix_str(format_postfix(record), refresh=False)
        self._bar.update(1)
        if self._stream.failed is not None:  # tqdm goes quiet on a terminal gone (EIO)
            raise self._stream.failed

    def close(self) -> None:
        """Leave the bar's last state on screen."""
        self._bar.close()


class GuardedReporter:
    """Passes everything on to `inner` until its output is gone, then nothing: `closed` tells
    the trainer to stop as SIGPIPE would, after saving (progress is never worth a traceback)."""

    def __init__(self, inner: Reporter) -> None:
        """Guard `inner`."""
        self._inner = inner
        self._stop: Interrupted | None = None  # what the failed write calls for

    @property
    def closed(self) -> bool:
        """Whether a write failed: the output is gone (or full)."""
        return self._stop is not None

    def _call(self, write: Callable[[], None]) -> None:
        if self.closed:
            return
        try:
            with at_once():  # a reader that stopped reading must not make a stop wait on it
                write()
        except OSError as exc:
            self._stop = output_stop(exc)
            if self._stop is None:
                raise

    def stop(self) -> Interrupted:
        """The stop that a closed output calls for (exit 141; 1 if it was full)."""
        return self._stop or output_closed()

    def banner(self, text: str) -> None:
        """The banner, unless the output is closed."""
        self._call(lambda: self._inner.banner(text))

    def update(self, record: dict[str, Any]) -> None:
        """The update, unless the output is closed."""
        self._call(lambda: self._inner.update(record))

    def close(self) -> None:
        """Close `inner`, unless the output is closed."""
        self._call(self._inner.close)


def make_reporter(
    quiet: bool, start: int, total: int | None, stream: IO[str] | None = None
) -> Reporter:
    """Quiet, a live bar on a terminal, or plain lines otherwise."""
    stream = stream or sys.stdout
    if quiet:
        return QuietReporter()
    if stream.isatty():
        return BarReporter(start, total, stream)
    return LineReporter(lambda line: print(line, file=stream, flush=True))
