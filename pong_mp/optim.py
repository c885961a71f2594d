"""RMSProp (as in "Pong from Pixels") and Adam over the flat parameter vector, gradient
ascent, each step one compiled pass (`sparse.pyx`); and the learning-rate schedule."""

from __future__ import annotations

import itertools
import math
import os
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor

import numpy as np

from pong_mp import sparse

EPS = 1e-5
"""Added to the root of the cache to avoid division by zero (Karpathy's value)."""


def rmsprop_step(
    params: np.ndarray,
    cache: np.ndarray,
    grad: np.ndarray,
    *,
    lr: float,
    decay: float,
    eps: float = EPS,
    out: tuple[np.ndarray, np.ndarray] | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """One RMSProp ascent step: the new (params, cache); the inputs are left untouched.

        cache' = decay * cache + (1 - decay) * grad^2
        params' = params + lr * grad / (sqrt(cache') + eps)

    Writing new arrays rather than updating in place means an interrupt can never leave a
    half-updated model: the caller swaps both in with one assignment. `out` is optional
    (new params, new cache), two float64 arrays of the same shape, reused between updates
    to save the cost of fresh 10 MB allocations.
    """
    if out is None:
        out = (np.empty_like(params), np.empty_like(cache))
    new_params, new_cache = out
    # One compiled pass with numpy's operations in numpy's order (tests check the bits).
    sparse.rmsprop(params, cache, grad, lr, decay, eps, new_params, new_cache)
    return new_params, new_cache


ADAM_BETA1 = 0.9
"""Adam's decay of the mean of gradients (Kingma and Ba's default)."""
ADAM_BETA2 = 0.999
"""Adam's decay of the mean of squared gradients (Kingma and Ba's default)."""
ADAM_EPS = 1e-8
"""Adam's epsilon (Kingma and Ba's default)."""

OPTIMIZERS = ("rmsprop", "adam")
"""The optimizers `--optimizer` accepts."""


def adam_step(
    params: np.ndarray,
    momentum: np.ndarray,
    cache: np.ndarray,
    grad: np.ndarray,
    *,
    step: int,
    lr: float,
    beta1: float = ADAM_BETA1,
    beta2: float = ADAM_BETA2,
    eps: float = ADAM_EPS,
    out: tuple[np.ndarray, np.ndarray, np.ndarray] | None = None,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """One Adam ascent step (Kingma and Ba, with bias correction): new (params, momentum,
    cache); the inputs are left untouched, as in `rmsprop_step`. `step` counts from 1; `out`
    is optional (new params, momentum and cache), reused as in `rmsprop_step`.

        m' = beta1 * m + (1 - beta1) * grad
        v' = beta2 * v + (1 - beta2) * grad^2
        params' = params + lr * (m' / (1 - beta1^step)) / (sqrt(v' / (1 - beta2^step)) + eps)
    """
    if step < 1:
        raise ValueError(f"Adam's step counts from 1, not {step}")
    if out is None:
        out = (np.empty_like(params), np.empty_like(momentum), np.empty_like(cache))
    new_params, new_momentum, new_cache = out
    sparse.adam(
        params, momentum, cache, grad, lr, beta1, beta2, eps, 1.0 - beta1**step,
        1.0 - beta2**step, new_params, new_momentum, new_cache,
    )
    return new_params, new_momentum, new_cache


def dropped(
    value: float, steps: int, drop_at: Sequence[float], drop_to: Sequence[float]
) -> float:
    """`value`, or once `steps` env steps reach a point of `drop_at` (increasing), the value
    of `drop_to` at the last point reached: the rule of --lr-drop-at and --entropy-drop-at.
    A drop at S steps gives the bytes of a run forked with the new value at its first update
    to start at S or later."""
    if not drop_at:  # no drop: its values are not read
        return value
    for point, to in zip(drop_at, drop_to, strict=True):
        if steps < point:
            break
        value = to
    return value


class Optimizer:
    """A run's update rule over the flat parameters, `rmsprop` or `adam`, as one object.

    Both write into arrays they reuse, in turn between two sets: fresh 10 MB arrays cost
    more than the step itself. So the arrays of the state that one step returns are overwritten
    two steps later: keep at most the last two states (the coordinator keeps one).
    """

    def __init__(self, name: str, lr: float, decay: float) -> None:
        """The optimizer `name` (one of OPTIMIZERS) with learning rate `lr` and RMSProp's
        `decay`."""
        if name not in OPTIMIZERS:
            raise ValueError(f"unknown optimizer {name!r}; choose one of {', '.join(OPTIMIZERS)}")
        self.name, self.lr, self.decay = name, lr, decay
        self._sets: list[tuple[np.ndarray, ...]] = []
        self._turn = 0

    def step(
        self,
        params: np.ndarray,
        cache: np.ndarray,
        momentum: np.ndarray | None,
        grad: np.ndarray,
        step: int,
        lr: float | None = None,
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray | None]:
        """Update number `step` (from 1): the new (params, cache, momentum); the inputs are
        left untouched, so the caller swaps the new state in at once. `lr`, if given, is this
        update's learning rate (a schedule's) instead of the optimizer's own."""
        lr = self.lr if lr is None else lr
        if len(self._sets) < 2:
            # Adam writes params, momentum and cache; RMSProp only params and cache.
            count = 3 if self.name == "adam" else 2
            self._sets.append(tuple(np.empty_like(params) for _ in range(count)))
        out = self._sets[self._turn]
        self._turn = 1 - self._turn
        if self.name == "adam":
            if momentum is None:
                raise ValueError("adam needs the momentum of the state it updates")
            new_params, new_momentum, new_cache = adam_step(
                params, momentum, cache, grad, step=step, lr=lr, out=(out[0], out[1], out[2])
            )
            return new_params, new_cache, new_momentum
        new_params, new_cache = rmsprop_step(
            params, cache, grad, lr=lr, decay=self.decay, out=(out[0], out[1])
        )
        return new_params, new_cache, None


STEP_BLOCK = 1 << 16
"""Elements per block of `MeanStep`'s gradient norm. Each block's sum of squares is added in
a fixed order of its own, and the blocks' sums exactly (`math.fsum`), so the norm has the
same bits however many threads share the blocks out."""

MAX_STEP_THREADS = 8
"""The most threads `MeanStep` uses: the step reads and writes ~80 MB a time over 1.2 M
parameters, and a few threads already take what memory gives."""


def step_threads() -> int:
    """Threads for the actor-critic's optimizer step: the CPUs this process may run on, at
    most MAX_STEP_THREADS. The workers wait while it runs, so their cores are free."""
    try:
        cpus = len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        cpus = os.cpu_count() or 1
    return max(1, min(cpus, MAX_STEP_THREADS))


class MeanStep:
    """The actor-critic's optimizer step from a minibatch's summed gradient: its mean, its
    norm, the clipped step and the float32 weights to publish, in two passes over memory
    that `threads` threads share out (the caller's thread and, inside `with`, the others).
    Each element gets the operations of `Optimizer.step` on `grad = total / divisor`, scaled
    as `grad *= scale` (the same bits).

    It updates its own copies of a state's arrays in place (`load`), which moves less
    memory than writing new ones: the caller's state stays as it was, so an update refused
    half-way (a non-finite step) changes nothing. A signal only records a stop (see
    `signals.py`), so no step is ever cut off half-way.
    """

    def __init__(self, name: str, decay: float, threads: int = 1) -> None:
        """A step of optimizer `name` (one of OPTIMIZERS; RMSProp's `decay`) on `threads`
        threads."""
        if name not in OPTIMIZERS:
            raise ValueError(f"unknown optimizer {name!r}; choose one of {', '.join(OPTIMIZERS)}")
        self.name, self.decay, self.threads = name, decay, max(1, threads)
        self.params = self.cache = np.empty(0)
        self.momentum: np.ndarray | None = None
        self.weights = np.empty(0, np.float32)
        """The weights of the last step, as float32 (overwritten by the next)."""
        self._partials = np.empty(0)
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

    def load(self, params: np.ndarray, cache: np.ndarray, momentum: np.ndarray | None) -> None:
        """Start from copies of a state's arrays."""
        if self.name == "adam" and momentum is None:
            raise ValueError("adam needs the momentum of the state it updates")
        self.params, self.cache = np.array(params, np.float64), np.array(cache, np.float64)
        self.momentum = np.array(momentum, np.float64) if self.name == "adam" else None
        self.weights = np.empty(len(params), np.float32)
        self._partials = np.empty(-(-len(params) // STEP_BLOCK))

    def norm(self, total: np.ndarray, divisor: float) -> float:
        """The Euclidean norm of total / divisor (float64, as long as the parameters)."""

        def part(first: int, last: int) -> bool:
            sparse.mean_squares(total, divisor, self._partials, first, last, STEP_BLOCK)
            return False

        self._share(part)
        try:
            return math.sqrt(math.fsum(self._partials))
        except OverflowError:  # finite blocks whose sum is not: no finite norm either
            return math.inf

    def step(self, total: np.ndarray, divisor: float, scale: float, step: int, lr: float) -> bool:
        """Update number `step` (from 1) on (total / divisor) * scale at rate `lr`; False
        where a new weight is not finite (the arrays then hold that step: `load` again
        before going on)."""
        n, params, cache, weights = len(self.params), self.params, self.cache, self.weights
        momentum = self.momentum

        def part(first: int, last: int) -> bool:
            start, stop = first * STEP_BLOCK, min(n, last * STEP_BLOCK)
            if momentum is None:
                return sparse.rmsprop_range(
                    params, cache, total, divisor, scale, lr, self.decay, EPS, weights,
                    start, stop,
                )
            return sparse.adam_range(
                params, momentum, cache, total, divisor, scale, lr, ADAM_BETA1, ADAM_BETA2,
                ADAM_EPS, 1.0 - ADAM_BETA1**step, 1.0 - ADAM_BETA2**step, weights, start, stop,
            )

        return not any(self._share(part))

    def _share(self, part: Callable[[int, int], bool]) -> list[bool]:
        # The blocks in one contiguous run a thread, the last run in the caller's.
        blocks = len(self._partials)
        cuts = [blocks * t // self.threads for t in range(self.threads + 1)]
        if self._pool is None:  # one thread, or outside `with`
            return [part(0, blocks)]
        runs = list(itertools.pairwise(cuts))
        futures = [self._pool.submit(part, a, b) for a, b in runs[:-1]]
        return [part(*runs[-1]), *(f.result() for f in futures)]

