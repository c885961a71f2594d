"""What a Ray actor call costs beyond its work, on this machine.

Two actors (one CPU each) take calls of a fixed busy loop, handed out as the backend hands
out episodes (`ray.wait` for the first done, then that actor's next call), with the float32
weights of the defaults' net as an object-store argument: one call at a time an actor, as
the backend does, or two (the next one queued behind the running one, so that the round
trip to the driver is hidden). Prints JSON: for each loop length and calls in flight, the
wall time per call and the actor time per call beyond the loop.

    python docs/bench/ray_call_cost.py > docs/bench/DATE-ray-call-cost.json
"""

from __future__ import annotations

import json
import os
import time

import numpy as np
import ray

CALLS = 1000
ACTORS = 2
PARAMS = 1_300_000  # about the defaults' parameter count


@ray.remote(num_cpus=1)
class Busy:
    """An actor whose call spins for a given time."""

    def work(self, weights: np.ndarray, seconds: float) -> int:
        """Spin for `seconds`; `weights` only travels."""
        start = time.perf_counter()
        while time.perf_counter() - start < seconds:
            pass
        return int(weights.size)


def seconds_per_call(actors: list, weights: object, seconds: float, in_flight: int) -> float:
    """Wall seconds per call over CALLS calls, each actor kept `in_flight` calls."""
    start = time.perf_counter()
    busy = {a.work.remote(weights, seconds): a for a in actors for _ in range(in_flight)}
    done = 0
    while done < CALLS:
        ready, _ = ray.wait(list(busy), num_returns=1)
        for ref in ready:
            actor = busy.pop(ref)
            ray.get(ref)
            done += 1
            busy[actor.work.remote(weights, seconds)] = actor
    ray.get(list(busy))
    return (time.perf_counter() - start) / CALLS


def main() -> None:
    """Measure and print the JSON record."""
    ray.init(num_cpus=ACTORS, include_dashboard=False, log_to_driver=False)
    actors = [Busy.remote() for _ in range(ACTORS)]
    weights = ray.put(np.zeros(PARAMS, np.float32))
    ray.get([a.work.remote(weights, 0.0) for a in actors])
    rows = []
    for in_flight in (1, 2):
        for seconds in (0.0, 0.004):
            wall = seconds_per_call(actors, weights, seconds, in_flight)
            rows.append({
                "calls_in_flight_an_actor": in_flight,
                "work_ms": seconds * 1e3,
                "wall_ms_per_call": wall * 1e3,
                "actor_ms_per_call_beyond_work": (wall * ACTORS - seconds) * 1e3,
            })  # fmt: skip
    print(json.dumps({"actors": ACTORS, "calls": CALLS, "cpus": os.cpu_count(), "rows": rows},
                     indent=2))


if __name__ == "__main__":
    main()
