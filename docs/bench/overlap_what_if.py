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
import json

from pong_mp.tools.projection import Costs, lay_out

SHAPES = [(2, 10), (8, 8), (16, 10), (16, 16), (32, 32)]
"""(workers, batch size) pairs projected."""

UPDATES = 20
"""Updates laid out for each pair."""


def bound(costs: Costs, workers: int, batch: int, epochs: int) -> dict[str, float]:
    """The play's share of an update as `simulate` lays it out, and the overlapped bound."""
    laid = lay_out(costs, workers, batch, epochs, UPDATES)
    synchronous = laid.play_wall + laid.learn_wall
    work = (laid.play_work + laid.pass_work) / min(workers, batch)
    overlapped = max(laid.learn_wall, work, laid.longest_play * UPDATES)
    return {
        "workers": workers,
        "batch_size": batch,
        "play_share": laid.play_wall / synchronous,
        "steps_per_sec": laid.steps / synchronous,
        "overlapped_steps_per_sec_bound": laid.steps / overlapped,
        "bound_over_synchronous": synchronous / overlapped,
    }


def main() -> None:
    """Print the rows of the record named on the command line."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("record", help="JSON of `pong-mp bench --project --json`")
    record = parser.parse_args().record
    with open(record) as file:
        measured = json.load(file)
    costs = Costs.from_dict(measured["costs"])
    rows = [bound(costs, w, b, measured["epochs"]) for w, b in SHAPES]
    print(json.dumps({"record": record, "rows": rows}, indent=2))


if __name__ == "__main__":
    main()
