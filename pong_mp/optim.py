"""RMSProp (as in "Pong from Pixels") and Adam over the flat parameter vector, gradient
ascent, in compiled passes (`sparse.pyx`); and the learning-rate schedule.

    cache' = decay * cache + (1 - decay) * grad^2                       (RMSProp)
    params' = params + lr * grad / (sqrt(cache') + eps)

    m' = beta1 * m + (1 - beta1) * grad                                 (Adam)
    v' = beta2 * v + (1 - beta2) * grad^2
    params' = params + lr * (m' / (1 - beta1^step)) / (sqrt(v' / (1 - beta2^step)) + eps)

Adam's `step` counts the steps since the moments were zero: the run's, or for the units a fork
added to the hidden layer, their own (`UnitCounts`).
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import NamedTuple, TypeVar

import numpy as np

from pong_mp import sparse

T = TypeVar("T")

EPS = 1e-5  # added to the root of the cache to avoid division by zero (Karpathy's value)


ADAM_BETA1 = 0.9  # Adam's decay of the mean of gradients (Kingma and Ba's default)
ADAM_BETA2 = 0.999  # Adam's decay of the mean of squared gradients (Kingma and Ba's default)
ADAM_EPS = 1e-8  # Adam's epsilon (Kingma and Ba's default)

OPTIMIZERS = ("rmsprop", "adam")  # the optimizers `--optimizer` accepts


def dropped(
    value: float, steps: int, drop_at: Sequence[float], drop_to: Sequence[float]
) -> float:
    """`value`, or once `steps` env steps reach a point of `drop_at` (increasing), the value
    of `drop_to` at the last point reached (--lr-drop-at, --entropy-drop-at): a drop at S
    steps gives the bytes of a run forked with the new value at its first update from S on."""
    if not drop_at:  # no drop: its values are not read
        return value
    for point, to in zip(drop_at, drop_to, strict=True):
        if steps < point:
            break
        value = to
    return value


class UnitCounts(NamedTuple):
    """Where each hidden unit's count of Adam's steps starts: `since[u]` of the run's
    optimizer steps for unit u (0: with the run's; later for the units a fork added to the
    layer, their moments zero), and the layout that finds a unit's weights (`policy.split`):
    `rows` of W1 transposed, then W2, then, where `head`, the value head's."""

    since: tuple[int, ...]
    rows: int
    head: bool


STEP_BLOCK = 1 << 16
"""Elements per block of `MeanStep`'s gradient norm. Each block's sum of squares is added in
a fixed order of its own, and the blocks' sums exactly (`math.fsum`), so the norm has the
same bits however many threads share the blocks out."""

MAX_STEP_THREADS = 8
"""The most threads `MeanStep` uses: the step reads and writes ~80 MB a time over 1.2 M
parameters, and a few threads already take what memory gives."""


def step_threads() -> int:
    """Threads for the actor-critic's optimizer step: the CPUs this process may run on (the
    workers wait while it runs), at most MAX_STEP_THREADS."""
    from pong_mp.config import default_workers  # not at the top: config imports this module

    return min(default_workers(), MAX_STEP_THREADS)


