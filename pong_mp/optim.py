"""RMSProp (as in "Pong from Pixels") and Adam over the flat parameter vector, gradient
ascent, each step one compiled pass (`sparse.pyx`); and the learning-rate schedule."""

from __future__ import annotations

from collections.abc import Sequence

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
