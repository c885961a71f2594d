"""Training speed of two checkouts of pong-mp, measured in turns on one machine.

`pong-mp bench` measures one checkout against the raw emulator; on a shared machine the
load moves between two such runs by more than a change to the coordinator is worth. This
runs `pong_mp.tools.bench.training_rate` (the local backend, `train`'s defaults, new
weights, one warm-up update, then --seconds of training) for each checkout in turn, --pairs
times, each in a fresh process, and prints every measurement as JSON, each with the commit
it measured. Compare the medians.

    python docs/bench/paired_rate.py OLD_CHECKOUT NEW_CHECKOUT --pairs 3 --seconds 60 \
        > docs/bench/DATE-NAME.json

Each checkout needs its compiled `pong_mp/sparse` module (`pip install -e .` there, or a
copy of one built from the same sparse.pyx).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys

MEASURE = """
import json, sys
from pong_mp.tools.bench import training_rate
if __name__ == "__main__":
    r = training_rate("ALE/Pong-v5", int(sys.argv[1]), float(sys.argv[2]))
    print(json.dumps({k: r[k] for k in ("steps_per_sec", "updates", "coordinator_share",
                                        "workers_busy", "idle_shares")}))
"""


def commit(checkout: str) -> str:
    """The commit checked out in `checkout`."""
    done = subprocess.run(
        ["git", "-C", checkout, "rev-parse", "HEAD"], capture_output=True, text=True, check=True
    )
    return done.stdout.strip()


def measure(checkout: str, workers: int, seconds: float) -> dict:
    """One training_rate measurement of `checkout`, in a fresh process run from it."""
    env = {**os.environ, "PYTHONPATH": os.path.abspath(checkout)}
    done = subprocess.run(
        [sys.executable, "-c", MEASURE, str(workers), str(seconds)],
        capture_output=True, text=True, env=env, cwd=os.path.abspath(checkout), check=True,
    )
    return json.loads(done.stdout.strip().splitlines()[-1])


def main() -> None:
    """Measure both checkouts in turns and print the results as one JSON object."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("old")
    parser.add_argument("new")
    parser.add_argument("--pairs", type=int, default=3)
    parser.add_argument("--seconds", type=float, default=60.0)
    parser.add_argument("--workers", type=int, default=2)
    args = parser.parse_args()
    runs: dict[str, list[dict]] = {"old": [], "new": []}
    for _ in range(args.pairs):
        for name in ("old", "new"):
            runs[name].append(measure(getattr(args, name), args.workers, args.seconds))
    medians = {
        name: statistics.median(r["steps_per_sec"] for r in rows) for name, rows in runs.items()
    }
    print(json.dumps({
        "commits": {"old": commit(args.old), "new": commit(args.new)},
        "workers": args.workers,
        "seconds": args.seconds,
        "cpus": os.cpu_count(),
        "median_steps_per_sec": medians,
        "new_over_old": medians["new"] / medians["old"],
        "runs": runs,
    }, indent=2))


if __name__ == "__main__":
    main()
