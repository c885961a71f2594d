"""RMSProp and Adam against hand computations and numpy's bits."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest

from pong_mp import policy, sparse
from pong_mp.optim import STEP_BLOCK, MeanStep, UnitCounts, dropped


def _step(name, params, cache, momentum, grad, step=1, lr=0.1, decay=0.9):
    # One step on `grad` itself (divisor and scale 1, as Karpathy's learner steps).
    with MeanStep(name, decay) as stepper:
        stepper.load(params, cache, momentum if name == "adam" else None)
        assert stepper.step(grad, 1.0, 1.0, step, lr)
        return stepper.params, stepper.cache, stepper.momentum


def test_one_step_by_hand() -> None:
    params = np.array([1.0, -2.0, 0.5])
    cache = np.array([0.0, 4.0, 1.0])
    grad = np.array([2.0, -1.0, 0.0])
    new_params, new_cache, _ = _step("rmsprop", params, cache, None, grad, lr=0.1, decay=0.9)
    # cache' = 0.9 cache + 0.1 g^2 ; p' = p + lr g / (sqrt(cache') + eps)   (ascent)
    expected_cache = [0.4, 3.7, 0.9]
    expected_params = [
        1.0 + 0.1 * 2.0 / (np.sqrt(0.4) + 1e-5),
        -2.0 + 0.1 * -1.0 / (np.sqrt(3.7) + 1e-5),
        0.5,
    ]
    np.testing.assert_allclose(new_cache, expected_cache, rtol=1e-15)
    np.testing.assert_allclose(new_params, expected_params, rtol=1e-15)
    # The inputs are untouched: the caller's state stays as it was.
    np.testing.assert_array_equal(params, [1.0, -2.0, 0.5])
    np.testing.assert_array_equal(cache, [0.0, 4.0, 1.0])


def test_first_step_from_zero_cache_moves_by_lr_over_sqrt_one_minus_decay() -> None:
    new_params, _, _ = _step(
        "rmsprop", np.zeros(2), np.zeros(2), None, np.array([3.0, -0.01]), lr=1e-4, decay=0.99
    )
    # With a zero cache the step is lr * sign(g) / sqrt(1 - decay) (eps aside).
    np.testing.assert_allclose(new_params, [1e-3, -1e-3], rtol=1e-2)


def test_adam_two_steps_by_hand() -> None:
    params = np.array([1.0, -2.0])
    grads = [np.array([2.0, -1.0]), np.array([-1.0, 3.0])]
    with MeanStep("adam", 0.9) as stepper:
        stepper.load(params, np.zeros(2), np.zeros(2))
        for step, grad in enumerate(grads, 1):
            assert stepper.step(grad, 1.0, 1.0, step, 0.1)
    # By hand: m1 = 0.1 g1, v1 = 0.001 g1^2; m2 = 0.9 m1 + 0.1 g2, v2 = 0.999 v1 + 0.001 g2^2,
    # each step p += lr * (m / (1 - b1^t)) / (sqrt(v / (1 - b2^t)) + eps).
    g1, g2 = grads
    m1, v1 = 0.1 * g1, 0.001 * g1**2
    p1 = params + 0.1 * (m1 / 0.1) / (np.sqrt(v1 / 0.001) + 1e-8)
    m2, v2 = 0.9 * m1 + 0.1 * g2, 0.999 * v1 + 0.001 * g2**2
    p2 = p1 + 0.1 * (m2 / (1 - 0.9**2)) / (np.sqrt(v2 / (1 - 0.999**2)) + 1e-8)
    np.testing.assert_allclose(stepper.momentum, m2, rtol=1e-14)
    np.testing.assert_allclose(stepper.cache, v2, rtol=1e-14)
    np.testing.assert_allclose(stepper.params, p2, rtol=1e-14)


def test_adam_first_step_moves_every_weight_by_lr_and_leaves_its_inputs() -> None:
    params, zeros = np.zeros(3), np.zeros(3)
    new_params, _, _ = _step("adam", params, zeros, zeros, np.array([5.0, -1e-3, 0.0]), lr=0.01)
    # Bias correction makes the first step lr * sign(g), however large or small g is.
    np.testing.assert_allclose(new_params, [0.01, -0.01, 0.0], rtol=1e-4)
    np.testing.assert_array_equal(params, 0.0)
    np.testing.assert_array_equal(zeros, 0.0)


@pytest.mark.parametrize("head", [False, True])
@pytest.mark.parametrize("threads", [1, 2])
def test_each_unit_takes_adams_step_of_its_own_count(threads: int, head: bool) -> None:
    shape = policy.NetShape(hidden=6, channels=8)  # 2,888 rows of W1 transposed
    rng = np.random.default_rng(0)
    n = policy.param_count(shape, head)
    params, momentum, total = rng.standard_normal(n), rng.standard_normal(n), rng.random(n)
    cache = rng.random(n)
    since = (0, 0, 0, 40, 40, 41)  # units 3 and 4 added after 40 steps, unit 5 after 41
    units = UnitCounts(since, policy.input_rows(shape), head)

    def stepped(step: int, units: UnitCounts | None = None) -> MeanStep:
        with MeanStep("adam", 0.9, threads) as stepper:
            stepper.load(params, cache, momentum, units)
            assert stepper.step(total, 3.0, 0.5, step, 1e-3)
        return stepper

    mixed = stepped(42, units)
    own = {count: stepped(42 - count) for count in set(since)}  # each count's own step
    unit_of = np.full(n, -1)  # the elements of no unit: the head's bias, the filters
    w1t, w2 = policy.split(unit_of, shape)
    w1t[...], w2[...] = np.arange(6), np.arange(6)
    if head:
        policy.value_head(unit_of, shape)[:-1] = np.arange(6)
    for name in ("params", "weights", "momentum", "cache"):
        got = getattr(mixed, name)
        for unit, count in [*enumerate(since), (-1, 0)]:
            where = unit_of == unit
            assert got[where].tobytes() == getattr(own[count], name)[where].tobytes(), name
    assert mixed.params.tobytes() != stepped(42).params.tobytes()  # the counts do differ
    # A count so far on that it corrects as the run's: the same bits as without counts.
    late = UnitCounts((0,) * 5 + (10,), units.rows, head)
    assert stepped(10**6, late).params.tobytes() == stepped(10**6).params.tobytes()

    # The compiled step in pieces that start inside a row of W1 (as threads share out
    # blocks of the parameters) gives the whole step's bits.
    counts = [42 - count for count in since] + [42]
    first = np.array([1.0 - 0.9**k for k in counts])
    second = np.array([1.0 - 0.999**k for k in counts])
    results = []
    for cuts in ([0, n], [0, 1001, 9_999, n - 7, n]):
        arrays = [a.copy() for a in (params, momentum, cache)] + [np.empty(n, np.float32)]
        for start, stop in itertools.pairwise(cuts):
            p, m, v, w = arrays
            sparse.adam_range(p, m, v, total, 3.0, 0.5, 1e-3, 0.9, 0.999, 1e-8, first, second,
                              units.rows, head, w, start, stop)  # fmt: skip
        results.append(b"".join(a.tobytes() for a in arrays))
    assert results[0] == results[1]
    assert results[0][: n * 8] == mixed.params.tobytes()


def test_adam_refuses_step_zero() -> None:
    with pytest.raises(ValueError, match="counts from 1"):
        _step("adam", np.zeros(1), np.zeros(1), np.zeros(1), np.ones(1), step=0)


def test_an_unknown_optimizer_is_refused() -> None:
    with pytest.raises(ValueError, match="unknown optimizer 'sgd'"):
        MeanStep("sgd", 0.9)


def test_a_drop_replaces_the_rate_from_its_step_on() -> None:
    assert dropped(1e-3, 10**9, (), (3e-4,)) == 1e-3  # no point: never
    assert dropped(1e-3, 4_999_999, (5e6,), (3e-4,)) == 1e-3
    assert dropped(1e-3, 5_000_000, (5e6,), (3e-4,)) == 3e-4
    assert dropped(1e-3, 9_000_000, (5e6,), (2e-3,)) == 2e-3


@pytest.mark.parametrize(
    ("steps", "value"),
    [(0, 0.01), (3_999_999, 0.01), (4_000_000, -0.03), (6_299_999, -0.03), (6_300_000, 0.0),
     (10**9, 0.0)],
)  # fmt: skip
def test_each_point_of_a_drop_gives_its_value_from_its_step_on(steps: int, value: float) -> None:
    assert dropped(0.01, steps, (4e6, 6.3e6), (-0.03, 0.0)) == value


def _numpy_rmsprop(params, cache, grad, lr, decay, eps):
    # The update as numpy writes it, operation by operation: the bits the compiled pass keeps.
    scratch = grad * grad
    scratch *= 1.0 - decay
    new_cache = cache * decay
    new_cache += scratch
    scratch = np.sqrt(new_cache)
    scratch += eps
    scratch = grad / scratch
    scratch *= lr
    return params + scratch, new_cache


def _numpy_adam(params, m, v, grad, step, lr, beta1=0.9, beta2=0.999, eps=1e-8):
    new_m = m * beta1
    new_m += (1.0 - beta1) * grad
    new_v = v * beta2
    new_v += (1.0 - beta2) * np.square(grad)
    denom = np.sqrt(new_v / (1.0 - beta2**step))
    denom += eps
    new_p = new_m / (1.0 - beta1**step)
    new_p /= denom
    new_p *= lr
    new_p += params
    return new_p, new_m, new_v


def test_the_compiled_steps_keep_numpy_bits() -> None:
    rng = np.random.default_rng(0)
    params, grad = rng.standard_normal(10_001), rng.standard_normal(10_001) * 1e-3
    cache, momentum = rng.random(10_001) * 1e-4, rng.standard_normal(10_001) * 1e-3
    got = _step("rmsprop", params, cache, None, grad, lr=1e-3, decay=0.99)[:2]
    want = _numpy_rmsprop(params, cache, grad, 1e-3, 0.99, 1e-5)
    assert all(g.tobytes() == w.tobytes() for g, w in zip(got, want, strict=True))
    for step in (1, 7, 1000):
        p, v, m = _step("adam", params, cache, momentum, grad, step=step, lr=3e-4)
        want = _numpy_adam(params, momentum, cache, grad, step, 3e-4)
        assert all(g.tobytes() == w.tobytes() for g, w in zip((p, m, v), want, strict=True))


def test_a_step_refuses_arrays_that_overlap() -> None:
    # The compiled loops take their arrays as distinct memory (so that they vectorize): a
    # step over arrays that share memory is refused, not computed wrongly.
    params, grad, weights = np.ones(8), np.ones(8), np.empty(8, np.float32)
    with pytest.raises(ValueError, match="overlap"):
        sparse.rmsprop_range(params, params, grad, 1.0, 1.0, 0.1, 0.9, 1e-5, weights, 0, 8)


# -- the actor-critic's step (MeanStep) -------------------------------------------------------


def _state(n: int, seed: int = 0) -> tuple[np.ndarray, ...]:
    rng = np.random.default_rng(seed)
    params = rng.standard_normal(n)
    momentum = rng.standard_normal(n) * 1e-3
    cache = rng.random(n) * 1e-6
    total = rng.standard_normal(n) * 40.0  # a sum over 80 steps, say
    return params, cache, momentum, total


@pytest.mark.parametrize("name", ["adam", "rmsprop"])
@pytest.mark.parametrize("threads", [1, 2, 3])
def test_the_mean_step_gives_numpys_bits_on_any_thread_count(name: str, threads: int) -> None:
    # More than one block, the last one cut short: every way of sharing them out.
    n = 3 * STEP_BLOCK + 5
    params, cache, momentum, total = _state(n)
    kept = [a.copy() for a in (params, cache, momentum)]
    momentum_or_none = momentum if name == "adam" else None
    with MeanStep(name, 0.99, threads) as stepper:
        stepper.load(params, cache, momentum_or_none)
        for step, scale in ((7, 1.0), (8, 0.25)):
            norm = stepper.norm(total, 80.0)
            assert stepper.step(total, 80.0, scale, step, 1e-3)
            grad = total / 80.0
            if scale != 1.0:
                grad *= scale
            if name == "adam":
                params, momentum_or_none, cache = _numpy_adam(
                    params, momentum_or_none, cache, grad, step, 1e-3
                )
            else:
                params, cache = _numpy_rmsprop(params, cache, grad, 1e-3, 0.99, 1e-5)
            np.testing.assert_array_equal(stepper.params, params)
            np.testing.assert_array_equal(stepper.cache, cache)
            if name == "adam":
                np.testing.assert_array_equal(stepper.momentum, momentum_or_none)
            np.testing.assert_array_equal(stepper.weights, params.astype(np.float32))
            assert norm == pytest.approx(float(np.linalg.norm(total / 80.0)), rel=1e-12)
    # The caller's arrays are copied, never written.
    for before, after in zip(kept, _state(n)[:3], strict=True):
        np.testing.assert_array_equal(before, after)


@pytest.mark.parametrize("name", ["adam", "rmsprop"])
def test_a_step_writes_its_weights_where_it_is_told_with_the_same_bits(name: str) -> None:
    n = 2 * STEP_BLOCK + 7
    params, cache, momentum, total = _state(n, seed=2)
    momentum_or_none = momentum if name == "adam" else None
    into = np.full(n, np.nan, np.float32)  # a backend's shared slot, say
    with MeanStep(name, 0.99, 2) as told, MeanStep(name, 0.99, 2) as own:
        for stepper in (told, own):
            stepper.load(params, cache, momentum_or_none)
        for step in (1, 2):
            assert told.step(total, 3.0, 0.5, step, 1e-3, into)
            assert own.step(total, 3.0, 0.5, step, 1e-3)
            assert into.tobytes() == own.weights.tobytes()
            assert told.params.tobytes() == own.params.tobytes()
        with pytest.raises(ValueError, match=f"{n} float32 values"):
            told.step(total, 3.0, 0.5, 3, 1e-3, np.zeros(n))  # float64: not weights


def test_the_mean_steps_norm_has_the_same_bits_on_any_thread_count() -> None:
    n = 5 * STEP_BLOCK + 3
    params, cache, momentum, total = _state(n, seed=1)
    norms = set()
    for threads in (1, 2, 3, 4, 7):
        with MeanStep("adam", 0.99, threads) as stepper:
            stepper.load(params, cache, momentum)
            norms.add(stepper.norm(total, 3.0))
    assert len(norms) == 1


def test_a_non_finite_mean_step_is_told_and_leaves_the_callers_state() -> None:
    params, cache, momentum, total = _state(STEP_BLOCK + 1)
    total[-1] = np.inf
    with MeanStep("adam", 0.99, 2) as stepper:
        stepper.load(params, cache, momentum)
        assert not math.isfinite(stepper.norm(total, 1.0))
        assert not stepper.step(total, 1.0, 1.0, 1, 1e-3)
    np.testing.assert_array_equal(params, _state(STEP_BLOCK + 1)[0])


def test_a_norm_too_large_to_sum_is_infinite_not_an_error() -> None:
    total = np.zeros(2 * STEP_BLOCK)
    total[[0, STEP_BLOCK]] = 1e154  # each block's sum of squares is finite, their sum not
    with MeanStep("adam", 0.99) as stepper:
        stepper.load(total, total, total)
        assert stepper.norm(total, 1.0) == math.inf
