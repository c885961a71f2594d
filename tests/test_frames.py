"""Input streams: the sparse frame differences are exactly the dense ones."""

from __future__ import annotations

import re

import numpy as np
import pytest

from pong_mp import policy
from pong_mp.envs import make_training_env
from pong_mp.frames import FRAME_SHAPE, BinaryInputs


@pytest.mark.parametrize("view", [np.asarray, np.ma.masked_array])
def test_binary_inputs_are_the_dense_frame_differences(view) -> None:
    # A masked array (some envs' frames) met the compiled loops as float64: a buffer error.
    env, inputs = make_training_env("FakePong-v0", points_to_win=2)
    assert isinstance(inputs, BinaryInputs)
    obs, _ = env.reset(seed=0)
    inputs.reset(view(obs))
    prev = policy.preprocess(obs)
    rng = np.random.default_rng(0)
    nonzero = 0
    for _ in range(400):
        obs, *_ = env.step(int(rng.choice([2, 3])))
        idx, vals = inputs.step(view(obs))
        assert vals.dtype == np.float32
        cur = policy.preprocess(obs)
        dense = np.zeros(6400)
        dense[idx] = vals
        np.testing.assert_array_equal(dense, cur - prev)
        assert len(np.unique(idx)) == len(idx)
        nonzero += len(idx)
        prev = cur
    assert nonzero > 400


@pytest.mark.parametrize(
    ("shape", "dtype"),
    [((250, 160, 3), "uint8"), ((196, 160, 3), "uint8"), ((210, 162, 3), "uint8"),
     ((210, 160), "uint8"), (FRAME_SHAPE, "float32"), (FRAME_SHAPE, "int64")],
)  # fmt: skip
def test_a_frame_of_another_shape_or_type_is_refused_not_cropped(
    shape: tuple[int, ...], dtype: str
) -> None:
    # The crop takes rows 35-195 of every other row and column of any frame big enough, and
    # compares any numbers with the erased colours: frames taller or wider than Pong's, or
    # of floats (0 to 1), trained on the wrong pixels without a word.
    expected = re.escape(f"gave a {dtype} array of shape {shape} for a frame, not a uint8 array")
    inputs = BinaryInputs()
    with pytest.raises(ValueError, match=expected):
        inputs.reset(np.zeros(shape, dtype))
    inputs.reset(np.zeros(FRAME_SHAPE, np.uint8))
    with pytest.raises(ValueError, match=expected):
        inputs.step(np.zeros(shape, dtype))
    with pytest.raises(ValueError, match="the env gave None for a frame, not a uint8 array"):
        inputs.step(None)
