"""What one pass of the actor-critic costs a worker, per env step, loop by loop.

Plays --episodes games of a model (the shipped agent by default: long, even episodes) on
real Pong, then times one epoch of train's minibatches over them, three times, in this one
process, and prints JSON: the fastest epoch's microseconds per env step, in all and for each
compiled loop of `ppo.PassWork.gradient`, and a SHA-256 of every gradient, which two
checkouts that give the same bits share. Run it from a checkout, one checkout after another:

    python docs/bench/pass_cost.py > docs/bench/DATE-NAME.json
"""

from __future__ import annotations

import argparse
import collections
import hashlib
import json
import time
from typing import Any

import numpy as np

LOOPS = ("conv_many", "forward_many", "ppo_coefficients", "ppo_accumulate", "finish",
         "conv_backward")


def _timed(loop: Any, name: str, spent: collections.Counter[str]) -> Any:
    """`loop`, adding its seconds to spent[name]."""

    def timed(*args: Any) -> Any:
        start = time.perf_counter()
        try:
            return loop(*args)
        finally:
            spent[name] += time.perf_counter() - start

    return timed


def measure(model: str, episodes: int) -> dict[str, Any]:
    """The costs of one epoch of passes over `episodes` games of `model`."""
    from pong_mp import policy, sparse
    from pong_mp.backends.base import prepare_worker_process
    from pong_mp.backends.episode_worker import EpisodeWorker
    from pong_mp.checkpoint import load_policy
    from pong_mp.config import TrainConfig
    from pong_mp.episode import make_tasks
    from pong_mp.gradient import Moments
    from pong_mp.ppo import EpochTask, advantage_moments
    from pong_mp.rundir import code_commit
    from pong_mp.trainer import rollout_spec

    params, stored = load_policy(model)
    config = TrainConfig(env="ALE/Pong-v5", workers=1, hidden=int(stored["hidden"]))
    config.validate()
    params = policy.with_value_head(params, config.shape, config.value_head)
    weights = policy.Weights32.from_params(params, config.shape)
    spent: collections.Counter[str] = collections.Counter()
    for name in LOOPS:  # each compiled loop the pass calls, timed where it is looked up
        if hasattr(sparse, name):
            setattr(sparse, name, _timed(getattr(sparse, name), name, spent))
    prepare_worker_process()
    worker = EpisodeWorker(rollout_spec(config))
    grad = np.empty(len(params), np.float32)
    worker.open()
    try:
        played = [
            (task, worker.play(weights, task).stats)
            for task in make_tasks(config.seed, 0, episodes, gradient=False)
        ]
        moments = Moments()
        for _, stats in played:
            moments.merge(advantage_moments(stats.data))
        digest = hashlib.sha256()
        epochs = []
        for repeat in range(3):
            spent.clear()
            start = time.perf_counter()
            for task, stats in played:
                for part in range(config.minibatches):
                    worker.play(weights, EpochTask(
                        task.index, task.seed, stats.data, 0, part, config.minibatches,
                        moments.mean, moments.standardizing_scale, config.entropy_bonus,
                    ), grad)
                    if repeat == 0:
                        digest.update(grad.tobytes())
            epochs.append((time.perf_counter() - start, dict(spent)))
    finally:
        worker.close()
    steps = sum(stats.steps for _, stats in played)
    seconds, loops = min(epochs, key=lambda epoch: epoch[0])
    return {
        "commit": code_commit(),  # "-dirty" where the package differs from it
        "build": sparse.BUILD,
        "model": model,
        "episodes": episodes,
        "steps": steps,
        "epoch_seconds": [round(epoch[0], 4) for epoch in epochs],
        "pass_us_per_step": 1e6 * seconds / steps,
        "loops_us_per_step": {name: 1e6 * t / steps for name, t in sorted(loops.items())},
        "gradients_sha256": digest.hexdigest(),
    }


def main() -> None:
    """Measure and print the JSON."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="models/pong.npz")
    parser.add_argument("--episodes", type=int, default=6)
    args = parser.parse_args()
    print(json.dumps(measure(args.model, args.episodes), indent=2))


if __name__ == "__main__":
    main()
