"""The Ray backend beyond what test_backends checks for every backend (determinism, a
killed worker, retried and persistent failures): a two-node cluster, and joining a cluster
from the command line. Skipped only where Ray is not installed.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np
import pytest

from pong_mp import policy
from pong_mp.backends import WorkerError, make_backend
from pong_mp.batch_sum import GROUP, GroupSum
from pong_mp.episode import EpisodeStats, make_tasks
from tests.helpers import (
    SPEC_SHAPE,
    fake_config,
    fake_spec,
    play_batch,
    pong_mp,
    run_batch,
    running,
    start,
    sum_batch,
)

ray = pytest.importorskip("ray")
pytestmark = pytest.mark.ray


@pytest.mark.own_ray
def test_a_two_node_cluster_gives_the_same_bytes_and_sums_the_groups_on_its_nodes(
    reference, clean_system
) -> None:
    from ray.cluster_utils import Cluster

    # Then three groups (30, 30 and 3 episodes) of one-point games, on the same two nodes.
    count = 2 * GROUP + 3
    spec = fake_spec(workers=2, env_kwargs={"points_to_win": 1})
    tasks = make_tasks(3, 7, count)
    params = policy.init_params(SPEC_SHAPE, 4)
    local = make_backend("local", spec)
    local.start()
    try:
        expected = play_batch(local, params, tasks)
    finally:
        local.close()
    cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 1})
    cluster.add_node(num_cpus=1)
    try:
        ray.init(address=cluster.address, log_to_driver=False)
        assert len([n for n in ray.nodes() if n["Alive"]]) == 2
        backend = make_backend("ray", fake_spec(workers=2))
        backend.start()
        try:
            assert len(set(backend.actor_nodes())) == 2  # one leader on each node
            # The driver's machine's leader through shared memory, the other's through Ray.
            assert sorted(leader.weights is not None for leader in backend._leaders) == [
                False,
                True,
            ]
            out = [
                play_batch(backend, policy.init_params(SPEC_SHAPE, b), make_tasks(1, b * 5, 5))
                for b in range(2)
            ]
        finally:
            backend.close()
        assert out == reference
        backend = make_backend("ray", spec)
        backend.start()
        try:
            items = list(run_batch(backend, params, tasks))
        finally:
            backend.close()
    finally:
        ray.shutdown()
        cluster.shutdown()
    assert sum_batch(items, tasks) == expected
    # The driver got no episode's gradient: only the three groups' sums.
    assert [type(i).__name__ for i in items].count("GroupSum") == 3
    assert all(i.grad is not None for i in items if isinstance(i, GroupSum))
    assert all(isinstance(i, EpisodeStats) for i in items if not isinstance(i, GroupSum))
    assert backend.group_sums == 3


def test_a_lost_leader_is_replaced_and_its_episodes_played_again(
    reference, clean_system, caplog
) -> None:
    backend = make_backend("ray", fake_spec(workers=2))
    backend.start()
    try:
        first = play_batch(backend, policy.init_params(SPEC_SHAPE, 0), make_tasks(1, 0, 5))
        ray.kill(backend._leaders[0].actor)  # as if its node had gone, with its workers
        second = play_batch(backend, policy.init_params(SPEC_SHAPE, 1), make_tasks(1, 5, 5))
    finally:
        backend.close()
    assert [first, second] == reference
    assert "episodes 5..: its node's leader died" in caplog.text
    assert backend.replacements == 1
    assert backend.group_sums == 2  # one per batch: the lost call's results never came


def test_a_private_instance_runs_its_workers_at_the_drivers_priority(clean_system) -> None:
    # Ray's own niceness for workers, 15, left a node leader's pool a small share of a
    # machine busy with other work.
    backend = make_backend("ray", fake_spec(workers=2))
    backend.start()
    try:
        play_batch(backend, policy.init_params(SPEC_SHAPE, 0), make_tasks(1, 0, 2))
        pids = backend.worker_pids()
        priorities = [os.getpriority(os.PRIO_PROCESS, pid) for pid in pids]
    finally:
        backend.close()
    assert len(pids) == 2
    assert priorities == [os.getpriority(os.PRIO_PROCESS, 0)] * 2


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _ray_cli(*args: str) -> subprocess.CompletedProcess:
    ray_bin = Path(sys.executable).with_name("ray")
    return subprocess.run([str(ray_bin), *args], capture_output=True, text=True, timeout=120)


@pytest.mark.own_ray
def test_train_joins_a_cluster_started_with_ray_start(tmp_path: Path, clean_system) -> None:
    port = _free_port()
    head = _ray_cli(
        "start",
        "--head",
        "--node-ip-address=127.0.0.1",
        f"--port={port}",
        "--num-cpus=2",
        "--include-dashboard=false",
        "--disable-usage-stats",
    )
    assert head.returncode == 0, head.stderr
    try:
        args = (
            "train --env FakePong-v0 --env-arg points_to_win=2 --hidden 16 --channels 4 "
            "--batch-size 4 --batches 3 --seed 1 --workers 2"
        ).split()
        joined = pong_mp(
            *args, "--ray-address", f"127.0.0.1:{port}", "--run-dir", str(tmp_path / "ray")
        )
        assert joined.returncode == 0, joined.stderr
    finally:
        _ray_cli("stop")
    local = pong_mp(*args, "--backend", "local", "--run-dir", str(tmp_path / "local"))
    assert local.returncode == 0, local.stderr
    weights = []
    for name in ("ray", "local"):
        with np.load(tmp_path / name / "checkpoint.npz", allow_pickle=False) as npz:
            weights.append(npz["W1"].tobytes() + npz["W2"].tobytes())
    assert weights[0] == weights[1]
    assert '"backend": "ray"' in (tmp_path / "ray" / "config.json").read_text()


@pytest.mark.own_ray
def test_without_ray_address_a_private_instance_starts_whatever_ray_address_says(
    tmp_path: Path, clean_system
) -> None:
    # Ray's own ray.init() would try to join RAY_ADDRESS (and refuse num_cpus with a
    # traceback); only --ray-address joins a cluster.
    args = "train --env FakePong-v0 --env-arg points_to_win=1 --batch-size 2 --batches 1"
    done = subprocess.run(
        [sys.executable, "-m", "pong_mp", *args.split(), "--backend", "ray", "--workers", "1",
         "--run-dir", str(tmp_path / "R")],
        capture_output=True, text=True, timeout=120,
        env={**os.environ, "RAY_ADDRESS": f"127.0.0.1:{_free_port()}"},
    )
    assert done.returncode == 0, done.stderr
    assert "on a private Ray instance (RAY_ADDRESS is not read: --ray-address 127.0.0.1:" in (
        done.stdout
    )
    assert (tmp_path / "R" / "checkpoint.npz").exists()


@pytest.mark.own_ray
def test_an_unreachable_cluster_is_one_line_and_quick(tmp_path: Path) -> None:
    start = time.monotonic()
    done = pong_mp(
        "train",
        "--env",
        "FakePong-v0",
        "--ray-address",
        f"127.0.0.1:{_free_port()}",
        "--run-dir",
        str(tmp_path / "R"),
    )
    assert time.monotonic() - start < 30
    assert done.returncode == 2 and done.stderr.count("\n") == 1
    assert "cannot reach a Ray cluster at 127.0.0.1:" in done.stderr
    assert not (tmp_path / "R").exists()



def _listen(answer: bytes | None) -> socket.socket:
    """A server on a free loopback port that accepts, reads, and then sends `answer` and
    closes, or (None) says nothing: a port held by something other than a Ray cluster."""
    server = socket.create_server(("127.0.0.1", 0))
    held: list[socket.socket] = []

    def serve() -> None:
        with contextlib.suppress(OSError):
            while True:
                conn, _ = server.accept()
                held.append(conn)
                if answer is not None:
                    conn.recv(100)
                    conn.sendall(answer)
                    conn.close()

    threading.Thread(target=serve, daemon=True).start()
    return server


@pytest.mark.own_ray
@pytest.mark.parametrize(
    ("answer", "said"),
    [
        (None, "the port is open, but nothing on it answers"),
        (b"HTTP/1.1 400 Bad Request\r\n\r\n", "answered, but not as a Ray cluster"),
    ],
    ids=["silent", "http"],
)
def test_a_port_that_is_no_ray_cluster_is_one_line_and_quick(
    tmp_path: Path, answer: bytes | None, said: str
) -> None:
    # ray.init, on a port that accepts and never answers, waits in C++ for ever.
    server = _listen(answer)
    with server:
        address = f"127.0.0.1:{server.getsockname()[1]}"
        start = time.monotonic()
        done = pong_mp(
            "train", "--env", "FakePong-v0", "--ray-address", address, "--run-dir",
            str(tmp_path / "R"), timeout=60,
        )
    assert time.monotonic() - start < 30
    assert done.returncode == 2 and done.stderr.count("\n") == 1, done.stderr
    assert said in done.stderr
    assert not (tmp_path / "R").exists()


# Ray sets its SIGTERM handlers during ray.init: Python's exits at once (exit 15), and once
# the driver's core worker runs, a C++ one prints a stack dump first. The kill comes just
# after that start, where both would be in place.
_STOP_IN_RAY_INIT = """
import os, signal
import ray._private.worker as worker
from pong_mp import signals
from pong_mp.backends import ray_cluster

