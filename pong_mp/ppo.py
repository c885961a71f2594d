"""The actor-critic learner (--algo ppo): what a worker records of an episode, GAE
advantages, the clipped surrogate's gradient over a stored episode (the worker's side,
PPOWork), and the update's passes (the coordinator's side, PPOLearner). The algorithm:
docs/how-it-works.md, 'The actor-critic (--algo ppo)'.

Data flow of one update:

    play: EpisodeTask ──worker──> Trajectory (sparse inputs, actions, log pi_old, V_old,
                                  rewards, GAE advantages and returns) as the episode's
                                  data, kept where it was played; no gradient
    for each epoch e, minibatch m:
        publish weights k ──> EpochTask(trajectory, e, m, advantage mean and scale,
                                        entropy weight)
                          ──worker──> gradient over the episode's steps of minibatch m
        sum in the batch's fixed order ──> optimizer step ──> weights k + 1

The minibatches are dealt by a hash written here (`minibatch_steps`), not numpy's
generator, so every gradient is a pure function of (weights, task): the bytes do not depend
on which worker, backend or retry computes it.
"""

from __future__ import annotations

import dataclasses
import itertools
import math
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import ClassVar

import gymnasium as gym
import numpy as np

from pong_mp import policy, sparse
from pong_mp.backends.base import Backend
from pong_mp.batch_sum import BatchSum
from pong_mp.episode import (
    EpisodeResult,
    EpisodeStats,
    EpisodeTask,
    PassTask,
    Task,
    ZeroRows,
    make_tasks,
    run_episode,
)
from pong_mp.frames import InputStream
from pong_mp.gradient import Moments
from pong_mp.learner import (
    Learning,
    NonFiniteError,
    Schedule,
    Stats,
    gradient_not_finite,
    next_state,
    run_round,
    update_stats,
)
from pong_mp.optim import MeanStep
from pong_mp.state import TrainState, unit_counts


@dataclass(frozen=True)
class PPOSettings:
    """The actor-critic's constants a worker needs, at PPO's usual values
    (docs/learning-notes.md: no other was worth an option); each EpochTask carries the rest."""

    clip: float = 0.1  # the surrogate holds the ratio within 1 +- clip
    gae_lambda: float = 0.95  # 1 gives the discounted returns minus V, 0 one-step TD errors
    value_coef: float = 0.5  # weight of the value loss, (V - R)^2 / 2 a step


