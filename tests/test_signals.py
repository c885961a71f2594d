"""Stop signals: one stop's signal arriving twice raises once; a later one cuts the stop short."""

from __future__ import annotations

import signal
import time

import pytest

from pong_mp import signals
from pong_mp.signals import Interrupted, stop_signals_deferred, stop_signals_raise
from tests.helpers import signal_self

# Each test enters stop_signals_raise, which forgets the stops of earlier tests.


@pytest.mark.parametrize("again", [signal.SIGINT, signal.SIGTERM])
def test_a_stop_signal_repeated_at_once_is_the_same_stop(again: int) -> None:
    # As coreutils `timeout` sends it: to the run, then to its whole process group.
    with stop_signals_raise():
        with pytest.raises(Interrupted) as stop:
            signal_self(signal.SIGINT)
        signal_self(again)  # the stop's save would run here: not cut short
    assert stop.value.signum == signal.SIGINT


def test_a_second_signal_after_the_window_cuts_the_stop_short(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(signals, "REPEAT_SECONDS", 0.05)
    with stop_signals_raise():
        with pytest.raises(Interrupted):
            signal_self(signal.SIGINT)
        time.sleep(0.1)
        with pytest.raises(Interrupted) as second:
            signal_self(signal.SIGTERM)
    assert second.value.exit_code == 143


def test_a_held_back_stop_raises_once_on_leaving_and_counts_as_the_stop() -> None:
    with stop_signals_raise():
        with pytest.raises(Interrupted) as stop, stop_signals_deferred():
            signal_self(signal.SIGTERM)
            signal_self(signal.SIGINT)
        signal_self(signal.SIGINT)  # the group's copy, after the commit: the same stop
    assert stop.value.signum == signal.SIGTERM


def test_a_new_run_takes_its_first_signal_even_within_the_window() -> None:
    # A notebook's second run, stopped at once after the first was: its handlers going in
    # forget the first run's stop.
    for _ in range(2):
        with stop_signals_raise(), pytest.raises(Interrupted):
            signal_self(signal.SIGINT)


def test_worker_signals_are_those_a_terminal_sends_a_group() -> None:
    assert set(signals.WORKER_IGNORES) == {signal.SIGINT, signal.SIGHUP}
    assert signal.SIGHUP in signals.STOP_SIGNALS
    assert Interrupted(signal.SIGHUP).exit_code == 129
    assert signals.output_closed().exit_code == 141
