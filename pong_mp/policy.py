"""The policy network of "Pong from Pixels": preprocessing, forward and backward passes.

All parameters live in one flat float64 vector so that the optimizer, the broadcast, the
gradient sum and the checkpoint each handle a single array. Its layout is W1 *transposed*
(6400 x H: one contiguous row of H weights per input pixel) followed by W2 (H): a frame
difference has ~30 non-zero pixels, and the sparse forward and backward passes of episodes
(`sparse.pyx`) touch only their rows. Checkpoints store W1 in the usual H x 6400 orientation.

The math here is the dense float64 reference (`preprocess`, `forward`, `backward`), line
for line Karpathy's: the readable definition. Episodes compute with `Weights32`, a float32
copy, through the compiled sparse loops of `sparse.pyx`; tests check those against this.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from pong_mp.frames import INPUT_SIZE, binarize

UP = 2
"""ALE Pong's action that moves the agent's paddle up ("RIGHT" in ALE's naming)."""
DOWN = 3
"""ALE Pong's action that moves the agent's paddle down ("LEFT" in ALE's naming)."""



def param_count(hidden: int, value: bool = False) -> int:
    """Number of scalars in a policy with `hidden` hidden units; with `value`, its value
    head too (hidden weights and a bias, after W2)."""
    return hidden * INPUT_SIZE + hidden + (hidden + 1 if value else 0)


def split(params: np.ndarray, hidden: int) -> tuple[np.ndarray, np.ndarray]:
    """Views (W1 transposed, shape (6400, hidden); W2, shape (hidden,)) into flat parameters,
    with or without a value head after them (see `value_head`)."""
    n1, n2 = hidden * INPUT_SIZE, param_count(hidden)
    if params.shape not in ((n2,), (param_count(hidden, value=True),)):
        raise ValueError(f"expected {n2} parameters, got shape {params.shape}")
    return params[:n1].reshape(INPUT_SIZE, hidden), params[n1:n2]


def value_head(params: np.ndarray, hidden: int) -> np.ndarray | None:
    """A view of the value head (hidden weights, then the bias) of flat parameters, or None
    if they have none."""
    split(params, hidden)  # checks the size
    n = param_count(hidden)
    return params[n:] if len(params) > n else None


def join(w1: np.ndarray, w2: np.ndarray) -> np.ndarray:
    """Flat float64 parameters from W1 (hidden x 6400, as in checkpoints) and W2."""
    return np.concatenate(
        [np.ascontiguousarray(w1.T, dtype=np.float64).ravel(), np.asarray(w2, dtype=np.float64)]
    )


def init_params(hidden: int, seed: int, value: bool = False) -> np.ndarray:
    """Xavier-initialised flat parameters, a pure function of (hidden, seed); a value head
    starts at zero (so the policy's weights are those of the same seed without one)."""
    rng = np.random.default_rng(np.random.SeedSequence(seed))
    w1 = rng.standard_normal((hidden, INPUT_SIZE)) / np.sqrt(INPUT_SIZE)
    w2 = rng.standard_normal(hidden) / np.sqrt(hidden)
    return with_value_head(join(w1, w2), hidden, value)


def with_value_head(flat: np.ndarray, hidden: int, value: bool) -> np.ndarray:
    """Flat parameters (or a vector shaped like them) with a value head, a new one of zeros
    if they have none; or, if not `value`, without one."""
    policy_part = flat[: param_count(hidden)]
    if not value:
        return policy_part
    head = value_head(flat, hidden)
    return flat if head is not None else np.concatenate([flat, np.zeros(hidden + 1, flat.dtype)])


def widened(
    flat: np.ndarray, hidden: int, new_hidden: int, new_columns: np.ndarray | None = None
) -> np.ndarray:
    """Flat parameters (or a vector shaped like them) with `new_hidden` hidden units, the
    first `hidden` of them `flat`'s own. The new units' W1 columns (6400 x the new units) are
    `new_columns`, or zeros; their W2 weights and value-head weights are zero, so the widened
    policy and its value compute what `flat`'s did."""
    if new_hidden < hidden:
        raise ValueError(f"cannot narrow {hidden} hidden units to {new_hidden}")
    w1t, w2 = split(flat, hidden)
    head = value_head(flat, hidden)
    added = new_hidden - hidden
    zeros = np.zeros(added, flat.dtype)
    columns = np.zeros((INPUT_SIZE, added), flat.dtype) if new_columns is None else new_columns
    parts = [np.hstack([w1t, columns.astype(flat.dtype)]).ravel(), w2, zeros]
    if head is not None:
        parts += [head[:hidden], zeros, head[hidden:]]
    return np.concatenate(parts)


def sigmoid(x: np.ndarray | float) -> np.ndarray | float:
    """The logistic function, 1 / (1 + exp(-x))."""
    return 1.0 / (1.0 + np.exp(-x))


def entropy(p_up: float) -> float:
    """The entropy in nats of the policy's two actions with P(UP) = `p_up`: ln 2 at 1/2, 0
    for a certain action (scalar `math`, the same bits on every machine)."""
    q = 1.0 - p_up
    if p_up <= 0.0 or q <= 0.0:
        return 0.0
    return -p_up * math.log(p_up) - q * math.log(q)


def entropy_slope(p_up: float) -> float:
    """d H / d logit for the policy's two actions with P(UP) = `p_up`: -logit * p * (1 - p).

    The entropy H = -p log p - (1 - p) log(1 - p) is largest at p = 1/2, where this slope is
    0; it is 0 too where p is exactly 0 or 1 (a saturated logit). Scalar `math`, not numpy, so
    that every machine computes the same bits.
    """
    q = 1.0 - p_up
    if p_up <= 0.0 or q <= 0.0:
        return 0.0
    return -(math.log(p_up) - math.log(q)) * p_up * q


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


# -- the dense float64 reference ---------------------------------------------------------------


def preprocess(frame: np.ndarray) -> np.ndarray:
    """An ALE frame -> 6400 float64 of 0/1, as in Karpathy's prepro()."""
    return binarize(frame).astype(np.float64)


def forward(w1t: np.ndarray, w2: np.ndarray, x: np.ndarray) -> tuple[float, np.ndarray]:
    """Probability of UP for a dense input `x`, and the hidden activations."""
    h = x @ w1t
    np.maximum(h, 0.0, out=h)
    return float(sigmoid(float(h @ w2))), h


def backward(
    w2: np.ndarray, xs: np.ndarray, hs: np.ndarray, dlogps: np.ndarray, out: np.ndarray
) -> np.ndarray:
    """Gradient of sum_t dlogps[t] * logit_t w.r.t. (W1, W2), written into the flat `out`.

    `xs` (T, 6400) are the inputs, `hs` (T, hidden) the hidden activations and `dlogps` (T,)
    the advantage-weighted (y - p) of each step.
    """
    hidden = w2.shape[0]
    dw1t, dw2 = split(out, hidden)
    np.matmul(hs.T, dlogps, out=dw2)
    dh = np.outer(dlogps, w2)
    dh[hs <= 0] = 0.0  # relu
    np.matmul(xs.T, dh, out=dw1t)
    return out


# -- the float32 weights of episodes ----------------------------------------------------------


@dataclass(frozen=True)
class Weights32:
    """The float32 copy of the policy that episodes compute with (read-only views)."""

    w1t: np.ndarray
    """W1 transposed, (6400, hidden) float32."""
    w2: np.ndarray
    """W2, (hidden,) float32."""
    value: np.ndarray | None = None
    """The value head, (hidden + 1,) float32 (weights, then the bias), or None."""

    @classmethod
    def from_params(cls, params: np.ndarray, hidden: int) -> Weights32:
        """The float32 weights of flat float64 parameters (a copy)."""
        return cls.from_flat32(params.astype(np.float32), hidden)

    @classmethod
    def from_flat32(cls, flat: np.ndarray, hidden: int) -> Weights32:
        """Views of flat float32 weights (W1 transposed, W2, and a value head if there is
        one), as backends receive them."""
        if flat.dtype != np.float32:
            raise ValueError(f"expected float32 weights, got {flat.dtype}")
        return cls(*split(flat, hidden), value_head(flat, hidden))
