"""Stop signals: one stop's signal arriving twice raises once; a later one cuts the stop short."""

from __future__ import annotations

import signal
import sys
import time

import pytest

from pong_mp import signals
from pong_mp.signals import Interrupted, stop_signals_deferred, stop_signals_raise
from tests.helpers import SignalsWhenDropped, signal_self

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


def test_a_stop_raised_where_python_only_prints_it_is_raised_at_the_next_safe_point() -> None:
    with stop_signals_raise():
        SignalsWhenDropped(signal.SIGTERM)  # the handler's Interrupted goes nowhere
        with pytest.raises(Interrupted) as stop:
            signals.raise_swallowed()
        signals.raise_swallowed()  # once
    assert stop.value.signum == signal.SIGTERM


def test_a_swallowed_stop_no_safe_point_raised_is_raised_on_leaving() -> None:
    with pytest.raises(Interrupted) as stop, stop_signals_raise():
        SignalsWhenDropped(signal.SIGINT)
    assert stop.value.exit_code == 130


def test_a_stop_swallowed_before_a_run_is_raised_as_its_handlers_go_in() -> None:
    # As under `pong-mp train`'s process-wide handlers, while the run directory is opened.
    with stop_signals_raise():
        SignalsWhenDropped(signal.SIGINT)
        with pytest.raises(Interrupted), stop_signals_raise():
            pytest.fail("the run began")


def test_other_unprintable_exceptions_go_to_the_hook_that_was_there(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    seen: list[BaseException | None] = []
    monkeypatch.setattr(sys, "unraisablehook", lambda unraisable: seen.append(unraisable.exc_value))

    class FailsWhenDropped:
        def __del__(self) -> None:
            raise ValueError("a finalizer's own error")

    with stop_signals_raise():
        FailsWhenDropped()
        signals.raise_swallowed()  # nothing to raise
    assert [type(e) for e in seen] == [ValueError]
    FailsWhenDropped()
    assert len(seen) == 2  # the hook that was there is back
