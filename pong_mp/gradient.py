"""An episode's policy gradient, folded rally by rally into fixed memory (EpisodeGradient),
and the running moments that standardise its returns without keeping them (Moments)."""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from pong_mp import policy, sparse


@dataclass
class Moments:
    """Count, mean and sum of squared deviations of a stream of values, merged chunk by chunk
    (Chan et al.), so that an episode's returns can be standardised without keeping them."""

    count: int = 0
    mean: float = 0.0
    m2: float = 0.0

    def add(self, values: np.ndarray) -> None:
        """Take in a chunk of values."""
        if len(values):
            mean = float(values.mean())
            self.merge(Moments(len(values), mean, float(np.square(values - mean).sum())))

    def add_zeros(self, count: int) -> None:
        """Take in `count` zeros."""
        self.merge(Moments(count))

    def merge(self, other: Moments) -> None:
        """Take in the values that `other` summarises (Chan et al.'s pairwise update)."""
        if not other.count:
            return
        total = self.count + other.count
        delta = other.mean - self.mean
        self.m2 += other.m2 + delta * delta * self.count * other.count / total
        self.mean += delta * other.count / total
        self.count = total

    @property
    def standardizing_scale(self) -> float:
        """1 / std, what standardising multiplies by; 1 if the values are all equal (then
        policy.standardize only centres them). The std is the population one (ddof=0)."""
        std = math.sqrt(self.m2 / self.count) if self.count else 0.0
        return 1.0 / std if std > 0 else 1.0


