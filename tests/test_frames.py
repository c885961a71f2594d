"""Input streams: the sparse frame differences are exactly the dense ones."""

from __future__ import annotations

import numpy as np
import pytest

from pong_mp import policy
from pong_mp.envs import make_training_env
from pong_mp.frames import PADDLE_COLUMN, BinaryInputs, input_stream


def test_binary_inputs_are_the_dense_frame_differences() -> None:
    env, inputs = make_training_env("FakePong-v0", points_to_win=2)
    assert isinstance(inputs, BinaryInputs)
    obs, _ = env.reset(seed=0)
    inputs.reset(obs)
    prev = policy.preprocess(obs)
    rng = np.random.default_rng(0)
    nonzero = 0
    for _ in range(400):
        obs, *_ = env.step(int(rng.choice([2, 3])))
        idx, vals = inputs.step(obs)
        cur = policy.preprocess(obs)
        dense = np.zeros(6400)
        dense[idx] = vals
        np.testing.assert_array_equal(dense, cur - prev)
        nonzero += len(idx)
        prev = cur
    assert nonzero > 400


def shown_paddle(cur: np.ndarray, prev: np.ndarray) -> np.ndarray:
    """The dense input of "diff+paddle": the difference, with the paddle column as it is."""
    dense = cur - prev
    dense[PADDLE_COLUMN::80] = cur[PADDLE_COLUMN::80]
    return dense


def test_binary_inputs_with_the_paddle_show_its_column_as_it_is() -> None:
    env, inputs = make_training_env("FakePong-v0", inputs="diff+paddle", points_to_win=2)
    obs, _ = env.reset(seed=0)
    inputs.reset(obs)
    prev = policy.preprocess(obs)
    rng = np.random.default_rng(0)
    for _ in range(400):
        obs, *_ = env.step(int(rng.choice([2, 3])))
        idx, vals = inputs.step(obs)
        cur = policy.preprocess(obs)
        dense = np.zeros(6400)
        dense[idx] = vals
        np.testing.assert_array_equal(dense, shown_paddle(cur, prev))
        # FakePong's paddle is 16 pixels high: 8 rows of the column, every step.
        assert dense[PADDLE_COLUMN::80].sum() == 8
        assert len(np.unique(idx)) == len(idx)
        prev = cur


def test_an_unknown_input_kind_is_refused() -> None:
    env, _ = make_training_env("FakePong-v0")
    with pytest.raises(ValueError, match="inputs must be one of diff, diff\\+paddle"):
        input_stream(env, "pixels")
    env.close()
