"""The coordinator: hand out episodes, sum gradients in their fixed order, step the optimizer, log
and checkpoint. It talks to any backend through the same calls (publish, submit, results).

Data flow of one update (`updates`, committed by `run`; L is --policy-lag):

    TrainState k ──weights──> backend.publish(k, float32 weights)
    batch j (k < j <= k+1+L) ──> backend.submit(weights version max(0, j-1-L), its episodes)
                                 │ backend.results(): EpisodeResult | EpisodeStats |
                                 │ GroupSum of any batch in flight, in any order
                                 v
                             BatchSum of its batch: the fixed order of additions
                                 │ (batch k+1 complete)
                                 │ summed gradient
                                 v
                             Optimizer.step (optim.py)  ──> TrainState k+1
                                 │ publish k+1, submit the next batch: workers play on
                                 v
                             the update's norms; then, while the workers play,
    run(): commit (signals deferred) ──> metrics.jsonl, TensorBoard, progress,
                                         checkpoint.npz every --checkpoint-every

The actor-critic (--algo ppo) has its own loop, `ppo_updates`, on the same backend calls:
it plays a batch into trajectories, then hands out --epochs x --minibatches rounds of
EpochTasks, one optimizer step each (its data flow is drawn at the top of ppo.py).
"""

from __future__ import annotations

import dataclasses
import logging
import math
import os
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np

from pong_mp import checkpoint
from pong_mp.backends import RolloutSpec, make_backend
from pong_mp.backends.base import Backend, BackendItem
from pong_mp.batch_sum import BatchSum, GroupSum
from pong_mp.config import TrainConfig
from pong_mp.envs import env_args_text
from pong_mp.episode import EpisodeResult, EpisodeStats, Task, make_tasks
from pong_mp.files import FileError
from pong_mp.gradient import Moments
from pong_mp.optim import Optimizer, dropped
from pong_mp.ppo import EpochTask, PassStats, Trajectory, advantage_moments
from pong_mp.progress import GuardedReporter, LineReporter, Reporter
from pong_mp.rundir import (
    CHECKPOINT_FILE,
    METRICS_FILE,
    MetricsLog,
    copy_fork_metrics,
    keep_metrics_until,
    open_run,
    write_config,
)
from pong_mp.signals import (
    Interrupted,
    output_closed,
    raise_swallowed,
    stop_signals_deferred,
    stop_signals_raise,
)
from pong_mp.state import TrainState, with_policy_lag
from pong_mp.tracking import TensorBoardLog

log = logging.getLogger("pong_mp")

RUNNING_DECAY = 0.99
"""Weight of the old value in the running reward, updated once per episode (Karpathy's)."""


def running_reward(running: float | None, rewards: list[float]) -> float | None:
    """The running reward after `rewards` (in episode order), from `running` (None before
    any episode): Karpathy's exponential mean, one episode at a time."""
    for reward in rewards:
        running = (
            reward if running is None else running * RUNNING_DECAY + reward * (1 - RUNNING_DECAY)
        )
    return running


class NonFiniteError(RuntimeError):
    """An update would have produced non-finite numbers; it was not applied."""


# -- training --------------------------------------------------------------------------------


def rollout_spec(config: TrainConfig) -> RolloutSpec:
    """What the backend needs to know about episodes, taken from the run's config."""
    return RolloutSpec(
        env_id=config.env,
        hidden=config.hidden,
        gamma=config.gamma,
        entropy_bonus=config.entropy_bonus,
        baseline=config.baseline,
        workers=config.workers,
        env_kwargs=dict(config.env_kwargs),
        episode_timeout=config.episode_timeout,
        lag=config.policy_lag,
        algo=config.algo,
        channels=config.conv_channels,
    )


def _scheduled_lr(config: TrainConfig, steps: int) -> float:
    # The run's schedule (--lr, --lr-drop-at/-to) at `steps` env steps. Counting env steps
    # rather than updates ties it to the experience played, so a setting means the same at
    # any batch size, and a resumed run carries on where it was (the checkpoint holds them).
    return dropped(config.lr, steps, config.lr_drop_at, config.lr_drop_to)


