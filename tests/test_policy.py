"""The network: preprocessing, discounting, forward and backward passes."""

from __future__ import annotations

import numpy as np
import pytest

from pong_mp import policy
from pong_mp.envs import make_env


def test_preprocess_real_ale_frame_keeps_ball_and_paddles() -> None:
    pytest.importorskip("ale_py")
    env = make_env("ALE/Pong-v5")
    try:
        obs, _ = env.reset(seed=0)
        for _ in range(60):  # far enough into the game that the ball is in play
            obs, *_ = env.step(0)
    finally:
        env.close()
    x = policy.preprocess(obs)
    assert x.shape == (6400,) and x.dtype == np.float64
    assert set(np.unique(x)) <= {0.0, 1.0}
    grid = x.reshape(80, 80)
    red = obs[35:195:2, ::2, 0]
    # Exactly the non-background pixels survive: both paddles and the ball.
    np.testing.assert_array_equal(grid, ((red != 144) & (red != 109) & (red != 0)).astype(float))
    assert grid[:, 70:72].sum() >= 4, "agent's paddle (right) should survive"
    assert grid[:, 8:10].sum() >= 4, "opponent's paddle (left) should survive"
    assert 0 < grid.sum() < 100


def test_preprocess_fake_pong_frame() -> None:
    env = make_env("FakePong-v0")
    obs, _ = env.reset(seed=3)
    for _ in range(3):
        obs, *_ = env.step(2)
    u = env.unwrapped
    grid = policy.preprocess(obs).reshape(80, 80)
    # Paddles are 16x4 pixels: 8 kept rows in each of 2 kept columns.
    assert grid[:, 70].sum() == grid[:, 71].sum() == 8  # the agent's, on the right
    assert grid[:, 8].sum() == grid[:, 9].sum() == 8  # the opponent's, on the left
    # The ball covers the kept rows 35 + 2i and columns 2j inside its 4x2 rectangle.
    rows = [i for i in range(80) if u.ball_y <= 35 + 2 * i < u.ball_y + 4]
    cols = [j for j in range(80) if u.ball_x <= 2 * j < u.ball_x + 2]
    assert len(rows) == 2 and len(cols) == 1
    assert grid[np.ix_(rows, cols)].sum() == 2
    assert grid.sum() == 4 * 8 + 2


def test_preprocess_erases_the_background_values() -> None:
    frame = np.full((210, 160, 3), 144, dtype=np.uint8)
    frame[100:110, 50:60, 0] = 109
    frame[120, 30, 0] = 0
    assert policy.preprocess(frame).sum() == 0
    frame[36, 2, 0] = 7
    assert policy.preprocess(frame).reshape(80, 80)[0, 1] == 0.0  # odd row: skipped
    frame[35, 2, 0] = 7
    assert policy.preprocess(frame).reshape(80, 80)[0, 1] == 1.0


def test_discount_restarts_at_each_point() -> None:
    r = np.array([0, 0, 1, 0, -1, 0, 0], dtype=float)
    g = 0.5
    expected = [0.25, 0.5, 1.0, -0.5, -1.0, 0.0, 0.0]
    np.testing.assert_allclose(policy.discount_rewards(r, g), expected)


def test_discount_without_points_is_zero_and_gamma_one_sums() -> None:
    np.testing.assert_array_equal(policy.discount_rewards(np.zeros(4), 0.99), np.zeros(4))
    np.testing.assert_allclose(policy.discount_rewards(np.array([0.0, 0, 1]), 1.0), [1, 1, 1])


def test_standardize() -> None:
    a = policy.standardize(np.array([1.0, 2.0, 3.0, 6.0]))
    assert abs(a.mean()) < 1e-12 and abs(a.std() - 1) < 1e-12
    np.testing.assert_array_equal(policy.standardize(np.array([2.0, 2.0])), [0.0, 0.0])


