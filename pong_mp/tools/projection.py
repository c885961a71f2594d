"""A projection of training throughput at worker counts this machine does not have.

`simulate` replays the local backend's schedule with costs measured here (`measure_costs`):
- episodes go out in order to the first free worker; one of batch k may start once the
  weights it is played with exist (update k-1-L); it takes its length (drawn from a
  trained agent's episodes) times a training worker's seconds per step;
- the coordinator adds each gradient as it arrives (a worker gets its next episode only
  then), and applies update k with its broadcast once batch k is summed.
Left out: the memory bandwidth and caches that processes share, and the CPU the
coordinator takes on a machine with no spare core. The figures are projections.
"""

from __future__ import annotations

import heapq
import time
from collections import deque
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from pong_mp.tools import markdown_table


@dataclass(frozen=True)
class Costs:
    """What one episode and one update cost, as measured on one machine."""

    episode_steps: tuple[int, ...]  # a trained agent's episode lengths
    step_seconds: float  # a training worker's per env step, policy and gradient included
    raw_step_seconds: float  # the emulator's alone, in one process
    sum_seconds: float  # the coordinator's to add one episode's gradient
    update_seconds: float  # the coordinator's for one update with its broadcast


def simulate(
    costs: Costs, workers: int, batch_size: int, lag: int, updates: int = 200, seed: int = 0
) -> dict[str, float]:
    """The workers' busy fraction ("efficiency") over `updates` updates, and the training
    rate as a fraction of `workers` raw processes' ("ratio")."""
    rng = np.random.default_rng(seed)
    lengths = rng.choice(np.asarray(costs.episode_steps), size=(updates, batch_size))
    applied = [0.0]  # applied[k]: when update k's weights exist (update 0: the start)
    summed = [0] * (updates + 1)  # episodes of each batch summed so far
    coordinator = 0.0
    idle: deque[tuple[float, int]] = deque((0.0, w) for w in range(workers))
    playing: list[tuple[float, int, int]] = []  # (finish, worker, batch)
    next_batch, next_episode = 1, 0
    busy = 0.0
    while len(applied) <= updates:
        # Hand out episodes whose weights exist, in order, to the workers free longest.
        while idle and next_batch <= updates and next_batch - 1 - lag < len(applied):
            free_since, worker = idle.popleft()
            start = max(free_since, applied[max(0, next_batch - 1 - lag)])
            seconds = lengths[next_batch - 1, next_episode] * costs.step_seconds
            busy += seconds
            heapq.heappush(playing, (start + seconds, worker, next_batch))
            next_episode += 1
            if next_episode == batch_size:
                next_batch, next_episode = next_batch + 1, 0
        finish, worker, batch = heapq.heappop(playing)
        coordinator = max(coordinator, finish) + costs.sum_seconds
        summed[batch] += 1
        idle.append((coordinator, worker))
        while len(applied) <= updates and summed[len(applied)] == batch_size:
            coordinator += costs.update_seconds
            applied.append(coordinator)
        idle = deque(sorted(idle))
    wall = applied[-1]
    efficiency = float(busy / (workers * wall))
    return {
        "workers": workers,
        "batch_size": batch_size,
        "policy_lag": lag,
        "efficiency": efficiency,
        "ratio": float(efficiency * costs.raw_step_seconds / costs.step_seconds),
    }


def project(
    costs: Costs, worker_counts: list[int], batch_sizes: list[int], lags: list[int]
) -> list[dict[str, float]]:
    """`simulate` for every combination, in the order given."""
    return [
        simulate(costs, workers, batch_size, lag)
        for batch_size in batch_sizes
        for lag in lags
        for workers in worker_counts
    ]


def run_projection(costs: Costs) -> list[dict[str, float]]:
    """`pong-mp bench --project`'s: 1 to 64 workers, batch sizes 10 and 32, lags 0 and 1."""
    return project(costs, [1, 2, 4, 8, 16, 32, 64], [10, 32], [0, 1])


