"""What a sleeping FakePong step costs in CPU: the premise of `pong-mp bench --simulate`.

The simulation stands in for a slow emulator with steps that sleep, on the premise that
sleeping costs no CPU. This plays --episodes games of `--simulate`'s FakePong-v0 (new
weights, the actor-critic's play, one process) three ways and prints JSON with the process's
CPU microseconds per env step for each: steps that do not sleep, steps that each sleep
--step-seconds, and steps that sleep in runs (FakePong's SLEEP_AT_LEAST, what the
simulation uses):

    python docs/bench/sleep_cost.py > docs/bench/DATE-NAME.json
"""

from __future__ import annotations

import argparse
import json
import time
from typing import Any


def cpu_per_step(step_seconds: float, sleep_at_least: float, episodes: int) -> float:
    """Process CPU microseconds per env step of `episodes` games played with new weights."""
    from pong_mp import policy
    from pong_mp.backends.base import prepare_worker_process
    from pong_mp.backends.episode_worker import EpisodeWorker
    from pong_mp.config import TrainConfig
    from pong_mp.envs import fake_pong
    from pong_mp.episode import make_tasks
    from pong_mp.tools.bench import FAKE_PONG_ID, simulated_env
    from pong_mp.trainer import rollout_spec

    fake_pong.SLEEP_AT_LEAST = sleep_at_least
    config = TrainConfig(env=FAKE_PONG_ID, workers=1, env_kwargs=simulated_env(step_seconds))
    config.validate()
    weights = policy.Weights32.from_params(
        policy.init_params(config.shape, 0, config.value_head), config.shape
    )
    prepare_worker_process()
    worker = EpisodeWorker(rollout_spec(config))
    worker.open()
    try:
        start = time.process_time()
        steps = sum(
            worker.play(weights, task).stats.steps
            for task in make_tasks(config.seed, 0, episodes, gradient=False)
        )
        return 1e6 * (time.process_time() - start) / steps
    finally:
        worker.close()


def main() -> None:
    """Measure and print the JSON."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--step-seconds", type=float, default=0.004)
    parser.add_argument("--episodes", type=int, default=6)
    args = parser.parse_args()
    from pong_mp.envs.fake_pong import SLEEP_AT_LEAST
    from pong_mp.rundir import code_commit

    ways: dict[str, Any] = {
        "no_sleep": (0.0, 0.0),
        "a_sleep_every_step": (args.step_seconds, 0.0),
        "sleeps_in_runs": (args.step_seconds, SLEEP_AT_LEAST),
    }
    print(json.dumps({
        "commit": code_commit(),  # "-dirty" where the package differs from it
        "step_seconds": args.step_seconds,
        "sleep_at_least": SLEEP_AT_LEAST,
        "episodes": args.episodes,
        "cpu_us_per_step": {
            name: round(cpu_per_step(step, least, args.episodes), 1)
            for name, (step, least) in ways.items()
        },
    }, indent=2))


if __name__ == "__main__":
    main()
