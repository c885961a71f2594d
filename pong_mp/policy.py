"""The policy network of "Pong from Pixels": preprocessing, forward and backward passes.

All parameters live in one flat float64 vector (W1 then W2) so that the optimizer, the
shared-memory broadcast, the gradient sum and the checkpoint all handle a single array;
`split` gives the W1/W2 views into it without copying.
"""

from __future__ import annotations

import numpy as np

INPUT_SIZE = 80 * 80
"""Length of one preprocessed frame: 80x80 pixels."""

UP = 2
"""ALE Pong's action that moves the agent's paddle up ("RIGHT" in ALE's naming)."""
DOWN = 3
"""ALE Pong's action that moves the agent's paddle down ("LEFT" in ALE's naming)."""

_ERASED = (144, 109, 0)  # red values set to 0: ALE Pong's two backgrounds, and 0 itself


def param_count(hidden: int) -> int:
    """Number of scalars in a policy with `hidden` hidden units."""
    return hidden * INPUT_SIZE + hidden


def split(params: np.ndarray, hidden: int) -> tuple[np.ndarray, np.ndarray]:
    """Views (W1 of shape (hidden, 6400), W2 of shape (hidden,)) into a flat parameter vector."""
    if params.shape != (param_count(hidden),):
        raise ValueError(f"expected {param_count(hidden)} parameters, got shape {params.shape}")
    n1 = hidden * INPUT_SIZE
    return params[:n1].reshape(hidden, INPUT_SIZE), params[n1:]


def init_params(hidden: int, seed: int) -> np.ndarray:
    """Xavier-initialised flat parameters, a pure function of (hidden, seed)."""
    rng = np.random.default_rng(np.random.SeedSequence(seed))
    params = np.empty(param_count(hidden), dtype=np.float64)
    w1, w2 = split(params, hidden)
    w1[:] = rng.standard_normal((hidden, INPUT_SIZE)) / np.sqrt(INPUT_SIZE)
    w2[:] = rng.standard_normal(hidden) / np.sqrt(hidden)
    return params


def preprocess(frame: np.ndarray) -> np.ndarray:
    """An ALE frame (210x160x3 uint8) -> 6400 float64 of 0/1: crop, downsample, erase background."""
    red = frame[35:195:2, ::2, 0]
    keep = (red != _ERASED[0]) & (red != _ERASED[1]) & (red != _ERASED[2])
    return keep.astype(np.float64).ravel()


def sigmoid(x: np.ndarray | float) -> np.ndarray | float:
    """The logistic function, 1 / (1 + exp(-x))."""
    return 1.0 / (1.0 + np.exp(-x))


def forward(w1: np.ndarray, w2: np.ndarray, x: np.ndarray) -> tuple[float, np.ndarray]:
    """Probability of UP for input `x`, and the hidden activations."""
    h = w1 @ x
    np.maximum(h, 0.0, out=h)
    return float(sigmoid(float(w2 @ h))), h


def backward(
    w2: np.ndarray, xs: np.ndarray, hs: np.ndarray, dlogps: np.ndarray, out: np.ndarray
) -> np.ndarray:
    """Gradient of sum_t dlogps[t] * logit_t w.r.t. (W1, W2), written into the flat `out`.

    `xs` (T, 6400) are the inputs, `hs` (T, hidden) the hidden activations and `dlogps` (T,)
    the advantage-weighted (y - p) of each step.
    """
    hidden = w2.shape[0]
    dw1, dw2 = split(out, hidden)
    np.matmul(hs.T, dlogps, out=dw2)
    dh = np.outer(dlogps, w2)
    dh[hs <= 0] = 0.0  # relu
    np.matmul(dh.T, xs, out=dw1)
    return out


def discount_rewards(rewards: np.ndarray, gamma: float) -> np.ndarray:
    """Discounted returns, restarting the sum at every point scored (reward != 0), as in Pong."""
    out = np.zeros(len(rewards), dtype=np.float64)
    running = 0.0
    for t in range(len(rewards) - 1, -1, -1):
        if rewards[t] != 0:
            running = 0.0  # a point ends a rally: later rewards belong to the next one
        running = running * gamma + rewards[t]
        out[t] = running
    return out


def standardize(values: np.ndarray) -> np.ndarray:
    """Zero mean and unit variance; only centred when all values are equal."""
    centred = values - values.mean()
    std = centred.std()
    return centred / std if std > 0 else centred
