"""The whole algorithm on one screen: Karpathy's policy gradient for Pong, in one process.

`pong-mp train` runs this same loop on a pool of workers, with checkpoints, resumes and logs.
Here it is alone, on the package's own modules. Each update:

1. make the batch's episode tasks: each episode's global index and its seed;
2. play each with the current weights (EpisodeWorker: the env, sparse frame differences,
   the policy, and the episode's gradient folded rally by rally);
3. add the gradients in the fixed order (BatchSum), so that the bytes never depend on who
   played what, or when;
4. take one RMSProp step (gradient ascent) and print the progress.

    python examples/minimal_loop.py                       # real Pong, until Ctrl-C
    python examples/minimal_loop.py --env FakePong-v0 --env-arg points_to_win=5 \\
        --env-arg fixed_serve=true --hidden 32 --lr 3e-3 --updates 40

With the same options it ends with the very weights of
`pong-mp train --preset pg --backend serial` (Karpathy's learner; the defaults of
`pong-mp train` are the actor-critic, whose passes over each batch this loop leaves out).
"""

from __future__ import annotations

import argparse
import json
import time
from typing import Any

import numpy as np
from threadpoolctl import threadpool_limits

from pong_mp import policy
from pong_mp.backends import RolloutSpec
from pong_mp.backends.episode_worker import EpisodeWorker
from pong_mp.batch_sum import BatchSum
from pong_mp.episode import make_tasks
from pong_mp.optim import MeanStep
from pong_mp.pg import PGWork

RUNNING_DECAY = 0.99  # the running reward's memory, one episode at a time (Karpathy's)


def train(
    env_id: str = "ALE/Pong-v5",
    env_kwargs: dict[str, Any] | None = None,
    updates: int | None = None,
    batch_size: int = 10,
    hidden: int = 200,
    lr: float = 1e-3,
    gamma: float = 0.99,
    decay: float = 0.99,
    seed: int = 0,
) -> np.ndarray:
    """Train from new weights for `updates` updates (forever if None); the flat weights."""
    shape = policy.NetShape(hidden)
    params = policy.init_params(shape, seed)  # W1 (transposed) then W2, float64
    optimizer = MeanStep("rmsprop", decay)
    optimizer.load(params, np.zeros_like(params), None)  # RMSProp's cache starts at zero
    # What the worker runs: Karpathy's learner's side, an episode played into its gradient.
    spec = RolloutSpec(env_id, shape, PGWork(gamma), env_kwargs=env_kwargs or {})
    worker = EpisodeWorker(spec)
    worker.open()  # the env and the gradient's working memory, built once
    episodes, steps, update, running = 0, 0, 0, None
    try:
        while updates is None or update < updates:
            start = time.perf_counter()
            # Episodes are played with float32 weights; the optimizer keeps float64 ones.
            weights = policy.Weights32.from_flat32(optimizer.params.astype(np.float32), shape)
            summed = BatchSum(episodes, batch_size, np.empty(len(optimizer.params)))
            for task in make_tasks(seed, episodes, batch_size):
                with threadpool_limits(limits=1):  # BLAS on one thread: the same bits anywhere
                    result = worker.play(weights, task)
                summed.add(result)  # into its place in the fixed order of additions
            update += 1
            # Karpathy's step: on the summed gradient itself (divisor and scale 1).
            if not optimizer.step(summed.total, 1.0, 1.0, update, lr):
                raise FloatingPointError(f"update {update}: the new weights are not finite")
            for reward in summed.episode_rewards:  # in episode order
                running = reward if running is None else (
                    running * RUNNING_DECAY + reward * (1 - RUNNING_DECAY)
                )
            episodes, steps = episodes + batch_size, steps + summed.steps
            rewards = summed.episode_rewards
            print(
                f"update {update:4d} | episodes {episodes:6d} | reward {np.mean(rewards):6.2f} "
                f"| running {running:6.2f} | {summed.steps / (time.perf_counter() - start):,.0f}"
                " steps/s",
                flush=True,
            )
    finally:
        worker.close()
    return optimizer.params


def main() -> None:
    """Parse the options, train, and save the weights if asked."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--env", default="ALE/Pong-v5")
    parser.add_argument("--env-arg", action="append", default=[], metavar="KEY=VALUE",
                        help="an env argument, VALUE as JSON (repeatable)")  # fmt: skip
    parser.add_argument("--updates", type=int, default=None, help="default: until Ctrl-C")
    parser.add_argument("--batch-size", type=int, default=10)
    parser.add_argument("--hidden", type=int, default=200)
    parser.add_argument("--lr", type=float, default=1e-3)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", help="write W1 (H x 6400) and W2 to this .npz at the end")
    args = parser.parse_args()
    env_kwargs = {k: json.loads(v) for k, v in (arg.split("=", 1) for arg in args.env_arg)}
    params = train(
        args.env, env_kwargs, args.updates, args.batch_size, args.hidden, args.lr,
        seed=args.seed,
    )  # fmt: skip
    if args.out:
        w1t, w2 = policy.split(params, policy.NetShape(args.hidden))
        np.savez(args.out, W1=np.ascontiguousarray(w1t.T), W2=w2)


if __name__ == "__main__":
    main()
