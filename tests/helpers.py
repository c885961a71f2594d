"""What several test modules share: running the command, a small FakePong run, a run's
weights, playing a batch on any backend, and finding pong-mp's leftovers (shared memory,
worker processes). Fixtures that use them are in conftest.py."""

from __future__ import annotations

import contextlib
import dataclasses
import itertools
import os
import subprocess
import sys
import threading
import time
import warnings
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from pong_mp import policy
from pong_mp.backends import Backend, RolloutSpec, make_backend
from pong_mp.backends.base import BackendItem, Task
from pong_mp.backends.shm import block_creator, pid_namespace
from pong_mp.batch_sum import BatchSum, GroupSum
from pong_mp.config import PRESETS, TrainConfig
from pong_mp.episode import EpisodeResult, EpisodeStats, EpisodeTask, make_tasks
from pong_mp.files import pid_alive
from pong_mp.learner import Stats, l2_norm, update_stats
from pong_mp.pg import PGLearner, PGWork
from pong_mp.progress import LineReporter
from pong_mp.rundir import open_run
from pong_mp.state import TrainState
from pong_mp.trainer import run

METRIC_FIELDS = frozenset(
    {"batch", "episodes", "steps", "reward_mean", "running_reward", "seconds", "steps_per_sec"}
)
"""Fields every metrics.jsonl line must have: the contract in DESIGN.md."""


# -- the command and its runs ------------------------------------------------------------------


def train(
    config: TrainConfig, *, resume: bool = False, log: Callable[[str], None] = print
) -> TrainState:
    """Train the run `config` describes, as `pong-mp train` does, with its progress lines going
    to `log`."""
    with open_run(Path(config.run_dir), resume, dataclasses.asdict(config)) as (config, state):
        return run(config, state, resumed=resume, reporter=LineReporter(log))


def apply(learner: PGLearner, state: TrainState, summed: BatchSum) -> tuple[TrainState, Stats]:
    """The state after one pg update from a batch's summed gradients, and its statistics, with
    no backend: what `PGLearner.update` does once the batch is summed."""
    new_state, _, grad, lr = learner.step(state, summed)
    return new_state, update_stats(state, new_state, summed, l2_norm(grad), lr)


