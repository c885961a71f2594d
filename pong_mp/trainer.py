"""The coordinator: drive a learner over a backend, and log and checkpoint each update.
The algorithm is the learner's (pg.py, ppo.py, behind `learner.Learner`); the backend only
plays tasks (backends/).

    run(config, state)
      make_backend(config.backend, rollout_spec(config))   the workers, with the learner's
                                                             side of a task
      updates(config, state, backend):
        learner = make_learner(config)
        learner.start(state, backend, more)
        while more(state):
          learner.play(state, backend)  ──> learner.learn(...)  ──> TrainState k+1, stats
          yield TrainState k+1, its metrics record
      commit ──> metrics.jsonl, TensorBoard, progress, checkpoint.npz every
                 --checkpoint-every (a stop signal is only recorded by its handler, and
                 raised at the learner's safe points: never inside a commit)
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np

from pong_mp import checkpoint, policy
from pong_mp.backends import RolloutSpec, make_backend
from pong_mp.backends.base import Backend
from pong_mp.config import TrainConfig
from pong_mp.envs import env_args_text
from pong_mp.files import FileError
from pong_mp.learner import Learner, Schedule, Stats
from pong_mp.optim import step_threads
from pong_mp.pg import PGLearner, PGLearning, PGWork
from pong_mp.ppo import PPO_FIELDS, PPOLearner, PPOLearning, PPOWork
from pong_mp.progress import GuardedReporter, LineReporter, Reporter
from pong_mp.rundir import (
    CHECKPOINT_FILE,
    METRICS_FILE,
    MetricsLog,
    copy_fork_metrics,
    keep_metrics_until,
    write_config,
)
from pong_mp.signals import Interrupted, stop_signals_raise
from pong_mp.state import TrainState
from pong_mp.tracking import TensorBoardLog

log = logging.getLogger("pong_mp")

# -- training --------------------------------------------------------------------------------


def rollout_spec(config: TrainConfig) -> RolloutSpec:
    """What the backend needs to know about episodes, taken from the run's config."""
    return RolloutSpec(
        env_id=config.env,
        shape=config.shape,
        learner=PPOWork(policy.GAMMA)
        if config.algo == "ppo"
        else PGWork(policy.GAMMA, config.entropy_bonus),
        workers=config.workers,
        env_kwargs=dict(config.env_kwargs),
        episode_timeout=config.episode_timeout,
        lag=config.policy_lag,
        batch_size=config.batch_size,
    )


def make_learner(config: TrainConfig) -> Learner:
    """The run's learner, with its settings taken from the run's config."""
    shared: dict[str, Any] = {  # learner.Learning's fields, which every learner has
        "seed": config.seed,
        "batch_size": config.batch_size,
        "optimizer": config.optimizer,
        "lr": Schedule(config.lr, config.lr_drop_at, config.lr_drop_to),
        "shape": config.shape,
        "decay_rate": config.decay_rate,
    }
    if config.algo == "ppo":
        entropy = Schedule(config.entropy_bonus, config.entropy_drop_at, config.entropy_drop_to)
        return PPOLearner(
            PPOLearning(
                **shared,
                epochs=config.epochs,
                minibatches=config.minibatches,
                entropy=entropy,
                step_threads=step_threads(),
            )
        )
    return PGLearner(PGLearning(**shared, lag=config.policy_lag, batches=config.batches))


def run(
    config: TrainConfig,
    state: TrainState,
    *,
    resumed: bool = False,
    reporter: Reporter | None = None,
) -> TrainState:
    """Train from `state` until `config.batches` updates are done or a stop signal arrives,
    in the run directory the caller holds (`rundir.open_run`), written only once the
    backend has started. Raises Interrupted, with the last update reached, on a stop signal
    or a closed output; on any exit after the start the last complete update is saved
    (unless saving is what failed: FileError), and the backend is always closed."""
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
                    raise reporter.stop()
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
                for new_state, record in updates(config, state, backend):
                    # The commit: an interrupt lands before it or after it, never inside.
                    state = new_state
                    metrics.write(record)
                    if events is not None:
                        events.write(record)
                    reporter.update(record)
                    if state.batch % config.checkpoint_every == 0:
                        _save(run_dir, state, config)
                        saved_batch = state.batch
                    if reporter.closed:
                        raise reporter.stop()
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


def updates(
    config: TrainConfig, state: TrainState, backend: Backend
) -> Iterator[tuple[TrainState, dict[str, Any]]]:
    """Each new state and its metrics record, from `state` until `config.batches` (forever if
    None) or the target reward, by the run's learner on a started backend. Writes nothing;
    asking for the next update means the caller took the last one."""
    learner = make_learner(config)

    def more(state: TrainState) -> bool:
        return (config.batches is None or state.batch < config.batches) and not reached_target(
            config, state
        )

    state = learner.start(state, backend, more)
    last = time.perf_counter()
    while more(state):
        # An env's inf or huge rewards make inf and nan in the batch's sums: the learner
        # refuses a sum that is not finite in one line (NonFiniteError), without numpy's
        # warnings (as EpisodeWorker.play does in the workers).
        with np.errstate(all="ignore"):
            played = learner.play(state, backend)
            play_seconds = time.perf_counter() - last
            new_state, stats = learner.learn(state, played, backend)
        now = time.perf_counter()
        seconds, last = now - last, now
        new_state.elapsed = state.elapsed + seconds
        yield new_state, _record(config, new_state, stats, seconds, play_seconds)
        state = new_state


def _record(
    config: TrainConfig, state: TrainState, stats: Stats, seconds: float, play_seconds: float
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
        # Until the batch was played (pg: with its gradients); the rest of `seconds` learns.
        "play_seconds": play_seconds,
        # The coordinator's critical path: from the batch's last result until the new
        # weights and the next episodes are out.
        "update_seconds": stats["update_seconds"],
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
    checkpoint.save(run_dir / CHECKPOINT_FILE, state, config.shape, config.to_json())


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