def test_init_is_xavier_and_a_function_of_the_seed() -> None:
    shape = policy.NetShape(50)
    a, b = policy.init_params(shape, 1), policy.init_params(shape, 1)
    assert a.tobytes() == b.tobytes() and a.tobytes() != policy.init_params(shape, 2).tobytes()
    w1t, w2 = policy.split(a, shape)  # W1 is kept transposed: one row per input pixel
    assert w1t.shape == (6400, 50) and w2.shape == (50,)
    assert abs(w1t.std() - 1 / np.sqrt(6400)) < 0.05 / np.sqrt(6400)
    assert abs(w2.std() - 1 / np.sqrt(50)) < 0.3 / np.sqrt(50)
    assert np.shares_memory(w1t, a)
    np.testing.assert_array_equal(policy.join(w1t.T, w2), a)


def test_widened_units_change_nothing_until_they_learn() -> None:
    rng = np.random.default_rng(1)
    narrow, wider = policy.NetShape(6), policy.NetShape(10)
    params = policy.with_value_head(policy.init_params(narrow, 3), narrow, True)
    params[-7:] = rng.standard_normal(7)  # a learned value head: 6 weights and a bias
    columns = rng.standard_normal((6400, 4))
    wide = policy.widened(params, narrow, 10, columns)
    assert wide.shape == (policy.param_count(wider, value=True),)
    w1t, w2 = policy.split(wide, wider)
    np.testing.assert_array_equal(w1t[:, 6:], columns)
    assert not w2[6:].any() and not policy.value_head(wide, wider)[6:10].any()
    x = rng.choice([-1.0, 0.0, 1.0], size=6400, p=[0.02, 0.96, 0.02])
    p_old, h_old = policy.forward(*policy.split(params, narrow), x)
    p_new, h_new = policy.forward(w1t, w2, x)
    assert p_new == pytest.approx(p_old, rel=1e-12) and h_new[6:].any()  # the new units see x
    np.testing.assert_allclose(h_new[:6], h_old, rtol=1e-12)  # BLAS may sum in another order
    old, new = policy.value_head(params, narrow), policy.value_head(wide, wider)
    assert h_new @ new[:-1] + new[-1] == pytest.approx(h_old @ old[:-1] + old[-1], rel=1e-12)
    zeros = policy.widened(params, narrow, 10)  # the optimizer's state: zero for the new units
    assert not policy.split(zeros, wider)[0][:, 6:].any()
    without_head = params[: policy.param_count(narrow)]
    assert policy.widened(without_head, narrow, 10).shape == (policy.param_count(wider),)
    with pytest.raises(ValueError, match="cannot narrow 6 hidden units to 4"):
        policy.widened(params, narrow, 4)


def test_a_conv_policy_widens_with_its_filters_kept() -> None:
    rng = np.random.default_rng(2)
    narrow, wider = policy.NetShape(6, 3), policy.NetShape(10, 3)
    params = policy.with_value_head(policy.init_params(narrow, 3), narrow, True)
    params[-policy.kernel_count(narrow) - 7 : -policy.kernel_count(narrow)] = (
        rng.standard_normal(7)  # a learned value head, before the filters
    )
    columns = rng.standard_normal((policy.input_rows(narrow), 4))
    wide = policy.widened(params, narrow, 10, columns)
    assert wide.shape == (policy.param_count(wider, True),)
    kernel = policy.conv_kernel(wide, wider)
    np.testing.assert_array_equal(kernel, policy.conv_kernel(params, narrow))
    w1t, w2 = policy.split(wide, wider)
    np.testing.assert_array_equal(w1t[:, 6:], columns)
    assert not w2[6:].any() and not policy.value_head(wide, wider)[6:10].any()
    x = rng.choice([-1.0, 0.0, 1.0], size=6400, p=[0.02, 0.96, 0.02])
    features = policy.conv_features(kernel, x)
    p_old, h_old = policy.forward(*policy.split(params, narrow), features)
    p_new, h_new = policy.forward(w1t, w2, features)
    assert p_new == pytest.approx(p_old, rel=1e-12)
    np.testing.assert_allclose(h_new[:6], h_old, rtol=1e-12)
    old, new = policy.value_head(params, narrow), policy.value_head(wide, wider)
    assert h_new @ new[:-1] + new[-1] == pytest.approx(h_old @ old[:-1] + old[-1], rel=1e-12)


