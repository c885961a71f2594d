"""Backends: same bytes whatever plays the episodes, and faults that cost nothing."""

from __future__ import annotations

import os
import signal
import threading
import time
from types import SimpleNamespace

import numpy as np
import pytest

from pong_mp import policy
from pong_mp.backends import RolloutSpec, WorkerError, make_backend
from pong_mp.backends.base import RemoteTraceback, skip_stall
from pong_mp.batch_sum import BatchSum, GroupSum
from pong_mp.episode import make_tasks
from tests.fault_envs import CRASHING_PONG, SLOW_PONG
from tests.helpers import (
    SPEC_SHAPE,
    episode_stats,
    fake_spec,
    new_backend,
    play_batch,
    play_batches,
    pong_processes,
    run_batch,
    sum_batch,
)


@pytest.mark.parametrize(
    ("backend", "workers"),
    [("serial", 1), ("local", 1), ("local", 3), pytest.param("ray", 2, marks=pytest.mark.ray)],
)
def test_same_bytes_on_every_backend_and_worker_count(
    backend: str, workers: int, reference, clean_system
) -> None:
    assert play_batches(backend, fake_spec(workers=workers)) == reference


def test_local_workers_are_named_processes(clean_system) -> None:
    backend = make_backend("local", fake_spec(workers=2))
    backend.start()
    try:
        pids = backend.worker_pids()
        assert len(pids) == 2 and os.getpid() not in pids
        names = [w.process.name for w in backend._workers]
        assert names == ["pong-mp-worker-0", "pong-mp-worker-1"]
        assert pong_processes() >= set(pids)  # the name the OS shows, too
    finally:
        backend.close()


@pytest.mark.parametrize("name", ["serial", "local", pytest.param("ray", marks=pytest.mark.ray)])
def test_weights_filled_in_a_backends_room_play_as_published(name: str, clean_system) -> None:
    spec = fake_spec(workers=1)
    params = policy.init_params(spec.shape, 3)
    with new_backend("serial", spec) as serial:
        want, _ = play_batch(serial, params, make_tasks(0, 0, 2))
    backend = new_backend(name, spec)
    with backend:
        backend.publish(0, np.zeros(len(params), np.float32))
        room = backend.weights_room()
        if name == "serial":  # no shared slot: it copies what it is given
            assert room is None
            got, _ = play_batch(backend, params, make_tasks(0, 0, 2))
        else:  # the local pool's slot, or the Ray leader's on this machine
            assert room is not None and room.dtype == np.float32 and room.flags.writeable
            room[:] = params  # as the optimizer step writes it
            backend.publish(1, room)
            tasks = make_tasks(0, 0, 2)
            backend.submit(1, tasks)
            got, _ = sum_batch(backend.results(), tasks)
    assert got == want


BACKENDS_WITH_WORKERS = ["local", pytest.param("ray", marks=pytest.mark.ray)]


@pytest.mark.parametrize("name", BACKENDS_WITH_WORKERS)
def test_a_killed_worker_is_replaced_and_its_episode_replayed(
    name: str, reference, clean_system
) -> None:
    spec = fake_spec(SLOW_PONG, workers=2, env_kwargs={"delay": 0.002})
    backend = new_backend(name, spec)
    backend.start()
    killed = []

    def kill_one_mid_episode() -> None:
        time.sleep(0.5)  # the first episodes take longer than this
        pid = backend.worker_pids()[0]
        os.kill(pid, signal.SIGKILL)
        killed.append(pid)

    try:
        out = []
        for b in range(2):
            if b == 0:
                threading.Thread(target=kill_one_mid_episode).start()
            params = policy.init_params(SPEC_SHAPE, b)
            out.append(play_batch(backend, params, make_tasks(1, b * 5, 5)))
        assert killed and killed[0] not in backend.worker_pids()
        assert backend.replacements == 1
    finally:
        backend.close()
    assert out == reference


@pytest.mark.parametrize(
    ("name", "mode"),
    [
        ("serial", "raise"),
        ("serial", "exit"),
        ("local", "raise"),
        ("local", "kill"),
        ("local", "exit"),
        pytest.param("ray", "raise", marks=pytest.mark.ray),
    ],
)
def test_a_failure_inside_an_episode_is_retried(
    name: str, mode: str, reference, clean_system
) -> None:
    # Each env instance fails in its second episode; the retry goes through.
    crash = {"crash_episodes": (1,), "mode": mode}
    spec = fake_spec(CRASHING_PONG, workers=2, env_kwargs=crash)
    assert play_batches(name, spec) == reference


def test_a_hung_worker_is_replaced(reference, clean_system) -> None:
    spec = fake_spec(
        CRASHING_PONG,
        workers=2,
        episode_timeout=1.5,
        env_kwargs={"crash_episodes": (2,), "mode": "hang"},
    )
    assert play_batches("local", spec) == reference


