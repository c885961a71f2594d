"""Karpathy's learner (--algo pg): each episode played into its policy gradient, the batch's
gradients summed in their fixed order, one optimizer step an update.

    worker (PGWorker.run)                      coordinator (PGLearner)
    ─────────────────────                      ───────────────────────
                                 <── publish   weights k (and, with --policy-lag L, the L
                                               versions before it)
    EpisodeTask ──> play_episode ──> gradient  BatchSum: the fixed order of additions
                    (gradient.py's folds)       │ batch k + 1 complete
                                                v
                                               optimizer step ──> weights k + 1, published;
                                               the next batch handed out before the
                                               update's norms are taken

With --policy-lag L, batches k .. k+L are in flight together (docs/how-it-works.md, 'Policy
lag').
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import ClassVar, NamedTuple

import gymnasium as gym
import numpy as np

from pong_mp import learner, policy
from pong_mp.backends.base import Backend
from pong_mp.batch_sum import BatchSum, GroupSum
from pong_mp.episode import (
    EpisodeResult,
    EpisodeStats,
    EpisodeTask,
    Task,
    ZeroRows,
    make_tasks,
    run_episode,
)
from pong_mp.frames import InputStream
from pong_mp.gradient import EpisodeGradient
from pong_mp.learner import (
    Learning,
    NonFiniteError,
    Stats,
    gradient_not_finite,
    l2_norm,
    next_state,
)
from pong_mp.optim import MeanStep
from pong_mp.signals import check_stop
from pong_mp.state import TrainState, unit_counts, with_policy_lag

# -- the worker's side ---------------------------------------------------------------------


@dataclass(frozen=True)
class PGWork:
    """What pg's workers need (`backends.base.WorkerSpec`)."""

    value_head: ClassVar[bool] = False
    gamma: float  # discount factor of the returns; they restart at every point
    entropy_bonus: float = 0.0  # weight of the policy's entropy in the objective (0: none)

    def worker(self, shape: policy.NetShape) -> PGWorker:
        """A worker's working memory for policies of `shape` (pg has no conv layer)."""
        if shape.channels:
            raise ValueError("Karpathy's learner plays the MLP only")
        return PGWorker(self, shape.hidden)


class PGWorker:
    """One worker's side of pg: every task is an episode to play into its gradient."""

    def __init__(self, work: PGWork, hidden: int) -> None:
        """Working memory for `work`'s episodes with policies of `hidden` units."""
        self.work = work
        self._gradient = EpisodeGradient(hidden, entropy_bonus=work.entropy_bonus)

    def run(
        self,
        env: gym.Env,
        inputs: InputStream,
        weights: policy.Weights32,
        task: Task,
        out: np.ndarray | None,
        zeroed: ZeroRows | None = None,
    ) -> EpisodeResult:
        """Play `task`, an episode, with `weights`: its gradient goes into `out`, every row
        written (so `zeroed` is cleared)."""
        if not isinstance(task, EpisodeTask):
            raise TypeError(f"Karpathy's learner has no task {type(task).__name__}")
        if zeroed is not None:
            zeroed.flags[:] = 0
        return play_episode(env, inputs, weights, self.work.gamma, task, out, self._gradient)


def play_episode(
    env: gym.Env,
    inputs: InputStream,
    weights: policy.Weights32,
    gamma: float,
    task: EpisodeTask,
    out: np.ndarray | None = None,
    work: EpisodeGradient | None = None,
) -> EpisodeResult:
    """Play one episode with the stochastic policy `weights` into its gradient, written into
    `out` (flat float32) when given; `work` is the working memory a worker reuses. The
    result depends only on (weights, task)."""
    start = time.perf_counter()
    work = work or EpisodeGradient(weights.w2.shape[0])
    work.start(weights, gamma)
    run_episode(
        env, inputs, task.seed, work.forward,
        # dlogp: d log pi(a) / d logit
        lambda action, p_up, reward: work.add((1.0 if action == policy.UP else 0.0) - p_up, reward),
    )
    grad = np.empty(work.size, np.float32) if out is None else out
    work.finish(grad)
    stats = EpisodeStats(
        index=task.index,
        reward_sum=work.reward_sum,
        steps=work.steps,
        seconds=time.perf_counter() - start,
        entropy=work.entropy_sum,
    )
    return EpisodeResult(stats, grad)


# -- the coordinator's side ----------------------------------------------------------------


@dataclass(frozen=True, kw_only=True)
class PGLearning(Learning):
    """What pg's coordinator needs of the run."""

    lag: int = 0  # --policy-lag: batch k is played with the weights of update k-1-L
    batches: int | None = None  # the run's last update: no batch past it is handed out


class PGStep(NamedTuple):
    """What `PGLearner.step` gives: the new state, its weights as float32 (written by the
    step itself, the publication's bits), and the gradient and rate applied."""

    state: TrainState
    weights: np.ndarray
    grad: np.ndarray
    lr: float


