"""Stop signals: one stop's signal arriving twice raises once; a later one cuts the stop short."""

from __future__ import annotations

import os
import signal
import time

import pytest

from pong_mp import signals
from pong_mp.signals import Interrupted, stop_signals_deferred, stop_signals_raise


@pytest.fixture
def no_stop_yet(monkeypatch: pytest.MonkeyPatch) -> None:
    """Forget stops raised by earlier tests in this process."""
    monkeypatch.setattr(signals, "_stopping_since", None)


def _signal_self(signum: int) -> None:
    os.kill(os.getpid(), signum)
    time.sleep(0.01)  # the handler runs in this thread, at the next bytecode at the latest


@pytest.mark.parametrize("again", [signal.SIGINT, signal.SIGTERM])
def test_a_stop_signal_repeated_at_once_is_the_same_stop(no_stop_yet: None, again: int) -> None:
    # As coreutils `timeout` sends it: to the run, then to its whole process group.
    with stop_signals_raise():
        with pytest.raises(Interrupted) as stop:
            _signal_self(signal.SIGINT)
        _signal_self(again)  # the stop's save would run here: not cut short
    assert stop.value.signum == signal.SIGINT


def test_a_second_signal_after_the_window_cuts_the_stop_short(
    no_stop_yet: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(signals, "REPEAT_SECONDS", 0.05)
    with stop_signals_raise():
        with pytest.raises(Interrupted):
            _signal_self(signal.SIGINT)
        time.sleep(0.1)
        with pytest.raises(Interrupted) as second:
            _signal_self(signal.SIGTERM)
    assert second.value.exit_code == 143


def test_a_held_back_stop_raises_once_on_leaving_and_counts_as_the_stop(
    no_stop_yet: None,
) -> None:
    with stop_signals_raise():
        with pytest.raises(Interrupted) as stop, stop_signals_deferred():
            _signal_self(signal.SIGTERM)
            _signal_self(signal.SIGINT)
        _signal_self(signal.SIGINT)  # the group's copy, after the commit: the same stop
    assert stop.value.signum == signal.SIGTERM


def test_a_new_stop_later_in_the_same_process_raises(
    no_stop_yet: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A notebook's second run, stopped after the first was: the window has passed.
    monkeypatch.setattr(signals, "REPEAT_SECONDS", 0.05)
    for _ in range(2):
        with stop_signals_raise(), pytest.raises(Interrupted):
            _signal_self(signal.SIGINT)
        time.sleep(0.1)


def test_worker_signals_are_those_a_terminal_sends_a_group() -> None:
    assert set(signals.WORKER_IGNORES) == {signal.SIGINT, signal.SIGHUP}
    assert signal.SIGHUP in signals.STOP_SIGNALS
    assert Interrupted(signal.SIGHUP).exit_code == 129
    assert signals.output_closed().exit_code == 141
