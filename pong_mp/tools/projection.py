"""A projection of the actor-critic's training rate at worker counts this machine does not
have, built from its parts measured here (`measure_costs`), each with the code a worker or
the coordinator runs:

    play        one trained agent's episodes, played and recorded (EpisodeWorker)
    pass        each episode's minibatch passes of one epoch (the same worker, epoch_pass)
    sum         a complete round's gradients summed on the coordinator's threads, per
                gradient (batch_sum.sum_in_blocks)
    step        the norm, the optimizer step and the publish of the new weights (MeanStep)
    round trip  one message to a worker process and back (a pipe)
    raw         the emulator alone, in one process

`simulate` replays the local backend's schedule of an update with them:

    play: episodes in order, each to the worker free first; a worker keeps what it played
    --epochs x --minibatches rounds, each:
      weights out (half a round trip) -> each worker runs the passes over the episodes it
      keeps back to back, then takes any still waiting -> each gradient back (half a round
      trip) -> once all are back, the round's sum and the step, then the next round

Left out: the memory bandwidth and caches that processes share, the cores the coordinator
takes on a machine with none spare, and the optimizer step's threads on a machine with more
cores than this one (its step is measured here). The figures are projections.
"""

from __future__ import annotations

import contextlib
import heapq
import multiprocessing as mp
import time
from dataclasses import dataclass
from multiprocessing.connection import Connection
from typing import TYPE_CHECKING, Any

import numpy as np

from pong_mp.tools import markdown_table

if TYPE_CHECKING:
    from pong_mp.config import TrainConfig


@dataclass(frozen=True)
class EpisodeCost:
    """One measured episode: its length, and a worker's seconds to play it and for each of
    its minibatch passes of one epoch (in minibatch order)."""

    steps: int
    play_seconds: float
    pass_seconds: tuple[float, ...]


@dataclass(frozen=True)
class Costs:
    """What an update's parts cost, as measured on one machine."""

    episodes: tuple[EpisodeCost, ...]
    raw_step_seconds: float  # the emulator's per env step alone, in one process
    add_seconds: float  # the coordinator's per gradient to sum a complete round
    step_seconds: float  # the coordinator's for one optimizer step and its publish
    round_trip_seconds: float  # a message to a worker process and back

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Costs:
        """The costs a `pong-mp bench --project --json` record holds (`dataclasses.asdict`)."""
        episodes = tuple(
            EpisodeCost(e["steps"], e["play_seconds"], tuple(e["pass_seconds"]))
            for e in data["episodes"]
        )
        scalars = ("raw_step_seconds", "add_seconds", "step_seconds", "round_trip_seconds")
        return cls(episodes=episodes, **{key: data[key] for key in scalars})


def _passes(
    costs: Costs, drawn: list[EpisodeCost], keeper: list[int], part: int, start: float
) -> list[float]:
    # When each episode's gradient of minibatch `part` is back at the coordinator: each worker
    # runs the passes it keeps in episode order, then takes the first still waiting.
    waiting = set(range(len(drawn)))
    arrival = [0.0] * len(drawn)
    free = [(start + costs.round_trip_seconds / 2, worker) for worker in range(max(keeper) + 1)]
    while waiting:
        now, worker = heapq.heappop(free)
        own = [index for index in waiting if keeper[index] == worker]
        index = min(own or waiting)
        waiting.remove(index)
        done = now + drawn[index].pass_seconds[part]
        arrival[index] = done + costs.round_trip_seconds / 2
        heapq.heappush(free, (done, worker))
    return arrival


@dataclass
class Schedule:
    """What `lay_out` totals over its updates: the play's and the learning's wall seconds,
    the workers' seconds of play and of passes, the env steps, and each update's longest
    episode's seconds."""

    play_wall: float = 0.0
    learn_wall: float = 0.0
    play_work: float = 0.0
    pass_work: float = 0.0
    steps: int = 0
    longest_plays: float = 0.0


