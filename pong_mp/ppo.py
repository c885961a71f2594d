"""The actor-critic learner (--algo ppo): what a worker records of an episode, GAE
advantages, and the clipped surrogate's gradient over a stored episode.

Data flow of one update (the coordinator's side is `trainer.ppo_updates`):

    play: EpisodeTask ──worker──> Trajectory (sparse inputs, actions, log pi_old, V_old,
                                  rewards, GAE advantages and returns) ──> coordinator
    for each epoch e, minibatch m:
        publish weights k ──> EpochTask(trajectory, e, m, advantage mean and scale,
                                        entropy weight)
                          ──worker──> gradient over the episode's steps of minibatch m
        sum in the batch's fixed order ──> optimizer step ──> weights k + 1

Each step of an episode falls in one minibatch per epoch, dealt from the episode's seed
and the epoch's number by a hash written here (`minibatch_steps`): which steps form a
minibatch depends only on indices, not on the numpy version, and every gradient is a pure
function of (weights, task), so the bytes do not depend on which worker, backend or retry
computes it.

The policy is the MLP with a value head on its hidden layer (the layout of
`policy.param_count(hidden, value=True)`); unlike --baseline value, the value loss's
gradient reaches the hidden layer's weights too (a shared trunk, as in PPO's Atari
setting). With --policy conv the hidden layer sees the features of a convolutional layer
(`sparse.conv_step`) instead of the pixels, and the gradient reaches its filters too
(`sparse.conv_backward`); a trajectory keeps the pixels, whose features each pass computes
again with the filters it is sent.

A point scored ends a rally: returns and advantages restart there, as Karpathy's returns
do, and a rally's last step bootstraps from nothing.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from pong_mp import policy, sparse
from pong_mp.gradient import Moments


@dataclass(frozen=True)
class PPOSettings:
    """What a worker needs of the actor-critic's hyperparameters, fixed at PPO's usual
    values (docs/learning.md: no other was worth an option). How many passes and minibatches
    an update has, and the entropy's weight (which may change during a run), are the
    coordinator's: each EpochTask carries them."""

    clip: float = 0.1
    """The surrogate's clipping range: the ratio is held within 1 +- clip."""
    gae_lambda: float = 0.95
    """GAE's lambda: 1 gives the discounted returns minus V, 0 one-step TD errors."""
    value_coef: float = 0.5
    """Weight of the value loss, (V - R)^2 / 2 a step."""


@dataclass(frozen=True)
class Trajectory:
    """One played episode as the learner keeps it: ~3 bytes per non-zero input pixel and
    ~30 per step (a 5,000-step game is about 0.5 MB)."""

    pixels: np.ndarray
    """uint16 indices of the non-zero input pixels, step after step."""
    signs: np.ndarray
    """int8 values (+1 or -1) of those pixels."""
    indptr: np.ndarray
    """int64 (steps + 1): step t's pixels are pixels[indptr[t]:indptr[t + 1]]."""
    actions: np.ndarray
    """uint8 (steps): the action of each step, 1 UP, 0 DOWN (`sparse.log_prob`'s codes)."""
    logp_old: np.ndarray
    """float64 (steps): log pi(action) under the weights that played it."""
    values: np.ndarray
    """float64 (steps): the value head's estimate when the step was played."""
    rewards: np.ndarray
    """float64 (steps): the step's reward (-1, 0 or +1 in Pong)."""
    advantages: np.ndarray
    """float64 (steps): GAE(lambda) advantages, restarting at every point."""
    returns: np.ndarray
    """float64 (steps): advantages + values, what the value head learns."""

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
        return (
            self.pixels[where].astype(np.int32),
            self.signs[where].astype(np.float32),
            indptr,
        )


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

    def __init__(self, hidden: int, channels: int = 0) -> None:
        """Working memory for a policy of `hidden` units (on the features of a conv layer
        of `channels`, or the pixels with 0)."""
        self._forward = policy.SparseForward(hidden, channels)
        self._weights: policy.Weights32 | None = None
        self._clear()

    def _clear(self) -> None:
        self._pixels: list[np.ndarray] = []
        self._signs: list[np.ndarray] = []
        self._counts: list[int] = []
        self._logits: list[float] = []
        self._values: list[float] = []
        self._actions: list[int] = []
        self._logp: list[float] = []
        self._rewards: list[float] = []
        self.entropy_sum = 0.0
        """Sum of the policy's entropy (nats) over the steps begun so far."""
        self.reward_sum = 0.0
        """Sum of the rewards added so far."""

    @property
    def steps(self) -> int:
        """Steps added so far."""
        return len(self._actions)

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
        logit = self._forward.logit(weights, idx, vals)
        self._values.append(sparse.value(self._forward.h, weights.value))
        self._logits.append(logit)
        # Copies, compact: an input stream reuses its arrays step after step.
        self._pixels.append(idx.astype(np.uint16))
        self._signs.append(vals.astype(np.int8))
        self._counts.append(len(idx))
        p_up = policy.logistic(logit)
        self.entropy_sum += policy.entropy(p_up)
        return p_up

    def add(self, action: int, reward: float) -> None:
        """Complete the step begun by `forward`: the action taken (ALE's), and the reward."""
        code = 1 if action == policy.UP else 0
        self._actions.append(code)
        logit = self._logits[len(self._actions) - 1]
        self._logp.append(sparse.log_prob(logit, code))
        self._rewards.append(reward)
        self.reward_sum += reward

    def finish(self, gamma: float, lam: float) -> Trajectory:
        """End the episode: its trajectory, with GAE(lambda) advantages."""
        pixels = np.concatenate(self._pixels) if self._pixels else np.zeros(0, np.uint16)
        signs = np.concatenate(self._signs) if self._signs else np.zeros(0, np.int8)
        indptr = np.zeros(len(self._counts) + 1, np.int64)
        np.cumsum(self._counts, out=indptr[1:])
        rewards = np.array(self._rewards, np.float64)
        values = np.array(self._values, np.float64)
        advantages, returns = gae(rewards, values, gamma, lam)
        trajectory = Trajectory(
            pixels=pixels,
            signs=signs,
            indptr=indptr,
            actions=np.array(self._actions, np.uint8),
            logp_old=np.array(self._logp, np.float64),
            values=values,
            rewards=rewards,
            advantages=advantages,
            returns=returns,
        )
        self._clear()
        return trajectory


