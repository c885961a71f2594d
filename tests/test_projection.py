"""The actor-critic's projection: its schedule against cases worked out by hand, and its
costs measured with the workers' own code."""

from __future__ import annotations

import dataclasses
import json

import pytest

from pong_mp.config import TrainConfig
from pong_mp.policy import init_params
from pong_mp.tools.projection import (
    Costs,
    EpisodeCost,
    format_projection,
    lay_out,
    measure_costs,
    run_projection,
    simulate,
)
from tests.helpers import pong_mp_here


def _costs(*episodes: tuple[float, ...], add=0.0, step=0.0, round_trip=0.0) -> Costs:
    # Each episode as (play seconds, then its passes' seconds); 100 steps each.
    return Costs(
        episodes=tuple(EpisodeCost(100, e[0], tuple(e[1:])) for e in episodes),
        raw_step_seconds=0.001,
        add_seconds=add,
        step_seconds=step,
        round_trip_seconds=round_trip,
    )


def test_one_worker_plays_then_passes_over_what_it_played() -> None:
    # 1 s of play and two passes of 0.1 s, twice over (2 epochs): 1.4 s an update.
    row = simulate(_costs((1.0, 0.1, 0.1)), workers=1, batch_size=1, epochs=2, updates=3)
    assert row["busy"] == pytest.approx(1.0)
    assert row["steps_per_sec"] == pytest.approx(100 / 1.4)
    assert row["ratio"] == pytest.approx(0.1 / 1.4)  # 100 raw steps take 0.1 s


def test_the_schedule_splits_each_update_into_play_and_learning() -> None:
    # 3 episodes on 2 workers, as below: the play takes 2 s an update (a worker plays two),
    # the passes 1 s (that worker passes over both); the longest episode 1 s an update.
    laid = lay_out(_costs((1.0, 0.5)), workers=2, batch_size=3, epochs=1, updates=2)
    assert (laid.play_wall, laid.learn_wall) == pytest.approx((4.0, 2.0))
    assert (laid.play_work, laid.pass_work) == pytest.approx((6.0, 3.0))
    assert (laid.steps, laid.longest_plays) == (600, 2.0)


def test_costs_read_back_from_a_records_json() -> None:
    costs = _costs((1.0, 0.5, 0.25), (2.0, 0.75, 0.5), add=0.01, step=0.02, round_trip=0.03)
    record = json.loads(json.dumps({"costs": dataclasses.asdict(costs)}))
    assert Costs.from_dict(record["costs"]) == costs


def test_workers_beyond_the_batch_stay_idle() -> None:
    costs = _costs((1.0, 0.1))
    assert simulate(costs, 8, 2, epochs=1, updates=5)["busy"] == pytest.approx(2 / 8)


def test_each_round_waits_for_the_worker_with_the_most_passes() -> None:
    # 3 equal episodes on 2 workers: one worker keeps two of them, so each round takes two
    # passes' time while the other worker waits half of it.
    row = simulate(_costs((1.0, 0.5)), workers=2, batch_size=3, epochs=1, updates=2)
    wall = 2.0 + 1.0  # play: 2 rounds of episodes; one round of passes: 2 passes
    assert row["steps_per_sec"] == pytest.approx(300 / wall)
    assert row["busy"] == pytest.approx((3 * 1.5) / (2 * wall))


def test_the_coordinators_adds_steps_and_round_trips_bound_the_rate() -> None:
    free = simulate(_costs((1.0, 0.1, 0.1)), 2, 2, epochs=4, updates=2)
    # Per round: 2 adds of 0.05 s after the passes, a step of 0.1 s, and a round trip of 0.02 s.
    costs = _costs((1.0, 0.1, 0.1), add=0.05, step=0.1, round_trip=0.02)
    busy = simulate(costs, 2, 2, epochs=4, updates=2)
    round_seconds = 0.1 + 0.02 + 2 * 0.05 + 0.1
    assert 100 * 2 / busy["steps_per_sec"] == pytest.approx(1.02 + 8 * round_seconds)
    assert busy["busy"] < free["busy"] == pytest.approx(1.0)


def test_the_projection_lists_every_count_with_its_speed_up() -> None:
    costs = _costs((1.0, 0.1, 0.1), (2.0, 0.2, 0.2))
    rows = run_projection(costs, batch_size=10, epochs=4)
    assert [(r["workers"], r["batch_size"]) for r in rows] == [
        (1, 10), (2, 10), (4, 10), (8, 10), (16, 10), (32, 10), (64, 10),
        (16, 16), (32, 32), (64, 64),
    ]
    assert rows[0]["speed_up"] == 1.0
    assert all(r["efficiency"] == pytest.approx(r["speed_up"] / r["workers"]) for r in rows)
    table = format_projection(costs, rows)
    assert table.count("\n| ") == len(rows) + 1  # the header and one line per row
    assert "100 steps on average" in table


def test_costs_are_measured_with_the_workers_code() -> None:
    config = TrainConfig(env="FakePong-v0", hidden=8, channels=2, minibatches=3)
    config.validate()
    params = init_params(config.shape, 0, value=True)
    costs = measure_costs(config, params, episodes=2, raw_seconds=0.2)
    assert len(costs.episodes) == 2
    for episode in costs.episodes:
        assert episode.steps > 0 and episode.play_seconds > 0
        assert len(episode.pass_seconds) == 3 and min(episode.pass_seconds) > 0
    assert min(costs.add_seconds, costs.step_seconds, costs.round_trip_seconds) > 0
    assert costs.raw_step_seconds > 0


def test_bench_project_refuses_karpathys_learner_in_one_line() -> None:
    done = pong_mp_here("bench", "--project", "--env", "FakePong-v0", "--preset", "pg")
    assert done.returncode == 2 and done.stderr.count("\n") == 1, done.stderr
    assert "--project models the actor-critic" in done.stderr