def test_a_worker_whose_pipe_closes_before_it_exits_is_named_by_its_exit_code(
    clean_system,
) -> None:
    # Its pipe's end comes first: the death was named "exit code None" before it was over.
    crash = {"crash_episodes": (0,), "mode": "close"}
    spec = fake_spec(CRASHING_PONG, workers=1, max_retries=0, env_kwargs=crash)
    with pytest.raises(WorkerError, match=r"lost its worker 1 times \(last: died \(exit code 7"):
        play_batches("local", spec, batches=1, batch_size=1)


def _slow_starting_spec() -> RolloutSpec:
    """One worker whose env takes 3 s to build and which hangs in its third episode; an
    episode may last 2 s (a 2-point game takes a fraction of that, even on a loaded
    machine), and is played at most twice."""
    return fake_spec(
        CRASHING_PONG,
        workers=1,
        episode_timeout=2.0,
        max_retries=1,
        env_kwargs={"crash_episodes": (2,), "mode": "hang", "start_seconds": 3.0},
    )


def test_a_replacement_slower_to_start_than_the_episode_timeout_is_not_judged_hung(
    clean_system,
) -> None:
    # The replacement builds its env for longer than an episode may last: only the episode,
    # from the moment the worker is ready, counts against --episode-timeout. One batch of 3
    # episodes: one hang, one replacement (each replacement hangs in its own third episode).
    spec = _slow_starting_spec()
    played = play_batches("serial", fake_spec(), batches=1, batch_size=3)
    assert play_batches("local", spec, batches=1, batch_size=3) == played


def test_a_replacement_that_does_not_start_is_replaced_in_turn(
    monkeypatch, clean_system
) -> None:
    import pong_mp.backends.local as local

    spec = _slow_starting_spec()
    backend = new_backend("local", spec)
    backend.start()
    monkeypatch.setattr(local, "_START_SECONDS", 1.0)  # replacements now start too slowly
    try:
        with pytest.raises(WorkerError, match=r"episode 2 lost its worker 2 times \(last: did"):
            list(run_batch(backend, policy.init_params(SPEC_SHAPE, 0), make_tasks(1, 0, 4)))
    finally:
        backend.close()


def test_a_worker_the_system_will_not_start_is_one_error_and_leaks_nothing(
    monkeypatch, clean_system
) -> None:
    import errno
    import multiprocessing.context

    start = multiprocessing.context.SpawnProcess.start
    started: list[object] = []

    def start_one_only(process: multiprocessing.context.SpawnProcess) -> None:
        if started:  # as a limit on open files or processes refuses the second
            raise OSError(errno.EMFILE, os.strerror(errno.EMFILE))
        started.append(process)
        start(process)

    monkeypatch.setattr(multiprocessing.context.SpawnProcess, "start", start_one_only)
    backend = new_backend("local", fake_spec(workers=2))
    with pytest.raises(WorkerError, match=r"^cannot start worker process 1: Too many open files$"):
        backend.start()
    backend.close()
    assert len(started) == 1 and not started[0].is_alive()  # the one started is stopped


@pytest.mark.parametrize("name", ["serial", *BACKENDS_WITH_WORKERS])
def test_a_persistent_error_stops_with_the_worker_traceback(name: str, clean_system) -> None:
    spec = fake_spec(
        CRASHING_PONG,
        workers=2,
        max_retries=2,
        env_kwargs={"crash_episodes": tuple(range(100))},
    )
    backend = new_backend(name, spec)
    backend.start()
    try:
        with pytest.raises(WorkerError, match=r"episode \d+ failed 3 times") as info:
            list(run_batch(backend, policy.init_params(SPEC_SHAPE, 0), make_tasks(1, 0, 4)))
    finally:
        backend.close()
    cause = info.value.__cause__
    assert isinstance(cause, RemoteTraceback)
    assert "fault_envs.py" in cause.tb  # the frames of the worker's own stack
    assert "RuntimeError: CrashingPong: planned failure" in cause.tb
    assert "\x1b[" not in cause.tb  # plain text, fit for a log


def test_a_worker_that_cannot_start_reports_why(clean_system) -> None:
    spec = fake_spec(env_kwargs={"points_to_win": 0})  # FakePong refuses this
    backend = make_backend("local", spec)
    with pytest.raises(WorkerError, match="failed to start") as info:
        backend.start()  # cleans up after itself: clean_system checks
    assert "points_to_win must be >= 1" in info.value.__cause__.tb


def test_close_twice_is_harmless(clean_system) -> None:
    backend = make_backend("local", fake_spec(workers=1))
    backend.start()
    backend.close()
    backend.close()