def advantage_moments(trajectory: Trajectory) -> Moments:
    """The moments of an episode's advantages (the batch merges them in its fixed order)."""
    moments = Moments()
    moments.add(trajectory.advantages)
    return moments


_GOLDEN = np.uint64(0x9E3779B97F4A7C15)
"""splitmix64's increment: 2^64 / the golden ratio, odd."""


def _mix64(x: np.ndarray) -> np.ndarray:
    """splitmix64's finalizer (Steele, Lea and Flood 2014), on uint64 arrays (wrapping)."""
    x = (x ^ (x >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
    x = (x ^ (x >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    return x ^ (x >> np.uint64(31))


def deal_keys(seed: int, epoch: int, steps: int) -> np.ndarray:
    """The uint64 key of each step 0 .. steps - 1 of an episode whose seed is `seed`, in pass
    `epoch`: splitmix64's stream at counter t + 1 from a start that is the stream of the
    mixed seed at counter epoch + 1.

    Written here, in integer arithmetic that wraps mod 2^64, rather than drawn from a
    library's generator: numpy does not promise `Generator.permutation`'s output across
    versions, and workers of mixed versions on a cluster must deal alike.
    """
    mask = (1 << 64) - 1
    with np.errstate(over="ignore"):
        mixed = _mix64(np.array([seed & mask], np.uint64))
        start = _mix64(mixed + np.uint64(epoch + 1) * _GOLDEN)
        return _mix64(start + np.arange(1, steps + 1, dtype=np.uint64) * _GOLDEN)


def minibatch_steps(seed: int, epoch: int, steps: int, minibatches: int, part: int) -> np.ndarray:
    """The step numbers (increasing) of an episode of `steps` steps whose seed is `seed`
    that fall in minibatch `part` of pass `epoch`.

    The steps are ordered by their `deal_keys` (a stable sort: ties by step number) and the
    order is cut into `minibatches` runs, the first `steps % minibatches` one step longer:
    every step falls in exactly one minibatch a pass, and the dealing depends only on these
    integers.
    """
    order = np.argsort(deal_keys(seed, epoch, steps), kind="stable")
    size, extra = divmod(steps, minibatches)
    start = part * size + min(part, extra)
    return np.sort(order[start : start + size + (part < extra)])


@dataclass(frozen=True)
class PassStats:
    """What one gradient pass over some steps saw (summed over those steps)."""

    steps: int = 0
    """Steps whose gradient was taken."""
    clipped: int = 0
    """Steps whose ratio was clipped (no policy gradient)."""
    entropy: float = 0.0
    """Sum of the policy's entropy (nats)."""
    value_error: float = 0.0
    """Sum of (V - R)^2."""
    kl: float = 0.0
    """Sum of log pi_old(a) - log pi(a): an estimate of KL(old || new) times the steps."""

    def __add__(self, other: PassStats) -> PassStats:
        return PassStats(
            self.steps + other.steps,
            self.clipped + other.clipped,
            self.entropy + other.entropy,
            self.value_error + other.value_error,
            self.kl + other.kl,
        )


class PassWork:
    """A worker's working memory for gradient passes: a float64 accumulator of the policy's
    gradient, kept zero between passes (only the rows a pass touched are cleared), and the
    value head's."""

    def __init__(self, hidden: int, channels: int = 0) -> None:
        """Memory for policies of `hidden` units (on the features of a conv layer of
        `channels`, or the pixels with 0)."""
        self.hidden = hidden
        self._sum = np.zeros(policy.mlp_count(hidden, channels))
        self._value = np.zeros(hidden + 1)
        self._touched = np.zeros(policy.input_rows(channels), np.uint8)
        # The filters' gradient (none for the MLP).
        self._kernel = np.zeros(policy.kernel_shape(channels)) if channels else None

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
    ) -> PassStats:
        """The gradient of the actor-critic's objective, summed over `steps` of
        `trajectory`, w.r.t. the flat parameters of `weights` (W1 transposed, W2, value
        head, the filters with --policy conv), written into the flat float32 `out`.
        Advantages are standardised with the batch's mean and scale; the entropy is
        weighed by `entropy_coef`."""
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
        hs = np.empty((count, hidden), np.float32)
        logits = np.empty(count)
        values = np.empty(count)
        sparse.forward_many(
            weights.w1t, weights.w2, weights.value, *rows_in, count, hs, logits, values
        )
        advantages = (trajectory.advantages[steps] - advantage_mean) * advantage_scale
        coef_logit = np.empty(count)
        coef_value = np.empty(count)
        clipped, entropy, error, kl = sparse.ppo_coefficients(
            logits, values, trajectory.actions[steps], trajectory.logp_old[steps], advantages,
            trajectory.returns[steps], settings.clip, settings.value_coef,
            entropy_coef, coef_logit, coef_value,
        )
        dh = None if kernel is None else np.empty((count, hidden))
        sparse.ppo_accumulate(
            *rows_in, hs, weights.w2, weights.value, coef_logit, coef_value, count,
            self._sum, self._value, self._touched, dh,
        )
        n = len(self._sum)
        # Writes the touched rows and W2 (zeros elsewhere) and clears what it wrote: with
        # mu 0 and scale 1, (A - 0 B) * 1 is A, so A serves as its own second sum.
        sparse.finish(self._sum, self._sum, self._touched, 0.0, 1.0, out[:n])
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
class EpochTask:
    """What a worker needs to compute one episode's share of one minibatch's gradient: the
    episode (its index, seed and trajectory), which pass and part, and the batch's
    advantage statistics. The gradient is a pure function of this and the weights."""

    index: int
    """Global episode index of the episode, as its EpisodeTask's."""
    seed: int
    """The episode's seed: with `epoch`, it deals the episode's steps into minibatches."""
    trajectory: Trajectory | None
    """The episode as it was played; None on its way to a worker that keeps it
    (`backends/kept.py`), which puts it back before the pass."""
    epoch: int
    """The pass over the batch (0, 1, ...)."""
    part: int
    """The minibatch of that pass (0 .. parts - 1)."""
    parts: int
    """Minibatches a pass."""
    advantage_mean: float
    """Mean of the batch's advantages."""
    advantage_scale: float
    """1 / their standard deviation (1 if they are all equal)."""
    entropy_coef: float
    """Weight of the policy's entropy (nats) a step in the update's objective: the run's
    --entropy-bonus, or from an --entropy-drop-at point on, its --entropy-drop-to (below 0: a
    penalty)."""


def epoch_gradient(
    weights: policy.Weights32,
    task: EpochTask,
    settings: PPOSettings,
    out: np.ndarray,
    work: PassWork | None = None,
) -> PassStats:
    """Write into `out` the gradient, summed over the episode's steps in the task's
    minibatch, of the actor-critic's objective at `weights`; return what the pass saw."""
    if task.trajectory is None:
        raise ValueError(f"the EpochTask of episode {task.index} carries no trajectory")
    steps = minibatch_steps(task.seed, task.epoch, task.trajectory.steps, task.parts, task.part)
    if work is None:
        work = PassWork(weights.w2.shape[0], weights.channels)
    return work.gradient(
        weights, task.trajectory, steps, task.advantage_mean, task.advantage_scale,
        task.entropy_coef, settings, out,
    )
