"""Training rate of the batch-16 recipe with the optimizer step's threads capped at each CAP,
in turns, each in a fresh process: one JSON line a measurement.

    python docs/bench/step_threads.py WORKERS SECONDS CAP [CAP ...]

Each measurement is `pong_mp.tools.bench.training_rate` (the local backend, new weights, one
warm-up update, then SECONDS of training) with `pong_mp.optim.MAX_STEP_THREADS` set to CAP in
that process: the threads of a round's sum and of the Adam step (`optim.step_threads`).
Run from a checkout whose compiled loops are built, with it on PYTHONPATH.
"""

import subprocess
import sys

MEASURE = """
import json, sys
import pong_mp.optim as optim
optim.MAX_STEP_THREADS = int(sys.argv[1])
from pong_mp.tools.bench import TrainingSetup, training_rate
if __name__ == "__main__":
    setup = TrainingSetup(batch_size=16, epochs=3, minibatches=26, lr=1.3e-3)
    r = training_rate("ALE/Pong-v5", int(sys.argv[2]), float(sys.argv[3]), setup)
    print(json.dumps({"cap": int(sys.argv[1]), "threads": optim.step_threads(),
                      **{k: r[k] for k in ("steps_per_sec", "updates", "coordinator_share",
                                           "workers_busy", "idle_shares")}}))
"""

if __name__ == "__main__":
    workers, seconds, caps = sys.argv[1], sys.argv[2], sys.argv[3:]
    for cap in caps:
        done = subprocess.run([sys.executable, "-c", MEASURE, cap, workers, seconds],
                              capture_output=True, text=True)
        print(done.stdout.strip().splitlines()[-1] if done.returncode == 0
              else done.stderr[-2000:], flush=True)