def test_a_batch_left_unfinished_leaves_nothing_for_the_next(clean_system) -> None:
    spec = fake_spec(SLOW_PONG, workers=2, env_kwargs={"delay": 0.001})
    params = policy.init_params(SPEC_SHAPE, 0)
    with make_backend("serial", spec) as serial:
        expected = play_batch(serial, params, make_tasks(1, 10, 4))
    with make_backend("local", spec) as backend:
        batch = run_batch(backend, params, make_tasks(1, 0, 6))
        next(batch)  # one result; the other worker is still playing
        batch.close()  # the caller leaves the batch
        assert backend.replacements == 0
        # The next batch gets only its own episodes, with the same bytes as anywhere.
        assert play_batch(backend, params, make_tasks(1, 10, 4)) == expected


def _play_in_flight(backend, batches, kill_after: int | None = None):
    """Publish each (version, params), submit every batch at once, and sum the items by
    batch: [(bytes, episodes)] per batch, as `play_batch` gives them one at a time. With
    `kill_after`, a worker is killed once that many items have come back."""
    for version, params, _ in batches:
        backend.publish(version, params.astype(np.float32))
    for version, _, tasks in batches:
        backend.submit(version, tasks)
    by_first = {tasks[0].index: [] for _, _, tasks in batches}
    size = len(batches[0][2])
    width = policy.param_count(SPEC_SHAPE)
    summed = {first: BatchSum(first, size, np.empty(width)) for first in by_first}
    for count, item in enumerate(backend.results(), 1):
        if isinstance(item, GroupSum):
            summed[item.first_index].add(item)
        else:
            stats = episode_stats(item)
            first = stats.index // size * size
            summed[first].add(item)
            by_first[first].append((stats.index, stats.steps, stats.reward_sum))
        if count == kill_after:
            os.kill(backend.worker_pids()[0], signal.SIGKILL)
    assert all(s.complete for s in summed.values())
    return [(summed[f].total.tobytes(), sorted(by_first[f])) for f in by_first]


@pytest.mark.parametrize(
    ("name", "kill_after"),
    [
        ("serial", None),
        ("local", None),
        ("local", 2),
        pytest.param("ray", None, marks=pytest.mark.ray),
        pytest.param("ray", 2, marks=pytest.mark.ray),
    ],
)
def test_batches_in_flight_play_with_their_own_weights(
    name: str, kill_after: int | None, reference, clean_system
) -> None:
    # The reference batches, played one at a time with weights 0 then 1, submitted at once
    # with a lag of 1: each with its own weights version, whoever plays it, a killed
    # worker included.
    batches = [(v, policy.init_params(SPEC_SHAPE, v), make_tasks(1, v * 5, 5)) for v in (0, 1)]
    spec = fake_spec(SLOW_PONG, workers=3, lag=1, env_kwargs={"delay": 0.001})
    with new_backend(name, spec) as backend:
        assert _play_in_flight(backend, batches, kill_after) == reference
        if kill_after is not None:
            assert backend.replacements == 1


def test_a_lag_keeps_only_its_versions() -> None:
    spec = fake_spec(lag=1)
    with make_backend("local", spec) as backend:
        params = policy.init_params(SPEC_SHAPE, 0).astype(np.float32)
        for version in range(3):
            backend.publish(version, params)
        with pytest.raises(ValueError, match="version 0 was not published"):
            backend.submit(0, make_tasks(1, 0, 1))
        backend.submit(1, make_tasks(1, 0, 1))  # the last two are kept
        assert len(list(backend.results())) == 1


def test_a_local_worker_goes_on_with_the_next_batch(clean_system) -> None:
    # Two workers, a batch of three episodes, then another: the worker that is free while
    # the first batch's last episode plays takes the second batch's first.
    spec = fake_spec(SLOW_PONG, workers=2, lag=1, env_kwargs={"delay": 0.001})
    params = policy.init_params(SPEC_SHAPE, 0).astype(np.float32)
    with make_backend("local", spec) as backend:
        sent: list[int] = []
        send = backend._send
        backend._send = lambda w, job: (sent.append(job.task.index), send(w, job))[1]
        backend.publish(0, params)
        backend.submit(0, make_tasks(1, 0, 3))
        backend.submit(0, make_tasks(1, 3, 3))
        arrivals = [(item.stats.index, list(sent)) for item in backend.results()]
    last_of_first = max(i for i, (index, _) in enumerate(arrivals) if index < 3)
    assert 3 in arrivals[last_of_first][1]
    assert sorted(index for index, _ in arrivals) == list(range(6))


def test_a_stall_is_taken_off_the_episode_clocks() -> None:
    # Last checked at 101, now 111: a clock started before the check skips the whole gap,
    # one started within it skips what it ran through; a gap of 2 s is no stall.
    clocks = [SimpleNamespace(since=100.0), SimpleNamespace(since=104.0)]
    skip_stall(clocks, checked=101.0, now=111.0)
    assert [c.since for c in clocks] == [110.0, 111.0]
    skip_stall(clocks, checked=111.0, now=113.0)
    assert [c.since for c in clocks] == [110.0, 111.0]
