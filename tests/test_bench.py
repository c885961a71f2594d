"""The env-speed measurement (figures themselves are for README, never asserted)."""

from __future__ import annotations

from pong_mp.bench import compare_envs, env_steps_per_sec


def test_env_rate_counts_steps_across_resets() -> None:
    assert env_steps_per_sec("FakePong-v0", seconds=0.2) > 0


def test_compare_envs_alternates_rounds() -> None:
    rates = compare_envs(("FakePong-v0", "SlowPong-v0"), seconds=0.05, rounds=2)
    assert list(rates) == ["FakePong-v0", "SlowPong-v0"]
    assert all(len(r) == 2 for r in rates.values())
    # SlowPong sleeps 10 ms a step: it cannot reach 200 steps/s, FakePong easily does.
    assert max(rates["SlowPong-v0"]) < 200 < min(rates["FakePong-v0"])
