"""RMSProp against a hand computation."""

from __future__ import annotations

import numpy as np

from pong_mp.optim import rmsprop_step


def test_one_step_by_hand() -> None:
    params = np.array([1.0, -2.0, 0.5])
    cache = np.array([0.0, 4.0, 1.0])
    grad = np.array([2.0, -1.0, 0.0])
    new_params, new_cache = rmsprop_step(params, cache, grad, lr=0.1, decay=0.9, eps=1e-5)
    # cache' = 0.9 cache + 0.1 g^2 ; p' = p + lr g / (sqrt(cache') + eps)   (ascent)
    expected_cache = [0.4, 3.7, 0.9]
    expected_params = [
        1.0 + 0.1 * 2.0 / (np.sqrt(0.4) + 1e-5),
        -2.0 + 0.1 * -1.0 / (np.sqrt(3.7) + 1e-5),
        0.5,
    ]
    np.testing.assert_allclose(new_cache, expected_cache, rtol=1e-15)
    np.testing.assert_allclose(new_params, expected_params, rtol=1e-15)
    # The inputs are untouched, so a caller can swap both results in at once.
    np.testing.assert_array_equal(params, [1.0, -2.0, 0.5])
    np.testing.assert_array_equal(cache, [0.0, 4.0, 1.0])


def test_first_step_from_zero_cache_moves_by_lr_over_sqrt_one_minus_decay() -> None:
    new_params, _ = rmsprop_step(
        np.zeros(2), np.zeros(2), np.array([3.0, -0.01]), lr=1e-4, decay=0.99
    )
    # With a zero cache the step is lr * sign(g) / sqrt(1 - decay) (eps aside).
    np.testing.assert_allclose(new_params, [1e-3, -1e-3], rtol=1e-2)
