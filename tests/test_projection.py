"""The throughput projection: its schedule against cases worked out by hand."""

from __future__ import annotations

from pathlib import Path

import pytest

from pong_mp.tools.projection import Costs, format_projection, measure_costs, project, simulate
from tests.helpers import pong_mp


def _costs(lengths=(100,), sum_seconds=0.0, update_seconds=0.0) -> Costs:
    return Costs(
        episode_steps=tuple(lengths),
        step_seconds=0.001,
        raw_step_seconds=0.0005,
        sum_seconds=sum_seconds,
        update_seconds=update_seconds,
    )


def test_equal_episodes_and_free_updates_keep_every_worker_busy() -> None:
    row = simulate(_costs(), workers=2, batch_size=4, lag=0, updates=10)
    assert row["efficiency"] == pytest.approx(1.0)
    assert row["ratio"] == pytest.approx(0.5)  # a training step costs twice a raw one


def test_the_barrier_waits_for_the_longest_episode_and_a_lag_hides_it() -> None:
    # Episodes of 100 or 300 steps; 2 workers, batches of 2: a synchronous batch lasts as
    # long as its longest episode.
    costs = _costs(lengths=(100, 300))
    synchronous = simulate(costs, workers=2, batch_size=2, lag=0, updates=400)
    lagged = simulate(costs, workers=2, batch_size=2, lag=1, updates=400)
    assert synchronous["efficiency"] < 0.85
    assert lagged["efficiency"] > 0.95


def test_workers_beyond_the_batches_in_flight_stay_idle() -> None:
    costs = _costs()
    assert simulate(costs, 8, 2, lag=0, updates=20)["efficiency"] == pytest.approx(2 / 8)
    assert simulate(costs, 8, 2, lag=1, updates=20)["efficiency"] == pytest.approx(4 / 8)


def test_the_coordinator_bounds_the_rate() -> None:
    # 100 ms episodes, 10 ms to sum each: a worker waits for its gradient to be read, and
    # one coordinator serves at most 10 workers.
    costs = _costs(sum_seconds=0.01)
    few = simulate(costs, 4, 32, lag=1, updates=20)["efficiency"]
    assert few == pytest.approx(100 / 110, rel=0.01)
    assert simulate(costs, 40, 32, lag=1, updates=20)["efficiency"] < 0.3


def test_format_projection_lists_every_row() -> None:
    costs = _costs(lengths=(100, 300), update_seconds=0.01)
    rows = project(costs, [1, 2], [10], [0, 1])
    assert [(r["workers"], r["policy_lag"]) for r in rows] == [(1, 0), (2, 0), (1, 1), (2, 1)]
    table = format_projection(costs, rows)
    assert table.count("\n| ") == 4 + 1  # the header and one line per row
    assert "200 steps on average" in table


def test_costs_are_measured_from_a_model(fake_checkpoint) -> None:
    costs = measure_costs(fake_checkpoint, "FakePong-v0", episodes=3, raw_seconds=0.2)
    assert len(costs.episode_steps) == 3 and min(costs.episode_steps) > 0
    assert costs.step_seconds > 0 and costs.raw_step_seconds > 0
    assert costs.sum_seconds > 0 and costs.update_seconds > 0


def test_bench_project_needs_a_model() -> None:
    done = pong_mp("bench", "--project", "--env", "FakePong-v0")
    assert done.returncode == 2
    assert done.stderr.count("\n") == 1 and "--project needs --model" in done.stderr


def test_bench_project_refuses_a_conv_agent_in_one_line() -> None:
    from pong_mp.checkpoint import load_policy

    model = Path(__file__).resolve().parents[1] / "models" / "pong.npz"
    assert load_policy(model)[1]["policy"] == "conv"
    done = pong_mp("bench", "--project", "--model", str(model), "--env", "FakePong-v0")
    assert done.returncode == 2 and done.stderr.count("\n") == 1, done.stderr
    assert "--project measures Karpathy's learner on an MLP agent" in done.stderr
