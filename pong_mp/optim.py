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
) -> tuple[np.ndarray, np.ndarray]:
    """One RMSProp ascent step: the new (params, cache); the inputs are left untouched.

    Returning new arrays rather than updating in place means an interrupt can never leave a
    half-updated model: the caller swaps both in with one assignment.
    """
    new_cache = decay * cache + (1.0 - decay) * grad * grad
    new_params = params + lr * grad / (np.sqrt(new_cache) + eps)
    return new_params, new_cache
