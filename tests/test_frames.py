"""Input streams: the sparse frame differences are exactly the dense ones."""

from __future__ import annotations

import numpy as np
import pytest

from pong_mp import policy
from pong_mp.envs import make_training_env
from pong_mp.frames import INPUTS, PADDLE_COLUMN, BinaryInputs, input_stream
from tests.helpers import expected_input


@pytest.mark.parametrize("kind", INPUTS)
def test_binary_inputs_are_the_dense_inputs(kind: str) -> None:
    env, inputs = make_training_env("FakePong-v0", kind, points_to_win=2)
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
        np.testing.assert_array_equal(dense, expected_input(kind, cur, prev))
        assert len(np.unique(idx)) == len(idx)
        if kind == "diff+paddle":  # FakePong's paddle: 16 pixels high, 8 rows of the column
            assert dense[PADDLE_COLUMN::80].sum() == 8
        if kind == "frame+trail":  # the paddle is shown, standing or moving
            assert (dense[PADDLE_COLUMN::80] == 1).sum() == 8
        nonzero += len(idx)
        prev = cur
    assert nonzero > 400


def test_an_unknown_input_kind_is_refused() -> None:
    env, _ = make_training_env("FakePong-v0")
    with pytest.raises(ValueError, match="inputs must be one of diff, diff\\+paddle"):
        input_stream(env, "pixels")
    env.close()