def scheduled_entropy_bonus(config: TrainConfig, steps: int) -> float:
    """The entropy's weight in the objective of an update whose batch starts at `steps` env
    steps: --entropy-bonus, or from an --entropy-drop-at point on, its --entropy-drop-to."""
    return dropped(config.entropy_bonus, steps, config.entropy_drop_at, config.entropy_drop_to)


def l2_norm(values: np.ndarray) -> float:
    """The Euclidean norm of `values`, with the same bits on every CPU.

    numpy's own pairwise sum, not BLAS: `np.linalg.norm` calls a BLAS kernel chosen for the
    CPU, and the kernels add in different orders, so a run replayed on another machine would
    record other last digits beside the very same weights.
    """
    return float(np.sqrt(np.add.reduce(np.square(values), axis=None)))


def apply_batch(
    config: TrainConfig,
    state: TrainState,
    summed: BatchSum,
    optimizer: Optimizer | None = None,
) -> tuple[TrainState, dict[str, Any]]:
    """The state after one update from a batch's summed gradients, and its statistics.

    `optimizer` is the run's (it reuses its arrays across updates); a new one if None.
    Raises NonFiniteError, and changes no state, if the gradient or the new weights are not
    finite.
    """
    new_state, grad, lr = step_batch(config, state, summed, optimizer)
    return new_state, update_stats(state, new_state, summed, grad, lr)


def step_batch(
    config: TrainConfig,
    state: TrainState,
    summed: BatchSum,
    optimizer: Optimizer | None = None,
) -> tuple[TrainState, np.ndarray, float]:
    """The state after one update from a batch's summed gradients, with the gradient and
    the rate it was applied with (for `update_stats`): what the next batch waits for.

    `optimizer` is the run's (it reuses its arrays across updates); a new one if None.
    Raises NonFiniteError, and changes no state, if the gradient or the new weights are not
    finite.
    """
    grad = summed.total
    # An overflow is no warning to print: the sums below tell, and the update is refused.
    with np.errstate(over="ignore", invalid="ignore"):
        if not np.isfinite(grad.sum()):  # NaN/inf iff some element is (or it overflows)
            raise NonFiniteError(f"update {state.batch + 1}: the summed gradient is not finite")
        if optimizer is None:
            optimizer = Optimizer(config.optimizer, config.lr, config.decay_rate)
        # The rate at the env steps played before this batch: update 1 uses --lr itself.
        lr = _scheduled_lr(config, state.steps)
        params, cache, momentum = optimizer.step(
            state.params, state.cache, state.momentum, grad, state.optimizer_steps + 1, lr
        )
        if not np.isfinite(params.sum()):
            raise NonFiniteError(
                f"update {state.batch + 1}: the new weights would not be finite"
            )
    running = running_reward(state.running_reward, summed.episode_rewards)
    new_state = dataclasses.replace(
        state,
        params=params,
        # The weights that batches in flight are played with move on by one update.
        lagged=(*state.lagged[1:], state.params.astype(np.float32)) if state.lagged else (),
        cache=cache,
        momentum=momentum,
        batch=state.batch + 1,
        episodes=state.episodes + summed.count,
        steps=state.steps + summed.steps,
        running_reward=running,
        optimizer_steps=state.optimizer_steps + 1,
    )
    return new_state, grad, lr


def update_stats(
    state: TrainState, new_state: TrainState, summed: BatchSum, grad: np.ndarray, lr: float
) -> dict[str, Any]:
    """The statistics of the update from `state` to `new_state` (`step_batch`'s): a few ms
    on 1.3 M parameters, for watching (TensorBoard), done while the next batch plays."""
    with np.errstate(over="ignore"):  # huge but finite weights: an inf norm says enough
        return {
            "reward_mean": float(np.mean(summed.episode_rewards)),
            "steps": summed.steps,
            "grad_norm": l2_norm(grad),
            "weight_norm": l2_norm(new_state.params),
            "step_norm": l2_norm(new_state.params - state.params),
            "lr": lr,
            # Mean entropy per step (nats; ln 2 = 0.69 is a coin toss): how settled the
            # policy is.
            "entropy": summed.entropy / summed.steps if summed.steps else None,
        }


def train(
    config: TrainConfig, *, resume: bool = False, log: Callable[[str], None] = print
) -> TrainState:
    """Train a run described by `config` (the Python API): open_run, then run, with
    plain progress lines going to `log`."""
    with open_run(Path(config.run_dir), resume, dataclasses.asdict(config)) as (config, state):
        return run(config, state, resumed=resume, reporter=LineReporter(log))


