"""What playing the next batch during an update's passes could buy the actor-critic, by its
projection, from the costs a `pong-mp bench --project` record measured: a bound, not a
measurement (no backend does it).

With a lag (the next batch played with the weights of an optimizer step before the update
ends) a pool could play the next batch while the update's last passes run, in the time its
workers wait on the coordinator and on the rounds' barriers. For each (workers, batch size)
the local backend's schedule (`projection.lay_out`) gives the play's wall time and the
learning's. With the next batch's play free to start after `E` of the update's epochs (0:
the weights the update starts from, a lag of the whole update), an update takes at least

    max(learning, learning of E epochs + max(longest play, play work / workers),
        (play work + pass work) / workers)

(each summed over the updates laid out), and its speed at most the steps over that. Prints
JSON.

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
    """The play's share of an update as the schedule lays it out, and for each count of
    epochs the next batch's play waits for, the overlapped bound over today's speed."""
    laid = lay_out(costs, workers, batch, epochs, UPDATES)
    synchronous = laid.play_wall + laid.learn_wall
    busy = min(workers, batch)
    work = (laid.play_work + laid.pass_work) / busy
    play = max(laid.longest_plays, laid.play_work / busy)
    after = {}
    for waits in range(epochs):  # the same episodes: the draws depend on the seed alone
        before = lay_out(costs, workers, batch, waits, UPDATES).learn_wall
        after[waits] = synchronous / max(laid.learn_wall, before + play, work)
    return {
        "workers": workers,
        "batch_size": batch,
        "play_share": laid.play_wall / synchronous,
        "steps_per_sec": laid.steps / synchronous,
        "bound_over_synchronous_by_epochs_waited": after,
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