def pong_mp(
    *args: str, timeout: float = 120, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess:
    """Run `python -m pong_mp ARGS` (with environment `env`, if given) and capture its
    output."""
    return subprocess.run(
        [sys.executable, "-m", "pong_mp", *args],
        capture_output=True, text=True, timeout=timeout, env=env,
    )


_HIDDEN_WARNINGS = (DeprecationWarning, PendingDeprecationWarning, ImportWarning, ResourceWarning)
"""What Python's default warning filters do not show, outside `__main__`."""


def pong_mp_here(*args: str) -> subprocess.CompletedProcess:
    """Run `pong-mp ARGS` in this process, as a notebook does (`pong_mp.cli.main(ARGS)`), and
    capture its output: for input refused before any work starts, where a new process would
    add only its half second of imports. An exception that escapes fails the test, as a
    traceback would, and so does a warning that a new process would print."""
    from click.testing import CliRunner

    from pong_mp.cli import main

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        for hidden in _HIDDEN_WARNINGS:
            warnings.simplefilter("ignore", hidden)
        done = CliRunner().invoke(main, args, prog_name="pong-mp", catch_exceptions=False)
    return subprocess.CompletedProcess(["pong-mp", *args], done.exit_code, done.stdout, done.stderr)


_started: list[subprocess.Popen] = []


def start(*args: str, group: bool = False) -> subprocess.Popen:
    """Start `python -m pong_mp ARGS` in the background, its output piped; with `group`, in
    a process group of its own, as a terminal starts a command (the test can then signal
    the whole group). One still running when its test ends is killed (`kill_started`)."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "pong_mp", *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=group,
    )
    _started.append(proc)
    return proc


def kill_started() -> None:
    """Kill the commands `start` started that still run (their test failed waiting on them):
    a run left training would load the tests after it. Its workers leave on their own."""
    while _started:
        proc = _started.pop()
        if proc.poll() is None:
            proc.kill()
            proc.communicate()


def signal_self(signum: int, settle: float = 0.01) -> None:
    """Send `signum` to this process and let its handler run before returning: in this
    thread, at the next bytecode at the latest; in another (`another_thread`), give it
    `settle` 0.2, the time a process's start takes on a loaded machine."""
    os.kill(os.getpid(), signum)
    time.sleep(settle)


class SignalsWhenDropped:
    """An object whose finalizer sends `signum` to this process: its handler runs inside the
    finalizer, where Python only prints an exception, as in a weakref callback of an import
    (drop it at once: `SignalsWhenDropped(signal.SIGINT)`)."""

    def __init__(self, signum: int) -> None:
        """See the class docstring."""
        self.signum = signum

    def __del__(self) -> None:
        signal_self(self.signum)


def fake_config(run_dir: Path, **overrides: Any) -> TrainConfig:
    """A small FakePong run's config (Karpathy's learner as --preset pg sets it, 2-point
    games, 16 hidden units, 3 updates of 3 episodes on 2 local workers, seed 4, a checkpoint
    every 2 updates); `overrides` replace any option. The pool's tests run the quicker
    learner: what they test does not depend on it, and test_ppo.py runs the actor-critic."""
    base: dict[str, Any] = PRESETS["pg"] | dict(
        env="FakePong-v0",
        env_kwargs={"points_to_win": 2},
        workers=2,
        batch_size=3,
        batches=3,
        hidden=16,
        seed=4,
        run_dir=str(run_dir),
        checkpoint_every=2,
    )
    return TrainConfig(**{**base, **overrides})


def checkpoint_weights(run_dir: Path) -> bytes:
    """The bytes of the weights in a run directory's checkpoint: W1, W2 and, with a value
    head or --policy conv's filters, those."""
    with np.load(Path(run_dir) / "checkpoint.npz", allow_pickle=False) as npz:
        extra = [npz[key].tobytes() for key in ("value", "conv") if key in npz.files]
        return b"".join([npz["W1"].tobytes(), npz["W2"].tobytes(), *extra])


# -- backends ------------------------------------------------------------------------------------

SPEC_SHAPE = policy.NetShape(16)
"""The shape of `fake_spec`'s policy: 16 hidden units on the pixels."""


def fake_spec(env_id: str = "FakePong-v0", workers: int = 2, **kwargs: Any) -> RolloutSpec:
    """A rollout spec of 2-point games and a SPEC_SHAPE policy for pg's workers (unless
    `kwargs` give a `learner`); `kwargs` go to RolloutSpec, and its env_kwargs add to the
    game's."""
    env_kwargs = {"points_to_win": 2, **kwargs.pop("env_kwargs", {})}
    return RolloutSpec(
        env_id=env_id,
        shape=SPEC_SHAPE,
        learner=kwargs.pop("learner", PGWork(0.99)),
        workers=workers,
        env_kwargs=env_kwargs,
        **kwargs,
    )


def new_backend(name: str, spec: RolloutSpec) -> Backend:
    """The backend `name`; skips the test where it needs Ray and Ray is not installed."""
    if name == "ray":
        pytest.importorskip("ray")
    return make_backend(name, spec)


def episode_stats(item: EpisodeResult | EpisodeStats) -> EpisodeStats:
    """The statistics of a backend's episode item, with its gradient or without."""
    return item.stats if isinstance(item, EpisodeResult) else item


Episodes = list[tuple[int, int, float]]
"""A batch's episodes as (index, steps, reward), in index order."""


_batch_versions = itertools.count(-2, -1)  # negative: never a trainer's update number


def run_batch(backend: Backend, params: np.ndarray, tasks: list[Task]) -> Iterator[BackendItem]:
    """Play `tasks` with float64 `params` and nothing else in flight; yield the results as
    `backend.results` does. Leaving early cancels what is left of the batch."""
    version = next(_batch_versions)
    backend.publish(version, params.astype(np.float32))
    backend.submit(version, tasks)
    finished = False
    try:
        yield from backend.results()
        finished = True
    finally:
        if not finished:
            backend.cancel()


def play_batch(
    backend: Backend, params: np.ndarray, tasks: list[EpisodeTask]
) -> tuple[bytes, Episodes]:
    """One batch as the trainer sums it: (the summed gradient's bytes, the episodes'
    (index, steps, reward) in order). Results come in any order, each exactly once; a
    gradient is read on arrival (the local backend reuses its worker's slot)."""
    return sum_batch(run_batch(backend, params, tasks), tasks)


def sum_batch(
    items: Iterable[EpisodeResult | EpisodeStats | GroupSum], tasks: list[EpisodeTask]
) -> tuple[bytes, Episodes]:
    """What play_batch gives, from the items run_batch yielded for `tasks`.
    Items kept in a list must stay valid: Ray's do, the local backend's gradients do not."""
    summed = BatchSum(tasks[0].index, len(tasks), np.empty(policy.param_count(SPEC_SHAPE)))
    episodes = []
    for item in items:
        summed.add(item)
        if not isinstance(item, GroupSum):  # an episode, with or without its gradient
            stats = episode_stats(item)
            episodes.append((stats.index, stats.steps, stats.reward_sum))
    assert summed.complete
    return summed.total.tobytes(), sorted(episodes)


def play_batches(
    backend_name: str, spec: RolloutSpec, batches: int = 2, batch_size: int = 5
) -> list[tuple[bytes, Episodes]]:
    """What `batches` batches give on a new backend, with other weights for each."""
    backend = new_backend(backend_name, spec)
    backend.start()
    try:
        out = []
        for b in range(batches):
            tasks = make_tasks(1, b * batch_size, batch_size)
            out.append(play_batch(backend, policy.init_params(SPEC_SHAPE, b), tasks))
            assert [e[0] for e in out[-1][1]] == [t.index for t in tasks]
        return out
    finally:
        backend.close()


# -- agents -------------------------------------------------------------------------------------


def assert_agent_acts_as(
    agent: Any,
    params: np.ndarray,
    shape: policy.NetShape,
    steps: int,
) -> list[int]:
    """Play `steps` steps of FakePong with `agent` (greedy) and check each action is the one
    the dense reference policy of flat `params` of `shape` takes on
    the frame difference; return the actions."""
    from pong_mp.envs import make_env

    w1t, w2 = policy.split(params, shape)
    kernel = policy.conv_kernel(params, shape)
    env = make_env("FakePong-v0", points_to_win=1)
    obs, _ = env.reset(seed=3)
    agent.reset()
    previous = None
    actions = []
    for _ in range(steps):
        frame = policy.preprocess(obs)
        x = np.zeros_like(frame) if previous is None else frame - previous
        previous = frame
        if kernel is not None:
            x = policy.conv_features(kernel, x)
        h = np.maximum(x @ w1t, 0.0)
        p_up = policy.logistic(float(h @ w2))
        action = agent.act(obs, greedy=True)
        assert action == (policy.UP if p_up >= 0.5 else policy.DOWN)
        actions.append(action)
        obs, *_ = env.step(action)
    return actions


# -- leftovers: shared memory and worker processes -------------------------------------------

SHM = Path("/dev/shm")
LANE_VARIABLES = ("PYTEST_XDIST_WORKER", "PONG_MP_TEST_RUN")  # conftest.py sets the second


def pong_shm_blocks() -> set[str]:
    """Names of pong-mp shared-memory blocks that exist now."""
    if not SHM.is_dir():
        return set()
    return {p.name for p in SHM.iterdir() if p.name.startswith("pong-mp-")}


def pong_processes() -> set[int]:
    """Pids of live processes whose OS name is pong-mp-worker-* (zombies excluded)."""
    pids = set()
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            status = (entry / "status").read_text()
        except OSError:
            continue
        fields = dict(line.split(":", 1) for line in status.splitlines() if ":" in line)
        if fields.get("Name", "").strip().startswith("pong-mp-worker") and not fields.get(
            "State", ""
        ).strip().startswith("Z"):
            pids.add(int(entry.name))
    return pids


def proc_stat(pid: int) -> list[str] | None:
    """The fields of /proc/PID/stat after the process's name (so [0] is its state, [1] its
    parent, [3] its session, [19] its start time), or None once it is gone."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return None


def running(pid: int, started: str | None = None) -> bool:
    """Whether `pid` names a live process, not a zombie (and, given `started`, the one that
    started then, not a later one given the same pid)."""
    stat = proc_stat(pid)
    return stat is not None and stat[0] != "Z" and started in (None, stat[19])


def children_of(pid: int) -> set[int]:
    """Pids of the processes whose parent is `pid`."""
    pids = (int(entry.name) for entry in Path("/proc").glob("[0-9]*"))
    return {child for child in pids if _parent(child) == pid}


def workers_of(pid: int) -> list[int]:
    """Pids of the pong-mp workers whose parent is `pid`."""
    return sorted(worker for worker in pong_processes() if _parent(worker) == pid)


def _parent(pid: int) -> int:
    stat = proc_stat(pid)
    return int(stat[1]) if stat else 0


def _runs_pong_mp_or_tests(pid: int) -> bool:
    try:
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return False
    # python -m pong_mp, the script, or pytest (whose test processes coordinate in-process)
    return any(name in cmdline for name in (b"pong_mp", b"pong-mp", b"pytest"))


def _coordinated(pid: int) -> bool:
    # Whether worker `pid` has a coordinator: its parent runs pong-mp or tests, or is a test
    # process of pytest-xdist (whose parent is pytest). An orphan's parent is init, or a
    # subreaper that runs neither.
    parent = _parent(pid)
    return parent > 1 and (
        _runs_pong_mp_or_tests(parent) or _runs_pong_mp_or_tests(_parent(parent))
    )


def _other_lane(pid: int) -> bool:
    # A worker started under another test process, of this pytest run (pytest-xdist's lanes)
    # or of another (bin/test's Ray tests run beside the others; a Ray node leader's pool,
    # whose parent is neither pong-mp nor pytest, included): its environment names that
    # process, whose tests answer for it.
    try:
        environ = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
    except OSError:
        return False
    mine = {f"{name}={os.environ.get(name, '')}".encode() for name in LANE_VARIABLES}
    return any(
        v.startswith(f"{name}=".encode()) and v not in mine
        for v in environ
        for name in LANE_VARIABLES
    )


def stray_workers() -> set[int]:
    """Workers that nothing will clean up: children of this test process, or orphans (no
    coordinator). Workers of other pong-mp runs, and of other tests (beside this one, or in
    another checkout), are not counted."""
    return {
        pid
        for pid in pong_processes()
        if (_parent(pid) == os.getpid() or not _coordinated(pid)) and not _other_lane(pid)
    }


def _other_runs_block(name: str) -> bool:
    """Whether a block belongs to another live process on this machine (neither this test
    process nor its child: another run, or another checkout's tests, whose command line
    need not name pong-mp), which a test must not be blamed for: training or testing in
    the background while the tests run is normal. A leaked block's creator is gone."""
    creator = block_creator(name)
    if creator is None or creator[1] != pid_namespace():
        return False
    pid = creator[0]
    return pid != os.getpid() and _parent(pid) != os.getpid() and pid_alive(pid)


def new_blocks(before: set[str]) -> set[str]:
    """The pong-mp blocks that exist now and not in `before`, other runs' left out."""
    return {name for name in pong_shm_blocks() - before if not _other_runs_block(name)}


def wait_until_clean(before_shm: set[str], timeout: float = 10.0) -> tuple[set[str], set[int]]:
    """Wait up to `timeout` s for new shm blocks and worker processes to vanish; the leftovers
    (other runs' blocks and workers are not counted)."""
    deadline = time.monotonic() + timeout
    while True:
        shm = new_blocks(before_shm)
        procs = stray_workers()
        if (not shm and not procs) or time.monotonic() > deadline:
            return shm, procs
        time.sleep(0.1)


@contextlib.contextmanager
def another_thread() -> Iterator[None]:
    """Inside, a second thread waits with every signal unblocked, as numpy's BLAS threads
    do: a signal sent to the process while the main thread blocks it goes to that one."""
    done = threading.Event()
    waiting = threading.Thread(target=done.wait)
    waiting.start()
    try:
        yield
    finally:
        done.set()
        waiting.join()
