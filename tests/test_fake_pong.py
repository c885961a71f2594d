"""FakePong: ALE's interface, scoring, determinism, and an opponent that can be beaten."""

from __future__ import annotations

import numpy as np
import pytest

from pong_mp.envs import fake_pong as fp
from pong_mp.envs import make_env
from tests.fault_envs import CRASHING_PONG


def _play(env, policy, seed: int, max_steps: int = 100_000):
    obs, _ = env.reset(seed=seed)
    frames, rewards = [obs], []
    rng = np.random.default_rng(seed)
    for _ in range(max_steps):
        obs, r, terminated, truncated, _ = env.step(policy(env.unwrapped, rng))
        frames.append(obs)
        rewards.append(r)
        if terminated or truncated:
            break
    return frames, rewards, terminated


def _random(u, rng) -> int:
    return int(rng.choice([2, 3]))


def _tracker(u, rng) -> int:
    return 2 if u.ball_y + fp.BALL_H / 2 < u.agent_y + fp.PADDLE_H / 2 else 3


def test_interface_matches_ale_pong() -> None:
    env = make_env("FakePong-v0")
    assert env.action_space.n == 6
    assert env.observation_space.shape == (210, 160, 3)
    obs, info = env.reset(seed=0)
    assert obs.shape == (210, 160, 3) and obs.dtype == np.uint8 and info == {}
    assert obs[100, 80, 0] == 144 or obs[100, 80, 0] == 236  # background (or the ball)
    # The colours that reach the preprocessor: background 144, paddles 92/213, ball 236.
    assert set(np.unique(obs[35:195:2, ::2, 0])) == {92, 144, 213, 236}


def test_up_and_down_move_the_agent_paddle() -> None:
    env = make_env("FakePong-v0")
    env.reset(seed=0)
    y0 = env.unwrapped.agent_y
    env.step(2)
    assert env.unwrapped.agent_y == y0 - fp.PADDLE_SPEED
    env.step(3)
    env.step(3)
    assert env.unwrapped.agent_y == y0 + fp.PADDLE_SPEED
    env.step(0)
    assert env.unwrapped.agent_y == y0 + fp.PADDLE_SPEED


@pytest.mark.parametrize("points", [1, 3, 21])
def test_points_and_the_end_of_a_game(points: int) -> None:
    env = make_env("FakePong-v0", points_to_win=points)
    _, rewards, terminated = _play(env, _random, seed=1)
    assert terminated
    assert set(rewards) <= {-1.0, 0.0, 1.0}
    won, lost = rewards.count(1.0), rewards.count(-1.0)
    assert max(won, lost) == points and min(won, lost) < points
    assert rewards[-1] != 0  # the last step scores the deciding point


def test_same_seed_same_game() -> None:
    a, b, c = (make_env("FakePong-v0", points_to_win=3) for _ in range(3))
    fa, ra, _ = _play(a, _random, seed=5)
    fb, rb, _ = _play(b, _random, seed=5)
    fc, rc, _ = _play(c, _random, seed=6)
    assert ra == rb and all(np.array_equal(x, y) for x, y in zip(fa, fb, strict=True))
    assert (
        len(fa) != len(fc)
        or ra != rc
        or any(not np.array_equal(x, y) for x, y in zip(fa, fc, strict=False))
    )


def test_reset_with_a_seed_forgets_the_previous_game() -> None:
    env = make_env("FakePong-v0", points_to_win=2)
    fresh = make_env("FakePong-v0", points_to_win=2)
    _play(env, _random, seed=11)
    f1, r1, _ = _play(env, _random, seed=3)
    f2, r2, _ = _play(fresh, _random, seed=3)
    assert r1 == r2 and np.array_equal(f1[-1], f2[-1])


def test_frames_are_copies_and_exact() -> None:
    env = make_env("FakePong-v0")
    frames, _, _ = _play(env, _random, seed=2, max_steps=400)
    assert frames[0] is not frames[1] and not np.shares_memory(frames[-2], frames[-1])
    # Redrawing only what moved must give the same picture as drawing from scratch.
    env.reset(seed=2)
    rng = np.random.default_rng(2)
    for _ in range(400):
        obs, *_ = env.step(_random(env.unwrapped, rng))
        u = env.unwrapped
        ref = np.empty_like(obs)
        ref[:] = fp.BACKGROUND
        ref[24 : fp.TOP] = fp.WALL
        ref[fp.BOTTOM :] = fp.WALL
        ref[u.agent_y : u.agent_y + 16, fp.AGENT_X : fp.AGENT_X + 4] = fp.AGENT
        ref[u.opponent_y : u.opponent_y + 16, fp.OPPONENT_X : fp.OPPONENT_X + 4] = fp.OPPONENT
        x0, x1 = max(u.ball_x, 0), min(u.ball_x + 2, 160)
        if x0 < x1:
            ref[u.ball_y : u.ball_y + 4, x0:x1] = fp.BALL
        np.testing.assert_array_equal(obs, ref)


def test_the_opponent_can_be_beaten_but_not_by_chance() -> None:
    env = make_env("FakePong-v0")
    random_scores = [sum(_play(env, _random, seed=s)[1]) for s in range(5)]
    tracker_scores = [sum(_play(env, _tracker, seed=s)[1]) for s in range(5)]
    assert np.mean(random_scores) < -8, random_scores
    assert np.mean(tracker_scores) > 8, tracker_scores


def test_crashing_pong_fails_where_told() -> None:
    env = make_env(CRASHING_PONG, crash_episodes=(1,), crash_at_step=3)
    _play(env, _random, seed=0, max_steps=10)  # episode 0: fine
    env.reset(seed=0)
    env.step(2)
    env.step(2)
    with pytest.raises(RuntimeError, match="planned failure in episode 1"):
        env.step(2)
    _play(env, _random, seed=0, max_steps=10)  # episode 2: fine again
