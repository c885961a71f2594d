"""The policy network of "Pong from Pixels": preprocessing, forward and backward passes.

All parameters live in one flat float64 vector so that the optimizer, the broadcast, the
gradient sum and the checkpoint each handle a single array, laid out as its `NetShape` says:
W1 *transposed* (6400 x H: one contiguous row of H weights per input pixel), W2 (H), then a
value head and a conv layer's filters if any. A frame difference has ~30 non-zero pixels,
and the sparse passes of `sparse.pyx` touch only their rows. Checkpoints store W1 as H x 6400.

The math here is the dense float64 reference (`preprocess`, `forward`, `backward`), line
for line Karpathy's. Episodes compute with `Weights32`, a float32 copy, through the compiled
sparse loops of `sparse.pyx`; tests check those against this.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from pong_mp import sparse
from pong_mp.frames import INPUT_SIZE, binarize

UP = 2  # ALE Pong's action that moves the agent's paddle up ("RIGHT" in ALE's naming)
DOWN = 3  # ALE Pong's action that moves the agent's paddle down ("LEFT" in ALE's naming)


CONV_SIZE = 8  # --policy conv: the side of its filters, in pixels of the 80x80 input
CONV_STRIDE = 4  # --policy conv: the step between its filters' positions
CONV_SIDE = (80 - CONV_SIZE) // CONV_STRIDE + 1
"""--policy conv: positions a side (19): its feature map is 19 x 19 x channels."""


@dataclass(frozen=True)
class NetShape:
    """The shape of a policy network: what the layout of its flat parameters follows."""

    hidden: int  # units
    channels: int = 0  # filters of the conv layer under the hidden layer; 0: the MLP

    @property
    def rows(self) -> int:
        """Rows of W1 transposed (`input_rows`)."""
        return input_rows(self)

    def size(self, value: bool) -> int:
        """Scalars in the flat parameters, with a value head or without (`param_count`)."""
        return param_count(self, value)


def input_rows(shape: NetShape) -> int:
    """Rows of W1 transposed: one per input pixel for the MLP, one per feature (position x
    channel) of the convolutional layer for --policy conv."""
    return CONV_SIDE * CONV_SIDE * shape.channels if shape.channels else INPUT_SIZE


def kernel_shape(shape: NetShape) -> tuple[int, ...]:
    """The shape of the convolutional layer's filters, (CONV_SIZE, CONV_SIZE, channels)."""
    return (CONV_SIZE, CONV_SIZE, shape.channels)


def kernel_count(shape: NetShape) -> int:
    """Scalars in the convolutional layer's filters (none for the MLP)."""
    return CONV_SIZE * CONV_SIZE * shape.channels


def mlp_count(shape: NetShape) -> int:
    """Scalars in W1 (transposed) and W2: the flat parameters before the value head."""
    return (input_rows(shape) + 1) * shape.hidden


def param_count(shape: NetShape, value: bool = False) -> int:
    """Scalars in a policy of `shape`: W1, W2, with `value` a value head (hidden weights and
    a bias), and the convolutional layer's filters last."""
    return mlp_count(shape) + (shape.hidden + 1 if value else 0) + kernel_count(shape)


def split(params: np.ndarray, shape: NetShape) -> tuple[np.ndarray, np.ndarray]:
    """Views (W1 transposed, (rows, hidden); W2, (hidden,)) into flat parameters, with or
    without a value head."""
    rows, hidden = input_rows(shape), shape.hidden
    sizes = (param_count(shape), param_count(shape, True))
    if params.shape not in ((sizes[0],), (sizes[1],)):
        raise ValueError(f"expected {sizes[0]} parameters, got shape {params.shape}")
    return params[: hidden * rows].reshape(rows, hidden), params[hidden * rows : mlp_count(shape)]


def value_head(params: np.ndarray, shape: NetShape) -> np.ndarray | None:
    """A view of the value head (hidden weights, then the bias) of flat parameters, or None."""
    split(params, shape)  # checks the size
    if len(params) == param_count(shape):
        return None
    return params[mlp_count(shape) : mlp_count(shape) + shape.hidden + 1]


def conv_kernel(params: np.ndarray, shape: NetShape) -> np.ndarray | None:
    """A view of the convolutional layer's filters (`kernel_shape`), the last scalars of flat
    parameters; None for the MLP."""
    split(params, shape)  # checks the size
    if shape.channels == 0:
        return None
    return params[len(params) - kernel_count(shape) :].reshape(kernel_shape(shape))


