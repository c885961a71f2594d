"""Shared fixtures: a clean /dev/shm and process table after every test that asks for it, a
small run's checkpoint, and the serial backend's batches that every backend must give.
The helpers they use are in helpers.py."""

from __future__ import annotations

import os
import signal
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.helpers import (
    fake_config,
    fake_spec,
    kill_started,
    play_batches,
    pong_shm_blocks,
    train,
    wait_until_clean,
)

# The stop signals as a terminal gives them. A shell ignores SIGINT in a job it starts in
# the background (`bin/test &` in a script), nohup ignores SIGHUP, and pong-mp rightly
# leaves a signal ignored on the way in: the processes the tests start would inherit that,
# and every test of a stop would fail.
for _signum, _handler in (
    (signal.SIGINT, signal.default_int_handler),
    (signal.SIGTERM, signal.SIG_DFL),
    (signal.SIGHUP, signal.SIG_DFL),
):
    if signal.getsignal(_signum) == signal.SIG_IGN:
        signal.signal(_signum, _handler)
# Ray, where tests start it, must not try to send usage reports from a machine without a
# network.
os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
# Names this pytest run in the environment of every process it starts, so that leak checks
# leave alone the workers of another run beside it (bin/test runs the Ray tests beside the
# others): helpers.LANE_VARIABLES.
os.environ.setdefault("PONG_MP_TEST_RUN", str(os.getpid()))
# Child processes (the command, scripts, Ray's workers and nodes) make the fault envs by
# their module path, tests.fault_envs: it must be importable wherever they start.
_ROOT = str(Path(__file__).resolve().parents[1])
if _ROOT not in os.environ.get("PYTHONPATH", "").split(os.pathsep):
    os.environ["PYTHONPATH"] = os.pathsep.join(
        p for p in (_ROOT, os.environ.get("PYTHONPATH")) if p
    )


def _shares_ray(item: pytest.Item | None) -> bool:
    """Whether a test runs its backends on the tests' shared Ray instance."""
    return (
        item is not None
        and item.get_closest_marker("ray") is not None
        and item.get_closest_marker("own_ray") is None
    )


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """The tests on the shared Ray instance run one after another, then those that start
    Ray their own way, so that the instance starts once (bin/test runs them all in one
    process of their own, after the others). Under pytest-xdist, the tests that start Ray
    all run in one process: one Ray instance at a time."""

    def rank(item: pytest.Item) -> int:
        if item.get_closest_marker("own_ray"):
            return 2
        return 1 if _shares_ray(item) else 0

    items.sort(key=rank)
    for item in items:
        if item.get_closest_marker("ray"):
            item.add_marker(pytest.mark.xdist_group("ray"))


@pytest.hookimpl(trylast=True)
def pytest_runtest_teardown(item: pytest.Item, nextitem: pytest.Item | None) -> None:
    """Stops the shared Ray instance once the next test will not use it: it costs CPU while
    idle, and a test that starts Ray its own way needs none running."""
    if _shares_ray(item) and not _shares_ray(nextitem):
        ray = sys.modules.get("ray")
        if ray is not None and ray.is_initialized():
            ray.shutdown()


SHARED_RAY_CPUS = 4
"""Ray CPUs of the tests' shared instance: the most workers a test's Ray backend asks for."""


@pytest.fixture(autouse=True)
def ray_of_the_test(request: pytest.FixtureRequest) -> None:
    """Tests marked ray run their backends on one Ray instance in this process, which a
    backend joins and leaves running (Ray's start and stop cost seconds a test); those also
    marked own_ray (a cluster of their own, or a command that starts Ray) run with none."""
    if request.node.get_closest_marker("ray") is None:
        return
    ray = pytest.importorskip("ray")
    if request.node.get_closest_marker("own_ray"):
        if ray.is_initialized():
            ray.shutdown()
        return
    from pong_mp.backends import ray_cluster

    ray_cluster.connect(None, num_cpus=SHARED_RAY_CPUS)  # SIGTERM's handler kept


@pytest.fixture(autouse=True)
def no_command_left_running() -> Iterator[None]:
    """Kills the commands a test started in the background and left running (it failed
    waiting on them), after the test's other fixtures have looked: set up first, so torn
    down last."""
    yield
    kill_started()


@pytest.fixture
def clean_system() -> Iterator[None]:
    """Fails the test if it leaves pong-mp shared memory or worker processes behind."""
    before = pong_shm_blocks()
    yield
    shm, procs = wait_until_clean(before)
    assert not shm, f"leaked shared memory: {shm}"
    assert not procs, f"orphan worker processes: {procs}"


@pytest.fixture(scope="session")
def fake_checkpoint(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """checkpoint.npz of a one-update FakePong run (2-point games, 8 hidden units)."""
    run_dir = tmp_path_factory.mktemp("fake-run")
    config = fake_config(
        run_dir, backend="serial", batch_size=2, batches=1, hidden=8, seed=0, checkpoint_every=10
    )
    train(config, log=lambda line: None)
    return run_dir / "checkpoint.npz"


@pytest.fixture(scope="session")
def reference() -> list[tuple[bytes, list[tuple[int, int, float]]]]:
    """Two batches of `fake_spec` on the serial backend (helpers.play_batches): what every
    other backend must reproduce."""
    return play_batches("serial", fake_spec())