def run(
    config: TrainConfig,
    state: TrainState,
    *,
    resumed: bool = False,
    reporter: Reporter | None = None,
) -> TrainState:
    """Train from `state` until `config.batches` updates are done or a stop signal arrives.

    The caller holds the run directory (`rundir.open_run`). The run's files are written
    once the backend has started, so a backend that cannot start leaves the run directory
    as it was. Raises Interrupted, with the last update reached, when a stop signal
    arrives or the reporter's output is closed (after saving that update, unless a second
    signal cuts the save short); on any exit after the start the last complete update is
    saved (unless saving is what failed: FileError), and the backend is always closed.
    """
    run_dir = Path(config.run_dir)
    reporter = GuardedReporter(reporter or LineReporter())
    reporter.banner(_banner(config, state, resumed))
    backend = make_backend(config.backend, rollout_spec(config), config.ray_address)
    saved_batch = state.batch if resumed else -1
    started = False
    metrics: MetricsLog | None = None
    events: TensorBoardLog | None = None
    file_failed = False
    try:
        with stop_signals_raise():
            try:
                if reporter.closed:  # nobody reads: stop before anything is written
                    raise output_closed()
                backend.start()
                write_config(run_dir, config)
                if config.fork_from is not None and not resumed:
                    # From here on the fork needs nothing of the run it came from: a fork
                    # killed before its first update resumes from this checkpoint.
                    copy_fork_metrics(config, state.batch)
                    _save(run_dir, state, config)
                    saved_batch = state.batch
                # Metrics lines newer than the checkpoint (and a line cut off by a crash)
                # describe updates that are played again; keeping them would record them
                # twice. Damaged lines are moved aside.
                set_aside = keep_metrics_until(run_dir / METRICS_FILE, state.batch)
                if set_aside is not None:
                    log.warning(set_aside)
                metrics = MetricsLog(run_dir / METRICS_FILE)
                if config.tensorboard:
                    events = TensorBoardLog(
                        run_dir, purge_from=state.steps + 1 if resumed else None
                    )
                started = True
                learner = ppo_updates if config.algo == "ppo" else updates
                for new_state, record in learner(config, state, backend):
                    # The commit: an interrupt lands before it or after it, never inside.
                    with stop_signals_deferred():
                        state = new_state
                        metrics.write(record)
                        if events is not None:
                            events.write(record)
                        reporter.update(record)
                        if state.batch % config.checkpoint_every == 0:
                            _save(run_dir, state, config)
                            saved_batch = state.batch
                    if reporter.closed:
                        raise output_closed()
            except FileError:
                file_failed = True  # the disk refused a write: the last good checkpoint stays
                raise
            finally:
                try:
                    if started and state.batch != saved_batch and not file_failed:
                        _save(run_dir, state, config)
                finally:
                    if metrics is not None:
                        metrics.close()
                    if events is not None:
                        events.close()
                    backend.close()
                    reporter.close()
    except Interrupted as exc:
        # The first stop, or a second one that cut the save above short: either way the
        # run reached this update (what is on disk, the caller reads from the disk).
        exc.reached = state.batch
        raise
    return state


def reached_target(config: TrainConfig, state: TrainState) -> bool:
    """Whether the run's --target-reward is set and the running reward has reached it."""
    return (
        config.target_reward is not None
        and state.running_reward is not None
        and state.running_reward >= config.target_reward
    )


def batch_weights_version(batch: int, lag: int) -> int:
    """The update whose weights play batch `batch` (1-based): batch - 1 - lag, or 0 (the
    initial weights) where there is no such update yet. Fixed by the batch's number alone,
    so that the bytes do not depend on timing, workers or backend."""
    return max(0, batch - 1 - lag)


def with_lagged(state: TrainState, lag: int) -> TrainState:
    """`state` with the float32 weights its next `lag` batches are played with: a new run's
    are its initial weights (a resumed run's come from its checkpoint)."""
    if len(state.lagged) == lag:
        return state
    if state.batch != 0:
        raise ValueError(f"update {state.batch} has no weights for a policy lag of {lag}")
    return with_policy_lag(state, lag)