class EpisodeGradient:
    """An episode's policy gradient, accumulated as the episode is played, in fixed memory
    (docs/how-it-works.md, 'Gradient'): sum_t (R_t - mu) / sigma * g_t, with
    g_t = dlogp_t * d logit_t / d params, is (A - mu * B) / sigma with A = sum_t R_t g_t and
    B = sum_t g_t, so a rally's steps are buffered (at most `block`) until its point gives
    their returns (R_t = r * gamma^(T - t)), then folded into the float64 sums A and B.
    Memory is the three accumulators plus the buffer, whatever the episode's length.

    A rally longer than the buffer is folded into a third accumulator, the carry:
    C = sum_s gamma^(t_c - s) g_s up to the last folded step t_c, so that when its point r
    is scored at T, A += r * gamma^(T - t_c) * C.

    A step is recorded in two calls: `forward` (P(UP), keeping what the gradient needs), then
    `add` (the sampled action's dlogp and the reward).
    """

    BLOCK = 1024  # steps buffered before they are folded into the accumulators (by default)
    ENTRIES = 64 * 1024  # non-zero input pixels buffered before a fold (~30 a step in Pong)

    def __init__(self, hidden: int, block: int = BLOCK, entropy_bonus: float = 0.0) -> None:
        """Working memory for the gradients of policies with `hidden` units. An
        `entropy_bonus` beta > 0 adds beta * sum_t H_t (the policy's entropy) to the
        objective."""
        self._shape = policy.NetShape(hidden)
        self._block = block
        self._entropy_bonus = entropy_bonus
        size = policy.param_count(self._shape)
        # Written through once here, so that the memory is resident from the start and an
        # episode's peak does not depend on what its first rallies touch.
        self._a = np.ones(size)
        self._b = np.ones(size)
        self._carry = np.ones(size)
        # With a bonus, E = sum_t dH_t/dlogit * d logit_t / d params: known step by step,
        # and added as beta * E after the standardising (so in its own sum), with each
        # step's slope dH/dlogit.
        self._e = np.ones(size) if entropy_bonus else None
        self._slopes = np.ones(block)
        self._no_slopes = np.zeros(block)
        # W1 rows that may be non-zero (uint8: the compiled loops take no bool arrays)
        self._touched = np.ones(policy.INPUT_SIZE, dtype=np.uint8)
        # The buffered steps: inputs in CSR form (a step has at most INPUT_SIZE entries, so
        # there is always room for one more after a check against ENTRIES), hidden units,
        # dlogps and rewards.
        self._idx = np.ones(self.ENTRIES + policy.INPUT_SIZE, dtype=np.int32)
        self._vals = np.ones(self.ENTRIES + policy.INPUT_SIZE, dtype=np.float32)
        self._indptr = np.zeros(block + 1, dtype=np.int64)
        self._hs = np.ones((block, hidden), dtype=np.float32)
        self._dlogps = np.ones(block)
        self._rewards = np.ones(block)
        self._weights: policy.Weights32 | None = None
        self._gamma = 1.0
        self._clear()

    def _clear(self) -> None:
        self._buffered = 0
        self._carried = 0  # steps of the rally in progress that are in the carry
        self._moments = Moments()
        self.steps = 0  # added so far
        self.reward_sum = 0.0  # of the rewards added so far
        self.entropy_sum = 0.0  # of the policy's entropy (nats) over the steps begun so far

    @property
    def size(self) -> int:
        """Length of the flat float32 gradient `finish` writes."""
        return policy.param_count(self._shape)

    @property
    def buffered(self) -> int:
        """Steps held in the buffer, not yet folded into the accumulators (< block)."""
        return self._buffered

    def start(self, weights: policy.Weights32, gamma: float) -> None:
        """Begin an episode played with `weights`, discounting with `gamma`."""
        self._clear()
        self._weights = weights
        self._gamma = gamma
        # `finish` leaves the sums zero; an episode cut short by an error may not have.
        for acc in (self._a, self._b) if self._e is None else (self._a, self._b, self._e):
            w1t, w2 = policy.split(acc, self._shape)
            w1t[np.flatnonzero(self._touched)] = 0.0
            w2[:] = 0.0
        self._touched[:] = 0

    def forward(self, idx: np.ndarray, vals: np.ndarray) -> float:
        """P(UP) for this step's input (int32 pixels `idx`, float32 values `vals`); the
        input and the hidden units are kept for the step's gradient."""
        assert self._weights is not None, "start() was not called"
        t = self._buffered
        first = int(self._indptr[t])
        last = first + len(idx)
        self._idx[first:last] = idx
        self._vals[first:last] = vals
        self._indptr[t + 1] = last
        p_up = sparse.forward(self._weights.w1t, self._weights.w2, idx, vals, self._hs[t])
        self.entropy_sum += policy.entropy(p_up)
        if self._e is not None:
            self._slopes[t] = policy.entropy_slope(p_up)
        return p_up

    def add(self, dlogp: float, reward: float) -> None:
        """Complete the step begun by `forward`: d log pi(action) / d logit, and the reward."""
        t = self._buffered
        self._dlogps[t] = dlogp
        self._rewards[t] = reward
        self._buffered = t + 1
        self.steps += 1
        self.reward_sum += reward
        if self._buffered == self._block or self._indptr[self._buffered] > self.ENTRIES:
            self._fold(final=False)

    def finish(self, out: np.ndarray) -> np.ndarray:
        """End the episode: write its gradient into the flat float32 `out`."""
        self._fold(final=True)
        mu, scale = self._moments.mean, self._moments.standardizing_scale
        if self._e is not None:
            # finish writes (A - mu B) * scale: A + beta / scale * E adds beta * E to it.
            self._e *= self._entropy_bonus / scale
            self._a += self._e
            self._e[:] = 0.0
        sparse.finish(self._a, self._b, self._touched, mu, scale, out[: self.size])
        return out

    def _fold(self, final: bool) -> None:
        buffered = self._buffered
        rewards = self._rewards[:buffered]
        scored = np.flatnonzero(rewards)
        done = int(scored[-1]) + 1 if len(scored) else 0  # buffered steps of finished rallies
        if not final and done == 0:
            self._fold_into_carry()
            return
        if self._carried and done:
            # The carried rally ends at its first point in the buffer.
            end = int(scored[0])
            r, lag = float(rewards[end]), end + 1
            self._carry *= r * self._gamma**lag  # in place: no 10 MB temporary
            self._a += self._carry
            # The carried steps' returns: r * gamma^(lag + k) for k = 0 .. carried - 1.
            for first in range(0, self._carried, self._block):
                k = np.arange(first, min(first + self._block, self._carried))
                self._moments.add(r * self._gamma ** (lag + k))
            self._carried = 0
        count = buffered if final else done
        returns = np.zeros(count)
        returns[:done] = policy.discount_rewards(rewards[:done], self._gamma)
        self._moments.add(returns[:done])
        if final:
            self._moments.add_zeros(count - done + self._carried)
        self._fold_steps(count, self._dlogps[:count] * returns, self._a)

    def _fold_into_carry(self) -> None:
        count = self._buffered
        decay = self._gamma ** np.arange(count - 1, -1, -1)  # gamma^(t_c - s)
        if self._carried:
            self._carry *= self._gamma**count
        else:
            self._carry[:] = 0.0
        self._fold_steps(count, self._dlogps[:count] * decay, self._carry)
        self._carried += count

    def _fold_steps(self, count: int, coef_a: np.ndarray, out_a: np.ndarray) -> None:
        # The buffer's first `count` steps folded in: sum_t coef_a[t] * g_t into `out_a`,
        # sum_t g_t into B (and the bonus's E); the steps after them (a rally in progress)
        # move to the buffer's front.
        assert self._weights is not None, "start() was not called"
        if count:
            sums = [(coef_a, self._dlogps[:count], out_a, self._b)]
            if self._e is not None:
                # The kernel fills two sums a call; E goes alone, as both, its second share 0.
                sums.append((self._slopes, self._no_slopes, self._e, self._e))
            for coefs_and_outs in sums:
                sparse.accumulate(
                    self._idx, self._vals, self._indptr, self._hs, self._weights.w2, count,
                    *coefs_and_outs, self._touched,
                )
        rest = self._buffered - count
        if rest:
            first, last = int(self._indptr[count]), int(self._indptr[self._buffered])
            self._idx[: last - first] = self._idx[first:last]
            self._vals[: last - first] = self._vals[first:last]
            self._indptr[: rest + 1] = self._indptr[count : self._buffered + 1] - first
            for array in (self._hs, self._dlogps, self._rewards, self._slopes):
                array[:rest] = array[count : self._buffered]
        self._indptr[0] = 0
        self._buffered = rest