@dataclass(frozen=True)
class Trajectory:
    """One played episode as the learner keeps it: ~3 bytes per non-zero input pixel and
    ~30 per step (a 5,000-step game is about 0.5 MB). `actions` and the fields after it
    hold one entry a step; those after `actions` are float64."""

    pixels: np.ndarray  # uint16 indices of the non-zero input pixels, step after step
    signs: np.ndarray  # int8 values (+1 or -1) of those pixels
    indptr: np.ndarray  # int64: step t's pixels are pixels[indptr[t]:indptr[t + 1]]
    actions: np.ndarray  # uint8: 1 UP, 0 DOWN (`sparse.log_prob`'s codes)
    logp_old: np.ndarray  # log pi(action) under the weights that played it
    values: np.ndarray  # the value head's estimate when the step was played
    rewards: np.ndarray  # the step's reward (-1, 0 or +1 in Pong)
    advantages: np.ndarray  # GAE(lambda), restarting at every point
    returns: np.ndarray  # advantages + values, what the value head learns

    @property
    def steps(self) -> int:
        """Env steps played."""
        return len(self.actions)

    def inputs(self, steps: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """The inputs of `steps` (increasing step numbers) in CSR form for the compiled
        loops: (int32 pixels, float32 values, int64 indptr)."""
        starts, ends = self.indptr[steps], self.indptr[steps + 1]
        lengths = ends - starts
        indptr = np.zeros(len(steps) + 1, np.int64)
        np.cumsum(lengths, out=indptr[1:])
        # Entry j of the gather comes from starts[step] + (j - indptr[step]).
        where = np.repeat(starts - indptr[:-1], lengths) + np.arange(indptr[-1])
        return self.pixels[where].astype(np.int32), self.signs[where].astype(np.float32), indptr


def gae(
    rewards: np.ndarray, values: np.ndarray, gamma: float, lam: float
) -> tuple[np.ndarray, np.ndarray]:
    """GAE(lambda) advantages and the returns (advantages + values) of one episode, each
    rally (up to a non-zero reward, or the episode's end) bootstrapping from 0 at its end."""
    count = len(rewards)
    advantages = np.zeros(count)
    following = 0.0  # the advantage of step t + 1 within the rally
    next_value = 0.0
    for t in range(count - 1, -1, -1):
        reward = float(rewards[t])
        if reward != 0.0 or t == count - 1:
            following, next_value = 0.0, 0.0  # the rally ends after this step
        value = float(values[t])
        delta = reward + gamma * next_value - value
        following = delta + gamma * lam * following
        advantages[t] = following
        next_value = value
    return advantages, advantages + values


class TrajectoryRecorder:
    """Records an episode as it is played with the actor-critic's weights: a step is
    `forward` (P(UP) for its input) then `add` (the action taken and the reward)."""

    def __init__(self, shape: policy.NetShape) -> None:
        """Working memory for a policy of `shape`."""
        self._forward = policy.SparseForward(shape)
        self._weights: policy.Weights32 | None = None
        self._clear()

    def _clear(self) -> None:
        self._pixels: list[np.ndarray] = []
        self._signs: list[np.ndarray] = []
        self._logit = 0.0  # of the step begun by `forward`
        self._values: list[float] = []
        self._actions: list[int] = []
        self._logp: list[float] = []
        self._rewards: list[float] = []
        self.entropy_sum = 0.0  # of the policy's entropy (nats) over the steps begun so far
        self.reward_sum = 0.0  # of the rewards added so far

    def start(self, weights: policy.Weights32) -> None:
        """Begin an episode played with `weights` (which must have a value head)."""
        if weights.value is None:
            raise ValueError("the actor-critic's weights need a value head")
        self._clear()
        self._weights = weights

    def forward(self, idx: np.ndarray, vals: np.ndarray) -> float:
        """P(UP) for this step's input (int32 pixels `idx`, float32 values `vals`)."""
        weights = self._weights
        assert weights is not None and weights.value is not None, "start() was not called"
        logit = self._forward.p_up(weights, idx, vals, logit=True)
        self._values.append(sparse.value(self._forward.h, weights.value))
        self._logit = logit
        # Copies, compact: an input stream reuses its arrays step after step.
        self._pixels.append(idx.astype(np.uint16))
        self._signs.append(vals.astype(np.int8))
        p_up = policy.logistic(logit)
        self.entropy_sum += policy.entropy(p_up)
        return p_up

    def add(self, action: int, reward: float) -> None:
        """Complete the step begun by `forward`: the action taken (ALE's), and the reward."""
        code = 1 if action == policy.UP else 0
        self._actions.append(code)
        self._logp.append(sparse.log_prob(self._logit, code))
        self._rewards.append(reward)
        self.reward_sum += reward

    def finish(self, gamma: float, lam: float) -> Trajectory:
        """End the episode: its trajectory, with GAE(lambda) advantages."""
        pixels = np.concatenate(self._pixels) if self._pixels else np.zeros(0, np.uint16)
        signs = np.concatenate(self._signs) if self._signs else np.zeros(0, np.int8)
        indptr = np.zeros(len(self._pixels) + 1, np.int64)
        np.cumsum([len(step) for step in self._pixels], out=indptr[1:])
        rewards = np.array(self._rewards, np.float64)
        values = np.array(self._values, np.float64)
        advantages, returns = gae(rewards, values, gamma, lam)
        trajectory = Trajectory(
            pixels, signs, indptr, np.array(self._actions, np.uint8),
            np.array(self._logp, np.float64), values, rewards, advantages, returns,
        )
        self._clear()
        return trajectory


def advantage_moments(trajectory: Trajectory) -> Moments:
    """The moments of an episode's advantages (the batch merges them in its fixed order)."""
    moments = Moments()
    moments.add(trajectory.advantages)
    return moments


_GOLDEN = np.uint64(0x9E3779B97F4A7C15)  # splitmix64's increment: 2^64 / the golden ratio, odd


def _mix64(x: np.ndarray) -> np.ndarray:
    """splitmix64's finalizer (Steele, Lea and Flood 2014), on uint64 arrays (wrapping)."""
    x = (x ^ (x >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
    x = (x ^ (x >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    return x ^ (x >> np.uint64(31))


def deal_keys(seed: int, epoch: int, steps: int) -> np.ndarray:
    """The uint64 key of each step 0 .. steps - 1 in pass `epoch` of an episode seeded `seed`:
    splitmix64's stream at counter t + 1 from the stream of the mixed seed at counter
    epoch + 1. Integer arithmetic mod 2^64, not a numpy generator (whose output numpy does not
    promise across versions): workers of mixed versions on a cluster must deal alike."""
    mask = (1 << 64) - 1
    with np.errstate(over="ignore"):
        mixed = _mix64(np.array([seed & mask], np.uint64))
        start = _mix64(mixed + np.uint64(epoch + 1) * _GOLDEN)
        return _mix64(start + np.arange(1, steps + 1, dtype=np.uint64) * _GOLDEN)


def deal_order(seed: int, epoch: int, steps: int) -> np.ndarray:
    """Steps 0 .. steps - 1 of pass `epoch` over an episode seeded `seed`, ordered by
    `deal_keys` (stably): `minibatch_steps` cuts it into the pass's minibatches."""
    return np.argsort(deal_keys(seed, epoch, steps), kind="stable")


def minibatch_steps(
    seed: int, epoch: int, steps: int, minibatches: int, part: int,
    order: np.ndarray | None = None,
) -> np.ndarray:
    """The step numbers (increasing) in minibatch `part` of pass `epoch` over an episode of
    `steps` steps seeded `seed`: the steps ordered by `deal_keys` (stably), cut into
    `minibatches` runs, the first `steps % minibatches` one step longer. `order` is that
    episode's `deal_order` where the caller kept it (each of the pass's minibatches needs
    it)."""
    if order is None:
        order = deal_order(seed, epoch, steps)
    size, extra = divmod(steps, minibatches)
    start = part * size + min(part, extra)
    return np.sort(order[start : start + size + (part < extra)])


@dataclass(frozen=True)
class PassStats:
    """What one gradient pass over some steps saw (summed over those steps)."""

    steps: int = 0  # whose gradient was taken
    # Steps whose ratio r = pi / pi_old left 1 +- clip (CleanRL's and SB3's clip fraction);
    # the surrogate zeroes the policy gradient of those that left it the way their advantage
    # pushes.
    clipped: int = 0
    entropy: float = 0.0  # the policy's (nats)
    value_error: float = 0.0  # (V - R)^2
    kl: float = 0.0  # log pi_old(a) - log pi(a): an estimate of KL(old || new) times the steps

    def __add__(self, other: PassStats) -> PassStats:
        # Field by field, not dataclasses.astuple (a deep copy): the coordinator adds one
        # for every pass of an update.
        return PassStats(*(getattr(self, name) + getattr(other, name) for name in _PASS_FIELDS))


_PASS_FIELDS = tuple(field.name for field in dataclasses.fields(PassStats))


ORDERS_KEPT = 1 << 22  # the most steps whose deal a worker keeps (`PassWork.order`): 16 MB of int32


class PassWork:
    """A worker's working memory for gradient passes: the value head's and the filters'
    float64 sums, kept zero between passes."""

    def __init__(self, shape: policy.NetShape) -> None:
        """Memory for policies of `shape`."""
        self.hidden = shape.hidden
        self._count = policy.mlp_count(shape)
        self._value = np.zeros(shape.hidden + 1)
        # Each step's hidden units and their gradient, kept for the next pass: fresh arrays
        # this size cost a page fault every 4 KB.
        self._hs = np.empty((0, shape.hidden), np.float32)
        self._dh = np.empty((0, shape.hidden))
        # The filters' gradient (none for the MLP).
        self._kernel = np.zeros(policy.kernel_shape(shape)) if shape.channels else None
        # The deal of each episode this worker passes over in the current epoch: the
        # epoch's minibatches each need it, and it costs a sort of the whole episode.
        self._orders: dict[tuple[int, int, int], np.ndarray] = {}

    def order(self, seed: int, epoch: int, steps: int) -> np.ndarray:
        """`deal_order(seed, epoch, steps)`, kept until a task of another epoch comes, or
        until the orders kept would pass ORDERS_KEPT steps (with --epochs 1 every pass is
        epoch 0)."""
        key = (seed, epoch, steps)
        order = self._orders.get(key)
        if order is None:
            kept = sum(len(order) for order in self._orders.values())
            if kept + steps > ORDERS_KEPT or any(k[1] != epoch for k in self._orders):
                self._orders.clear()
            order = self._orders[key] = deal_order(seed, epoch, steps).astype(np.int32)
        return order

    def gradient(
        self,
        weights: policy.Weights32,
        trajectory: Trajectory,
        steps: np.ndarray,
        advantage_mean: float,
        advantage_scale: float,
        entropy_coef: float,
        settings: PPOSettings,
        out: np.ndarray,
        zeroed: ZeroRows | None = None,
    ) -> PassStats:
        """The gradient of the actor-critic's objective, summed over `steps` of
        `trajectory`, w.r.t. the flat parameters of `weights`, into the flat float32 `out`
        (with `zeroed` its W1 rows' flags, kept up to date); advantages standardised with the
        batch's mean and scale."""
        if weights.value is None:
            raise ValueError("the actor-critic's weights need a value head")
        hidden = self.hidden
        count = len(steps)
        idx, vals, indptr = trajectory.inputs(steps)
        kernel = weights.kernel
        # The hidden layer's inputs: the pixels, or the features of the conv layer.
        rows_in = (idx, vals, indptr) if kernel is None else sparse.conv_many(
            kernel, idx, vals, indptr, count
        )
        if len(self._hs) < count:
            self._hs = np.empty((count, hidden), np.float32)
            self._dh = np.empty((count, hidden))
        hs, dh = self._hs[:count], self._dh[:count]
        logits, values = np.empty((2, count))
        sparse.forward_many(
            weights.w1t, weights.w2, weights.value, *rows_in, count, hs, logits, values
        )
        advantages = (trajectory.advantages[steps] - advantage_mean) * advantage_scale
        coef_logit, coef_value = np.empty((2, count))
        clipped, entropy, error, kl = sparse.ppo_coefficients(
            logits, values, trajectory.actions[steps], trajectory.logp_old[steps], advantages,
            trajectory.returns[steps], settings.clip, settings.value_coef,
            entropy_coef, coef_logit, coef_value,
        )
        n = self._count
        sparse.ppo_accumulate(
            *rows_in, hs, weights.w2, weights.value, coef_logit, coef_value, count,
            out[:n], self._value, dh, None if zeroed is None else zeroed.flags,
        )
        out[n : n + hidden + 1] = self._value
        self._value[:] = 0.0
        if kernel is not None and self._kernel is not None:
            sparse.conv_backward(
                weights.w1t, idx, vals, indptr, rows_in[0], rows_in[2], dh, count, self._kernel
            )
            start = n + hidden + 1  # the filters come last in the flat layout
            out[start : start + self._kernel.size] = self._kernel.ravel()
            self._kernel[:] = 0.0
        return PassStats(count, clipped, entropy, error, kl)


@dataclass(frozen=True)
class EpochTask(PassTask):
    """One episode's share of one minibatch's gradient (its Trajectory as `data`): with the
    weights, all that the gradient is a function of."""

    epoch: int  # the pass over the batch (0, 1, ...)
    part: int  # the minibatch of that pass (0 .. parts - 1)
    parts: int
    advantage_mean: float  # of the batch's advantages
    advantage_scale: float  # 1 / their standard deviation (1 if they are all equal)
    # The entropy's weight (nats a step) in the update's objective: --entropy-bonus, or from
    # an --entropy-drop-at point on, its --entropy-drop-to (below 0: a penalty).
    entropy_coef: float

    @property
    def trajectory(self) -> Trajectory | None:
        """The episode as it was played; None on its way to a worker that keeps it."""
        assert self.data is None or isinstance(self.data, Trajectory)
        return self.data


# -- the worker's side ---------------------------------------------------------------------


@dataclass(frozen=True)
class PPOWork:
    """What the actor-critic's workers need (`backends.base.WorkerSpec`)."""

    value_head: ClassVar[bool] = True
    gamma: float  # discount factor of the returns; they restart at every point
    settings: PPOSettings = PPOSettings()

    def worker(self, shape: policy.NetShape) -> PPOWorker:
        """A worker's working memory for policies of `shape`."""
        return PPOWorker(self, shape)


class PPOWorker:
    """One worker's side of the actor-critic: an EpisodeTask is played into a trajectory
    (which comes back as the episode's data; no gradient), an EpochTask gives its share of a
    minibatch's gradient, playing nothing."""

    def __init__(self, work: PPOWork, shape: policy.NetShape) -> None:
        """Working memory for `work`'s tasks with policies of `shape`."""
        self.work = work
        self._recorder = TrajectoryRecorder(shape)
        self._passes = PassWork(shape)

    def run(
        self,
        env: gym.Env,
        inputs: InputStream,
        weights: policy.Weights32,
        task: Task,
        out: np.ndarray | None,
        zeroed: ZeroRows | None = None,
    ) -> EpisodeResult:
        """Do `task` with `weights` (see the class)."""
        if isinstance(task, EpochTask):
            return epoch_pass(weights, task, self.work.settings, out, self._passes, zeroed)
        if not isinstance(task, EpisodeTask):
            raise TypeError(f"the actor-critic has no task {type(task).__name__}")
        # The episode played: the result depends only on (weights, task).
        start = time.perf_counter()
        recorder = self._recorder
        recorder.start(weights)
        run_episode(
            env, inputs, task.seed, recorder.forward,
            lambda action, p_up, reward: recorder.add(action, reward),
        )
        reward_sum, entropy = recorder.reward_sum, recorder.entropy_sum
        trajectory = recorder.finish(self.work.gamma, self.work.settings.gae_lambda)
        stats = EpisodeStats(
            index=task.index,
            reward_sum=reward_sum,
            steps=trajectory.steps,
            seconds=time.perf_counter() - start,
            entropy=entropy,
            data=trajectory,
        )
        return EpisodeResult(stats, None)


def epoch_pass(
    weights: policy.Weights32,
    task: EpochTask,
    settings: PPOSettings,
    out: np.ndarray | None = None,
    work: PassWork | None = None,
    zeroed: ZeroRows | None = None,
) -> EpisodeResult:
    """An episode's share of one minibatch's gradient at `weights` (summed over its steps in
    the task's minibatch), written into `out` (flat float32) when given, with what the pass
    saw as its report. `work` is the working memory a worker reuses; `zeroed` the flags
    kept with `out` (`sparse.ppo_accumulate`)."""
    start = time.perf_counter()
    trajectory = task.trajectory
    if trajectory is None:
        raise ValueError(f"the EpochTask of episode {task.index} carries no trajectory")
    work = work or PassWork(weights.shape)
    steps = minibatch_steps(
        task.seed, task.epoch, trajectory.steps, task.parts, task.part,
        work.order(task.seed, task.epoch, trajectory.steps),
    )
    grad = np.empty(weights.shape.size(value=True), np.float32) if out is None else out
    seen = work.gradient(
        weights, trajectory, steps, task.advantage_mean, task.advantage_scale,
        task.entropy_coef, settings, grad, zeroed if out is not None else None,
    )
    stats = EpisodeStats(
        index=task.index,
        reward_sum=0.0,
        steps=seen.steps,
        seconds=time.perf_counter() - start,
        entropy=seen.entropy,
        report=seen,
    )
    return EpisodeResult(stats, grad)


# -- the coordinator's side ----------------------------------------------------------------

MAX_GRAD_NORM = 0.5
"""The longest step gradient of the actor-critic (each minibatch's mean, scaled down to this
norm where it is longer): PPO's usual limit."""

PPO_FIELDS = ("entropy_bonus", "value_loss", "clip_fraction", "approx_kl")
"""The metrics fields of --algo ppo, over the update's passes (docs/how-it-works.md, 'The
actor-critic (--algo ppo)', says what each is)."""


@dataclass(frozen=True, kw_only=True)
class PPOLearning(Learning):
    """What the actor-critic's coordinator needs of the run."""

    epochs: int  # passes over each batch
    minibatches: int  # optimizer steps a pass
    entropy: Schedule  # the entropy's weight in the objective
    step_threads: int = 1  # of each optimizer step (`optim.MeanStep`): any count, same bits


@dataclass
class Played:
    """A batch of the actor-critic, played: its sum (counts, rewards, entropy) and each
    episode's trajectory, in episode order."""

    summed: BatchSum
    tasks: list[EpisodeTask]
    trajectories: dict[int, Trajectory]


class PPOLearner:
    """The actor-critic on a backend (`learner.Learner`): play a batch, then --epochs passes
    of --minibatches optimizer steps, each step's gradient computed by the workers and summed
    in the batch's fixed order. Weights versions count optimizer steps: each step's weights
    are published before the next minibatch is handed out."""

    def __init__(self, settings: PPOLearning) -> None:
        """A learner with `settings`; `start` readies it for a run's state."""
        self.settings = settings
        self._total = np.empty(0)
        self._version = 0

    @property
    def steps_per_update(self) -> int:
        """Optimizer steps an update."""
        return self.settings.epochs * self.settings.minibatches

    def start(
        self, state: TrainState, backend: Backend, more: Callable[[TrainState], bool]
    ) -> TrainState:
        """Publish the weights the next batch is played with."""
        self._total = np.empty(len(state.params))
        self._version = state.batch * self.steps_per_update
        backend.publish(self._version, state.params.astype(np.float32))
        return state

    def play(self, state: TrainState, backend: Backend) -> Played:
        """The next batch, played into trajectories; no gradient travels."""
        first, size = state.episodes, self.settings.batch_size
        tasks = make_tasks(self.settings.seed, first, size, gradient=False)
        summed = BatchSum(first, size, None)
        trajectories: dict[int, Trajectory] = {}
        for stats in run_round(backend, self._version, tasks, summed):
            if not isinstance(stats.data, Trajectory):
                raise RuntimeError(f"episode {stats.index} came back without its trajectory")
            trajectories[stats.index] = stats.data
        return Played(summed, tasks, trajectories)

    def learn(
        self, state: TrainState, played: Played, backend: Backend
    ) -> tuple[TrainState, Stats]:
        """The update's passes over `played`, one optimizer step a minibatch."""
        settings, tasks = self.settings, played.tasks
        moments = Moments()
        for task in tasks:  # in episode order: the same bits whatever the arrival order
            moments.merge(advantage_moments(played.trajectories[task.index]))
        stepper = MeanStep(settings.optimizer, settings.decay_rate, settings.step_threads)
        stepper.load(state.params, state.cache, state.momentum, unit_counts(state, settings.shape))
        seen = PassStats()
        grad_norm = 0.0
        lr = settings.lr(state.steps)
        entropy_bonus = settings.entropy(state.steps)
        coordinator = 0.0  # the workers wait on the coordinator between minibatches
        first, update, parts = state.episodes, state.batch + 1, settings.minibatches
        with stepper:
            for epoch, part in itertools.product(range(settings.epochs), range(parts)):
                epoch_tasks = [
                    EpochTask(
                        task.index, task.seed, played.trajectories[task.index], epoch, part, parts,
                        moments.mean, moments.standardizing_scale, entropy_bonus,
                    )
                    for task in tasks
                ]
                summed = BatchSum(first, settings.batch_size, self._total, stepper.ranges)
                passes = {
                    stats.index: stats.report
                    for stats in run_round(backend, self._version, epoch_tasks, summed)
                }
                for task in tasks:  # added in episode order: the same bits every time
                    report = passes.get(task.index)
                    seen += report if isinstance(report, PassStats) else PassStats()
                arrived = time.perf_counter()
                step = state.optimizer_steps + epoch * parts + part + 1
                divisor = max(1, summed.steps)  # the minibatch's mean
                grad_norm = stepper.norm(summed.total, divisor)
                if not math.isfinite(grad_norm):
                    raise gradient_not_finite(update, played.summed)
                scale = MAX_GRAD_NORM / grad_norm if grad_norm > MAX_GRAD_NORM else 1.0
                # Straight into the backend's shared slot where it has one: no copy after.
                room = backend.weights_room()
                if not stepper.step(summed.total, divisor, scale, step, lr, room):
                    raise NonFiniteError(f"update {update}: the new weights would not be finite")
                self._version += 1
                backend.publish(self._version, stepper.weights if room is None else room)
                coordinator += time.perf_counter() - arrived
        new_state = next_state(state, stepper, played.summed, self.steps_per_update)
        return new_state, {
            **update_stats(state, new_state, played.summed, grad_norm, lr),
            "entropy_bonus": entropy_bonus,
            "value_loss": seen.value_error / 2 / seen.steps if seen.steps else None,
            "clip_fraction": seen.clipped / seen.steps if seen.steps else None,
            "approx_kl": seen.kl / seen.steps if seen.steps else None,
            "update_seconds": coordinator,
        }
