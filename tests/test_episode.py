"""One episode: seeding, determinism and the gradient it returns."""

from __future__ import annotations

import numpy as np

from pong_mp import policy
from pong_mp.envs import make_training_env
from pong_mp.episode import EpisodeTask, episode_seed, make_tasks, play_episode

HIDDEN = 16


def _play(env_and_inputs, weights, task):
    env, inputs = env_and_inputs
    return play_episode(env, inputs, weights, 0.99, task)


def test_episode_seeds_are_a_function_of_run_seed_and_index() -> None:
    assert episode_seed(0, 5) == episode_seed(0, 5)
    seeds = {episode_seed(s, i) for s in range(3) for i in range(100)}
    assert len(seeds) == 300
    tasks = make_tasks(7, 10, 3)
    assert [t.index for t in tasks] == [10, 11, 12]
    assert tasks[1].seed == episode_seed(7, 11)


def test_same_task_same_bytes_whatever_the_env_did_before() -> None:
    weights = policy.Weights32.from_params(policy.init_params(HIDDEN, 0), HIDDEN)
    task = EpisodeTask(index=3, seed=episode_seed(1, 3))
    env_a = make_training_env("FakePong-v0", points_to_win=2)
    env_b = make_training_env("FakePong-v0", points_to_win=2)
    _play(env_b, weights, EpisodeTask(0, 123))  # env_b has a history
    a = _play(env_a, weights, task)
    b = _play(env_b, weights, task)
    assert a.grad.tobytes() == b.grad.tobytes()
    assert (a.steps, a.reward_sum, a.index) == (b.steps, b.reward_sum, 3)
    other = _play(env_a, weights, EpisodeTask(4, episode_seed(1, 4)))
    assert other.grad.tobytes() != a.grad.tobytes()


def test_result_is_a_finite_gradient_of_the_right_size() -> None:
    weights = policy.Weights32.from_params(policy.init_params(HIDDEN, 0), HIDDEN)
    result = _play(make_training_env("FakePong-v0", points_to_win=2), weights, EpisodeTask(0, 1))
    assert result.grad.shape == (policy.param_count(HIDDEN),)
    assert result.grad.dtype == np.float32
    assert np.all(np.isfinite(result.grad)) and np.any(result.grad != 0)
    assert result.steps > 10 and result.reward_sum in {-2.0, -1.0, 0.0, 1.0, 2.0}
    assert result.seconds > 0
