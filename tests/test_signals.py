"""Stop signals: recorded by their handlers and raised once, where the code checks; one stop's
signal arriving twice is one stop, a later one cuts the stop short; waits wake at once."""

from __future__ import annotations

import os
import signal
import sys
import threading
import time
from multiprocessing import Pipe

import pytest

from pong_mp import progress, signals
from pong_mp.backends.worker_process import WORKER_IGNORES
from pong_mp.signals import Interrupted, check_stop, stop_signals_raise
from pong_mp.tools import bench
from tests.helpers import SignalsWhenDropped, signal_self

# Each test enters stop_signals_raise, which forgets the stops of earlier tests.


def test_a_stop_signal_is_raised_once_where_the_code_checks() -> None:
    with stop_signals_raise():
        signal_self(signal.SIGTERM)  # the handler records it, and the code goes on
        with pytest.raises(Interrupted) as stop:
            check_stop()
        check_stop()  # once
    assert stop.value.exit_code == 143


@pytest.mark.parametrize("again", [signal.SIGINT, signal.SIGTERM])
def test_a_stop_signal_repeated_at_once_is_the_same_stop(again: int) -> None:
    # As coreutils `timeout` sends it: to the run, then to its whole process group; the
    # copy may come before the stop is raised, or while it is saved.
    with stop_signals_raise():
        signal_self(signal.SIGINT)
        signal_self(again)
        with pytest.raises(Interrupted) as stop:
            check_stop()
        signal_self(again)  # the stop's save would run here: not cut short
        check_stop()
    assert stop.value.signum == signal.SIGINT


def test_a_second_signal_after_the_window_cuts_the_stop_short(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(signals, "REPEAT_SECONDS", 0.05)
    with stop_signals_raise():
        signal_self(signal.SIGINT)
        with pytest.raises(Interrupted):
            check_stop()
        time.sleep(0.1)
        with pytest.raises(Interrupted) as second:
            signal_self(signal.SIGTERM)  # raised by its handler, wherever the code is
    assert second.value.exit_code == 143


def test_a_new_run_takes_its_first_signal_even_within_the_window() -> None:
    # A notebook's second run, stopped at once after the first was: its handlers going in
    # forget the first run's stop.
    for _ in range(2):
        with stop_signals_raise(), pytest.raises(Interrupted):
            signal_self(signal.SIGINT)
            check_stop()


@pytest.mark.parametrize("ignored", [signal.SIGHUP, signal.SIGINT])
def test_a_stop_signal_ignored_on_the_way_in_stays_ignored(ignored: int) -> None:
    # `nohup` ignores SIGHUP; a shell script's background job, SIGINT.
    before = signal.signal(ignored, signal.SIG_IGN)
    try:
        with stop_signals_raise():
            assert signal.getsignal(ignored) == signal.SIG_IGN
            signal_self(ignored)
            check_stop()  # nothing recorded
            signals.raise_stop_signals()
            assert signal.getsignal(ignored) == signal.SIG_IGN
        assert signal.getsignal(ignored) == signal.SIG_IGN
    finally:
        signal.signal(ignored, before)


def test_worker_signals_are_those_a_terminal_sends_a_group() -> None:
    assert set(WORKER_IGNORES) == {signal.SIGINT, signal.SIGHUP}
    assert signal.SIGHUP in signals.STOP_SIGNALS
    assert Interrupted(signal.SIGHUP).exit_code == 129
    assert progress.output_closed().exit_code == 141


def test_a_stop_signal_handled_in_a_finalizer_is_printed_nowhere_and_raised_later(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Where Python only prints an exception (a finalizer, an import's weakref callback).
    printed: list[BaseException | None] = []
    monkeypatch.setattr(sys, "unraisablehook", lambda unraisable: printed.append(unraisable))
    with stop_signals_raise():
        SignalsWhenDropped(signal.SIGTERM)
        assert printed == []
        with pytest.raises(Interrupted) as stop:
            check_stop()
    assert stop.value.signum == signal.SIGTERM


def test_a_stop_no_safe_point_raised_is_raised_on_leaving() -> None:
    with pytest.raises(Interrupted) as stop, stop_signals_raise():
        signal_self(signal.SIGINT)
    assert stop.value.exit_code == 130


def test_a_stop_recorded_before_a_run_is_raised_as_its_handlers_go_in() -> None:
    # As under `pong-mp train`'s process-wide handlers, while the run directory is opened.
    with pytest.raises(Interrupted), stop_signals_raise():
        signal_self(signal.SIGINT)
        with stop_signals_raise():
            pytest.fail("the run began")


def _signal_soon(to_thread: bool, signum: int = signal.SIGINT) -> threading.Timer:
    """A timer that sends `signum` in 0.2 s: to this process, or to the timer's own thread
    (a signal another thread takes does not interrupt the main thread's system call)."""

    def send() -> None:
        if to_thread:
            signal.pthread_kill(threading.get_ident(), signum)
        else:
            os.kill(os.getpid(), signum)

    timer = threading.Timer(0.2, send)
    timer.start()
    return timer


@pytest.mark.parametrize("to_thread", [False, True], ids=["process", "other-thread"])
def test_a_stop_signal_wakes_a_wait_at_once(to_thread: bool) -> None:
    ours, _theirs = Pipe()  # nothing will come
    with stop_signals_raise():
        timer = _signal_soon(to_thread)
        began = time.monotonic()
        with pytest.raises(Interrupted):
            signals.wait([ours], timeout=30)
        timer.join()
    assert time.monotonic() - began < 5


def test_a_wait_woken_by_another_signal_raises_nothing_and_gives_what_is_ready() -> None:
    ours, theirs = Pipe()
    previous = signal.signal(signal.SIGUSR1, lambda signum, frame: None)
    try:
        with stop_signals_raise():
            timer = _signal_soon(to_thread=True, signum=signal.SIGUSR1)  # wakes, is no stop
            assert signals.wait([ours], timeout=1) == []
            timer.join()
            theirs.send(1)
            assert signals.wait([ours], timeout=5) == [ours]
    finally:
        signal.signal(signal.SIGUSR1, previous)


def test_a_stop_signal_ends_the_wait_for_the_bench_processes() -> None:
    with bench._processes([(time.sleep, (30,))]) as started, stop_signals_raise():
        timer = _signal_soon(to_thread=False)
        began = time.monotonic()
        with pytest.raises(Interrupted):
            bench._answers(started)
        timer.join()
    assert time.monotonic() - began < 5


