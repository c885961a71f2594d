"""A projection of training throughput at worker counts this machine does not have.

The model replays the local backend's schedule with measured costs instead of real
episodes (`simulate`):

- episodes are handed out in order, one at a time, to the first free worker; an episode
  of batch k may start once the weights it is played with exist (update k-1-L);
- an episode takes its length (drawn from a trained agent's episodes) times the seconds a
  training worker spends per step;
- the coordinator is one process: it adds each gradient to its batch's sum as it arrives
  (a worker gets its next episode only once its gradient slot has been read), and applies
  update k, then writes the new weights to shared memory, once batch k is summed.

The costs come from this machine (`measure_costs`): the episode lengths and per-step
seconds of a trained agent playing training episodes, the time to add one gradient, and
the time of one update with its broadcast. What the model leaves out: the memory bandwidth
and caches that many processes share, and the CPU the coordinator takes from the workers
on a machine with no spare core. Its figures are projections, not measurements.
"""

from __future__ import annotations

import heapq
import time
from collections import deque
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np


@dataclass(frozen=True)
class Costs:
    """What one episode and one update cost, as measured on one machine."""

    episode_steps: tuple[int, ...]
    """Lengths of a trained agent's episodes (the schedule draws from them)."""
    step_seconds: float
    """A training worker's seconds per env step (policy and gradient included)."""
    raw_step_seconds: float
    """Seconds per step of the emulator alone, in one process."""
    sum_seconds: float
    """The coordinator's time to add one episode's gradient to its batch's sum."""
    update_seconds: float
    """The coordinator's time for one update: optimizer step, statistics and broadcast."""


def simulate(
    costs: Costs, workers: int, batch_size: int, lag: int, updates: int = 200, seed: int = 0
) -> dict[str, float]:
    """The schedule of `updates` updates: the workers' busy fraction ("efficiency") and
    the training rate as a fraction of `workers` raw emulator processes ("ratio")."""
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


PROJECTED_WORKERS = [1, 2, 4, 8, 16, 32, 64]
"""Worker counts `pong-mp bench --project` projects."""


def run_projection(costs: Costs) -> list[dict[str, float]]:
    """The projection `pong-mp bench --project` prints: PROJECTED_WORKERS, batch sizes 10
    and 32, policy lag 0 and 1."""
    return project(costs, PROJECTED_WORKERS, [10, 32], [0, 1])


def measure_costs(
    model: Path, env_id: str = "ALE/Pong-v5", episodes: int = 16, raw_seconds: float = 10.0
) -> Costs:
    """Measure the model's inputs on this machine: `episodes` training episodes of the
    agent in `model` (sampled actions, gradients computed, as in training), the raw
    emulator in one process, one gradient added to a float64 sum, and one update."""
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
    lines = [
        f"measured: {len(steps)} trained episodes of {steps.mean():,.0f} steps on average "
        f"(min {steps.min():,}, max {steps.max():,}); "
        f"{1e3 * costs.step_seconds:.3f} ms a training step, "
        f"{1e3 * costs.raw_step_seconds:.3f} ms a raw one; "
        f"{1e3 * costs.sum_seconds:.2f} ms to add a gradient, "
        f"{1e3 * costs.update_seconds:.1f} ms an update with its broadcast",
        "",
        "| workers | batch size | policy lag | workers busy | training / raw (projected) |",
        "|---|---|---|---|---|",
    ]
    for r in rows:
        lines.append(
            f"| {r['workers']} | {r['batch_size']} | {r['policy_lag']} | "
            f"{100 * r['efficiency']:.0f}% | {r['ratio']:.2f} |"
        )
    return "\n".join(lines)