def test_backward_matches_finite_differences() -> None:
    rng = np.random.default_rng(0)
    hidden, steps = 6, 5
    shape = policy.NetShape(hidden)
    params = policy.init_params(shape, 7) * 5
    xs = rng.choice([-1.0, 0.0, 1.0], size=(steps, 6400), p=[0.01, 0.98, 0.01])
    adv = rng.standard_normal(steps)
    ys = rng.integers(0, 2, steps).astype(float)

    def objective(p: np.ndarray) -> float:
        # sum_t adv_t * log pi(a_t | x_t): what the gradient of an episode ascends.
        w1, w2 = policy.split(p, shape)
        total = 0.0
        for x, y, a in zip(xs, ys, adv, strict=True):
            prob, _ = policy.forward(w1, w2, x)
            total += a * np.log(prob if y else 1 - prob)
        return total

    w1, w2 = policy.split(params, shape)
    hs, dlogps = [], []
    for x, y in zip(xs, ys, strict=True):
        prob, h = policy.forward(w1, w2, x)
        hs.append(h)
        dlogps.append(y - prob)
    grad = policy.backward(w2, xs, np.vstack(hs), np.array(dlogps) * adv, np.empty_like(params))
    # Check every W2 entry and the W1 entries that touch non-zero inputs (W1 is stored
    # transposed: the weight from pixel c to unit r sits at c * hidden + r).
    active_cols = np.flatnonzero(np.abs(xs).sum(axis=0))[:6]
    idx = [hidden * 6400 + k for k in range(hidden)]
    idx += [c * hidden + r for r in range(hidden) for c in active_cols]
    eps = 1e-6
    for i in idx:
        up, down = params.copy(), params.copy()
        up[i] += eps
        down[i] -= eps
        numeric = (objective(up) - objective(down)) / (2 * eps)
        assert grad[i] == pytest.approx(numeric, rel=1e-4, abs=1e-7), i
    # Inputs that are always zero get no gradient.
    zero_col = int(np.flatnonzero(np.abs(xs).sum(axis=0) == 0)[0])
    assert np.all(grad[zero_col * hidden : (zero_col + 1) * hidden] == 0.0)


def test_the_entropy_and_its_slope_by_the_logit() -> None:
    def entropy(logit: float) -> float:
        p = 1 / (1 + np.exp(-logit))
        return -p * np.log(p) - (1 - p) * np.log(1 - p)

    for logit in (-3.0, -0.2, 0.0, 1.5):
        p = 1 / (1 + np.exp(-logit))
        numeric = (entropy(logit + 1e-6) - entropy(logit - 1e-6)) / 2e-6
        assert policy.entropy(p) == pytest.approx(entropy(logit), rel=1e-12)
        assert policy.entropy_slope(p) == pytest.approx(numeric, rel=1e-6, abs=1e-9)
    assert policy.entropy_slope(0.0) == policy.entropy_slope(1.0) == 0.0
    assert policy.entropy(0.5) == pytest.approx(np.log(2), rel=1e-15)
    assert policy.entropy(0.2) == pytest.approx(-0.2 * np.log(0.2) - 0.8 * np.log(0.8))
    assert policy.entropy(0.0) == policy.entropy(1.0) == 0.0


@pytest.mark.parametrize("logit", [-30.0, -2.5, -0.3, 0.0, 0.4, 3.0, 30.0])
def test_the_probability_of_up_matches_the_log_probs(logit: float) -> None:
    from pong_mp import sparse

    p_up = policy.logistic(logit)
    assert np.exp(sparse.log_prob(logit, 1)) == pytest.approx(p_up, abs=1e-12)
    assert np.exp(sparse.log_prob(logit, 0)) == pytest.approx(1 - p_up, abs=1e-12)
    with pytest.raises(ValueError, match="no action 2"):
        sparse.log_prob(logit, 2)


def test_actions_are_drawn_with_their_probability_and_greedy_takes_the_likelier() -> None:
    # UP below P(UP) and DOWN above it, as Karpathy's policy draws.
    p_up = policy.logistic(0.3)
    assert policy.choose_action(p_up, lambda: p_up - 1e-12, False) == policy.UP
    assert policy.choose_action(p_up, lambda: 0.999999, False) == policy.DOWN
    never = lambda: pytest.fail("a greedy choice draws nothing")  # noqa: E731
    assert policy.choose_action(0.5, never, greedy=True) == policy.UP
    assert policy.choose_action(0.4999, never, greedy=True) == policy.DOWN
