"""What the actor-critic's projection says of a W-worker recipe, and of taking the
coordinator's sums off its one core, from the costs a `pong-mp bench --project` record
measured.

For each (workers, batch size) the batch is passed over with minibatches scaled as the
batch (16 a pass at 10 episodes, so the optimizer steps per env step stay the defaults'),
each episode's measured pass time of one epoch shared evenly among them (so a pass's fixed
cost is left out), in two cases: the coordinator as measured; and its round's sum and
optimizer step 4 times faster (more threads, where memory keeps up). Prints JSON.

    python docs/bench/projection_what_if.py docs/bench/DATE-projection.json \
        > docs/bench/DATE-projection-what-if.json
"""

from __future__ import annotations

import argparse
import dataclasses
import json

from pong_mp.tools.projection import Costs, simulate

SHAPES = [(2, 10), (8, 32), (16, 32), (16, 64), (32, 64), (32, 128)]
"""(workers, batch size) pairs projected."""


def main() -> None:
    """Print the what-if rows of the record named on the command line."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("record", help="JSON of `pong-mp bench --project --json`")
    record = parser.parse_args().record
    with open(record) as file:
        measured = json.load(file)
    costs = Costs.from_dict(measured["costs"])
    one = simulate(costs, 1, measured["batch_size"], measured["epochs"])["steps_per_sec"]
    rows = []
    for workers, batch in SHAPES:
        parts = round(measured["minibatches"] * batch / measured["batch_size"])
        even = dataclasses.replace(
            costs,
            episodes=tuple(
                dataclasses.replace(e, pass_seconds=(sum(e.pass_seconds) / parts,) * parts)
                for e in costs.episodes
            ),
        )
        cases = {
            "measured": even,
            "sum_and_step_4x": dataclasses.replace(
                even, add_seconds=even.add_seconds / 4, step_seconds=even.step_seconds / 4
            ),
        }
        for case, case_costs in cases.items():
            row = simulate(case_costs, workers, batch, measured["epochs"], updates=5)
            rows.append({
                "case": case, "minibatches": parts, **row,
                "efficiency": row["steps_per_sec"] / one / workers,
            })
    print(json.dumps({"record": record, "rows": rows}, indent=2))


if __name__ == "__main__":
    main()
