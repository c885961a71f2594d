"""Training speed of two checkouts of pong-mp, measured in turns on one machine.

`pong-mp bench` measures one checkout against the raw emulator; on a shared machine the
load moves between two such runs by more than a change to the coordinator is worth. This
runs `pong_mp.tools.bench.training_rate` (the local backend, `train`'s defaults, new
weights, one warm-up update, then --seconds of training) for each checkout in turn, --pairs
times, each in a fresh process, and prints every measurement as JSON, each with the commit
it measured. Compare the medians.

    python docs/bench/paired_rate.py OLD_CHECKOUT NEW_CHECKOUT --pairs 3 --seconds 60 \
        > docs/bench/DATE-NAME.json

`--simulate STEP_SECONDS` measures `bench --simulate`'s FakePong instead (steps that sleep:
the orchestration of many workers on few cores), and `--options JSON` trains with train's
options of that object (`'{"batch_size": 16}'`) instead of the defaults:

    python docs/bench/paired_rate.py OLD NEW --workers 16 --simulate 0.004 \
        --options '{"batch_size": 16, "epochs": 3, "minibatches": 26, "lr": 0.0013}'

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
from pong_mp.tools.bench import FAKE_PONG_ID, TrainingSetup, simulated_env, training_rate
if __name__ == "__main__":
    workers, seconds, simulate, options = sys.argv[1:]
    setup = TrainingSetup(**json.loads(options))
    if float(simulate):
        r = training_rate(FAKE_PONG_ID, int(workers), float(seconds), setup,
                          simulated_env(float(simulate)))
    else:
        r = training_rate("ALE/Pong-v5", int(workers), float(seconds), setup)
    print(json.dumps({k: r[k] for k in ("steps_per_sec", "updates", "coordinator_share",
                                        "workers_busy", "idle_shares")}))
"""


def commit(checkout: str) -> str:
    """The commit checked out in `checkout`."""
    done = subprocess.run(
        ["git", "-C", checkout, "rev-parse", "HEAD"], capture_output=True, text=True, check=True
    )
    return done.stdout.strip()


def measure(
    checkout: str, workers: int, seconds: float, simulate: float = 0.0, options: str = "{}"
) -> dict:
    """One training_rate measurement of `checkout`, in a fresh process run from it."""
    env = {**os.environ, "PYTHONPATH": os.path.abspath(checkout)}
    done = subprocess.run(
        [sys.executable, "-c", MEASURE, str(workers), str(seconds), str(simulate), options],
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
    parser.add_argument("--simulate", type=float, default=0.0, metavar="STEP_SECONDS")
    parser.add_argument("--options", default="{}", metavar="JSON")
    args = parser.parse_args()
    runs: dict[str, list[dict]] = {"old": [], "new": []}
    for _ in range(args.pairs):
        for name in ("old", "new"):
            runs[name].append(
                measure(getattr(args, name), args.workers, args.seconds, args.simulate,
                        args.options)
            )
    medians = {
        name: statistics.median(r["steps_per_sec"] for r in rows) for name, rows in runs.items()
    }
    print(json.dumps({
        "commits": {"old": commit(args.old), "new": commit(args.new)},
        "workers": args.workers,
        "seconds": args.seconds,
        "simulate": args.simulate or None,
        "options": json.loads(args.options),
        "cpus": os.cpu_count(),
        "median_steps_per_sec": medians,
        "new_over_old": medians["new"] / medians["old"],
        "runs": runs,
    }, indent=2))


if __name__ == "__main__":
    main()