original = worker.connect
def connect(*args, **kwargs):
    result = original(*args, **kwargs)
    os.kill(os.getpid(), signal.SIGTERM)
    return result
worker.connect = connect
signals.raise_stop_signals()
ray_cluster.connect(None, 1)
try:
    signals.check_stop()
    print("no stop")
except signals.Interrupted as stop:
    print("stop", stop.signum)
ray_cluster.ray.shutdown()
"""


@pytest.mark.own_ray
def test_a_sigterm_while_ray_starts_is_the_runs_stop() -> None:
    done = subprocess.run(
        [sys.executable, "-c", _STOP_IN_RAY_INIT],
        capture_output=True, text=True, timeout=120,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout == f"stop {int(signal.SIGTERM)}\n"
    assert "SIGTERM received" not in done.stderr


@pytest.mark.own_ray
def test_a_killed_driver_leaves_no_process_of_its_ray_instance(tmp_path: Path) -> None:
    # Ray's two agents ignore SIGTERM and, their raylet gone, wait a minute on the dead GCS.
    from pong_mp.backends.ray_cluster import _descendants

    run = start(
        "train", "--env", "FakePong-v0", "--env-arg", "points_to_win=2", "--backend", "ray",
        "--workers", "1", "--batch-size", "2", "--no-tensorboard", "--run-dir",
        str(tmp_path / "R"),
    )
    assert run.stdout is not None
    for _ in range(2):  # the banner, then an update: the instance is up
        assert run.stdout.readline(), run.stderr and run.stderr.read()
    instance = _descendants(run.pid)
    run.kill()
    run.wait()
    deadline = time.monotonic() + 15
    while instance and time.monotonic() < deadline:
        time.sleep(0.5)
        instance = {p for p in instance if running(*p)}
    assert not instance


def test_the_actor_critic_sends_no_trajectory_back_to_where_it_was_played(
    tmp_path: Path, clean_system
) -> None:
    from pong_mp.state import TrainState
    from pong_mp.trainer import rollout_spec, updates

    # 2 updates of 3 episodes, each with 2 passes of 2 minibatches: 12 passes an update.
    config = fake_config(tmp_path, algo="ppo", optimizer="adam", epochs=2, minibatches=2)
    params = policy.with_value_head(policy.init_params(config.shape, 0), config.shape, True)
    zeros = np.zeros_like(params)
    state = TrainState(params=params, cache=zeros, momentum=zeros.copy())
    backend = make_backend("ray", rollout_spec(config))
    backend.start()
    try:
        stream = updates(config, state, backend)
        for _ in range(2):
            next(stream)
        last = range(config.batch_size, 2 * config.batch_size)
        assert sorted(backend._holder) == list(last)  # the last batch's only
    finally:
        backend.close()
    assert backend.data_sent == 0  # each pass went to the node that played its episode


def test_workers_fill_the_nodes_with_the_most_cpus_first() -> None:
    from pong_mp.backends.ray_cluster import plan_nodes

    cpus = {"b": 4, "a": 4, "head": 0, "c": 8}
    assert plan_nodes(10, cpus) == {"c": 8, "a": 2}  # equal CPUs: by node id
    assert plan_nodes(2, {"x": 1, "y": 1}) == {"x": 1, "y": 1}
    with pytest.raises(WorkerError, match="has 16 CPUs for workers, fewer than the 17"):
        plan_nodes(17, cpus)
