"""How evenly a run's work falls on its workers: each episode's length, and each round's
share of a pass for each episode, recorded while the run trains.

The local backend hands each worker whole episodes, and each round of passes one
episode's share of the minibatch, so a batch's play waits for its longest episode and a
round for its largest share. This trains a run through `pong_mp.train` (any options;
FakePong or real Pong), and writes one JSON line an update: the env steps of each
episode played (`play`, in episode order) and, for each round of passes, the steps of each
episode's share (`rounds`). The run's bytes are those of the same command without it, on
any worker count, so its metrics can be checked against a record's, and the lengths are
those the record's run played.

    python docs/bench/work_shares.py RUN_DIR OUT.jsonl --preset batch16 --seed 8 \
        --target-reward 18 --workers 2

A run stopped (Ctrl-C) goes on with `--resume` and the same RUN_DIR and OUT: the updates
recorded go on from its checkpoint's.
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any


def main() -> None:
    """Train with the options given, recording the work shares to OUT."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("run_dir")
    parser.add_argument("out")
    parser.add_argument("--preset")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--target-reward", type=float)
    parser.add_argument("--batches", type=int)
    parser.add_argument("--resume", action="store_true", help="go on with RUN_DIR's run")
    args = parser.parse_args()

    import pong_mp
    from pong_mp import ppo
    from pong_mp.episode import EpisodeStats

    original = ppo.run_round
    update: dict[str, Any] = {"play": [], "rounds": []}
    out = open(args.out, "a")  # noqa: SIM115 (held open for the run)

    def recorded(backend: Any, version: int, tasks: list[Any], summed: Any) -> Iterator[Any]:
        steps: dict[int, int] = {}
        stats: EpisodeStats
        for stats in original(backend, version, tasks, summed):
            steps[stats.index] = stats.steps
            yield stats
        shares = [steps[task.index] for task in tasks]
        if isinstance(tasks[0], ppo.EpochTask):
            update["rounds"].append(shares)
        else:  # a new batch's play: the last update's rounds are all in
            if update["play"]:
                out.write(json.dumps(update) + "\n")
                out.flush()
            update["play"], update["rounds"] = shares, []

    ppo.run_round = recorded
    given = {k: v for k, v in vars(args).items() if k not in ("run_dir", "out", "resume")}
    options = {k: v for k, v in given.items() if k != "preset" and not args.resume}
    options = {k: v for k, v in options.items() if v is not None}
    try:
        pong_mp.train(
            args.run_dir, resume=args.resume, preset=None if args.resume else args.preset,
            progress=False, **options,
        )
    finally:
        # The last update, where its rounds are all in (a stop mid-update leaves it to the
        # resume, which plays it again from the checkpoint).
        if update["rounds"]:  # a run that started
            config = json.loads((Path(args.run_dir) / "config.json").read_text())
            if len(update["rounds"]) == config["epochs"] * config["minibatches"]:
                out.write(json.dumps(update) + "\n")
        out.close()


if __name__ == "__main__":
    main()