def lay_out(
    costs: Costs, workers: int, batch_size: int, epochs: int, updates: int = 20, seed: int = 0
) -> Schedule:
    """The local backend's schedule of `updates` updates of `batch_size` episodes drawn from
    the measured ones (see the module's docstring), totalled."""
    rng = np.random.default_rng(seed)
    total = Schedule()
    for _ in range(updates):
        drawn = [costs.episodes[i] for i in rng.integers(len(costs.episodes), size=batch_size)]
        free = [(0.0, worker) for worker in range(min(workers, batch_size))]
        keeper, back = [], 0.0
        for episode in drawn:  # played in order, each by the worker free first
            now, worker = heapq.heappop(free)
            done = now + costs.round_trip_seconds + episode.play_seconds
            keeper.append(worker)
            back = max(back, done)
            heapq.heappush(free, (done, worker))
        now = back
        for _epoch in range(epochs):
            for part in range(len(drawn[0].pass_seconds)):
                arrivals = _passes(costs, drawn, keeper, part, now)
                now = max(arrivals) + len(drawn) * costs.add_seconds + costs.step_seconds
        total.play_wall += back
        total.learn_wall += now - back
        total.play_work += sum(e.play_seconds for e in drawn)
        total.pass_work += sum(epochs * sum(e.pass_seconds) for e in drawn)
        total.steps += sum(e.steps for e in drawn)
        total.longest_plays += max(e.play_seconds for e in drawn)
    return total


def simulate(
    costs: Costs, workers: int, batch_size: int, epochs: int, updates: int = 20, seed: int = 0
) -> dict[str, float]:
    """The training rate over `updates` updates of `batch_size` episodes drawn from the
    measured ones: env steps a second, as a fraction of `workers` raw processes' ("ratio",
    each on a core of its own), and the workers' busy fraction ("busy")."""
    laid = lay_out(costs, workers, batch_size, epochs, updates, seed)
    wall = laid.play_wall + laid.learn_wall
    return {
        "workers": workers,
        "batch_size": batch_size,
        "steps_per_sec": laid.steps / wall,
        "busy": (laid.play_work + laid.pass_work) / (workers * wall),
        "ratio": laid.steps * costs.raw_step_seconds / (workers * wall),
    }


def run_projection(costs: Costs, batch_size: int, epochs: int) -> list[dict[str, float]]:
    """`pong-mp bench --project`'s rows: 1 to 64 workers, with batches of `batch_size` and of
    one episode a worker, each with its speed-up over one worker and its efficiency (speed-up /
    workers; 1 is ideal)."""
    counts = [1, 2, 4, 8, 16, 32, 64]
    rows = [simulate(costs, w, batch_size, epochs) for w in counts]
    rows += [simulate(costs, w, w, epochs) for w in counts if w > batch_size]
    for row in rows:
        row["speed_up"] = row["steps_per_sec"] / rows[0]["steps_per_sec"]
        row["efficiency"] = row["speed_up"] / row["workers"]
    return rows


def _echo(conn: Connection) -> None:
    # The other end of the round trip: send back whatever comes, until None, or until the
    # parent is gone (its end closed: no traceback from an orphan).
    with contextlib.suppress(EOFError, OSError):
        while (message := conn.recv()) is not None:
            conn.send(message)


def round_trip_seconds(messages: int = 2000) -> float:
    """A small message's trip to another process and back, through a pipe (median)."""
    ctx = mp.get_context("spawn")
    here, there = ctx.Pipe()
    process = ctx.Process(target=_echo, args=(there,), daemon=True)
    process.start()
    try:
        times = []
        for number in range(messages):
            start = time.perf_counter()
            here.send(("task", number))
            here.recv()
            times.append(time.perf_counter() - start)
        here.send(None)
    finally:
        process.join(5)
        if process.is_alive():
            process.kill()
    return float(np.median(times))


