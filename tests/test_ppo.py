"""The actor-critic's pieces: GAE, the recorded trajectory, minibatches, and the clipped
surrogate's gradient against a dense float64 reference."""

from __future__ import annotations

import dataclasses
import json
import math
import os
import re
import signal
import threading
import time
from pathlib import Path

import numpy as np
import pytest

from pong_mp import pg, policy, ppo
from pong_mp.api import Agent
from pong_mp.backends import RolloutSpec
from pong_mp.batch_sum import BatchSum
from pong_mp.config import ConfigError
from pong_mp.envs import make_training_env
from pong_mp.episode import ZeroRows, make_tasks
from pong_mp.frames import INPUT_SIZE
from pong_mp.rundir import prepare_run, read_metrics
from tests.helpers import (
    assert_agent_acts_as,
    checkpoint_weights,
    fake_config,
    new_backend,
    pong_mp,
    pong_mp_here,
    run_batch,
    train,
)

HIDDEN = 6


def _gae_reference(rewards: list[float], values: list[float], gamma: float, lam: float):
    # Rally by rally, the textbook recursion with V = 0 after each rally's last step.
    out: list[float] = []
    start = 0
    for end in range(len(rewards)):
        if rewards[end] != 0 or end == len(rewards) - 1:
            r, v = rewards[start : end + 1], [*values[start : end + 1], 0.0]
            deltas = [r[t] + gamma * v[t + 1] - v[t] for t in range(len(r))]
            for t in range(len(r)):
                out.append(sum((gamma * lam) ** k * deltas[t + k] for k in range(len(r) - t)))
            start = end + 1
    return out


def test_gae_restarts_at_every_point_and_matches_the_textbook_sum() -> None:
    rewards = [0.0, 0.0, 1.0, 0.0, -1.0, 0.0, 0.0]
    values = [0.1, -0.2, 0.3, 0.5, -0.4, 0.2, 0.05]
    advantages, returns = ppo.gae(np.array(rewards), np.array(values), 0.9, 0.8)
    np.testing.assert_allclose(advantages, _gae_reference(rewards, values, 0.9, 0.8))
    np.testing.assert_allclose(returns, advantages + np.array(values))
    # lambda 1: the discounted rewards of the rally minus V, as Karpathy's returns.
    advantages, returns = ppo.gae(np.array(rewards), np.array(values), 0.9, 1.0)
    np.testing.assert_allclose(returns, policy.discount_rewards(np.array(rewards), 0.9))


def test_minibatches_deal_every_step_once_and_depend_on_seed_and_epoch() -> None:
    parts = [ppo.minibatch_steps(7, 0, 103, 4, m) for m in range(4)]
    assert sorted(np.concatenate(parts).tolist()) == list(range(103))
    assert all(25 <= len(p) <= 26 for p in parts)
    assert all(np.all(np.diff(p) > 0) for p in parts)
    np.testing.assert_array_equal(parts[1], ppo.minibatch_steps(7, 0, 103, 4, 1))
    assert not np.array_equal(parts[1], ppo.minibatch_steps(7, 1, 103, 4, 1))
    assert not np.array_equal(parts[1], ppo.minibatch_steps(8, 0, 103, 4, 1))


def test_the_dealing_is_pinned_to_the_projects_own_hash() -> None:
    # The same integers give the same minibatches on every numpy version and machine: a
    # cluster of mixed versions deals alike. Changing the hash changes every run's bytes.
    assert ppo.deal_keys(7, 0, 3).tolist() == [
        13572837776801163602, 17131688404863395086, 10113019774653369851
    ]
    assert ppo.deal_keys(2**64 - 1, 5, 2).tolist() == [849527102006244401, 11112550638282159097]
    parts = [ppo.minibatch_steps(7, 0, 10, 3, m).tolist() for m in range(3)]
    assert parts == [[3, 4, 5, 6], [0, 2, 7], [1, 8, 9]]