def updates(
    config: TrainConfig, state: TrainState, backend: Backend
) -> Iterator[tuple[TrainState, dict[str, Any]]]:
    """Play batches from `state` until `config.batches` (forever if None) or the target
    reward on a started backend; yield each new state and its metrics record. Writes nothing.

    With --policy-lag L, batch k is played with the weights of update k-1-L, so batches
    k .. k+L are submitted together and the backend plays them back to back: the gradient
    of batch k is applied as soon as it is summed, while the next L play on.

    Asking for the next update means the caller took the last one: the optimizer reuses the
    arrays of the states before it (see optim.Optimizer).
    """
    lag = config.policy_lag
    state = with_lagged(state, lag)
    # Batch k sums into sums[k % (lag + 1)].
    sums = [np.empty(len(state.params)) for _ in range(lag + 1)]
    optimizer = Optimizer(config.optimizer, config.lr, config.decay_rate)
    # Versions batch-L .. batch (those before update 0 are update 0's: published once).
    versions = {max(0, v): w for v, w in enumerate(state.lagged, start=state.batch - lag)}
    versions[state.batch] = state.params.astype(np.float32)
    for version in sorted(versions):
        backend.publish(version, versions[version])
    in_flight: dict[int, BatchSum] = {}  # by the batch's first episode
    submitted = state.batch

    def more(state: TrainState) -> bool:
        return (config.batches is None or state.batch < config.batches) and not reached_target(
            config, state
        )

    def submit_ahead(state: TrainState) -> None:
        # Keep L + 1 batches in flight past `state`, up to --batches.
        nonlocal submitted
        while submitted < state.batch + 1 + lag and (
            config.batches is None or submitted < config.batches
        ):
            submitted += 1
            first = state.episodes + (submitted - state.batch - 1) * config.batch_size
            in_flight[first] = BatchSum(first, config.batch_size, sums[submitted % (lag + 1)])
            tasks = make_tasks(config.seed, first, config.batch_size)
            backend.submit(batch_weights_version(submitted, lag), tasks)

    if more(state):
        submit_ahead(state)
    last = time.perf_counter()
    while more(state):
        summed = in_flight[state.episodes]
        arrived = time.perf_counter()
        for item in backend.results():
            raise_swallowed()
            arrived = time.perf_counter()
            in_flight[_batch_of(item, state.episodes, config.batch_size)].add(item)
            if summed.complete:
                break
        if not summed.complete:
            raise RuntimeError("the backend ended a batch before every episode was summed")
        del in_flight[state.episodes]
        new_state, grad, lr = step_batch(config, state, summed, optimizer)
        # The critical path: the workers wait for these weights and their next episodes.
        # The rest of the update's work (its norms here, the caller's metrics line,
        # TensorBoard, progress and checkpoint) is done while they play. (The sum that
        # `grad` may be is the next batch's too, but results are only added to it in the
        # next `backend.results()`.)
        backend.publish(new_state.batch, new_state.params.astype(np.float32))
        if more(new_state):
            submit_ahead(new_state)
        handed_out = time.perf_counter()
        stats = update_stats(state, new_state, summed, grad, lr)
        now = time.perf_counter()
        seconds, last = now - last, now
        new_state.elapsed = state.elapsed + seconds
        yield new_state, _record(config, new_state, stats, seconds, handed_out - arrived)
        state = new_state


