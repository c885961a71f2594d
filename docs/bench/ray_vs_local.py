"""Training speed of the Ray backend against the local pool, for two checkouts, in turns.

Runs `pong-mp train --backend B --seed 9 --workers W --batches 12` (the defaults: the
actor-critic on the conv policy; --batches N for another count) for each checkout and
backend in turn, --pairs times, each in a fresh process and run directory, and prints JSON:
every run's env steps/s over updates 3 to N (from its metrics.jsonl: Ray's start and the
first updates left out), the medians,
Ray over local for each checkout, and whether every run ended with the same weights.

    python docs/bench/ray_vs_local.py OLD_CHECKOUT NEW_CHECKOUT --pairs 2 [--workers 2] \
        > docs/bench/DATE-NAME.json

Both may be the same checkout (--workers 1 on 2 cores: Ray's own processes get a core).
--load N runs N other processes that keep a core busy each (a pure Python loop) for the
whole measurement: a machine shared with other work.

Both checkouts run with this Python (which needs Ray), each from its own directory, so each
needs its compiled loops (`pip install -e .` there, or `bin/pong-mp --version`).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np

COMMAND = "train --seed 9 --quiet --no-tensorboard"
FIRST = 3  # the first update counted: 1 and 2 hold Ray's start and the first publishes


def commit(checkout: str) -> str:
    """The commit checked out in `checkout`."""
    done = subprocess.run(
        ["git", "-C", checkout, "rev-parse", "HEAD"], capture_output=True, text=True, check=True
    )
    return done.stdout.strip()


def measure(checkout: str, backend: str, workers: int, batches: int) -> dict:
    """One run of COMMAND on `backend` from `checkout`: its rate and its weights' hash."""
    with tempfile.TemporaryDirectory() as tmp:
        run_dir = Path(tmp) / "run"
        args = [*COMMAND.split(), "--batches", str(batches), "--workers", str(workers)]
        args += ["--backend", backend]
        args += ["--run-dir", str(run_dir)]
        env = {**os.environ, "PYTHONPATH": checkout}
        subprocess.run(
            [sys.executable, "-m", "pong_mp", *args], cwd=checkout, env=env, check=True,
            capture_output=True,
        )  # fmt: skip
        lines = (run_dir / "metrics.jsonl").read_text().splitlines()
        records = [json.loads(line) for line in lines][FIRST - 1 :]
        steps = sum(r["steps"] for r in records)
        seconds = sum(r["seconds"] for r in records)
        with np.load(run_dir / "checkpoint.npz") as npz:
            weights = hashlib.sha256(npz["W1"].tobytes() + npz["W2"].tobytes()).hexdigest()
    return {"steps_per_sec": steps / seconds, "weights_sha256": weights}


def main() -> None:
    """Measure, in turns, and print the JSON record."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("old")
    parser.add_argument("new")
    parser.add_argument("--pairs", type=int, default=2)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--load", type=int, default=0)
    parser.add_argument("--batches", type=int, default=12)
    args = parser.parse_args()
    checkouts = {"old": args.old, "new": args.new}
    runs: dict[str, dict[str, list[dict]]] = {
        name: {"local": [], "ray": []} for name in checkouts
    }
    hogs = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(args.load)]
    try:
        for _ in range(args.pairs):
            for name, checkout in checkouts.items():
                for backend in ("local", "ray"):
                    run = measure(checkout, backend, args.workers, args.batches)
                    runs[name][backend].append(run)
    finally:
        for hog in hogs:
            hog.kill()
            hog.wait()
    medians = {
        name: {b: statistics.median(r["steps_per_sec"] for r in rs) for b, rs in by.items()}
        for name, by in runs.items()
    }
    hashes = {r["weights_sha256"] for by in runs.values() for rs in by.values() for r in rs}
    record = {
        "command": f"pong-mp {COMMAND} --batches {args.batches} --workers {args.workers}"
        " --backend local|ray",
        "counted_from_update": FIRST,
        "commits": {name: commit(checkout) for name, checkout in checkouts.items()},
        "cpus": os.cpu_count(),
        "busy_processes_beside": args.load,
        "median_steps_per_sec": medians,
        "ray_over_local": {name: m["ray"] / m["local"] for name, m in medians.items()},
        "new_ray_over_old_ray": medians["new"]["ray"] / medians["old"]["ray"],
        "same_weights_everywhere": len(hashes) == 1,
        "runs": runs,
    }
    print(json.dumps(record, indent=2))


if __name__ == "__main__":
    main()
