"""Input streams: the sparse frame differences are exactly the dense ones."""

from __future__ import annotations

import numpy as np

from pong_mp import policy
from pong_mp.envs import make_training_env
from pong_mp.frames import BinaryInputs


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
        assert len(np.unique(idx)) == len(idx)
        nonzero += len(idx)
        prev = cur
    assert nonzero > 400