def measure_costs(
    model: Path, env_id: str = "ALE/Pong-v5", episodes: int = 16, raw_seconds: float = 10.0
) -> Costs:
    """Measure here `episodes` training episodes of the agent in `model`, the raw emulator
    in one process, one gradient added to a float64 sum, and one update."""
    from pong_mp import policy
    from pong_mp.backends.base import RolloutSpec, prepare_worker_process
    from pong_mp.backends.episode_worker import EpisodeWorker
    from pong_mp.backends.shm import BlockShape, SharedWeights
    from pong_mp.batch_sum import BatchSum
    from pong_mp.checkpoint import load_policy
    from pong_mp.config import PRESETS, TrainConfig
    from pong_mp.episode import EpisodeResult, EpisodeStats, make_tasks
    from pong_mp.pg import PGLearner, PGWork
    from pong_mp.signals import check_stop
    from pong_mp.state import TrainState
    from pong_mp.tools.bench import env_steps_per_sec
    from pong_mp.trainer import make_learner

    prepare_worker_process()
    params, config = load_policy(model)
    hidden = int(config["hidden"])
    spec = RolloutSpec(env_id, policy.NetShape(hidden), PGWork(policy.GAMMA))
    worker = EpisodeWorker(spec)
    worker.open()
    weights = policy.Weights32.from_params(params, spec.shape)
    grad = np.empty(policy.param_count(spec.shape), dtype=np.float32)
    steps, seconds = [], 0.0
    try:
        for task in make_tasks(0, 0, episodes):
            check_stop()
            result = worker.play(weights, task, grad)
            steps.append(result.stats.steps)
            seconds += result.stats.seconds
    finally:
        worker.close()
    raw = env_steps_per_sec(env_id, raw_seconds)

    total = np.zeros(len(params))
    start = time.perf_counter()
    for _ in range(20):
        total += grad
    sum_seconds = (time.perf_counter() - start) / 20

    # The trainer's own update (optimizer step and statistics), then the broadcast.
    learner = make_learner(TrainConfig(**(PRESETS["pg"] | {"env": env_id, "hidden": hidden})))
    assert isinstance(learner, PGLearner)
    state = TrainState(params=params, cache=np.zeros_like(params))
    summed = BatchSum(0, 1, np.empty(len(params)))
    summed.add(EpisodeResult(EpisodeStats(0, 0.0, 1, 0.0), grad))
    shared: SharedWeights | None = None
    try:
        shared = SharedWeights.create(BlockShape(policy.NetShape(hidden)))
        start = time.perf_counter()
        for _ in range(10):
            state, _ = learner.apply(state, summed)
            shared.write(state.params, state.batch)
        update_seconds = (time.perf_counter() - start) / 10
    finally:
        if shared is not None:
            shared.close()
            shared.unlink()
    return Costs(
        episode_steps=tuple(steps),
        step_seconds=seconds / sum(steps),
        raw_step_seconds=1.0 / raw,
        sum_seconds=sum_seconds,
        update_seconds=update_seconds,
    )


def format_projection(costs: Costs, rows: list[dict[str, Any]]) -> str:
    """The measured costs, then the projection as a Markdown table."""
    steps = np.asarray(costs.episode_steps)
    measured = (
        f"measured: {len(steps)} trained episodes of {steps.mean():,.0f} steps on average "
        f"(min {steps.min():,}, max {steps.max():,}); "
        f"{1e3 * costs.step_seconds:.3f} ms a training step, "
        f"{1e3 * costs.raw_step_seconds:.3f} ms a raw one; "
        f"{1e3 * costs.sum_seconds:.2f} ms to add a gradient, "
        f"{1e3 * costs.update_seconds:.1f} ms an update with its broadcast"
    )
    table = (
        f"{r['workers']} | {r['batch_size']} | {r['policy_lag']} | "
        f"{100 * r['efficiency']:.0f}% | {r['ratio']:.2f}"
        for r in rows
    )
    head = "workers | batch size | policy lag | workers busy | training / raw (projected)"
    return markdown_table(head, table, [measured, ""])
