"""One episode (episode.py) and its gradient (gradient.py): seeding, determinism, and whole
episodes' gradients against the dense reference."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest

from pong_mp import policy
from pong_mp.envs import make_training_env
from pong_mp.episode import EpisodeTask, episode_seed, make_tasks, run_episode
from pong_mp.gradient import EpisodeGradient, Moments
from pong_mp.pg import play_episode
from tests.fault_envs import CRASHING_PONG

HIDDEN = 16
SHAPE = policy.NetShape(HIDDEN)


def _play(env_and_inputs, weights, task, work=None):
    env, inputs = env_and_inputs
    return play_episode(env, inputs, weights, 0.99, task, work=work)


def test_episode_seeds_are_a_function_of_run_seed_and_index() -> None:
    assert episode_seed(0, 5) == episode_seed(0, 5)
    seeds = {episode_seed(s, i) for s in range(3) for i in range(100)}
    assert len(seeds) == 300
    tasks = make_tasks(7, 10, 3)
    assert [t.index for t in tasks] == [10, 11, 12]
    assert tasks[1].seed == episode_seed(7, 11)


def test_same_task_same_bytes_whatever_the_env_did_before() -> None:
    weights = policy.Weights32.from_params(policy.init_params(SHAPE, 0), SHAPE)
    task = EpisodeTask(index=3, seed=episode_seed(1, 3))
    env_a = make_training_env("FakePong-v0", points_to_win=2)
    env_b = make_training_env("FakePong-v0", points_to_win=2)
    _play(env_b, weights, EpisodeTask(0, 123))  # env_b has a history
    a = _play(env_a, weights, task)
    b = _play(env_b, weights, task)
    assert a.grad.tobytes() == b.grad.tobytes()
    assert a.stats.index == 3
    assert (a.stats.steps, a.stats.reward_sum) == (b.stats.steps, b.stats.reward_sum)
    other = _play(env_a, weights, EpisodeTask(4, episode_seed(1, 4)))
    assert other.grad.tobytes() != a.grad.tobytes()


def test_result_is_a_finite_gradient_of_the_right_size() -> None:
    weights = policy.Weights32.from_params(policy.init_params(SHAPE, 0), SHAPE)
    result = _play(make_training_env("FakePong-v0", points_to_win=2), weights, EpisodeTask(0, 1))
    assert result.grad.shape == (policy.param_count(SHAPE),)
    assert result.grad.dtype == np.float32
    assert np.all(np.isfinite(result.grad)) and np.any(result.grad != 0)
    assert result.stats.steps > 10 and result.stats.reward_sum in {-2.0, -1.0, 0.0, 1.0, 2.0}
    assert result.stats.seconds > 0


class _Changed(gym.Wrapper):
    """FakePong whose steps' results go through `change(obs, reward, terminated, truncated,
    info)`."""

    def __init__(self, env: gym.Env, change) -> None:
        super().__init__(env)
        self.change = change

    def step(self, action):
        return self.change(*self.env.step(action))


def _played(change) -> list[tuple]:
    # (action, P(UP), reward) of each step of an episode of FakePong changed by `change`.
    env, inputs = make_training_env("FakePong-v0", points_to_win=2)
    steps: list[tuple] = []
    run_episode(_Changed(env, change), inputs, 5, lambda i, v: 0.5, lambda *a: steps.append(a))
    return steps


def _steps_with_flags(as_flag) -> int:
    return len(_played(lambda o, r, t, u, i: (o, r, as_flag(t), u, i)))


def test_an_episode_ends_on_flags_of_any_bool_or_int_kind() -> None:
    steps = _steps_with_flags(bool)
    assert steps > 10
    assert _steps_with_flags(np.bool_) == _steps_with_flags(int) == steps


@pytest.mark.parametrize(
    ("as_flag", "shown"),
    [
        (lambda t: None, "None"),  # would never end the game
        (lambda t: str(t), "'False'"),  # would end it at the first step
        (lambda t: np.array([t, t]), "array([False, False])"),
    ],
)
def test_a_flag_that_is_not_a_bool_is_refused(as_flag, shown: str) -> None:
    with pytest.raises(TypeError) as caught:
        _steps_with_flags(as_flag)
    assert str(caught.value) == f"the env gave {shown} for terminated, not a bool"


def _rewards_seen(as_reward) -> list:
    return [step[2] for step in _played(lambda o, r, t, u, i: (o, as_reward(r), t, u, i))]


@pytest.mark.parametrize("kind", [np.float32, np.float64, np.int64, np.array, int])
def test_a_reward_of_any_number_kind_is_a_python_float(kind) -> None:
    # A wrapper's numpy float32 reached the metrics' JSON, which cannot say it, and play's
    # --json report: tracebacks.
    seen = _rewards_seen(lambda r: kind(r))
    assert {type(r) for r in seen} == {float}
    assert seen == _rewards_seen(float)


@pytest.mark.parametrize(
    ("as_reward", "shown"), [(lambda r: str(r), "'0.0'"), (lambda r: np.array([r]), "array([0.])")]
)
def test_a_reward_that_is_not_a_number_is_refused(as_reward, shown: str) -> None:
    with pytest.raises(TypeError) as caught:
        _rewards_seen(as_reward)
    assert str(caught.value) == f"the env gave {shown} for a reward, not a number"


class _Recording(EpisodeGradient):
    """Keeps every step it is given, for comparison with the dense reference."""

    def __init__(
        self, hidden: int, block: int, entries: int, entropy_bonus: float = 0.0
    ) -> None:
        super().__init__(hidden, block, entropy_bonus)
        self.ENTRIES = entries  # the buffers stay larger: only the fold's trigger moves
        self.log: list[tuple[np.ndarray, np.ndarray, float, float]] = []
        self.most_buffered = 0

    def forward(self, idx, vals) -> float:
        self.log.append((idx.copy(), vals.copy(), 0.0, 0.0))
        return super().forward(idx, vals)

    def add(self, dlogp, reward) -> None:
        self.log[-1] = (*self.log[-1][:2], dlogp, reward)
        super().add(dlogp, reward)
        self.most_buffered = max(self.most_buffered, self.buffered)


def _dense_gradient(
    log, params: np.ndarray, hidden: int, gamma: float, entropy_bonus: float = 0.0
) -> np.ndarray:
    """Karpathy's computation of an episode's gradient, dense and in float64; with an
    entropy bonus beta, plus beta times the gradient of the sum of the steps' entropies."""
    xs = np.zeros((len(log), policy.INPUT_SIZE))
    for t, (idx, vals, _, _) in enumerate(log):
        xs[t, idx] = vals
    dlogps = np.array([step[2] for step in log])
    rewards = np.array([step[3] for step in log])
    advantages = policy.standardize(policy.discount_rewards(rewards, gamma))
    w1t, w2 = policy.split(params.astype(np.float32).astype(np.float64), policy.NetShape(hidden))
    steps = [policy.forward(w1t, w2, x) for x in xs]
    hs = np.vstack([h for _, h in steps])
    # H = -p log p - (1-p) log(1-p); dH/dlogit = -logit p (1-p), logit = log(p / (1-p))
    ps = np.array([p for p, _ in steps])
    slopes = -np.log(ps / (1 - ps)) * ps * (1 - ps)
    coefficients = dlogps * advantages + entropy_bonus * slopes
    return policy.backward(w2, xs, hs, coefficients, np.empty_like(params))


@pytest.mark.parametrize(
    ("block", "entries", "max_steps"),
    [
        (1024, EpisodeGradient.ENTRIES, 27_000),  # rallies fit in a block
        (16, EpisodeGradient.ENTRIES, 27_000),  # rallies span several blocks: the carry
        (7, EpisodeGradient.ENTRIES, 300),  # ... and the episode is cut off mid-rally
        (1024, 40, 27_000),  # folds when the buffered inputs fill up, not the steps
    ],
)
def test_episode_gradient_matches_the_dense_reference(
    block: int, entries: int, max_steps: int
) -> None:
    params = policy.init_params(SHAPE, 2) * 3  # larger weights: many active units
    weights = policy.Weights32.from_params(params, SHAPE)
    env = make_training_env("FakePong-v0", points_to_win=3, max_steps=max_steps)
    work = _Recording(HIDDEN, block, entries)
    result = _play(env, weights, EpisodeTask(0, 5), work)
    rewards = [step[3] for step in work.log]
    assert result.stats.steps == len(work.log) and result.stats.reward_sum == sum(rewards)
    rally = np.diff(np.flatnonzero(np.r_[1.0, rewards])).max()
    assert rally > block or block == 1024
    assert work.most_buffered < min(block, entries)  # a FakePong step has >= 1 entry
    dense = _dense_gradient(work.log, params, HIDDEN, 0.99)
    scale = np.abs(dense).max()
    assert scale > 0
    np.testing.assert_allclose(result.grad, dense, rtol=0, atol=scale * 1e-5)


@pytest.mark.parametrize("block", [1024, 16, 7])
def test_an_entropy_bonus_adds_its_gradient_to_the_dense_reference(block: int) -> None:
    params = policy.init_params(SHAPE, 2) * 3
    weights = policy.Weights32.from_params(params, SHAPE)
    env = make_training_env("FakePong-v0", points_to_win=3, max_steps=300 if block == 7 else 27_000)
    work = _Recording(HIDDEN, block, EpisodeGradient.ENTRIES, entropy_bonus=0.3)
    result = _play(env, weights, EpisodeTask(0, 5), work)
    dense = _dense_gradient(work.log, params, HIDDEN, 0.99, entropy_bonus=0.3)
    scale = np.abs(dense).max()
    np.testing.assert_allclose(result.grad, dense, rtol=0, atol=scale * 1e-5)
    without = _dense_gradient(work.log, params, HIDDEN, 0.99)
    assert np.abs(without - dense).max() > scale * 1e-2  # the bonus changes the gradient
    # The episode's entropy, reported with or without a bonus, is that of its steps' P(UP).
    w1t, w2 = policy.split(params.astype(np.float32).astype(np.float64), SHAPE)
    ps = []
    for idx, vals, _, _ in work.log:
        x = np.zeros(policy.INPUT_SIZE)
        x[idx] = vals
        ps.append(policy.forward(w1t, w2, x)[0])
    ps = np.array(ps)
    entropy = -(ps * np.log(ps) + (1 - ps) * np.log(1 - ps)).sum()
    assert result.stats.entropy == pytest.approx(entropy, rel=1e-5)
    assert 0 < result.stats.entropy < np.log(2) * result.stats.steps


def test_a_reused_workspace_gives_the_same_bytes_as_a_new_one() -> None:
    weights = policy.Weights32.from_params(policy.init_params(SHAPE, 0), SHAPE)
    env = make_training_env("FakePong-v0", points_to_win=2)
    work = EpisodeGradient(HIDDEN)
    _play(env, weights, EpisodeTask(0, 11), work)  # leaves its sums in the workspace
    reused = _play(env, weights, EpisodeTask(1, 12), work)
    fresh = _play(env, weights, EpisodeTask(1, 12), EpisodeGradient(HIDDEN))
    assert reused.grad.tobytes() == fresh.grad.tobytes()


@pytest.mark.parametrize("entropy_bonus", [0.0, 0.5])
def test_a_workspace_left_by_a_failed_episode_gives_the_same_bytes_as_a_new_one(
    entropy_bonus: float,
) -> None:
    params = policy.init_params(SHAPE, 0)
    weights = policy.Weights32.from_params(params, SHAPE)
    crashing = make_training_env(
        CRASHING_PONG, crash_episodes=(0,), crash_at_step=60, points_to_win=2
    )
    # small blocks: folds happen before the failure
    work = EpisodeGradient(HIDDEN, block=8, entropy_bonus=entropy_bonus)
    with pytest.raises(RuntimeError, match="planned failure"):
        _play(crashing, weights, EpisodeTask(0, 11), work)
    assert work.steps == 59 and work.buffered < 8
    reused = _play(crashing, weights, EpisodeTask(1, 12), work)
    env = make_training_env("FakePong-v0", points_to_win=2)
    fresh = _play(
        env, weights, EpisodeTask(1, 12),
        EpisodeGradient(HIDDEN, 8, entropy_bonus=entropy_bonus),
    )
    assert reused.grad.tobytes() == fresh.grad.tobytes()
    again = _play(env, weights, EpisodeTask(1, 12), work)  # after a finished episode
    assert again.grad.tobytes() == fresh.grad.tobytes()


def test_moments_merge_chunks_like_numpy() -> None:
    rng = np.random.default_rng(0)
    values = rng.standard_normal(1000) * 3 + 1
    moments = Moments()
    for chunk in np.split(values, [10, 11, 500]):
        moments.add(chunk)
    moments.add_zeros(40)
    everything = np.r_[values, np.zeros(40)]
    assert moments.count == 1040
    assert moments.mean == pytest.approx(everything.mean(), rel=1e-12)
    assert 1 / moments.standardizing_scale == pytest.approx(everything.std(), rel=1e-12)
