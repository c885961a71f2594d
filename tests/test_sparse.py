"""The compiled sparse loops against the dense float64 reference of policy.py."""

from __future__ import annotations

import itertools
import os
import subprocess
import sys

import numpy as np
import pytest

from pong_mp import policy, sparse


def _sparse_episode(steps: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Random sparse +-1 inputs like frame differences, and advantage-weighted dlogps."""
    rng = np.random.default_rng(seed)
    xs = np.zeros((steps, policy.INPUT_SIZE))
    for t in range(steps):
        on = rng.choice(policy.INPUT_SIZE, size=rng.integers(0, 40), replace=False)
        xs[t, on] = rng.choice([-1.0, 1.0], size=len(on))
    return xs, rng.standard_normal(steps)


def _csr(xs: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The rows of `xs` as (int32 indices, float32 values, int64 row starts)."""
    rows = [np.flatnonzero(x).astype(np.int32) for x in xs]
    indptr = np.zeros(len(xs) + 1, dtype=np.int64)
    np.cumsum([len(r) for r in rows], out=indptr[1:])
    idx = np.concatenate(rows)
    vals = np.concatenate([x[r] for x, r in zip(xs, rows, strict=True)]).astype(np.float32)
    return idx, vals, indptr


def test_forward_matches_the_dense_reference() -> None:
    shape = policy.NetShape(50)
    params = policy.init_params(shape, 3) * 3  # larger weights: some units are cut by the relu
    w1t, w2 = policy.split(params, shape)
    weights = policy.Weights32.from_params(params, shape)
    xs, _ = _sparse_episode(200, 1)
    h = np.empty(50, dtype=np.float32)
    cut = 0
    for x in xs:
        idx = np.flatnonzero(x).astype(np.int32)
        p_up = sparse.forward(weights.w1t, weights.w2, idx, x[idx].astype(np.float32), h)
        p_dense, h_dense = policy.forward(w1t, w2, x)
        assert p_up == pytest.approx(p_dense, abs=1e-6)
        np.testing.assert_allclose(h, h_dense, rtol=1e-5, atol=1e-5)
        cut += np.count_nonzero(h_dense == 0)
    assert cut > 0
    empty = np.zeros(0, dtype=np.int32)
    assert sparse.forward(weights.w1t, weights.w2, empty, empty.astype(np.float32), h) == 0.5
    assert not h.any()


def test_accumulate_matches_the_dense_reference() -> None:
    hidden = 24
    shape = policy.NetShape(hidden)
    params = policy.init_params(shape, 5) * 4  # larger weights: many active units
    w1t, w2 = policy.split(params, shape)
    weights = policy.Weights32.from_params(params, shape)
    xs, dlogps = _sparse_episode(3000, 2)
    hs = np.vstack([policy.forward(w1t, w2, x)[1] for x in xs])
    dense = policy.backward(w2, xs, hs, dlogps, np.empty_like(params))
    # Two weightings at once (dlogps and -2 dlogps), in uneven chunks as an episode's come.
    outs = [np.zeros_like(params), np.zeros_like(params)]
    touched = np.zeros(policy.INPUT_SIZE, dtype=np.uint8)
    for a, b in itertools.pairwise([0, 1024, 2048, 2900, 3000]):
        idx, vals, indptr = _csr(xs[a:b])
        chunk_hs = np.zeros((1024, hidden), dtype=np.float32)  # a buffer longer than the chunk
        for t in range(b - a):
            sparse.forward(weights.w1t, weights.w2, idx[indptr[t] : indptr[t + 1]],
                           vals[indptr[t] : indptr[t + 1]], chunk_hs[t])
        sparse.accumulate(idx, vals, indptr, chunk_hs, weights.w2, b - a, dlogps[a:b],
                          -2 * dlogps[a:b], outs[0], outs[1], touched)
    np.testing.assert_array_equal(touched, np.any(xs != 0, axis=0))  # 0/1 == False/True
    scale = np.abs(dense).max()
    assert scale > 0 and np.count_nonzero(dense) > len(dense) // 4
    np.testing.assert_allclose(outs[0], dense, rtol=0, atol=scale * 1e-5)
    np.testing.assert_allclose(outs[1], -2 * dense, rtol=0, atol=scale * 2e-5)


def test_finish_writes_every_row_and_clears_the_sums() -> None:
    hidden = 3
    size = policy.param_count(policy.NetShape(hidden))
    rng = np.random.default_rng(0)
    touched = np.zeros(policy.INPUT_SIZE, dtype=np.uint8)
    touched[[0, 17, 6399]] = 1
    rows = np.r_[np.flatnonzero(touched), policy.INPUT_SIZE]  # and W2, always
    a, b = np.zeros(size), np.zeros(size)
    for acc in (a, b):
        acc.reshape(-1, hidden)[rows] = rng.standard_normal((len(rows), hidden))
    want = np.zeros(size, dtype=np.float32)
    want.reshape(-1, hidden)[rows] = (a - 0.5 * b).reshape(-1, hidden)[rows] * 2.0
    out = np.full(size, np.nan, dtype=np.float32)  # last episode's gradient: all overwritten
    sparse.finish(a, b, touched, 0.5, 2.0, out)
    np.testing.assert_array_equal(out, want)
    assert not a.any() and not b.any() and not touched.any()


def test_palette_diff_finds_changed_colours_and_stops_at_unseen_pairs() -> None:
    change = np.full((256, 256), sparse.UNSEEN, dtype=np.int8)
    change[1, 2], change[2, 1] = 1, -1
    change[1, 3] = change[3, 1] = 0  # both colours erased
    prev = np.ones(64, dtype=np.uint8)
    cur = prev.copy()
    cur[[5, 6, 40, 63]] = [2, 3, 2, 2]
    idx, vals = np.empty(64, dtype=np.int32), np.empty(64, dtype=np.float32)
    n = sparse.palette_diff(cur, prev, change, idx, vals)
    assert (idx[:n].tolist(), vals[:n].tolist()) == ([5, 40, 63], [1.0, 1.0, 1.0])
    assert sparse.palette_diff(prev, cur, change, idx, vals) == 3
    assert vals[:3].tolist() == [-1.0, -1.0, -1.0]
    cur[9] = 7  # 1 -> 7 was never met
    assert sparse.palette_diff(cur, prev, change, idx, vals) == -1


def test_bad_arrays_raise_instead_of_reading_out_of_bounds() -> None:
    shape = policy.NetShape(4)
    weights = policy.Weights32.from_params(policy.init_params(shape, 0), shape)
    h = np.empty(4, dtype=np.float32)
    one = np.ones(1, dtype=np.float32)
    with pytest.raises(IndexError):
        sparse.forward(weights.w1t, weights.w2, np.array([6400], dtype=np.int32), one, h)
    with pytest.raises(ValueError):
        sparse.forward(weights.w1t, weights.w2, np.array([0], dtype=np.int32), one, h[:3])
    size = policy.param_count(shape)
    sums = np.zeros(size), np.zeros(size)
    touched = np.zeros(policy.INPUT_SIZE, dtype=np.uint8)
    hs = np.zeros((2, 4), dtype=np.float32)
    coef = np.ones(2)
    with pytest.raises(IndexError):  # a pixel index past W1
        sparse.accumulate(np.array([7000], dtype=np.int32), one, np.array([0, 1, 1]), hs,
                          weights.w2, 2, coef, coef, *sums, touched)
    with pytest.raises(ValueError):  # more steps than hidden units were kept for
        sparse.accumulate(np.array([0], dtype=np.int32), one, np.array([0, 1, 1, 1]), hs,
                          weights.w2, 3, np.ones(3), np.ones(3), *sums, touched)
    with pytest.raises(ValueError):
        sparse.finish(sums[0], sums[1][:-1], touched, 0.0, 1.0, np.empty(size, np.float32))
    assert not touched.any() and not sums[0].any()


def _clustered_inputs(steps: int, seed: int) -> np.ndarray:
    """Sparse +-1 inputs whose pixels come in small blobs, as a ball's and paddles' do,
    with pixels on the frame's edges too."""
    rng = np.random.default_rng(seed)
    xs = np.zeros((steps, 80, 80))
    for t in range(steps):
        for _ in range(rng.integers(0, 4)):
            y, x = rng.integers(0, 78, size=2)
            xs[t, y : y + rng.integers(1, 3), x : x + rng.integers(1, 9)] = rng.choice([-1, 1])
        if t % 5 == 0:
            xs[t, 0, 0], xs[t, 79, 79], xs[t, 0, 79] = 1.0, -1.0, 1.0
    return xs.reshape(steps, policy.INPUT_SIZE)


def test_conv_features_match_the_dense_reference() -> None:
    channels = 5
    kernel = np.random.default_rng(0).standard_normal((8, 8, channels)).astype(np.float32)
    xs = _clustered_inputs(60, 1)
    rows = policy.input_rows(policy.NetShape(1, channels))
    out_idx, out_vals = np.empty(rows, np.int32), np.empty(rows, np.float32)
    pre, seen = np.zeros(rows, np.float32), np.zeros(19 * 19, np.uint8)
    idx, vals, indptr = _csr(xs)
    features, values, starts = sparse.conv_many(kernel, idx, vals, indptr, len(xs))
    assert len(starts) == len(xs) + 1
    active = 0
    for t, x in enumerate(xs):
        dense = policy.conv_features(kernel.astype(np.float64), x)
        n = sparse.conv_step(
            kernel, idx[indptr[t] : indptr[t + 1]], vals[indptr[t] : indptr[t + 1]],
            out_idx, out_vals, pre, seen,
        )
        # Only the features the relu lets through, in increasing order, as the dense ones.
        np.testing.assert_array_equal(out_idx[:n], np.flatnonzero(dense))
        np.testing.assert_allclose(out_vals[:n], dense[dense > 0], rtol=1e-5, atol=1e-6)
        assert not pre.any() and not seen.any()  # the scratch is left zeroed
        # conv_many computes each step as conv_step does, bit for bit.
        np.testing.assert_array_equal(features[starts[t] : starts[t + 1]], out_idx[:n])
        assert values[starts[t] : starts[t + 1]].tobytes() == out_vals[:n].tobytes()
        active += n
    assert active > 100


def test_conv_loops_refuse_bad_arrays() -> None:
    kernel = np.ones((8, 8, 2), np.float32)
    rows = policy.input_rows(policy.NetShape(1, 2))
    room = np.empty(rows, np.int32), np.empty(rows, np.float32)
    scratch = np.zeros(rows, np.float32), np.zeros(19 * 19, np.uint8)
    one = np.ones(1, np.float32)
    with pytest.raises(IndexError):  # a pixel past the frame
        sparse.conv_step(kernel, np.array([6400], np.int32), one, *room, *scratch)
    with pytest.raises(ValueError):  # no room for every feature
        sparse.conv_step(kernel, np.array([0], np.int32), one, room[0][:10], room[1], *scratch)
    with pytest.raises(ValueError):  # filters that are not 8 x 8
        sparse.conv_step(np.ones((4, 4, 2), np.float32), np.array([0], np.int32), one,
                         *room, *scratch)
    with pytest.raises(ValueError):
        sparse.conv_many(kernel, np.array([0], np.int32), one, np.array([0, 5]), 1)


def test_the_clip_fraction_counts_every_ratio_outside_the_interval() -> None:
    # As CleanRL and Stable-Baselines3 count it: |r - 1| > clip, whichever way the advantage
    # pushes. Step 0 is pushed back inside (A < 0, r > 1.1): counted, and its gradient kept;
    # step 1 left the way A pushes (A < 0, r < 0.9): counted, its policy gradient zeroed;
    # step 2 is inside.
    logits = np.zeros(3)  # P(UP) = 0.5 for every step: log pi(UP) = log 0.5
    logp_old = np.log(np.array([0.5 / 1.5, 0.5 / 0.5, 0.5 / 1.05]))  # r = 1.5, 0.5, 1.05
    actions = np.ones(3, np.uint8)  # UP
    advantages = np.array([-1.0, -1.0, 1.0])
    zeros = np.zeros(3)
    coef_logit, coef_value = np.empty(3), np.empty(3)
    clipped, *_ = sparse.ppo_coefficients(
        logits, zeros, actions, logp_old, advantages, zeros, 0.1, 0.5, 0.0, coef_logit,
        coef_value,
    )
    assert clipped == 2
    assert coef_logit[0] != 0.0 and coef_logit[1] == 0.0 and coef_logit[2] != 0.0


@pytest.mark.skipif(sparse.BUILD != "avx2", reason="this CPU has no AVX2: one build only")
def test_the_avx2_build_trains_to_the_same_bytes_as_the_portable_one(tmp_path) -> None:
    # Two updates of the actor-critic on the conv policy (play, passes, Adam) and two of
    # Karpathy's learner (RMSProp), once with each build of the loops.
    from tests.helpers import checkpoint_weights, pong_mp

    runs = {"ppo": ["--batch-size", "3", "--minibatches", "2", "--epochs", "2"],
            "pg": ["--preset", "karpathy", "--batch-size", "3"]}
    for name, options in runs.items():
        weights = []
        for build in ("portable", "avx2"):
            run_dir = tmp_path / f"{name}-{build}"
            env = {**os.environ, "PONG_MP_LOOPS": build}
            used = subprocess.run(
                [sys.executable, "-c", "from pong_mp import sparse; print(sparse.BUILD)"],
                capture_output=True, text=True, timeout=60, env=env, check=True,
            )
            assert used.stdout.strip() == build
            done = pong_mp(
                "train", "--env", "FakePong-v0", "--env-arg", "points_to_win=5", "--backend",
                "serial", "--batches", "2", "--seed", "4", *options, "--run-dir", str(run_dir),
                env=env,
            )
            assert done.returncode == 0, done.stderr
            weights.append(checkpoint_weights(run_dir))
        assert weights[0] == weights[1], name
