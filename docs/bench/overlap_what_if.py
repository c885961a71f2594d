"""What playing the next batch during an update's passes could buy the actor-critic, by its
projection, from the costs a `pong-mp bench --project` record measured: a bound, not a
measurement (no backend does it).

With a lag of one update (batch k + 1 played with the weights update k starts from) a pool
could play the next batch while update k's passes run, in the time its workers wait on the
coordinator and on the rounds' barriers. For each (workers, batch size) the local backend's
schedule (`projection.simulate`'s) gives the play's wall time and the learning's; with the
play overlapped, an update takes at least its learning and at least all the work spread
over the workers:

    overlapped = max(learning, (play work + pass work) / workers, longest play)

Prints JSON.

    python docs/bench/overlap_what_if.py docs/bench/DATE-projection.json \
        > docs/bench/DATE-overlap-what-if.json
"""

from __future__ import annotations

import argparse
import heapq
import json

import numpy as np

from pong_mp.tools.projection import Costs, EpisodeCost, _passes

SHAPES = [(2, 10), (8, 8), (16, 10), (16, 16), (32, 32)]
"""(workers, batch size) pairs projected."""


def phases(
    costs: Costs, workers: int, batch: int, epochs: int, updates: int = 20, seed: int = 0
) -> dict[str, float]:
    """The play's and the learning's wall seconds over `updates` updates as `simulate` lays
    them out, the overlapped bound, and the work behind them."""
    rng = np.random.default_rng(seed)
    play_wall = learn_wall = play_work = pass_work = steps = longest = 0.0
    for _ in range(updates):
        drawn = [costs.episodes[i] for i in rng.integers(len(costs.episodes), size=batch)]
        free = [(0.0, worker) for worker in range(min(workers, batch))]
        keeper, back = [], 0.0
        for episode in drawn:
            now, worker = heapq.heappop(free)
            done = now + costs.round_trip_seconds + episode.play_seconds
            keeper.append(worker)
            back = max(back, done)
            heapq.heappush(free, (done, worker))
        now = back
        for _epoch in range(epochs):
            for part in range(len(drawn[0].pass_seconds)):
                arrivals = _passes(costs, drawn, keeper, part, now)
                now = max(arrivals) + len(drawn) * costs.add_seconds + costs.step_seconds
        play_wall += back
        learn_wall += now - back
        play_work += sum(e.play_seconds for e in drawn)
        pass_work += sum(epochs * sum(e.pass_seconds) for e in drawn)
        longest = max(longest, max(e.play_seconds for e in drawn))
        steps += sum(e.steps for e in drawn)
    busy = min(workers, batch)
    overlapped = max(learn_wall, (play_work + pass_work) / busy, longest * updates)
    return {
        "workers": workers,
        "batch_size": batch,
        "play_share": play_wall / (play_wall + learn_wall),
        "steps_per_sec": steps / (play_wall + learn_wall),
        "overlapped_steps_per_sec_bound": steps / overlapped,
        "bound_over_synchronous": (play_wall + learn_wall) / overlapped,
    }


def main() -> None:
    """Print the rows of the record named on the command line."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("record", help="JSON of `pong-mp bench --project --json`")
    record = parser.parse_args().record
    with open(record) as file:
        measured = json.load(file)
    raw = measured["costs"]
    costs = Costs(
        episodes=tuple(
            EpisodeCost(e["steps"], e["play_seconds"], tuple(e["pass_seconds"]))
            for e in raw["episodes"]
        ),
        **{k: raw[k] for k in ("raw_step_seconds", "add_seconds", "step_seconds",
                               "round_trip_seconds")},
    )
    rows = [phases(costs, w, b, measured["epochs"]) for w, b in SHAPES]
    print(json.dumps({"record": record, "rows": rows}, indent=2))


if __name__ == "__main__":
    main()
