"""RMSProp over the flat parameter vector, as in "Pong from Pixels" (gradient ascent)."""

from __future__ import annotations

import numpy as np

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
    out: tuple[np.ndarray, np.ndarray, np.ndarray] | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """One RMSProp ascent step: the new (params, cache); the inputs are left untouched.

        cache' = decay * cache + (1 - decay) * grad^2
        params' = params + lr * grad / (sqrt(cache') + eps)

    Writing new arrays rather than updating in place means an interrupt can never leave a
    half-updated model: the caller swaps both in with one assignment. `out` is optional
    (new params, new cache, scratch), three float64 arrays of the same shape, reused
    between updates to save the cost of fresh 10 MB allocations (~3x faster).
    """
    if out is None:
        out = (np.empty_like(params), np.empty_like(cache), np.empty_like(params))
    new_params, new_cache, scratch = out
    np.multiply(grad, grad, out=scratch)
    scratch *= 1.0 - decay
    np.multiply(cache, decay, out=new_cache)
    new_cache += scratch
    np.sqrt(new_cache, out=scratch)
    scratch += eps
    np.divide(grad, scratch, out=scratch)
    scratch *= lr
    np.add(params, scratch, out=new_params)
    return new_params, new_cache