def ppo_updates(
    config: TrainConfig, state: TrainState, backend: Backend
) -> Iterator[tuple[TrainState, dict[str, Any]]]:
    """The actor-critic's updates (--algo ppo), as `updates` yields pg's: play a batch with
    the current weights, then --epochs passes of --minibatches optimizer steps each over
    the episodes the workers played, every step's gradient computed by the workers from
    the trajectories and summed in the batch's fixed order. Writes nothing.

    Weights versions count optimizer steps, so each step's weights are published as a
    version of their own before the next minibatch is handed out.
    """
    optimizer = Optimizer(config.optimizer, config.lr, config.decay_rate)
    steps_per_update = config.epochs * config.minibatches
    total = np.empty(len(state.params))
    version = state.batch * steps_per_update
    backend.publish(version, state.params.astype(np.float32))
    last = time.perf_counter()
    while (config.batches is None or state.batch < config.batches) and not reached_target(
        config, state
    ):
        first = state.episodes
        tasks = make_tasks(config.seed, first, config.batch_size)
        played = BatchSum(first, config.batch_size, total)
        trajectories: dict[int, Trajectory] = {}
        for stats in _round(backend, version, tasks, played):
            if stats.trajectory is None:
                raise RuntimeError(f"episode {stats.index} came back without its trajectory")
            trajectories[stats.index] = stats.trajectory
        moments = Moments()
        for task in tasks:  # in episode order: the same bits whatever the arrival order
            moments.merge(advantage_moments(trajectories[task.index]))
        params, cache, momentum = state.params, state.cache, state.momentum
        seen = PassStats()
        grad_norm = 0.0
        lr = _scheduled_lr(config, state.steps)
        entropy_bonus = scheduled_entropy_bonus(config, state.steps)
        coordinator = 0.0  # the workers wait on the coordinator between minibatches
        for epoch in range(config.epochs):
            for part in range(config.minibatches):
                epoch_tasks = [
                    EpochTask(
                        task.index, task.seed, trajectories[task.index], epoch, part,
                        config.minibatches, moments.mean, moments.standardizing_scale,
                        entropy_bonus,
                    )
                    for task in tasks
                ]
                summed = BatchSum(first, config.batch_size, total)
                passes = {
                    stats.index: stats.ppo_pass
                    for stats in _round(backend, version, epoch_tasks, summed)
                }
                for task in tasks:  # added in episode order: the same bits every time
                    seen += passes.get(task.index) or PassStats()
                arrived = time.perf_counter()
                step = state.optimizer_steps + epoch * config.minibatches + part + 1
                # An overflow is no warning to print: the checks tell, and the update is
                # refused (as pg's).
                with np.errstate(over="ignore", invalid="ignore"):
                    grad = summed.total / max(1, summed.steps)  # the minibatch's mean
                    grad_norm = l2_norm(grad)
                    if not math.isfinite(grad_norm):
                        raise NonFiniteError(
                            f"update {state.batch + 1}: the summed gradient is not finite"
                        )
                    if grad_norm > MAX_GRAD_NORM:
                        grad *= MAX_GRAD_NORM / grad_norm
                    params, cache, momentum = optimizer.step(
                        params, cache, momentum, grad, step, lr
                    )
                    if not np.isfinite(params.sum()):
                        raise NonFiniteError(
                            f"update {state.batch + 1}: the new weights would not be finite"
                        )
                version += 1
                backend.publish(version, params.astype(np.float32))
                coordinator += time.perf_counter() - arrived
        running = running_reward(state.running_reward, played.episode_rewards)
        # The optimizer reuses its arrays step after step: the state keeps copies.
        new_state = dataclasses.replace(
            state,
            params=params.copy(),
            cache=cache.copy(),
            momentum=None if momentum is None else momentum.copy(),
            batch=state.batch + 1,
            episodes=state.episodes + played.count,
            steps=state.steps + played.steps,
            running_reward=running,
            optimizer_steps=state.optimizer_steps + steps_per_update,
        )
        stats_out = {
            "reward_mean": float(np.mean(played.episode_rewards)),
            "steps": played.steps,
            "grad_norm": grad_norm,
            "weight_norm": l2_norm(new_state.params),
            "step_norm": l2_norm(new_state.params - state.params),
            "lr": lr,
            "entropy": played.entropy / played.steps if played.steps else None,
            "entropy_bonus": entropy_bonus,
            "value_loss": seen.value_error / 2 / seen.steps if seen.steps else None,
            "clip_fraction": seen.clipped / seen.steps if seen.steps else None,
            "approx_kl": seen.kl / seen.steps if seen.steps else None,
        }
        now = time.perf_counter()
        seconds, last = now - last, now
        new_state.elapsed = state.elapsed + seconds
        yield new_state, _record(config, new_state, stats_out, seconds, coordinator)
        state = new_state


def _round(
    backend: Backend, version: int, tasks: list[Task], summed: BatchSum
) -> Iterator[EpisodeStats]:
    """Hand `tasks` out with weights `version`, add what comes back into `summed` in its
    fixed order, and yield each episode's statistics, until the batch is complete."""
    backend.submit(version, tasks)
    for item in backend.results():
        raise_swallowed()
        summed.add(item)
        if isinstance(item, EpisodeResult):
            yield item.stats
        elif isinstance(item, EpisodeStats):
            yield item
        if summed.complete:
            break
    if not summed.complete:
        raise RuntimeError("the backend ended a batch before every episode was summed")


