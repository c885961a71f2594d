"""FastAtari: the same game as gymnasium's ALE/Pong-v5, read faster, reset without reload."""

from __future__ import annotations

import numpy as np
import pytest

from pong_mp import policy
from pong_mp.envs import make_env, make_training_env
from pong_mp.frames import BinaryInputs, PaletteInputs

pytestmark = pytest.mark.ale


def _fast(**kwargs):
    from pong_mp.envs.atari import FastAtari

    return FastAtari("ALE/Pong-v5", **kwargs)


def _actions(n: int, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).choice([0, 2, 3, 4, 5], size=n)


def test_same_frames_rewards_and_endings_as_gymnasium() -> None:
    # Without sticky actions both are deterministic: the same actions give the same game.
    fast = _fast(repeat_action_probability=0.0)
    gym_env = make_env("ALE/Pong-v5", repeat_action_probability=0.0)
    obs, _ = fast.reset(seed=1)
    ref, _ = gym_env.reset(seed=1)
    assert np.array_equal(fast.binary(obs.ravel()), policy.binarize(ref))
    rewards = 0
    for action in _actions(1500):
        obs, r, term, trunc, _ = fast.step(int(action))
        ref, r_ref, term_ref, trunc_ref, _ = gym_env.step(int(action))
        assert np.array_equal(fast.binary(obs.ravel()), policy.binarize(ref))
        assert (r, term, trunc) == (r_ref, term_ref, trunc_ref)
        rewards += abs(r)
    assert rewards >= 5  # points were scored: the colours of a whole rally were compared
    fast.close()
    gym_env.close()


def test_a_reset_forgets_the_previous_game() -> None:
    env = _fast()
    env.reset(seed=3)
    first = [env.step(int(a))[:2] for a in _actions(300)]
    env.reset(seed=9)
    for a in _actions(500, seed=1):
        env.step(int(a))
    env.reset(seed=3)
    again = [env.step(int(a))[:2] for a in _actions(300)]
    assert all(
        np.array_equal(o1, o2) and r1 == r2 for (o1, r1), (o2, r2) in zip(first, again, strict=True)
    )
    env.reset(seed=4)
    other = [env.step(int(a))[0] for a in _actions(300)]
    assert any(not np.array_equal(o1, o2) for (o1, _), o2 in zip(first, other, strict=True))


def test_sticky_actions_keep_the_previous_action() -> None:
    # With probability 1 every frame keeps the previous action: the game's first, NOOP.
    stuck = _fast(repeat_action_probability=1.0)
    noop = _fast(repeat_action_probability=0.0)
    stuck.reset(seed=0)
    noop.reset(seed=0)
    for a in _actions(200):
        assert np.array_equal(stuck.step(int(a))[0], noop.step(0)[0])


def test_training_env_for_ale_is_fast_atari_unless_told_otherwise() -> None:
    from pong_mp.envs.atari import FastAtari

    env, inputs = make_training_env("ALE/Pong-v5")
    assert isinstance(env, FastAtari) and isinstance(inputs, PaletteInputs)
    env.close()
    env, inputs = make_training_env("ALE/Pong-v5", fast=False)
    assert not isinstance(env.unwrapped, FastAtari) and isinstance(inputs, BinaryInputs)
    env.close()


def test_palette_inputs_are_the_dense_frame_differences() -> None:
    env = _fast()
    inputs = PaletteInputs(env)
    obs, _ = env.reset(seed=2)
    inputs.reset(obs)
    prev = env.binary(obs.ravel()).astype(float)
    nonzero = 0
    for step, a in enumerate(_actions(600)):
        if step == 301:  # a new game, after an odd number of steps: the buffers swapped
            obs, _ = env.reset(seed=3)
            inputs.reset(obs)
            prev = env.binary(obs.ravel()).astype(float)
        obs, *_ = env.step(int(a))
        idx, vals = inputs.step(obs)
        cur = env.binary(obs.ravel()).astype(float)
        dense = np.zeros(6400)
        dense[idx] = vals
        np.testing.assert_array_equal(dense, cur - prev)
        assert vals.dtype == np.float32 and idx.dtype == np.int32
        nonzero += len(idx)
        prev = cur
    assert nonzero > 600  # the differences were not all empty
