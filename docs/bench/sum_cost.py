"""What a round's sum costs: a round's float32 gradients added into the float64 total one
after the other, in one pass each (the local pool's sum until the one-pass loop) and in one
pass over memory for all of them (`sparse.add_float32` with a list), on one thread, for
gradients of the default conv policy's size. Prints JSON; the best of --repeats, in ms.

    python docs/bench/sum_cost.py > docs/bench/DATE-sum-cost.json
"""

from __future__ import annotations

import argparse
import json
import time

import numpy as np

from pong_mp import rundir, sparse
from pong_mp.config import TrainConfig
from pong_mp.policy import param_count


def in_turn(total: np.ndarray, grads: list[np.ndarray]) -> None:
    """The first gradient copied, then each of the others added in a pass of its own."""
    np.copyto(total, grads[0])
    for grad in grads[1:]:
        sparse.add_float32(total, [grad])


def one_pass(total: np.ndarray, grads: list[np.ndarray]) -> None:
    """The same additions in one pass over memory."""
    sparse.add_float32(total, grads, first=True)


def main() -> None:
    """Time both ways of summing 2, 10, 16 and 32 gradients; print one JSON object."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=15)
    args = parser.parse_args()
    n = param_count(TrainConfig().shape, value=True)
    rng = np.random.default_rng(0)
    rows = []
    for count in (2, 10, 16, 32):
        grads = [rng.standard_normal(n).astype(np.float32) for _ in range(count)]
        total = np.empty(n)
        best = {"in_turn_ms": float("inf"), "one_pass_ms": float("inf")}
        for _ in range(args.repeats):  # alternated, so that both see the same load
            for name, run in (("in_turn_ms", in_turn), ("one_pass_ms", one_pass)):
                start = time.perf_counter()
                run(total, grads)
                best[name] = min(best[name], (time.perf_counter() - start) * 1e3)
        rows.append({"gradients": count, **best, "ratio": best["in_turn_ms"] / best["one_pass_ms"]})
    print(json.dumps({"commit": rundir.code_commit(), "loops": sparse.BUILD, "parameters": n,
                      "repeats": args.repeats, "rows": rows}, indent=2))


if __name__ == "__main__":
    main()