def join(w1: np.ndarray, w2: np.ndarray) -> np.ndarray:
    """Flat float64 parameters from W1 (hidden x rows, as in checkpoints) and W2."""
    return np.concatenate(
        [np.ascontiguousarray(w1.T, dtype=np.float64).ravel(), np.asarray(w2, dtype=np.float64)]
    )


def init_params(shape: NetShape, seed: int, value: bool = False) -> np.ndarray:
    """Xavier-initialised flat parameters, a pure function of (shape, seed); a value head
    starts at zero (the policy's weights are those of the same seed without one); the
    filters are drawn last, with a variance of 1 / 64 (one over the fan-in, 8 x 8)."""
    rng = np.random.default_rng(np.random.SeedSequence(seed))
    rows = input_rows(shape)
    w1 = rng.standard_normal((shape.hidden, rows)) / np.sqrt(rows)
    w2 = rng.standard_normal(shape.hidden) / np.sqrt(shape.hidden)
    flat = join(w1, w2)
    if shape.channels:
        kernel = rng.standard_normal(kernel_count(shape)) / np.sqrt(CONV_SIZE * CONV_SIZE)
        flat = np.concatenate([flat, kernel])
    return with_value_head(flat, shape, value)


def with_value_head(flat: np.ndarray, shape: NetShape, value: bool) -> np.ndarray:
    """Flat parameters (or a vector shaped like them) with a value head, a new one of zeros
    if they have none; or, if not `value`, without one."""
    if (value_head(flat, shape) is not None) == value:
        return flat
    tail = flat[len(flat) - kernel_count(shape) :]
    middle = np.zeros(shape.hidden + 1, flat.dtype) if value else flat[:0]
    return np.concatenate([flat[: mlp_count(shape)], middle, tail])


def widened(
    flat: np.ndarray, shape: NetShape, new_hidden: int, new_columns: np.ndarray | None = None
) -> np.ndarray:
    """Flat parameters (or a vector shaped like them) with `new_hidden` hidden units: the new
    units' W1 columns are `new_columns` (or zeros), their W2 and value-head weights zero and
    the filters kept, so the widened policy and its value compute what `flat`'s did."""
    hidden = shape.hidden
    if new_hidden < hidden:
        raise ValueError(f"cannot narrow {hidden} hidden units to {new_hidden}")
    w1t, w2 = split(flat, shape)
    head = value_head(flat, shape)
    zeros = np.zeros(new_hidden - hidden, flat.dtype)
    if new_columns is None:
        new_columns = np.zeros((input_rows(shape), len(zeros)), flat.dtype)
    parts = [np.hstack([w1t, new_columns.astype(flat.dtype)]).ravel(), w2, zeros]
    if head is not None:
        parts += [head[:hidden], zeros, head[hidden:]]
    parts.append(flat[len(flat) - kernel_count(shape) :])
    return np.concatenate(parts)


def entropy(p_up: float) -> float:
    """The entropy in nats of the two actions with P(UP) = `p_up` (scalar `math`: the same
    bits on every machine)."""
    q = 1.0 - p_up
    if p_up <= 0.0 or q <= 0.0:
        return 0.0
    return -p_up * math.log(p_up) - q * math.log(q)


def entropy_slope(p_up: float) -> float:
    """d H / d logit of the two actions with P(UP) = `p_up`: -logit * p * (1 - p), 0 where p
    is exactly 0 or 1 (scalar `math`: the same bits on every machine)."""
    q = 1.0 - p_up
    if p_up <= 0.0 or q <= 0.0:
        return 0.0
    return -(math.log(p_up) - math.log(q)) * p_up * q


def logistic(x: float) -> float:
    """P(UP) of logit `x`, in scalar math (0 far below): the same bits in every process."""
    return 1.0 / (1.0 + math.exp(-x)) if x > -700.0 else 0.0


def choose_action(p_up: float, uniform: Callable[[], float], greedy: bool) -> int:
    """The ALE action for P(UP) = `p_up`: UP when one number drawn from `uniform` is below
    it, or, if `greedy` (no draw), when it is at least 1/2; else DOWN."""
    up = p_up >= 0.5 if greedy else uniform() < p_up
    return UP if up else DOWN


