"""TrainState: everything that changes during training, a new run's state, and the reshaping
of a state that a fork may ask for (wider hidden layer, a value head added or dropped,
another policy lag, and the optimizer's state anew for another learner).

`checkpoint.py` saves and loads a state; `rundir.py` decides which state a run starts from;
`trainer.py` moves it on by one update at a time.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from pong_mp import policy
from pong_mp.config import TrainConfig
from pong_mp.optim import UnitCounts


@dataclass
class TrainState:
    """Everything that changes during training; what a checkpoint stores."""

    params: np.ndarray  # flat float64, laid out as their `policy.NetShape` says
    cache: np.ndarray  # mean of squared gradients, like params: RMSProp's cache, Adam's v
    batch: int = 0  # updates done
    episodes: int = 0  # played (the next episode's global index)
    steps: int = 0  # env steps played
    running_reward: float | None = None  # exponential mean (0.99) of episode rewards
    elapsed: float = 0.0  # wall seconds spent in updates so far, across resumes
    momentum: np.ndarray | None = None  # Adam's mean of gradients (m); None for RMSProp
    # Optimizer steps since the optimizer's state was last zeroed (a new run, or a fork that
    # starts it anew): Adam's bias correction counts these, not the updates.
    optimizer_steps: int = 0
    # Hidden units whose Adam moments started at zero later than the run's, as a fork that
    # widened the layer added them: (first unit, optimizer_steps then), one pair a widening,
    # each for the units up to the next pair's first (or the last unit). Adam's bias
    # correction counts their own steps (`unit_counts`). () for most runs.
    late_units: tuple[tuple[int, int], ...] = ()
    # With --policy-lag L: the flat float32 weights of updates batch-L .. batch-1 (the oldest
    # known where there was none: a new run's initial weights, or those a fork that lengthened
    # the lag started from), which the next L batches are played with; () without lag.
    lagged: tuple[np.ndarray, ...] = ()


def initial_state(config: TrainConfig) -> TrainState:
    """The state of a new run: weights from its seed, the optimizer's state at zero."""
    params = policy.init_params(config.shape, config.seed, config.value_head)
    return TrainState(
        params=params,
        cache=np.zeros_like(params),
        momentum=np.zeros_like(params) if config.optimizer == "adam" else None,
    )


def with_hidden(
    state: TrainState, shape: policy.NetShape, new_hidden: int, seed: int
) -> TrainState:
    """`state` (a policy of `shape`) widened to `new_hidden` hidden units that play as it did:
    the new units' W1 rows are those of a new run of `new_hidden` units and `seed`, their
    outgoing weights and optimizer state zero (so they learn from the first update), and
    Adam's bias correction counting their steps from there (`late_units`); a convolutional layer
    keeps its filters and optimizer state."""
    wide = dataclasses.replace(shape, hidden=new_hidden)
    columns = policy.split(policy.init_params(wide, seed), wide)[0][:, shape.hidden :]
    widened = _reshaped(
        state,
        lambda flat: policy.widened(flat, shape, new_hidden, columns),
        lambda flat: policy.widened(flat, shape, new_hidden),
    )
    if state.momentum is None or state.optimizer_steps == 0 or new_hidden == shape.hidden:
        return widened  # no bias correction, or none that differs from the run's
    return dataclasses.replace(
        widened, late_units=(*state.late_units, (shape.hidden, state.optimizer_steps))
    )


def unit_counts(state: TrainState, shape: policy.NetShape) -> UnitCounts | None:
    """Where each hidden unit's count of Adam's steps starts, for `optim.MeanStep` (a policy
    of `shape`); None where all start with the run's."""
    if not state.late_units:
        return None
    since = [0] * shape.hidden
    for first, steps in state.late_units:  # a later widening's units follow an earlier one's
        since[first:] = [steps] * (shape.hidden - first)
    head = policy.value_head(state.params, shape) is not None
    return UnitCounts(tuple(since), policy.input_rows(shape), head)


def with_new_optimizer_state(state: TrainState) -> TrainState:
    """`state` with the optimizer's state at zero, as a new run's (the weights kept): its
    step count too, so that Adam's bias correction starts again."""
    momentum = None if state.momentum is None else np.zeros_like(state.momentum)
    return dataclasses.replace(
        state, cache=np.zeros_like(state.cache), momentum=momentum, optimizer_steps=0, late_units=()
    )


def with_value_head(state: TrainState, shape: policy.NetShape, value: bool) -> TrainState:
    """`state` with a new value head (zeros, and zero optimizer state) added to every
    parameter-sized vector, or with its value head dropped."""
    reshaped = functools.partial(policy.with_value_head, shape=shape, value=value)
    return _reshaped(state, reshaped, reshaped)


def _reshaped(
    state: TrainState,
    weights: Callable[[np.ndarray], np.ndarray],
    optimizer: Callable[[np.ndarray], np.ndarray],
) -> TrainState:
    # Every parameter-sized vector of a state changes shape together: the weights (and those
    # of batches in flight) one way, the optimizer's running averages another.
    return dataclasses.replace(
        state,
        params=weights(state.params),
        cache=optimizer(state.cache),
        momentum=None if state.momentum is None else optimizer(state.momentum),
        lagged=tuple(weights(flat) for flat in state.lagged),
    )


def with_policy_lag(state: TrainState, lag: int) -> TrainState:
    """`state` with the weights of its next `lag` batches in flight: a longer lag repeats the
    oldest weights it has (a new run's initial weights, where it has none), as a new run
    does; a shorter one drops the oldest."""
    lagged = state.lagged[max(0, len(state.lagged) - lag) :] if lag else ()
    if lag > len(lagged):
        oldest = lagged[0] if lagged else state.params.astype(np.float32)
        lagged = (oldest,) * (lag - len(lagged)) + lagged
    return dataclasses.replace(state, lagged=lagged)
