"""What publishing the actor-critic's new weights costs the coordinator each round: the
Adam step with its float32 weights written into the step's own array and then copied into
the local pool's shared slot (`SharedWeights.write`), against the step writing them into
the slot itself (`SharedWeights.room`), in turns, in this one process.

    python docs/bench/publish_cost.py [--rounds 200] [--threads T] > docs/bench/DATE-NAME.json

Prints JSON: the median milliseconds of each way, over --rounds rounds each, on the
defaults' policy (1.2 M parameters) and --threads threads (the step's own count where not
given), and whether both gave the same bits.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time

import numpy as np


def main() -> None:
    """Time both ways of publishing, in turns, and print the medians as JSON."""
    from pong_mp import policy
    from pong_mp.backends.shm import BlockShape, SharedWeights
    from pong_mp.optim import MeanStep, step_threads
    from pong_mp.rundir import code_commit

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=200)
    parser.add_argument("--threads", type=int, default=step_threads())
    args = parser.parse_args()
    shape = policy.NetShape(200, 16)
    params = policy.init_params(shape, 0, value=True)
    rng = np.random.default_rng(0)
    total = rng.standard_normal(len(params)) * 10.0
    zeros = np.zeros(len(params))
    block = SharedWeights.create(BlockShape(shape, width=1, value=True))
    spent: dict[str, list[float]] = {"copied": [], "in_place": []}
    try:
        with MeanStep("adam", 0.99, args.threads) as copied, \
                MeanStep("adam", 0.99, args.threads) as in_place:
            for stepper in (copied, in_place):
                stepper.load(params, zeros, zeros)
            for step in range(1, args.rounds + 1):
                start = time.perf_counter()
                copied.step(total, 1000.0, 1.0, step, 1e-3)
                block.write(copied.weights, 2 * step)
                spent["copied"].append(time.perf_counter() - start)
                reference = block.flat(2 * step).tobytes()
                start = time.perf_counter()
                room = block.room()
                in_place.step(total, 1000.0, 1.0, step, 1e-3, room)
                block.write(room, 2 * step + 1)
                spent["in_place"].append(time.perf_counter() - start)
                if block.flat(2 * step + 1).tobytes() != reference:
                    raise SystemExit(f"round {step}: the two ways gave other bits")
    finally:
        block.close()
        block.unlink()
    medians = {name: 1e3 * statistics.median(times) for name, times in spent.items()}
    print(json.dumps({
        "commit": code_commit(),
        "cpus": os.cpu_count(),
        "threads": args.threads,
        "parameters": len(params),
        "rounds": args.rounds,
        "median_ms": medians,
        "in_place_over_copied": medians["in_place"] / medians["copied"],
        "same_bits": True,
    }, indent=2))


if __name__ == "__main__":
    main()