def measure_costs(
    config: TrainConfig, params: np.ndarray, episodes: int = 16, raw_seconds: float = 10.0
) -> Costs:
    """Measure here the parts of an update of `config` (a checked TrainConfig of the
    actor-critic) from weights `params`: `episodes` episodes, each with one epoch's passes."""
    from pong_mp.backends.base import prepare_worker_process
    from pong_mp.backends.episode_worker import EpisodeWorker
    from pong_mp.backends.shm import BlockShape, SharedWeights
    from pong_mp.batch_sum import sum_in_blocks
    from pong_mp.episode import EpisodeStats, EpisodeTask, make_tasks
    from pong_mp.gradient import Moments
    from pong_mp.optim import MeanStep, step_threads
    from pong_mp.policy import Weights32
    from pong_mp.ppo import EpochTask, advantage_moments
    from pong_mp.signals import check_stop
    from pong_mp.tools.bench import env_here, env_steps_per_sec
    from pong_mp.trainer import rollout_spec

    prepare_worker_process()
    worker = EpisodeWorker(rollout_spec(config))
    weights = Weights32.from_params(params, config.shape)
    grad = np.empty(len(params), np.float32)
    played: list[tuple[EpisodeTask, EpisodeStats, float]] = []
    worker.open()
    try:
        for task in make_tasks(config.seed, 0, episodes, gradient=False):
            check_stop()
            start = time.perf_counter()
            with env_here(config.env, "as its episodes were measured"):
                stats = worker.play(weights, task).stats
            played.append((task, stats, time.perf_counter() - start))
        moments = Moments()
        for _, stats, _ in played:
            moments.merge(advantage_moments(stats.data))
        measured = []
        for task, stats, play_seconds in played:
            passes = []
            for part in range(config.minibatches):
                check_stop()
                epoch_task = EpochTask(
                    task.index, task.seed, stats.data, 0, part, config.minibatches,
                    moments.mean, moments.standardizing_scale, config.entropy_bonus,
                )
                start = time.perf_counter()
                worker.play(weights, epoch_task, grad)
                passes.append(time.perf_counter() - start)
            measured.append(EpisodeCost(stats.steps, play_seconds, tuple(passes)))
    finally:
        worker.close()

    # The learner's own round: the sum on the step's threads, its norm, the step, then the
    # publish to the workers.
    total = np.empty(len(params))
    # 20 gradients in 20 places, as a round's slots are: one read over and over would be
    # summed from cache.
    rows = list(np.tile(grad, (20, 1)))
    stepper = MeanStep(config.optimizer, config.decay_rate, step_threads())
    stepper.load(params, np.zeros_like(params), np.zeros_like(params))
    shared = SharedWeights.create(BlockShape(config.shape, value=True))
    try:
        with stepper:
            start = time.perf_counter()
            for _ in range(5):
                sum_in_blocks(total, rows, stepper.ranges)
            add_seconds = (time.perf_counter() - start) / 100
            start = time.perf_counter()
            for step in range(1, 21):
                norm = stepper.norm(total, 1000.0)
                stepper.step(total, 1000.0, 0.5 / norm if norm > 0.5 else 1.0, step, 1e-6)
                shared.write(stepper.weights, step)
            step_seconds = (time.perf_counter() - start) / 20
    finally:
        shared.close()
        shared.unlink()
    return Costs(
        episodes=tuple(measured),
        raw_step_seconds=1.0 / env_steps_per_sec(config.env, raw_seconds),
        add_seconds=add_seconds,
        step_seconds=step_seconds,
        round_trip_seconds=round_trip_seconds(),
    )


def format_projection(costs: Costs, rows: list[dict[str, Any]]) -> str:
    """The measured costs, then the projection as a Markdown table."""
    steps = np.asarray([e.steps for e in costs.episodes])
    play = sum(e.play_seconds for e in costs.episodes) / steps.sum()
    passes = sum(sum(e.pass_seconds) for e in costs.episodes) / steps.sum()
    measured = (
        f"measured: {len(steps)} episodes of {steps.mean():,.0f} steps on average "
        f"(min {steps.min():,}, max {steps.max():,}); per env step {1e3 * play:.3f} ms to play, "
        f"{1e3 * passes:.3f} ms a pass, {1e3 * costs.raw_step_seconds:.3f} ms raw; "
        f"{1e3 * costs.add_seconds:.2f} ms a gradient to sum a round, "
        f"{1e3 * costs.step_seconds:.1f} ms "
        f"an optimizer step with its publish, {1e6 * costs.round_trip_seconds:.0f} us a round trip"
    )
    return markdown_table(
        "workers | batch size | training steps/s | speed-up over 1 worker | efficiency | "
        "workers busy | training / raw",
        (
            f"{r['workers']} | {r['batch_size']} | {r['steps_per_sec']:,.0f} | "
            f"{r['speed_up']:.2f}x | {r['efficiency']:.2f} | {100 * r['busy']:.0f}% | "
            f"{r['ratio']:.2f}"
            for r in rows
        ),
        [measured, ""],
    )