def test_a_worker_keeps_each_episodes_deal_for_the_current_epoch_only(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    work = ppo.PassWork(policy.NetShape(HIDDEN))
    kept = work.order(7, 0, 103)
    np.testing.assert_array_equal(kept, ppo.deal_order(7, 0, 103))
    assert work.order(7, 0, 103) is kept  # sorted once for the epoch's minibatches
    parts = [ppo.minibatch_steps(7, 0, 103, 4, m, kept) for m in range(4)]
    for m, part in enumerate(parts):
        np.testing.assert_array_equal(part, ppo.minibatch_steps(7, 0, 103, 4, m))
    assert work.order(8, 0, 50) is work.order(8, 0, 50)
    work.order(7, 1, 103)  # a new epoch: the last one's deals go
    assert work.order(7, 0, 103) is not kept
    # With one epoch a pass, the deals kept stay within ORDERS_KEPT steps all the same.
    monkeypatch.setattr(ppo, "ORDERS_KEPT", 250)
    work = ppo.PassWork(policy.NetShape(HIDDEN))
    first = work.order(1, 0, 100)
    assert work.order(2, 0, 100) is not None and work.order(1, 0, 100) is first
    work.order(3, 0, 100)  # 300 steps: the others go
    assert work.order(1, 0, 100) is not first


def _weights(seed: int, channels: int = 0) -> tuple[np.ndarray, policy.Weights32]:
    rng = np.random.default_rng(seed)
    shape = policy.NetShape(HIDDEN, channels)
    params = policy.init_params(shape, seed, value=True)
    # A value head that is not zero, so that its share of the gradient shows.
    head = policy.value_head(params, shape)
    head[:] = rng.standard_normal(HIDDEN + 1) * 0.5
    # Hidden units of size ~1 for sparse inputs.
    params[: policy.input_rows(shape) * HIDDEN] *= 40.0 if channels else 8.0
    params = params.astype(np.float32).astype(np.float64)
    return params, policy.Weights32.from_params(params, shape)


def _record(weights: policy.Weights32, steps: int, seed: int) -> ppo.Trajectory:
    rng = np.random.default_rng(seed)
    recorder = ppo.TrajectoryRecorder(weights.shape)
    recorder.start(weights)
    # One pair of arrays for every step, as an input stream reuses its own.
    idx_room = np.empty(INPUT_SIZE, np.int32)
    vals_room = np.empty(INPUT_SIZE, np.float32)
    for t in range(steps):
        n = int(rng.integers(0, 12))
        idx, vals = idx_room[:n], vals_room[:n]
        idx[:] = np.sort(rng.choice(INPUT_SIZE, n, replace=False))
        vals[:] = rng.choice([-1.0, 1.0], n)
        p = recorder.forward(idx, vals)
        reward = 0.0 if t % 9 != 8 else float(rng.choice([-1.0, 1.0]))
        recorder.add(policy.choose_action(p, rng.random, greedy=False), reward)
    return recorder.finish(0.99, 0.95)


def test_the_recorded_trajectory_keeps_the_inputs_and_the_playing_policy() -> None:
    params, weights = _weights(0)
    trajectory = _record(weights, 40, seed=1)
    assert trajectory.steps == 40
    rng = np.random.default_rng(1)
    w1t, w2 = policy.split(params, policy.NetShape(HIDDEN))
    head = policy.value_head(params, policy.NetShape(HIDDEN))
    for t in range(40):
        n = int(rng.integers(0, 12))
        idx = np.sort(rng.choice(INPUT_SIZE, n, replace=False))
        vals = rng.choice([-1.0, 1.0], n)
        if t % 9 == 8:
            rng.choice([-1.0, 1.0])
        rng.random()
        got_idx, got_vals, _ = trajectory.inputs(np.array([t]))
        np.testing.assert_array_equal(got_idx, idx)
        np.testing.assert_array_equal(got_vals, vals)
        x = np.zeros(INPUT_SIZE)
        x[idx] = vals
        p, h = policy.forward(w1t, w2, x)
        up = trajectory.actions[t] == 1
        assert trajectory.logp_old[t] == pytest.approx(np.log(p if up else 1 - p), rel=1e-5)
        assert trajectory.values[t] == pytest.approx(h @ head[:HIDDEN] + head[HIDDEN], rel=1e-5)


def _log_probs(z: float) -> np.ndarray:
    # log P(DOWN), log P(UP) (the codes' order), from the definition.
    p = 1 / (1 + np.exp(-z))
    return np.log([1 - p, p])


def _objective(params: np.ndarray, trajectory: ppo.Trajectory, steps: np.ndarray,
               mean: float, scale: float, entropy_coef: float, settings: ppo.PPOSettings,
               channels: int) -> float:
    # The dense float64 definition of what the gradient is of.
    shape = policy.NetShape(HIDDEN, channels)
    w1t, w2 = policy.split(params, shape)
    head = policy.value_head(params, shape)
    kernel = policy.conv_kernel(params, shape)
    total = 0.0
    for t in steps:
        idx, vals, _ = trajectory.inputs(np.array([t]))
        x = np.zeros(INPUT_SIZE)
        x[idx] = vals
        if kernel is not None:
            x = policy.conv_features(kernel, x)
        h = np.maximum(x @ w1t, 0.0)
        z, v = h @ w2, h @ head[:HIDDEN] + head[HIDDEN]
        logps = _log_probs(z)
        logp = logps[trajectory.actions[t]]
        ratio = np.exp(logp - trajectory.logp_old[t])
        adv = (trajectory.advantages[t] - mean) * scale
        clipped = np.clip(ratio, 1 - settings.clip, 1 + settings.clip)
        entropy = -np.sum(np.exp(logps) * logps)
        total += min(ratio * adv, clipped * adv)
        total += -settings.value_coef / 2 * (v - trajectory.returns[t]) ** 2
        total += entropy_coef * entropy
    return total


@pytest.mark.parametrize("channels", [0, 3], ids=["mlp", "conv"])
@pytest.mark.parametrize("moved", [0.0, 0.3])
def test_the_surrogate_gradient_is_the_objectives(moved: float, channels: int) -> None:
    params, weights = _weights(0, channels)
    trajectory = _record(weights, 60, seed=2)
    assert set(trajectory.actions.tolist()) == {0, 1}  # both actions were played
    # Later passes see weights that have moved from those that played.
    rng = np.random.default_rng(3)
    new = params + moved * rng.standard_normal(len(params)) * (np.abs(params) > 0)
    new = new.astype(np.float32).astype(np.float64)
    settings = ppo.PPOSettings(clip=0.2, value_coef=0.5)
    steps = ppo.minibatch_steps(5, 0, trajectory.steps, 2, 0)
    mean, scale, beta = 0.1, 1.7, 0.01
    out = np.empty(len(params), np.float32)
    work = ppo.PassWork(weights.shape)
    moved_weights = policy.Weights32.from_params(new, weights.shape)
    stats = work.gradient(moved_weights, trajectory, steps, mean, scale, beta, settings, out)
    # The reused working memory was left clear: a second pass gives the same bytes.
    again = np.empty_like(out)
    work.gradient(moved_weights, trajectory, steps, mean, scale, beta, settings, again)
    assert again.tobytes() == out.tobytes()
    assert stats.steps == len(steps)
    assert (stats.clipped > 0) == (moved > 0)
    # Central differences of the dense objective, on the coordinates the steps reach.
    touched = np.flatnonzero(out)
    assert len(touched) > 3 * HIDDEN
    check = rng.choice(touched, 40, replace=False)
    w2_start = policy.input_rows(weights.shape) * HIDDEN
    check = np.concatenate([check, np.arange(w2_start, w2_start + 2 * HIDDEN + 1)])
    if channels:  # and the filters' taps
        filters = touched[touched >= w2_start + 2 * HIDDEN + 1]
        assert len(filters) > 20
        check = np.concatenate([check, rng.choice(filters, 20, replace=False)])
    for i in check:
        eps = 1e-6
        up, down = new.copy(), new.copy()
        up[i] += eps
        down[i] -= eps
        slope = (
            _objective(up, trajectory, steps, mean, scale, beta, settings, channels)
            - _objective(down, trajectory, steps, mean, scale, beta, settings, channels)
        ) / (2 * eps)
        assert out[i] == pytest.approx(slope, rel=2e-3, abs=2e-4), i


@pytest.mark.parametrize("channels", [0, 3], ids=["mlp", "conv"])
def test_a_slots_zero_row_flags_stay_true_and_change_no_bit(channels: int) -> None:
    # A pass into a slot that keeps flags of the W1 rows it holds as +0.0 leaves a flagged
    # row as it is instead of clearing it; the gradient must be the one written into a new
    # array, pass after pass over other steps, and every flag must say the truth.
    params, weights = _weights(0, channels)
    trajectory = _record(weights, 60, seed=2)
    settings = ppo.PPOSettings(clip=0.2, value_coef=0.5)
    rows = policy.input_rows(weights.shape)
    out = np.zeros(len(params), np.float32)  # a new block's slot: zeros, no flag known
    zeroed = ZeroRows(np.zeros(rows, np.uint8), HIDDEN)
    work, fresh_work = ppo.PassWork(weights.shape), ppo.PassWork(weights.shape)
    flagged = []
    for part in [0, 1, 2, 1, 0]:
        steps = ppo.minibatch_steps(5, 0, trajectory.steps, 3, part)
        work.gradient(weights, trajectory, steps, 0.1, 1.7, 0.01, settings, out, zeroed)
        fresh = np.empty(len(params), np.float32)
        fresh_work.gradient(weights, trajectory, steps, 0.1, 1.7, 0.01, settings, fresh)
        assert out.tobytes() == fresh.tobytes()
        w1 = out[: rows * HIDDEN].reshape(rows, HIDDEN)
        assert not w1[zeroed.flags == 1].any()  # a flagged row holds zeros
        assert not np.signbit(w1[zeroed.flags == 1]).any()  # +0.0, not -0.0
        flagged.append(int(zeroed.flags.sum()))
    # Most rows are untouched by a pass of 20 steps, and flagged once cleared.
    assert min(flagged) > rows // 2


def test_karpathys_learner_clears_a_slots_zero_row_flags() -> None:
    # pg writes every row of its gradient: no flag may survive it.
    shape = policy.NetShape(HIDDEN)
    params = policy.init_params(shape, 1)
    env, inputs = make_training_env("FakePong-v0")
    try:
        out = np.zeros(len(params), np.float32)
        zeroed = ZeroRows(np.ones(policy.input_rows(shape), np.uint8), HIDDEN)
        worker = pg.PGWork(0.99).worker(shape)
        task = make_tasks(0, 0, 1)[0]
        worker.run(env, inputs, policy.Weights32.from_params(params, shape), task, out, zeroed)
    finally:
        env.close()
    assert not zeroed.flags.any()


def test_at_the_playing_weights_no_step_is_clipped_and_the_ratio_is_one() -> None:
    params, weights = _weights(1)
    trajectory = _record(weights, 50, seed=4)
    out = np.empty(len(params), np.float32)
    stats = ppo.PassWork(policy.NetShape(HIDDEN)).gradient(
        weights, trajectory, np.arange(50), 0.0, 1.0, 0.01, ppo.PPOSettings(clip=1e-9), out
    )
    assert stats.clipped == 0
    assert stats.kl == 0.0


# -- training with --algo ppo ---------------------------------------------------------------

PPO = {"algo": "ppo", "optimizer": "adam", "lr": 1e-3, "epochs": 2, "minibatches": 2}
"""A small actor-critic: 2 passes of 2 minibatches over each batch."""

TIMING = {
    "seconds", "steps_per_sec", "play_seconds", "update_seconds", "elapsed", "time", "workers",
}  # fmt: skip


def _quiet(_: str) -> None:
    pass


def _metrics(run_dir: Path) -> list[dict]:
    lines = (run_dir / "metrics.jsonl").read_text().splitlines()
    return [{k: v for k, v in json.loads(line).items() if k not in TIMING} for line in lines]


@pytest.fixture(scope="module")
def ppo_serial(tmp_path_factory: pytest.TempPathFactory) -> tuple[bytes, list[dict]]:
    """The weights and metrics of 3 actor-critic updates on the serial backend."""
    run_dir = tmp_path_factory.mktemp("ppo-serial")
    train(fake_config(run_dir, backend="serial", **PPO), log=_quiet)
    return checkpoint_weights(run_dir), _metrics(run_dir)


@pytest.mark.parametrize(
    ("backend", "workers"),
    [("local", 1), ("local", 3), pytest.param("ray", 2, marks=pytest.mark.ray)],
)
def test_the_actor_critic_gives_the_same_bits_on_every_backend(
    tmp_path: Path, backend: str, workers: int, ppo_serial, clean_system
) -> None:
    if backend == "ray":
        pytest.importorskip("ray")
    train(fake_config(tmp_path, backend=backend, workers=workers, **PPO), log=_quiet)
    assert checkpoint_weights(tmp_path) == ppo_serial[0]
    assert _metrics(tmp_path) == ppo_serial[1]


def test_the_actor_critic_resumes_bit_for_bit(tmp_path: Path, ppo_serial, clean_system) -> None:
    train(fake_config(tmp_path, batches=2, **PPO), log=_quiet)
    train(fake_config(tmp_path, batches=3, backend="serial", **PPO), resume=True, log=_quiet)
    assert checkpoint_weights(tmp_path) == ppo_serial[0]
    assert _metrics(tmp_path) == ppo_serial[1]


def test_the_actor_critic_learns_a_value_and_logs_its_passes(
    tmp_path: Path, ppo_serial, clean_system
) -> None:
    records = ppo_serial[1]
    for record in records:
        assert record["value_loss"] > 0
        assert 0 <= record["clip_fraction"] < 1
        assert math.isfinite(record["approx_kl"])
    # The value head starts at zero and moves; the weights differ from pg's on the same seed.
    state = train(fake_config(tmp_path, backend="serial", **PPO), log=_quiet)
    head = policy.value_head(state.params, policy.NetShape(16))
    assert head is not None and np.any(head != 0)
    pg = train(fake_config(tmp_path / "pg", backend="serial"), log=_quiet)
    assert not np.array_equal(pg.params, state.params[: len(pg.params)])
    # Every optimizer step of the update moved the weights: more passes, another result.
    more = train(fake_config(tmp_path / "more", backend="serial", **{**PPO, "epochs": 3}),
                 log=_quiet)
    assert not np.array_equal(more.params, state.params)


def test_an_actor_critic_checkpoint_plays(tmp_path: Path, ppo_serial, clean_system) -> None:
    train(fake_config(tmp_path, backend="serial", **PPO), log=_quiet)
    done = pong_mp("play", str(tmp_path), "--episodes", "2", "--json")
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["games"] == 2


@pytest.mark.parametrize(
    ("options", "message"),
    [
        (["--policy-lag", "1"], "--algo ppo works with --policy-lag 0"),
        (["--epochs", "0"], "--epochs must be between 1 and 100"),
    ],
)
def test_options_the_actor_critic_cannot_take_are_one_line(
    tmp_path: Path, options: list[str], message: str
) -> None:
    done = pong_mp_here(
        "train", "--env", "FakePong-v0", "--algo", "ppo", *options, "--run-dir", str(tmp_path)
    )
    assert done.returncode == 2
    assert done.stderr.strip().splitlines() == [f"pong-mp: error: {message}"] or (
        message in done.stderr and "Traceback" not in done.stderr
    )
    assert not tmp_path.exists() or not any(tmp_path.iterdir())


def test_the_karpathy_preset_is_pg_whatever_the_learner_asked() -> None:
    from pong_mp.config import apply_preset

    assert apply_preset("karpathy", {"algo": "ppo"})["algo"] == "pg"
    assert apply_preset("karpathy", {"algo": "ppo"}, {"algo"})["algo"] == "ppo"


def _synthetic(steps: int, seed: int) -> ppo.Trajectory:
    # A long made-up episode: ~25 pixels a step, a point every 60 steps.
    rng = np.random.default_rng(seed)
    counts = rng.integers(15, 35, steps)
    indptr = np.zeros(steps + 1, np.int64)
    np.cumsum(counts, out=indptr[1:])
    rewards = np.where(np.arange(steps) % 60 == 59, rng.choice([-1.0, 1.0], steps), 0.0)
    values = rng.standard_normal(steps) * 0.1
    advantages, returns = ppo.gae(rewards, values, 0.99, 0.95)
    return ppo.Trajectory(
        pixels=rng.integers(0, INPUT_SIZE, indptr[-1]).astype(np.uint16),
        signs=rng.choice([-1, 1], indptr[-1]).astype(np.int8),
        indptr=indptr,
        actions=rng.integers(0, 2, steps).astype(np.uint8),
        logp_old=np.log(rng.uniform(0.3, 0.7, steps)),
        values=values,
        rewards=rewards,
        advantages=advantages,
        returns=returns,
    )


def _summed(items, episodes: int, size: int) -> bytes:
    # A round's results summed in the batch's fixed order: the bytes the trainer steps with.
    total = BatchSum(0, episodes, np.empty(size))
    for item in items:
        total.add(item)
    assert total.complete
    return total.total.tobytes()


@pytest.mark.parametrize("light", [False, True], ids=["whole-pass", "light-pass"])
def test_a_worker_killed_mid_pass_changes_no_bit(light: bool, clean_system) -> None:
    # The local backend's; Ray's replaces an actor whatever the task it held (test_backends).
    # A light pass (its trajectory kept by the worker) is played again whole elsewhere.
    shape = policy.NetShape(200)
    spec = RolloutSpec("FakePong-v0", shape, ppo.PPOWork(0.99), workers=2)
    params = policy.init_params(shape, 3, value=True)
    params[policy.param_count(shape) :] = 0.01
    tasks = [
        ppo.EpochTask(i, 100 + i, _synthetic(40_000, i), 0, 0, 1, 0.1, 0.9, 0.01)
        for i in range(4)
    ]

    def summed(items) -> bytes:
        return _summed(items, len(tasks), len(params))

    serial = new_backend("serial", spec)
    with serial:
        expected = summed(run_batch(serial, params, tasks))
    backend = new_backend("local", spec)
    killed = []

    def kill_one_mid_pass() -> None:
        time.sleep(0.2)  # each pass over 40,000 steps takes longer than this
        pid = backend.worker_pids()[0]
        os.kill(pid, signal.SIGKILL)
        killed.append(pid)

    with backend:
        if light:  # a first round, whole: each worker keeps the trajectories it was sent
            assert summed(run_batch(backend, params, tasks)) == expected
            assert (backend.light_passes, backend.whole_passes) == (0, len(tasks))
        threading.Thread(target=kill_one_mid_pass).start()
        got = summed(run_batch(backend, params, tasks))
        assert killed and killed[0] not in backend.worker_pids()
        assert backend.replacements == 1
        if light:  # both started light, and the killed one's pass was played again whole
            assert backend.light_passes >= 2 and backend.whole_passes >= len(tasks) + 1
    assert got == expected


@pytest.mark.parametrize("batch_size", [0, 3], ids=["own-slots", "a-slot-a-position"])
def test_a_worker_killed_with_a_pass_queued_changes_no_bit(
    batch_size: int, clean_system
) -> None:
    # One worker keeps every trajectory after a first round, so in the second it is sent
    # each next pass while it still computes the one before; killed mid-pass, its queued
    # pass goes back in line uncounted, and both are played again by its replacement.
    hidden = 200
    spec = RolloutSpec(
        "FakePong-v0", policy.NetShape(hidden), ppo.PPOWork(0.99), workers=1, max_retries=1,
        batch_size=batch_size,
    )
    params = policy.init_params(policy.NetShape(hidden), 3, value=True)
    tasks = [
        ppo.EpochTask(i, 100 + i, _synthetic(40_000, i), 0, 0, 1, 0.1, 0.9, 0.01)
        for i in range(3)
    ]

    def summed(items) -> bytes:
        return _summed(items, len(tasks), len(params))

    with new_backend("serial", spec) as serial:
        expected = summed(run_batch(serial, params, tasks))
    with new_backend("local", spec) as backend:
        assert backend._by_position == bool(batch_size)
        assert summed(run_batch(backend, params, tasks)) == expected
        assert backend.queued_passes == 0  # nothing kept yet: nothing to send ahead
        pid = backend.worker_pids()[0]
        threading.Timer(0.2, os.kill, (pid, signal.SIGKILL)).start()
        got = summed(run_batch(backend, params, tasks))
        assert backend.replacements == 1 and backend.queued_passes >= 1
    assert got == expected


@pytest.mark.parametrize(
    ("workers", "batch_size", "by_position"),
    [(2, 10, True), (2, 16, True), (2, 17, False), (8, 32, True), (8, 33, False), (2, 0, False)],
)
def test_a_slot_for_each_position_only_for_batches_of_a_few_episodes_a_worker(
    workers: int, batch_size: int, by_position: bool
) -> None:
    # A batch of 300 on 2 workers would hold 1.4 GB of /dev/shm for a few slots' work.
    from pong_mp.backends.local import LocalBackend

    spec = RolloutSpec(
        "FakePong-v0", policy.NetShape(HIDDEN), ppo.PPOWork(0.99), workers=workers,
        batch_size=batch_size,
    )
    layouts = LocalBackend(spec)._layouts()
    assert layouts[0] == ((batch_size, True) if by_position else (2, False))
    assert layouts[-1] == (1, False)  # where /dev/shm has room for little else


def _passes_after_a_batch(backend, kill_before_passes: bool = False) -> list[bytes]:
    # A batch of 6 FakePong episodes, then 2 epochs of 2 minibatches over it: the summed
    # gradient of each pass, as the trainer would step with.
    params = policy.init_params(policy.NetShape(HIDDEN), 5, value=True)
    params[policy.param_count(policy.NetShape(HIDDEN)) :] = 0.01
    tasks = make_tasks(11, 0, 6, gradient=False)
    trajectories = {
        item.stats.index: item.stats.data for item in run_batch(backend, params, tasks)
    }
    if kill_before_passes:
        os.kill(backend.worker_pids()[0], signal.SIGKILL)
        backend._workers[0].process.join(5)
    sums = []
    for epoch in range(2):
        for part in range(2):
            passes = [
                ppo.EpochTask(
                    t.index, t.seed, trajectories[t.index], epoch, part, 2, 0.1, 0.9, 0.01
                )
                for t in tasks
            ]
            total = BatchSum(0, len(passes), np.empty(len(params)))
            for item in run_batch(backend, params, passes):
                total.add(item)
            assert total.complete
            sums.append(total.total.tobytes())
    return sums


@pytest.mark.parametrize("batch_size", [0, 6], ids=["own-slots", "a-slot-a-position"])
@pytest.mark.parametrize("kill", [False, True], ids=["all-kept", "a-worker-replaced"])
def test_passes_go_without_their_trajectory_to_the_worker_that_keeps_it(
    kill: bool, batch_size: int, clean_system
) -> None:
    # With a slot for each position of the batch, each pass's gradient stays there until its
    # round is summed; with a slot or two a worker, each is added as it arrives.
    spec = RolloutSpec(
        "FakePong-v0", policy.NetShape(HIDDEN), ppo.PPOWork(0.99), workers=2,
        batch_size=batch_size,
    )
    with new_backend("serial", spec) as serial:
        expected = _passes_after_a_batch(serial)
    with new_backend("local", spec) as backend:
        assert backend._by_position == bool(batch_size)
        kept_by_first = len(backend._workers[0].kept)  # nothing yet: records start empty
        got = _passes_after_a_batch(backend, kill_before_passes=kill)
        light, whole = backend.light_passes, backend.whole_passes
        assert backend.replacements == int(kill)
        # The slots' zero-row flags were kept (and, staying, read by the sum): the bytes
        # above are the same with them.
        flagged = [backend._grads[0].zeroed(s).flags.sum() for s in range(batch_size or 1)]
        assert min(flagged) > 0
    assert got == expected
    assert kept_by_first == 0 and light + whole == 4 * 6
    # A trajectory crosses the pipe at most once per worker that did not play it...
    assert whole <= 6 * (spec.workers - 1) + (6 if kill else 0)
    # ...and a worker replaced keeps nothing: its predecessor's episodes go whole.
    assert whole >= 1 if kill else light >= 4 * 6 - 6


def test_a_pg_run_forks_into_the_actor_critic(tmp_path: Path, clean_system) -> None:
    train(fake_config(tmp_path / "pg", backend="serial", batches=2), log=_quiet)
    learner = {"algo": "ppo", "epochs": 2, "minibatches": 2}  # the run's RMSProp, kept
    given = {"fork_from": str(tmp_path / "pg"), "backend": "serial", **learner}
    config, state = prepare_run(tmp_path / "ppo", False, given)
    assert config.algo == "ppo" and state.batch == 2
    assert np.all(policy.value_head(state.params, policy.NetShape(16)) == 0)  # a new head
    assert not np.any(state.cache)  # and the optimizer's state anew
    fork = train(fake_config(tmp_path / "ppo", batches=3, **given), log=_quiet)
    assert np.any(policy.value_head(fork.params, policy.NetShape(16)) != 0)  # which learned
    # The fork's first batch is played with the run's weights: the same games as pg's third.
    pg_on = train(fake_config(tmp_path / "pg", backend="serial", batches=3), resume=True,
                  log=_quiet)
    assert pg_on.steps == fork.steps
    records = [json.loads(line) for line in (tmp_path / "ppo" / "metrics.jsonl").open()]
    assert [r["batch"] for r in records] == [1, 2, 3] and "value_loss" in records[-1]


def test_a_fork_into_the_actor_critic_steps_adam_as_a_new_run_does(
    tmp_path: Path, clean_system
) -> None:
    # The fork starts Adam's moments anew, so its bias correction must count from step 1
    # too: counted from the source run's updates, its first step was about half a new run's
    # here (3x after a long run). One step an update; each weight's first Adam step is about
    # lr, so the step's norm per weight it moved is compared (the two runs' games move
    # different numbers of the MLP's weights).
    source = fake_config(tmp_path / "pg", backend="serial", optimizer="adam", batches=20)
    train(source, log=_quiet)
    learner = {"algo": "ppo", "optimizer": "adam", "epochs": 1, "minibatches": 1}
    fork = fake_config(
        tmp_path / "fork", backend="serial", batches=21, fork_from=str(tmp_path / "pg"),
        **learner,
    )
    new = fake_config(tmp_path / "new", backend="serial", batches=1, **learner)
    norms = []
    for config in (fork, new):
        start = prepare_run(Path(config.run_dir), False, dataclasses.asdict(config))[1]
        assert start.optimizer_steps == 0
        end = train(config, log=_quiet)
        assert end.optimizer_steps == 1
        moved = (end.params - start.params)[end.params != start.params]
        norms.append(math.sqrt(np.mean(np.square(moved))))
    assert norms[0] == pytest.approx(norms[1], rel=0.1)


def test_the_ppo_preset_is_the_measured_actor_critic() -> None:
    from pong_mp.config import PRESETS, TrainConfig, apply_preset

    # The options of the records in docs/runs/ppo (what docs/learning.md measured).
    measured = {
        "algo": "ppo", "optimizer": "adam", "lr": 1e-3, "entropy_bonus": 0.01, "epochs": 4,
        "minibatches": 4, "batch_size": 10, "hidden": 200,
    }
    config = TrainConfig(**apply_preset("ppo", {}))
    config.validate()
    assert {key: getattr(config, key) for key in measured} == measured
    # And the hyperparameters that are no longer options, at the values those runs had.
    assert (ppo.PPOSettings(), ppo.MAX_GRAD_NORM) == (ppo.PPOSettings(0.1, 0.95, 0.5), 0.5)
    assert set(PRESETS["ppo"]) >= set(PRESETS["karpathy"])  # it leaves no option of pg's open
    done = pong_mp("train", "--preset", "ppo", "--help")
    assert done.returncode == 0
    assert "ppo: the actor-critic on the MLP" in " ".join(done.stdout.split())


@pytest.mark.parametrize("channels", [0, 3], ids=["mlp", "conv"])
def test_an_actor_critic_agent_loads_from_its_checkpoint_or_model_and_plays(
    tmp_path: Path, channels: int, clean_system
) -> None:
    from pong_mp import checkpoint

    options = {**PPO, "policy": "conv", "channels": channels} if channels else PPO
    state = train(fake_config(tmp_path / "run", backend="serial", **options), log=_quiet)
    done = pong_mp("export", str(tmp_path / "run"), str(tmp_path / "model.npz"))
    assert done.returncode == 0, done.stderr
    params, config = checkpoint.load_policy(tmp_path / "model.npz")
    assert config["algo"] == "ppo"
    # The model holds the policy: the actor-critic's weights without its value head (W1,
    # W2 and, with --policy conv, the filters).
    shape = policy.NetShape(16, channels)
    without_head = policy.with_value_head(state.params, shape, False)
    assert np.array_equal(params.astype(np.float32), without_head.astype(np.float32))
    for path in (tmp_path / "run" / "checkpoint.npz", tmp_path / "model.npz"):
        actions = assert_agent_acts_as(Agent.load(path, seed=0), params, shape, 30)
        assert {policy.UP, policy.DOWN} == set(actions)
    done = pong_mp("play", str(tmp_path / "model.npz"), "--episodes", "2", "--json")
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["games"] == 2


# -- --policy conv ----------------------------------------------------------------------------

CONV = {**PPO, "policy": "conv", "channels": 3}
"""The actor-critic with a small convolutional layer."""


@pytest.fixture(scope="module")
def conv_serial(tmp_path_factory: pytest.TempPathFactory) -> tuple[bytes, list[dict]]:
    """The weights and metrics of 3 updates of --policy conv on the serial backend."""
    run_dir = tmp_path_factory.mktemp("conv-serial")
    train(fake_config(run_dir, backend="serial", **CONV), log=_quiet)
    return checkpoint_weights(run_dir), _metrics(run_dir)


@pytest.mark.parametrize(
    ("backend", "workers"), [("local", 3), pytest.param("ray", 2, marks=pytest.mark.ray)]
)
def test_the_conv_policy_gives_the_same_bits_on_every_backend(
    tmp_path: Path, backend: str, workers: int, conv_serial, clean_system
) -> None:
    if backend == "ray":
        pytest.importorskip("ray")
    train(fake_config(tmp_path, backend=backend, workers=workers, **CONV), log=_quiet)
    assert checkpoint_weights(tmp_path) == conv_serial[0]
    assert _metrics(tmp_path) == conv_serial[1]


def test_the_conv_policy_resumes_bit_for_bit_and_learns_its_filters(
    tmp_path: Path, conv_serial, clean_system
) -> None:
    train(fake_config(tmp_path, batches=2, **CONV), log=_quiet)
    train(fake_config(tmp_path, batches=3, backend="serial", **CONV), resume=True, log=_quiet)
    assert checkpoint_weights(tmp_path) == conv_serial[0]
    assert _metrics(tmp_path) == conv_serial[1]
    with np.load(tmp_path / "checkpoint.npz") as npz:
        assert npz["W1"].shape == (16, 19 * 19 * 3) and npz["conv"].shape == (8, 8, 3)
        assert npz["adam_m_conv"].any()
    shape = policy.NetShape(16, 3)
    first = policy.conv_kernel(policy.init_params(shape, 4, value=True), shape)
    with np.load(tmp_path / "checkpoint.npz") as npz:
        assert not np.array_equal(npz["conv"].ravel(), first.ravel())


DROP = {**CONV, "entropy_bonus": 0.3, "entropy_drop_at": 400.0, "entropy_drop_to": -0.3}
"""The conv actor-critic with an entropy bonus that turns to a penalty within 3 updates (at
400 env steps)."""


@pytest.mark.parametrize(
    ("backend", "workers"), [("local", 3), pytest.param("ray", 2, marks=pytest.mark.ray)]
)
def test_an_entropy_drop_gives_the_same_bits_on_every_backend_and_resume(
    tmp_path: Path, backend: str, workers: int, conv_serial, clean_system
) -> None:
    # The entropy's weight travels in each pass's task: kept or sent whole, to a local worker
    # or a Ray actor, before the drop and after it, across a resume.
    if backend == "ray":
        pytest.importorskip("ray")
    reference = tmp_path / "serial"
    train(fake_config(reference, backend="serial", **DROP), log=_quiet)
    assert checkpoint_weights(reference) != conv_serial[0]  # the drop was learned
    weights = [record["entropy_bonus"] for record in _metrics(reference)]
    assert weights[0] == 0.3 and weights[-1] == -0.3
    run_dir = tmp_path / backend
    given = {"backend": backend, **DROP}
    train(fake_config(run_dir, workers=workers, batches=2, **given), log=_quiet)
    train(fake_config(run_dir, workers=2, **given), resume=True, log=_quiet)
    assert checkpoint_weights(run_dir) == checkpoint_weights(reference)
    assert _metrics(run_dir) == _metrics(reference)
    with pytest.raises(ConfigError, match=re.escape("with --entropy-drop-at 400, not 500:")):
        prepare_run(run_dir, True, {"entropy_drop_at": 500.0})


@pytest.mark.parametrize(
    ("value", "drop"),
    [
        ({"entropy_bonus": 0.2}, {"entropy_drop_at": 300.0, "entropy_drop_to": -0.1}),
        ({"lr": 2e-3}, {"lr_drop_at": 300.0, "lr_drop_to": 3e-4}),
    ],
    ids=["entropy", "lr"],
)
def test_a_fork_refuses_a_value_that_a_fallen_drop_would_hide(
    tmp_path: Path, value: dict, drop: dict, clean_system
) -> None:
    source = tmp_path / "source"
    train(fake_config(source, backend="serial", batches=2, **CONV, **drop), log=_quiet)
    # The options a user gives: the rest comes from the run forked from, its drop too.
    given = {"fork_from": str(source), "backend": "serial", **value}
    (name,), (at, _) = value, drop
    with pytest.raises(ConfigError, match=f"--{name.replace('_', '-')} .* would never apply"):
        prepare_run(tmp_path / "fork", False, given, build_env=False)
    config, _ = prepare_run(tmp_path / "fork", False, {**given, at: 0.0}, build_env=False)
    assert (getattr(config, name), getattr(config, at)) == (value[name], ())  # no drop
    # A drop still ahead of the checkpoint leaves the given value its updates until then.
    ahead = tmp_path / "ahead"
    train(fake_config(ahead, backend="serial", batches=2, **CONV, **{**drop, at: 1e9}), log=_quiet)
    given["fork_from"] = str(ahead)
    config, _ = prepare_run(tmp_path / "fork", False, given, build_env=False)
    assert (getattr(config, name), getattr(config, at)) == (value[name], (1e9,))
    # Of two points, the first fallen hides the value as one alone does.
    to = at.replace("_at", "_to")
    two = tmp_path / "two"
    points = {at: (300.0, 1e9), to: (getattr(config, to)[0], value[name])}
    train(fake_config(two, backend="serial", batches=2, **CONV, **points), log=_quiet)
    given["fork_from"] = str(two)
    at_flag, to_flag = (f"--{name.replace('_', '-')}" for name in (at, to))
    with pytest.raises(ConfigError, match=f"has {at_flag} 300,1e9, so ") as refused:
        prepare_run(tmp_path / "fork", False, given, build_env=False)
    # ... and names the point still ahead, with its value, as the way to keep it.
    assert f"(or {at_flag} 1e9 {to_flag} {value[name]:g} to keep" in str(refused.value)
    # Points given alone take the values of the run forked from, which must match them.
    with pytest.raises(ConfigError, match=f"{at_flag} 2000 has 1 point, and the run forked"):
        prepare_run(tmp_path / "fork", False, {**given, at: 2000.0}, build_env=False)


def test_a_damaged_conv_checkpoint_is_named(tmp_path: Path, clean_system) -> None:
    from pong_mp import checkpoint

    train(fake_config(tmp_path, backend="serial", batches=1, **CONV), log=_quiet)
    with np.load(tmp_path / "checkpoint.npz") as npz:
        arrays = {key: npz[key] for key in npz.files}
    del arrays["rmsprop_conv"]
    np.savez(tmp_path / "broken.npz", **arrays)
    with pytest.raises(checkpoint.CheckpointError, match="missing rmsprop_conv"):
        checkpoint.load(tmp_path / "broken.npz")


@pytest.mark.parametrize(
    ("options", "message"),
    [
        (["--algo", "pg"], "--algo pg takes --policy mlp and --entropy-drop-at 0 (as --preset"),
        (
            ["--algo", "pg", "--policy", "mlp"],
            "--entropy-drop-at 4e6,6.3e6,1e7 works with --algo ppo only (Karpathy's learner",
        ),
        (["--algo", "ppo", "--channels", "0"], "--channels must be between 1 and 64"),
    ],
)
def test_options_the_conv_policy_cannot_take_are_one_line(
    tmp_path: Path, options: list[str], message: str
) -> None:
    done = pong_mp_here(
        "train", "--env", "FakePong-v0", "--policy", "conv", *options, "--run-dir", str(tmp_path)
    )
    assert done.returncode == 2
    assert message in done.stderr and "Traceback" not in done.stderr
    assert not tmp_path.exists() or not any(tmp_path.iterdir())


def test_a_conv_run_forks_with_its_policy(tmp_path: Path, clean_system) -> None:
    train(fake_config(tmp_path / "base", backend="serial", batches=1, **CONV), log=_quiet)
    base = ["train", "--fork-from", str(tmp_path / "base"), "--backend", "serial"]
    widen = pong_mp(*base, "--hidden", "32", "--batches", "2", "--run-dir", str(tmp_path / "w"))
    assert widen.returncode == 0, widen.stderr
    with np.load(tmp_path / "w" / "checkpoint.npz") as wide:
        assert wide["W1"].shape == (32, policy.input_rows(policy.NetShape(32, CONV["channels"])))
        assert np.isfinite(wide["conv"]).all() and np.isfinite(wide["W1"]).all()
    mlp = pong_mp_here(*base, "--policy", "mlp", "--run-dir", str(tmp_path / "mlp"))
    assert mlp.returncode == 2 and "a fork keeps the --policy" in mlp.stderr
    fork = pong_mp(*base, "--lr", "5e-4", "--batches", "2", "--run-dir", str(tmp_path / "f"))
    assert fork.returncode == 0, fork.stderr


@pytest.mark.ale
@pytest.mark.parametrize("channels", [0, 3], ids=["mlp", "conv"])
def test_a_trajectory_of_real_pong_keeps_every_steps_input(channels: int) -> None:
    # ALE's input stream hands out the same arrays step after step (FakePong's does not):
    # the recorder must keep copies, or every step would hold the episode's last pixels.
    from pong_mp.envs import make_training_env
    from pong_mp.episode import run_episode

    env, stream = make_training_env("ALE/Pong-v5")
    _, weights = _weights(0, channels)
    recorder = ppo.TrajectoryRecorder(policy.NetShape(HIDDEN, channels))
    recorder.start(weights)
    seen: list[tuple[np.ndarray, np.ndarray]] = []

    def p_up(idx: np.ndarray, vals: np.ndarray) -> float:
        seen.append((idx.copy(), vals.copy()))
        return recorder.forward(idx, vals)

    try:
        run_episode(env, stream, 7, p_up, lambda a, p, reward: recorder.add(a, reward))
    finally:
        env.close()
    trajectory = recorder.finish(0.99, 0.95)
    assert trajectory.steps == len(seen) > 500
    assert sum(len(idx) > 0 for idx, _ in seen) > 400
    for t, (idx, vals) in enumerate(seen):
        got_idx, got_vals, _ = trajectory.inputs(np.array([t]))
        np.testing.assert_array_equal(got_idx, idx)
        np.testing.assert_array_equal(got_vals, vals)


def test_an_entropy_penalty_makes_a_forked_policy_commit(tmp_path: Path, clean_system) -> None:
    # A bonus and a penalty of the same size, forked from the same weights, against the run
    # that forked going on without either: the penalty's last batch is played with the least
    # entropy, the bonus's with the most (here about 0.20, 0.66 and 0.69 nats; a sign lost
    # on the way makes them equal or reversed). A high lr moves the policy off the coin toss,
    # where the entropy's slope is 0.
    base = {**CONV, "backend": "serial", "workers": 1, "lr": 0.01}
    train(fake_config(tmp_path / "base", batches=2, **base), log=_quiet)
    last = {}
    for beta in (1.0, -1.0):
        run_dir = tmp_path / f"beta{beta}"
        given = {"fork_from": str(tmp_path / "base"), "entropy_bonus": beta}
        train(fake_config(run_dir, batches=8, **base, **given), log=_quiet)
        records = read_metrics(run_dir / "metrics.jsonl")
        assert [r["batch"] for r in records] == list(range(1, 9))
        last[beta] = records[-1]["entropy"]
    train(fake_config(tmp_path / "base", batches=8, **base), resume=True, log=_quiet)
    records = read_metrics(tmp_path / "base" / "metrics.jsonl")
    assert records[-1]["batch"] == 8
    assert last[-1.0] < records[-1]["entropy"] < last[1.0]


def test_an_entropy_drop_gives_the_bytes_of_a_fork_with_each_of_its_values_where_it_falls(
    tmp_path: Path, clean_system
) -> None:
    # One point: a penalty from it, as a run forked there with that --entropy-bonus trains.
    # Two: a penalty from the first, then a bonus again from the second, as a fork of that
    # fork at the second.
    base = {**CONV, "backend": "serial", "workers": 1}
    one = tmp_path / "one"
    penalty_from_300 = {"entropy_drop_at": 300.0, "entropy_drop_to": -0.5}
    train(fake_config(one, batches=5, **base, **penalty_from_300), log=_quiet)
    records = read_metrics(one / "metrics.jsonl")
    before = [r["total_steps"] - r["steps"] for r in records]
    first = next(k for k, steps in enumerate(before) if steps >= 300)  # the first dropped
    assert 0 < first < 3  # both points fall inside the run, not at its start
    beta = fake_config(tmp_path, **base).entropy_bonus
    assert beta not in (-0.5, 0.25)
    assert [r["entropy_bonus"] for r in records] == [beta] * first + [-0.5] * (5 - first)
    second = before[first + 1]  # the update after the first dropped one starts here
    two = tmp_path / "two"
    points = {"entropy_drop_at": (300.0, second), "entropy_drop_to": (-0.5, 0.25)}
    train(fake_config(two, batches=5, **base, **points), log=_quiet)
    weights = [r["entropy_bonus"] for r in read_metrics(two / "metrics.jsonl")]
    assert weights == [beta] * first + [-0.5] + [0.25] * (4 - first)
    source, penalty, hold = tmp_path / "source", tmp_path / "penalty", tmp_path / "hold"
    train(fake_config(source, batches=first, **base), log=_quiet)
    at_first = {"fork_from": str(source), "entropy_bonus": -0.5}
    train(fake_config(penalty, batches=first + 1, **base, **at_first), log=_quiet)
    at_second = {"fork_from": str(penalty), "entropy_bonus": 0.25}
    train(fake_config(hold, batches=5, **base, **at_second), log=_quiet)
    assert checkpoint_weights(hold) == checkpoint_weights(two)
    train(fake_config(penalty, batches=5, **base, **at_first), resume=True, log=_quiet)
    assert checkpoint_weights(penalty) == checkpoint_weights(one)
    train(fake_config(source, batches=5, **base), resume=True, log=_quiet)  # no drop
    assert len({checkpoint_weights(run) for run in (source, one, two)}) == 3  # each counts
