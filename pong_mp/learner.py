"""The learner interface: what the trainer calls, whichever algorithm learns, and what the
learners share. The loop that calls it is drawn at the top of trainer.py.

A learner reaches the workers only through the backend's calls, its tasks and its
`backends.base.WorkerSpec`: backends and the episode loop never see a learner's types. It
takes its own settings, never the run's TrainConfig (`trainer.make_learner` builds them).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np

from pong_mp.backends.base import Backend
from pong_mp.batch_sum import BatchSum
from pong_mp.episode import EpisodeResult, EpisodeStats, Task
from pong_mp.optim import MeanStep, dropped
from pong_mp.policy import NetShape
from pong_mp.signals import check_stop
from pong_mp.state import TrainState

Stats = dict[str, Any]
"""An update's statistics, keyed by the metrics fields `trainer._record` writes them to."""

RUNNING_DECAY = 0.99
"""Weight of the old value in the running reward, updated once per episode (Karpathy's)."""


class Learner(Protocol):
    """One learning algorithm, as the trainer drives it: play a batch, then learn from it."""

    def start(
        self, state: TrainState, backend: Backend, more: Callable[[TrainState], bool]
    ) -> TrainState:
        """Publish what the first batch from `state` plays with; `more(state)` tells whether
        an update is to follow a state. Returns the state to go on from."""

    def play(self, state: TrainState, backend: Backend) -> Any:
        """The batch of update `state.batch + 1`, played: what `learn` takes."""

    def learn(self, state: TrainState, played: Any, backend: Backend) -> tuple[TrainState, Stats]:
        """One update from `played`: the new state (its weights published, the next batch
        under way where `more` allows) and its statistics. Raises NonFiniteError, and
        changes no state, where the update would not be finite."""


class NonFiniteError(RuntimeError):
    """An update would have produced non-finite numbers; it was not applied."""


def gradient_not_finite(update: int, played: BatchSum) -> NonFiniteError:
    """The error for update `update` whose summed gradient is not finite, naming the first
    episode of `played` whose rewards do not sum to a finite number (the env's), if any."""
    bad = [(i, r) for i, r in sorted(played.rewards.items()) if not math.isfinite(r)]
    why = f" (episode {bad[0][0]}'s rewards sum to {bad[0][1]}: the env's)" if bad else ""
    return NonFiniteError(f"update {update}: the summed gradient is not finite{why}")


@dataclass(frozen=True)
class Schedule:
    """A value that changes with the env steps played: `value`, or from each point of `at`
    on (increasing), the value of `to` at that point (--lr-drop-at, --entropy-drop-at).
    Env steps, not updates: a setting means the same at any batch size."""

    value: float
    at: tuple[float, ...] = ()
    to: tuple[float, ...] = ()

    def __call__(self, steps: int) -> float:
        """The value after `steps` env steps."""
        return dropped(self.value, steps, self.at, self.to)


@dataclass(frozen=True, kw_only=True)
class Learning:
    """What every learner's coordinator needs of the run (pg.PGLearning, ppo.PPOLearning)."""

    seed: int  # every episode's derives from it
    batch_size: int  # episodes an update
    optimizer: str  # adam or rmsprop (optim.OPTIMIZERS)
    lr: Schedule  # by env steps played before the update's batch
    shape: NetShape  # the policy's, where the optimizer finds the units a fork added
    decay_rate: float = 0.99  # RMSProp's decay of the mean of squared gradients


def running_reward(running: float | None, rewards: list[float]) -> float | None:
    """The running reward after `rewards` (in episode order), from `running` (None before
    any episode): Karpathy's exponential mean, one episode at a time."""
    for reward in rewards:
        running = (
            reward if running is None else running * RUNNING_DECAY + reward * (1 - RUNNING_DECAY)
        )
    return running


def l2_norm(values: np.ndarray) -> float:
    """The Euclidean norm of `values`, with the same bits on every CPU: numpy's own pairwise
    sum, not `np.linalg.norm`'s BLAS kernel, whose order of additions depends on the CPU. An
    overflowing norm is inf, which says enough: no warning."""
    with np.errstate(over="ignore"):
        return float(np.sqrt(np.add.reduce(np.square(values), axis=None)))


def next_state(
    state: TrainState, stepper: MeanStep, batch: BatchSum, steps: int, **changes: Any
) -> TrainState:
    """The state after an update of `steps` optimizer steps on `batch`, which takes over the
    stepper's arrays (its own copies), with `changes` besides."""
    return dataclasses.replace(
        state,
        params=stepper.params,
        cache=stepper.cache,
        momentum=stepper.momentum,
        batch=state.batch + 1,
        episodes=state.episodes + batch.count,
        steps=state.steps + batch.steps,
        running_reward=running_reward(state.running_reward, batch.episode_rewards),
        optimizer_steps=state.optimizer_steps + steps,
        **changes,
    )


def update_stats(
    state: TrainState, new_state: TrainState, batch: BatchSum, grad_norm: float, lr: float
) -> Stats:
    """The statistics every learner records of the update from `state` to `new_state` on
    `batch`, given its last step's gradient norm and its rate."""
    with np.errstate(over="ignore"):  # huge but finite weights: an inf norm says enough
        return {
            "reward_mean": float(np.mean(batch.episode_rewards)),
            "steps": batch.steps,
            "grad_norm": grad_norm,
            "weight_norm": l2_norm(new_state.params),
            "step_norm": l2_norm(new_state.params - state.params),
            "lr": lr,
            # Mean entropy per step (nats; ln 2 = 0.69 is a coin toss): how settled the
            # policy is.
            "entropy": batch.entropy / batch.steps if batch.steps else None,
        }


def run_round(
    backend: Backend, version: int, tasks: list[Task], summed: BatchSum
) -> Iterator[EpisodeStats]:
    """Hand `tasks` out with weights `version`, add what comes back into `summed` in its
    fixed order, and yield each episode's statistics, until the round is complete."""
    backend.submit(version, tasks)
    for item in backend.results():
        check_stop()
        summed.add(item)
        if isinstance(item, EpisodeResult):
            yield item.stats
        elif isinstance(item, EpisodeStats):
            yield item
        if summed.complete:
            break
    if not summed.complete:
        raise RuntimeError("the backend ended a batch before every episode was summed")