def _batch_of(item: BackendItem, first: int, batch_size: int) -> int:
    # The first episode of the batch that `item` belongs to (batches in flight are
    # consecutive runs of batch_size episodes from `first` on).
    if isinstance(item, GroupSum):
        return item.first_index
    index = item.stats.index if isinstance(item, EpisodeResult) else item.index
    return index - (index - first) % batch_size


MAX_GRAD_NORM = 0.5
"""The longest step gradient of the actor-critic (each minibatch's mean, scaled down to this
norm where it is longer): PPO's usual limit."""

PPO_FIELDS = ("entropy_bonus", "value_loss", "clip_fraction", "approx_kl")
"""The metrics fields of --algo ppo: the entropy's weight in the update's objective (its
schedule's, as `lr` is), the value head's mean (V - R)^2 / 2, the share of steps whose ratio
was clipped, and the mean of log pi_old - log pi, over the update's passes."""


def _record(
    config: TrainConfig,
    state: TrainState,
    stats: dict[str, Any],
    seconds: float,
    update_seconds: float,
) -> dict[str, Any]:
    """The metrics record of the update that made `state`."""
    return {
        "batch": state.batch,
        "episodes": state.episodes,
        "steps": stats["steps"],
        "reward_mean": stats["reward_mean"],
        "running_reward": state.running_reward,
        "seconds": seconds,
        "steps_per_sec": stats["steps"] / seconds,
        # The coordinator's critical path: from the batch's last result until the new
        # weights and the next episodes are out.
        "update_seconds": update_seconds,
        "grad_norm": stats["grad_norm"],
        "weight_norm": stats["weight_norm"],
        "step_norm": stats["step_norm"],
        "lr": stats["lr"],
        "entropy": stats["entropy"],
        # The actor-critic's passes, over all of the update's optimizer steps.
        **{key: stats[key] for key in PPO_FIELDS if key in stats},
        "elapsed": state.elapsed,
        "total_steps": state.steps,
        "workers": 1 if config.backend == "serial" else config.workers,
        "time": time.time(),
    }


def _save(run_dir: Path, state: TrainState, config: TrainConfig) -> None:
    checkpoint.save(
        run_dir / CHECKPOINT_FILE, state, config.hidden, config.to_json(), config.conv_channels
    )


def _banner(config: TrainConfig, state: TrainState, resume: bool) -> str:
    where = (
        "this process"
        if config.backend == "serial"
        else (f"{config.workers} {config.backend} worker{'s' * (config.workers != 1)}")
    )
    until = f"until update {config.batches}" if config.batches is not None else "until Ctrl-C"
    if config.batches is not None and state.batch >= config.batches:
        # A resume or fork given fewer --batches than the run has done trains nothing.
        until = f"nothing to train (at update {state.batch}, past --batches {config.batches})"
    elif config.target_reward is not None:
        until += f" or a running reward of {config.target_reward:g}"
    if config.backend == "ray":
        where += f" on {config.ray_address or 'a private Ray instance'}"
        if config.ray_address is None and os.environ.get("RAY_ADDRESS"):
            joins = f"--ray-address {os.environ['RAY_ADDRESS']}"
            where += f" (RAY_ADDRESS is not read: {joins} joins that cluster)"
    if resume:
        start = f"resuming at update {state.batch}"
    elif config.fork_from is not None:
        start = f"new run forked from {config.fork_from} at update {state.batch}"
    else:
        start = "new run"
    idle = ""
    playable = config.batch_size * (config.policy_lag + 1)
    if config.backend != "serial" and config.workers > playable:
        # The batches in flight (L + 1) are all there is to hand out before an update.
        idle = (
            f"; only {playable} of the {config.workers} workers can be busy "
            f"(--batch-size {config.workers} would use them all)"
        )
    # The env's arguments change the game (v5's sticky actions off is another game), so a
    # log names them with the env.
    env = config.env
    if config.env_kwargs:
        env += f" ({env_args_text(config.env_kwargs)})"
    return (
        f"pong-mp: {env} on {where}, batch size {config.batch_size}, {until}; "
        f"{start} in {config.run_dir}{idle}"
    )