class PGLearner:
    """Karpathy's learner on a backend (`learner.Learner`)."""

    def __init__(self, settings: PGLearning) -> None:
        """A learner with `settings`; `start` readies it for a run's state."""
        self.settings = settings
        self._in_flight: dict[int, BatchSum] = {}  # by the batch's first episode
        self._sums: list[np.ndarray] = []
        self._submitted = 0
        self._arrived = 0.0
        self._more: Callable[[TrainState], bool] = lambda state: True

    def start(
        self, state: TrainState, backend: Backend, more: Callable[[TrainState], bool]
    ) -> TrainState:
        """Publish the weights of the batches in flight from `state`, and hand them out."""
        lag = self.settings.lag
        if len(state.lagged) != lag:  # a new run's are its initial weights
            if state.batch != 0:
                raise ValueError(f"update {state.batch} has no weights for a policy lag of {lag}")
            state = with_policy_lag(state, lag)
        self._more = more
        # Batch k sums into sums[k % (lag + 1)].
        self._sums = [np.empty(len(state.params)) for _ in range(lag + 1)]
        # Versions batch-L .. batch (those before update 0 are update 0's: published once).
        versions = {max(0, v): w for v, w in enumerate(state.lagged, start=state.batch - lag)}
        versions[state.batch] = state.params.astype(np.float32)
        for version in sorted(versions):
            backend.publish(version, versions[version])
        self._in_flight.clear()
        self._submitted = state.batch
        if more(state):
            self._submit_ahead(state, backend)
        return state

    def _submit_ahead(self, state: TrainState, backend: Backend) -> None:
        # Keep L + 1 batches in flight past `state`, up to the run's last update.
        lag, size, last = self.settings.lag, self.settings.batch_size, self.settings.batches
        while self._submitted < state.batch + 1 + lag and (last is None or self._submitted < last):
            self._submitted += 1
            first = state.episodes + (self._submitted - state.batch - 1) * size
            out = self._sums[self._submitted % (lag + 1)]
            self._in_flight[first] = BatchSum(first, size, out)
            # Played with update k-1-L's weights (0: the initial), fixed by the batch's
            # number alone so that the bytes do not depend on timing, workers or backend.
            version = max(0, self._submitted - 1 - lag)
            backend.submit(version, make_tasks(self.settings.seed, first, size))

    def play(self, state: TrainState, backend: Backend) -> BatchSum:
        """The summed gradients of the batch after `state` (others in flight are summed as
        their results come)."""
        summed = self._in_flight[state.episodes]
        self._arrived = time.perf_counter()
        for item in backend.results():
            check_stop()
            self._arrived = time.perf_counter()
            # The batch of `item`, by its first episode (batches in flight are consecutive
            # runs of batch_size episodes from state.episodes on).
            if isinstance(item, GroupSum):
                first = item.first_index
            else:
                index = item.stats.index if isinstance(item, EpisodeResult) else item.index
                first = index - (index - state.episodes) % self.settings.batch_size
            self._in_flight[first].add(item)
            if summed.complete:
                break
        if not summed.complete:
            raise RuntimeError("the backend ended a batch before every episode was summed")
        del self._in_flight[state.episodes]
        return summed

    def learn(
        self, state: TrainState, played: BatchSum, backend: Backend
    ) -> tuple[TrainState, Stats]:
        """One optimizer step from the batch's summed gradient; the new weights and the next
        batch go out before the update's norms are taken."""
        new_state, weights, grad, lr = self.step(state, played)
        # The critical path: the workers wait for these weights and their next episodes; the
        # norms, metrics and checkpoint are done while they play. (`grad` may be the next
        # batch's sum too, but results are only added to it in the next `play`.)
        backend.publish(new_state.batch, weights)
        if self._more(new_state):
            self._submit_ahead(new_state, backend)
        handed_out = time.perf_counter()
        stats = learner.update_stats(state, new_state, played, l2_norm(grad), lr)
        stats["update_seconds"] = handed_out - self._arrived
        return new_state, stats

    def step(self, state: TrainState, summed: BatchSum) -> PGStep:
        """The state after one update from a batch's summed gradients, its float32 weights
        (what the next batch waits for), and the gradient and rate applied (for
        `learner.update_stats`).
        Raises NonFiniteError, and changes no state, if the gradient or the new weights are
        not finite."""
        grad = summed.total
        # An overflow is no warning to print: the sums below tell, and the update is refused.
        with np.errstate(over="ignore", invalid="ignore"):
            if not np.isfinite(grad.sum()):  # NaN/inf iff some element is (or it overflows)
                raise gradient_not_finite(state.batch + 1, summed)
            # The rate at the env steps played before this batch: update 1 uses --lr itself.
            lr = self.settings.lr(state.steps)
        # The summed gradient itself (divisor and scale 1 are exact): Karpathy's step.
        stepper = MeanStep(self.settings.optimizer, self.settings.decay_rate)
        units = unit_counts(state, self.settings.shape)
        stepper.load(state.params, state.cache, state.momentum, units)
        if not stepper.step(grad, 1.0, 1.0, state.optimizer_steps + 1, lr):
            raise NonFiniteError(f"update {state.batch + 1}: the new weights would not be finite")
        # The weights that batches in flight are played with move on by one update.
        lagged = (*state.lagged[1:], state.params.astype(np.float32)) if state.lagged else ()
        new_state = next_state(state, stepper, summed, 1, lagged=lagged)
        return PGStep(new_state, stepper.weights, grad, lr)