class MeanStep:
    """An optimizer step from a summed gradient: its norm, then the formula above on
    `grad = total / divisor` scaled as `grad *= scale`, and the float32 weights to publish,
    in passes over memory that `threads` threads share out (the others inside `with`).
    Karpathy's learner steps on its sum itself (divisor and scale 1), the actor-critic on a
    minibatch's clipped mean. It updates its own copies of a state's arrays in place
    (`load`; less memory moved than new arrays): the caller's state stays as it was, so an
    update refused half-way changes nothing, and a signal only records a stop."""

    def __init__(self, name: str, decay: float, threads: int = 1) -> None:
        """A step of optimizer `name` (OPTIMIZERS; RMSProp's `decay`) on `threads` threads."""
        if name not in OPTIMIZERS:
            raise ValueError(f"unknown optimizer {name!r}; choose one of {', '.join(OPTIMIZERS)}")
        self.name, self.decay, self.threads = name, decay, max(1, threads)
        self.params = self.cache = np.empty(0)
        self.momentum: np.ndarray | None = None
        self.weights = np.empty(0, np.float32)
        """The weights of the last step, as float32 (overwritten by the next)."""
        self._partials = np.empty(0)
        self._units: UnitCounts | None = None
        self._pool: ThreadPoolExecutor | None = None

    def __enter__(self) -> MeanStep:
        """Start the threads (none where `threads` is 1)."""
        if self.threads > 1 and self._pool is None:
            self._pool = ThreadPoolExecutor(self.threads - 1, thread_name_prefix="pong-mp-step")
        return self

    def __exit__(self, *exc: object) -> None:
        """Stop the threads."""
        if self._pool is not None:
            self._pool.shutdown()
            self._pool = None

    def load(
        self,
        params: np.ndarray,
        cache: np.ndarray,
        momentum: np.ndarray | None,
        units: UnitCounts | None = None,
    ) -> None:
        """Start from copies of a state's arrays; Adam counts each unit's steps from `units`
        (None: all from the run's start)."""
        self._units = units
        if self.name == "adam" and momentum is None:
            raise ValueError("adam needs the momentum of the state it updates")
        self.params, self.cache = np.array(params, np.float64), np.array(cache, np.float64)
        self.momentum = np.array(momentum, np.float64) if self.name == "adam" else None
        self.weights = np.empty(len(params), np.float32)
        self._partials = np.empty(-(-len(params) // STEP_BLOCK))

    def norm(self, total: np.ndarray, divisor: float) -> float:
        """The Euclidean norm of total / divisor (float64, as long as the parameters)."""

        def part(first: int, last: int) -> None:
            sparse.mean_squares(total, divisor, self._partials, first, last, STEP_BLOCK)

        self._share(part)
        try:
            return math.sqrt(math.fsum(self._partials))
        except OverflowError:  # finite blocks whose sum is not: no finite norm either
            return math.inf

    def step(
        self,
        total: np.ndarray,
        divisor: float,
        scale: float,
        step: int,
        lr: float,
        weights: np.ndarray | None = None,
    ) -> bool:
        """Update number `step` (from 1) on (total / divisor) * scale at rate `lr`, its
        float32 weights into `weights` where given (a backend's `weights_room`), else into
        `self.weights`; False where a new weight is not finite (the arrays then hold that
        step: `load` again before going on)."""
        if step < 1:
            raise ValueError(f"the optimizer's step counts from 1, not {step}")
        if weights is None:
            weights = self.weights
        elif weights.shape != self.weights.shape or weights.dtype != np.float32:
            raise ValueError(f"the weights go into {len(self.weights)} float32 values")
        params, cache, momentum = self.params, self.cache, self.momentum
        corrections = self._adam_corrections(step) if momentum is not None else None

        def part(start: int, stop: int) -> bool:
            if momentum is None:
                return sparse.rmsprop_range(
                    params, cache, total, divisor, scale, lr, self.decay, EPS, weights,
                    start, stop,
                )
            return sparse.adam_range(
                params, momentum, cache, total, divisor, scale, lr, ADAM_BETA1, ADAM_BETA2,
                ADAM_EPS, *corrections, weights, start, stop,
            )

        return not any(self.ranges(part))

    def _adam_corrections(self, step: int) -> tuple[np.ndarray, np.ndarray, int, bool]:
        # `sparse.adam_range`'s corrections and layout: each unit's, then the run's; the
        # run's alone where every unit's are the run's (as they become, far enough on).
        run = _corrections(step)
        units = self._units
        if units is not None:
            by_since = {count: _corrections(step - count) for count in set(units.since)}
            if any(own != run for own in by_since.values()):
                pairs = [by_since[count] for count in units.since] + [run]
                first, second = zip(*pairs, strict=True)
                return np.array(first), np.array(second), units.rows, units.head
        return np.array([run[0]]), np.array([run[1]]), 0, False

    def ranges(self, part: Callable[[int, int], T]) -> list[T]:
        """Run `part(start, stop)` over the element ranges of the parameters, on the step's
        threads (inside `with`): the step's, and a round's sum of gradients
        (`batch_sum.sum_in_blocks`); its results, as `share` gives them."""
        n = len(self.params)
        return self._share(lambda first, last: part(first * STEP_BLOCK, min(n, last * STEP_BLOCK)))

    def _share(self, part: Callable[[int, int], T]) -> list[T]:
        # The blocks in one contiguous run a thread (in one, outside `with`).
        return share(self._pool, self.threads, len(self._partials), part)


def _corrections(step: int) -> tuple[float, float]:
    # Adam's bias corrections at its step number `step` (from 1).
    return 1.0 - ADAM_BETA1**step, 1.0 - ADAM_BETA2**step


def share(
    pool: ThreadPoolExecutor | None, threads: int, count: int, part: Callable[[int, int], T]
) -> list[T]:
    """`part(start, stop)` over 0..count in one contiguous run a thread: `threads` - 1 of
    them on `pool`, the last in the caller's (all in one where `pool` is None); their
    results, in order of the runs' ends (the caller's first)."""
    if pool is None:
        return [part(0, count)]
    runs = list(itertools.pairwise([count * t // threads for t in range(threads + 1)]))
    futures = [pool.submit(part, a, b) for a, b in runs[:-1]]
    return [part(*runs[-1]), *(f.result() for f in futures)]