GAMMA = 0.99
"""The discount of every learner's returns (Karpathy's; 0.995 was behind late in a run,
docs/learning-notes.md)."""


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
    return float(1.0 / (1.0 + np.exp(-float(h @ w2)))), h  # the logistic function of the logit


def backward(
    w2: np.ndarray, xs: np.ndarray, hs: np.ndarray, dlogps: np.ndarray, out: np.ndarray
) -> np.ndarray:
    """Gradient of sum_t dlogps[t] * logit_t w.r.t. (W1, W2), written into the flat `out`:
    `xs` (T, 6400) inputs, `hs` (T, hidden) activations, `dlogps` (T,) weighted (y - p)."""
    dw1t, dw2 = split(out, NetShape(w2.shape[0]))
    np.matmul(hs.T, dlogps, out=dw2)
    dh = np.outer(dlogps, w2)
    dh[hs <= 0] = 0.0  # relu
    np.matmul(xs.T, dh, out=dw1t)
    return out


# -- the float32 weights of episodes ----------------------------------------------------------


@dataclass(frozen=True)
class Weights32:
    """The float32 copy of the policy that episodes compute with (read-only views)."""

    w1t: np.ndarray  # W1 transposed, (rows, hidden): rows are pixels, or conv features
    w2: np.ndarray  # (hidden,)
    value: np.ndarray | None = None  # the value head, (hidden + 1,): weights, then the bias
    kernel: np.ndarray | None = None  # --policy conv's filters, (CONV_SIZE, CONV_SIZE, channels)

    @property
    def shape(self) -> NetShape:
        """The network's shape."""
        return NetShape(self.w2.shape[0], 0 if self.kernel is None else self.kernel.shape[2])

    @classmethod
    def from_params(cls, params: np.ndarray, shape: NetShape) -> Weights32:
        """The float32 weights of flat float64 parameters (a copy)."""
        return cls.from_flat32(params.astype(np.float32), shape)

    @classmethod
    def from_flat32(cls, flat: np.ndarray, shape: NetShape) -> Weights32:
        """Views of flat float32 weights of a network of `shape`, as backends receive them."""
        if flat.dtype != np.float32:
            raise ValueError(f"expected float32 weights, got {flat.dtype}")
        return cls(*split(flat, shape), value_head(flat, shape), conv_kernel(flat, shape))


def conv_features(kernel: np.ndarray, x: np.ndarray) -> np.ndarray:
    """The dense float64 reference of --policy conv's first layer: relu of the 80x80 input
    `x` convolved with `kernel`, stride CONV_STRIDE, no padding, no bias (a sparse input
    gives sparse features); flat, feature (row * CONV_SIDE + column) * channels + channel."""
    windows = np.lib.stride_tricks.sliding_window_view(x.reshape(80, 80), kernel.shape[:2])
    windows = windows[::CONV_STRIDE, ::CONV_STRIDE]
    return np.maximum(np.einsum("ijyx,yxc->ijc", windows, kernel), 0.0).ravel()


class SparseForward:
    """P(UP) of sparse inputs with `Weights32` through the compiled loops (`sparse.pyx`), on
    the pixels or on conv features; holds the working memory, reused step after step."""

    def __init__(self, shape: NetShape) -> None:
        """Memory for a policy of `shape`."""
        self.h = np.zeros(shape.hidden, np.float32)
        """The hidden units (after the relu) of the last input."""
        self._features = np.zeros(shape.rows if shape.channels else 0, np.int32)
        self._values = np.zeros(len(self._features), np.float32)
        self._pre = np.zeros(len(self._features), np.float32)  # conv_step's scratch
        self._seen = np.zeros(CONV_SIDE * CONV_SIDE, np.uint8)

    def p_up(
        self, weights: Weights32, idx: np.ndarray, vals: np.ndarray, logit: bool = False
    ) -> float:
        """P(UP) for values `vals` (float32) at pixels `idx` (int32), or with `logit` its logit
        (of which P(UP) is the sigmoid)."""
        # The hidden layer's sparse input: the pixels, or their conv features.
        if weights.kernel is not None:
            count = sparse.conv_step(
                weights.kernel, idx, vals, self._features, self._values, self._pre, self._seen
            )
            idx, vals = self._features[:count], self._values[:count]
        return sparse.forward(weights.w1t, weights.w2, idx, vals, self.h, logit=logit)
