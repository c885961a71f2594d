"""The Ray backend: the local pool on every node of a Ray cluster, one leader actor a node
(docs/ray.md; `ray` is imported only here).

The driver talks to the leaders only, one call per node for each round, which returns the
episodes' small results with one float64 sum per group of batch_sum.GROUP episodes, made on
the node that played the group. So the weights are bit-identical to the local backend's,
the driver gets about GROUP times fewer bytes than one gradient per episode, and a round
costs one Ray call per node instead of one per episode.

Data flow of one round (a batch to play, or one round of the actor-critic's passes):

    driver (RayBackend)                          node N (NodeLeader, its local pool)
    -------------------                          -----------------------------------
    publish: weights -> object store (one put)
    submit: groups of GROUP tasks -> nodes
            (a pass goes where its episode
            was played, without its data)
            run(weights ref, version, groups) --> pool.publish, pool.submit, results:
                                                  each group summed in batch_sum's order
    results: LeaderReport(stats, group sums,  <-- stats (with the trajectory when played),
             workers replaced, warnings)          one GroupSum per group

On the driver's own machine (and without --policy-lag) the object store is skipped: the
driver writes the weights into that leader's pool's shared-memory block, calls run(None,
...), and maps the leader's SharedSums block to read the group sums in place.
"""

from __future__ import annotations

import contextlib
import dataclasses
import ipaddress
import logging
import os
import re
import signal
import socket
import subprocess
import sys
import time
from collections import OrderedDict, deque
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from types import FrameType
from typing import Any, NamedTuple

import numpy as np
import ray
import ray.exceptions
from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

from pong_mp.backends.base import (
    BackendBase,
    BackendUnavailable,
    RemoteTraceback,
    RolloutSpec,
    WorkerError,
    worker_error,
)
from pong_mp.backends.shm import BlockShape, SharedSums, SharedWeights, map_sums
from pong_mp.backends.worker_process import block_shapes
from pong_mp.batch_sum import GROUP, BatchSum, GroupSum
from pong_mp.episode import EpisodeStats, PassTask, Task
from pong_mp.optim import MAX_STEP_THREADS, share
from pong_mp.signals import POLL_SECONDS, check_stop

log = logging.getLogger("pong_mp")

CONNECT_SECONDS = 30.0
"""How long joining a cluster may take before pong-mp gives up with one clear line."""
_START_SECONDS = 180.0  # leaders start their pools: workers import numpy, gymnasium and ALE
_JOIN_SECONDS = 5.0  # how long close() waits for an idle leader to close its pool


class LeaderGroup(NamedTuple):
    """Driver -> leader: one group of a batch's tasks, to play and sum on the node."""

    number: int  # in its batch (its first episode's position // GROUP)
    first_index: int  # its batch's first episode
    tasks: list[Task]  # in position order; a pass's data None where the leader keeps it


class LeaderReport(NamedTuple):
    """Leader -> driver: what one call did."""

    stats: list[EpisodeStats]  # every task's, in the order they finished
    sums: list[GroupSum]  # one per group whose tasks give a gradient
    replaced: int  # workers the node's pool replaced during the call
    pids: list[int]  # of the pool's workers, after the call
    warnings: list[str]  # what the pool logged (a replaced worker, a retried episode)
    error: str | None = None  # an episode failed too often: the run stops with this
    traceback: str = ""  # and the worker's traceback
    sums_block: str = ""  # with `in_block`: the leader's SharedSums, a slot per group number
    in_block: tuple[int, ...] = ()  # the groups whose sums are in it (a driver on its machine)


class LeaderStart(NamedTuple):
    """Leader -> driver: its pool has started, or why not."""

    node: str  # the Ray node's id
    pids: list[int]  # of the pool's workers
    error: str | None = None
    traceback: str = ""
    weights_block: str = ""  # its pool's SharedWeights, which a driver on its machine writes


class _Lines(logging.Handler):
    """Keeps the pool's log lines, to go back to the driver with the call's report."""

    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(record.getMessage())


@ray.remote(concurrency_groups={"control": 1})
class NodeLeader:
    """The local pool of one node's workers, under one Ray actor. Its calls run one at a
    time, in order; `abort` runs beside them."""

    def __init__(self, spec: RolloutSpec) -> None:
        """Start the pool (its workers build their envs); a failure is raised to the
        driver."""
        from pong_mp.backends.local import LocalBackend

        self._lines = _Lines()
        log.addHandler(self._lines)
        # A spawned process runs its parent's main script again as it starts: here Ray's
        # worker script, which imports Ray (4.7 s a worker, against 0.06 s without it, on a
        # 2-core machine). The pool's workers need nothing from it.
        with contextlib.suppress(AttributeError):
            del sys.modules["__main__"].__file__
        self.pool = LocalBackend(spec)
        self._start_error: WorkerError | None = None
        try:
            self.pool.start()
        except WorkerError as exc:  # reported by `started`, with the worker's traceback
            self._start_error = exc
        self._versions: deque[int] = deque(maxlen=spec.lag + 1)  # published to the pool
        # The trajectories of the episodes played or passed here, by episode index: the same
        # objects the pool's kept data is identified by (`kept.py`), put back into the passes
        # that arrive without theirs.
        self._data: dict[int, object] = {}
        self._aborted = False
        self._sums: SharedSums | None = None  # made for a driver on this machine, on demand
        # A round's sums on as many threads as the local coordinator's optimizer step takes
        # (the node's workers wait for them): each thread adds its own range of elements.
        self._threads = min(spec.workers, MAX_STEP_THREADS)
        self._adders = ThreadPoolExecutor(self._threads - 1) if self._threads > 1 else None
        self._size = spec.shape.size(spec.value_head)  # of the weights, and of a sum

    def started(self) -> LeaderStart:
        """Where this leader runs, and whether its pool started (the driver's readiness
        check)."""
        node = ray.get_runtime_context().get_node_id()
        if self._start_error is None:
            return LeaderStart(node, self.pool.worker_pids(), weights_block=self.pool.weights_name)
        return LeaderStart(node, [], str(self._start_error), _traceback(self._start_error))

    def run(
        self, flat32: np.ndarray | None, version: int, groups: list[LeaderGroup]
    ) -> LeaderReport:
        """Play `groups` with the float32 weights `flat32` as `version`, on the pool, and sum
        each group's gradients in batch_sum's order. With `flat32` None, a driver on this
        machine has written the weights into the pool's block, and reads the sums from this
        leader's SharedSums block."""
        self._lines.lines = []
        replaced_before = self.pool.replacements
        tasks = [task for group in groups for task in group.tasks]
        if any(not isinstance(task, PassTask) for task in tasks):
            self._data.clear()  # a batch to play: the last one's passes are over
        tasks = [self._with_data(task) for task in tasks]
        if flat32 is not None and version not in self._versions:
            self.pool.publish(version, flat32)
            self._versions.append(version)
        block = self._sums_block(groups) if flat32 is None else None

        def total(group: LeaderGroup) -> np.ndarray | None:
            # Where the group's sum goes: none for tasks that give no gradient.
            if not group.tasks[0].gradient:
                return None
            return block.slots[group.number] if block is not None else np.empty(self._size)

        owner = {task.index: n for n, group in enumerate(groups) for task in group.tasks}
        sums = [BatchSum(g.tasks[0].index, len(g.tasks), total(g), self._ranges) for g in groups]
        stats: list[EpisodeStats] = []
        try:
            self.pool.submit(version, tasks)
            for item in self.pool.results():
                if item.stats.data is not None:
                    self._data[item.stats.index] = item.stats.data
                sums[owner[item.stats.index]].add(item)
                stats.append(item.stats)
        except WorkerError as exc:
            if not self._aborted:
                self.pool.cancel()
                pids = self.pool.worker_pids()
                return LeaderReport([], [], 0, pids, self._lines.lines, str(exc), _traceback(exc))
        except Exception:
            if not self._aborted:
                raise
        if self._aborted:  # nobody waits for this call's results any more
            return LeaderReport([], [], 0, [], [])
        made = [
            GroupSum(group.number, summed.total, group.first_index)
            for group, summed in zip(groups, sums, strict=True)
            if summed.total is not None
        ]
        replaced = self.pool.replacements - replaced_before
        report = LeaderReport(stats, made, replaced, self.pool.worker_pids(), self._lines.lines)
        if block is None:
            return report
        numbers = [s.group for s in made]
        return report._replace(sums=[], sums_block=block.name, in_block=tuple(numbers))

    def _sums_block(self, groups: list[LeaderGroup]) -> SharedSums | None:
        # A slot for each group number of the call, made anew where it needs more; None where
        # /dev/shm has no room (the sums then go through the object store).
        need = 1 + max(group.number for group in groups)
        if self._sums is not None and self._sums.shape.width >= need:
            return self._sums
        self._close_sums()
        spec = self.pool.spec
        with contextlib.suppress(OSError):
            self._sums = SharedSums.create(BlockShape(spec.shape, need, spec.value_head))
        return self._sums

    def _close_sums(self) -> None:
        if self._sums is not None:
            self._sums.close()
            self._sums.unlink()
            self._sums = None

    def _ranges(self, part: Callable[[int, int], object]) -> None:
        # batch_sum.Ranges: part(start, stop) over the parameters, a range a thread.
        share(self._adders, self._threads, self._size, part)

    def _with_data(self, task: Task) -> Task:
        if not isinstance(task, PassTask):
            return task
        if task.data is None:
            return dataclasses.replace(task, data=self._data[task.index])
        self._data[task.index] = task.data  # sent whole: played elsewhere, or before a loss
        return task

    @ray.method(concurrency_group="control")
    def abort(self) -> None:
        """End the call in progress at once, its episodes thrown away: its workers are
        killed (and replaced), so that `close`, queued behind it, can follow. The driver
        calls it only before `close`."""
        self._aborted = True
        self.pool.cancel()

    def close(self) -> None:
        """Stop the pool's workers and free its shared memory."""
        self._close_sums()
        self.pool.close()
        if self._adders is not None:
            self._adders.shutdown()


def _traceback(error: WorkerError) -> str:
    cause = error.__cause__
    return cause.tb if isinstance(cause, RemoteTraceback) else ""


@dataclass
class _Leader:
    actor: Any
    node: str
    workers: int
    pids: list[int] = field(default_factory=list)  # of its pool's workers, as last reported
    # On the driver's machine: its pool's weights block, which the driver writes, and its
    # group sums' block, which the driver reads (nothing through the object store).
    weights: SharedWeights | None = None
    sums: tuple[str, list[np.ndarray]] | None = None  # the block's name, its slots' views

    def close_blocks(self) -> None:
        """Drop the driver's mappings of the leader's blocks (the leader removes them; a sum
        still held elsewhere keeps its own mapping)."""
        if self.weights is not None:
            self.weights.close()
        self.weights = self.sums = None


@dataclass
class _Call:
    seq: int  # submission order: a replaced leader gets its calls again in this order
    leader: int
    version: int
    groups: list[LeaderGroup]  # as submitted: every pass with its data
    ref: Any = None
    failures: int = 0


def _get(refs: Any, timeout: float) -> Any:
    """ray.get(refs, timeout=timeout), in slices with a look for a stop signal between them:
    Ray runs the signal handlers inside its waits, but waits on when they do not raise."""
    deadline = time.monotonic() + timeout
    while True:
        check_stop()
        try:
            return ray.get(refs, timeout=max(0.0, min(POLL_SECONDS, deadline - time.monotonic())))
        except ray.exceptions.GetTimeoutError:
            if time.monotonic() >= deadline:
                raise


def _alarm(signum: int, frame: FrameType | None) -> None:
    raise TimeoutError


def _use_token_if_available() -> None:
    # `ray start --head` enables token authentication and writes ~/.ray/auth_token, but a
    # driver sends the token only in token mode: opt in when a token is at hand and the
    # user chose no mode.
    if "RAY_AUTH_MODE" in os.environ:
        return
    token_file = os.environ.get("RAY_AUTH_TOKEN_PATH", os.path.expanduser("~/.ray/auth_token"))
    if "RAY_AUTH_TOKEN" in os.environ or os.path.isfile(token_file):
        os.environ["RAY_AUTH_MODE"] = "token"
        # Ray caches its config, mode included, once imported: have it read the mode again,
        # as Ray's own opt-in does (a private call; where it is missing, there is no cache).
        with contextlib.suppress(ImportError, AttributeError):
            from ray._raylet import Config

            Config.initialize("")


HANDSHAKE_SECONDS = 5.0
# An HTTP/2 client's preface and an empty SETTINGS frame: a gRPC server (Ray's GCS) answers
# with a SETTINGS frame of its own, frame type 4 in the fourth byte.
_GRPC_HELLO = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n" + b"\x00\x00\x00\x04\x00\x00\x00\x00\x00"


def _handshake_problem(address: str) -> str | None:
    """Why no Ray cluster can be joined at `address` (HOST:PORT), or None when its GCS
    answered the gRPC handshake within HANDSHAKE_SECONDS. ray.init itself, on a port that
    accepts and never answers, waits in C++ for ever, past any alarm."""
    host, _, port = address.rpartition(":")
    try:
        sock = socket.create_connection(
            (host.removeprefix("[").removesuffix("]"), int(port)), timeout=HANDSHAKE_SECONDS
        )
    except (OSError, ValueError) as exc:
        return f"cannot reach a Ray cluster at {address} ({exc})"
    with sock:
        if os.environ.get("RAY_USE_TLS", "0").lower() in ("1", "true"):
            return None  # TLS's handshake comes first: Ray's own checks take over
        answer = b""
        try:
            sock.sendall(_GRPC_HELLO)
            while len(answer) < 4 and (chunk := sock.recv(9)):
                answer += chunk
        except TimeoutError:
            return (
                f"no Ray cluster answered at {address} within {HANDSHAKE_SECONDS:.0f} s (the "
                "port is open, but nothing on it answers)"
            )
        except OSError:
            pass  # closed on us: not a gRPC server
    if len(answer) < 4 or answer[3] != 4:
        return (
            f"{address} answered, but not as a Ray cluster: give the head node's GCS address, "
            "the one `ray start --head` printed"
        )
    return None


@contextlib.contextmanager
def _keeping_sigterm() -> Iterator[None]:
    """Keep the run's SIGTERM handler through ray.init, which sets two of its own: Python's
    exits at once (exit 15, nothing said, the instance half started), and the C++ one prints a
    stack dump first. A stop in those seconds is the run's, taken at its next safe point.
    Ray's switches are private: where one is missing, the handler is put back after."""
    handler = signal.getsignal(signal.SIGTERM)
    private = getattr(ray, "_private", None)
    switches = [
        (getattr(private, "utils", None), "set_sigterm_handler", lambda handler: None),
        # read as the driver's core worker starts: no C++ crash handler in the driver
        (getattr(private, "ray_constants", None), "RAY_DISABLE_FAILURE_SIGNAL_HANDLER", True),
    ]
    kept = []
    for where, name, value in switches:
        if hasattr(where, name):
            kept.append((where, name, getattr(where, name)))
            setattr(where, name, value)
    try:
        yield
    finally:
        for where, name, old in kept:
            setattr(where, name, old)
        if handler is not None:
            signal.signal(signal.SIGTERM, handler)


def _descendants(root: int) -> set[tuple[int, str]]:
    """The descendants of process `root` as (pid, start time), from /proc (none elsewhere)."""
    procs: dict[int, tuple[int, str]] = {}  # pid -> its parent's pid, its start time
    with contextlib.suppress(OSError):
        for entry in os.scandir("/proc"):
            with contextlib.suppress(OSError, ValueError, IndexError):
                fields = Path(entry.path, "stat").read_text().rsplit(")", 1)[1].split()
                procs[int(entry.name)] = int(fields[1]), fields[19]
    found: set[tuple[int, str]] = set()
    todo = [root]
    while todo:
        parent = todo.pop()
        children = [pid for pid, (ppid, _) in procs.items() if ppid == parent]
        found.update((pid, procs[pid][1]) for pid in children)
        todo += children
    return found


# Waits for the driver to end, however it ends (its end of the pipe closes), then kills what
# of a private Ray instance outlived it: after a SIGKILL of the driver, Ray's two agents
# ignore SIGTERM and wait a minute on the dead GCS before they exit. A pid whose start time
# changed is another process, left alone.
_REAPER = """
import os, signal, sys
for s in (signal.SIGINT, signal.SIGHUP, signal.SIGTERM):
    signal.signal(s, signal.SIG_IGN)
sys.stdin.buffer.read()
for pid, start in (arg.split(":") for arg in sys.argv[1:]):
    try:
        with open(f"/proc/{pid}/stat") as stat:
            if stat.read().rsplit(")", 1)[1].split()[19] == start:
                os.kill(int(pid), signal.SIGKILL)
    except (OSError, IndexError):
        pass
"""


def _start_reaper(processes: set[tuple[int, str]]) -> None:
    """Start a process that kills `processes` (pid, start time) once this one has ended, or
    has called `_stop_reaper`: a help, not a need, so one that cannot start is let be."""
    global _reaper
    if processes:
        with contextlib.suppress(OSError):
            _reaper = subprocess.Popen(
                [sys.executable, "-c", _REAPER, *(f"{pid}:{start}" for pid, start in processes)],
                stdin=subprocess.PIPE, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                start_new_session=True,  # out of the terminal's reach: no Ctrl-C, no hang-up
            )


def _stop_reaper() -> None:
    """Have the reaper kill what is left of the instance now (ray.shutdown has stopped it)."""
    global _reaper
    reaper, _reaper = _reaper, None
    if reaper is not None and reaper.stdin is not None:
        reaper.stdin.close()
        with contextlib.suppress(subprocess.TimeoutExpired):
            reaper.wait(_JOIN_SECONDS)


_reaper: subprocess.Popen | None = None  # for the driver's life: its pipe's end is the sign


def connect(address: str | None, num_cpus: int) -> bool:
    """Start a local Ray instance (address None) or join the cluster at `address`.

    Returns whether this call started Ray (and so should shut it down). Raises
    BackendUnavailable, within about CONNECT_SECONDS, when the cluster cannot be joined.
    """
    if ray.is_initialized():
        return False
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")  # no reports sent home unasked
    quiet = {"logging_level": logging.ERROR, "log_to_driver": False}
    if address is None:
        # Ray runs its workers at niceness 15, so that they yield to its own daemons; the
        # node leader's pool inherits it, and on a machine busy with other work it got a
        # fraction of the CPU the local pool gets. A private instance runs them as the
        # driver runs (docs/ray.md), unless RAY_worker_niceness says otherwise.
        os.environ.setdefault("RAY_worker_niceness", "0")
        # A private instance on loopback: nothing to reach from elsewhere. "local", because
        # a bare ray.init() would join whatever RAY_ADDRESS or the last `ray start` names
        # (and then refuse num_cpus with a traceback); only --ray-address joins a cluster.
        before = _descendants(os.getpid())
        with _keeping_sigterm():
            ray.init(
                address="local",
                num_cpus=num_cpus,
                include_dashboard=False,
                _node_ip_address="127.0.0.1",
                **quiet,
            )
        _start_reaper(_descendants(os.getpid()) - before)
        return True
    _use_token_if_available()
    if (problem := _handshake_problem(address)) is not None:
        raise BackendUnavailable(problem)
    # Ray retries a failed handshake for minutes; an alarm bounds the wait.
    previous = signal.signal(signal.SIGALRM, _alarm)
    signal.alarm(int(CONNECT_SECONDS))
    try:
        extra: dict[str, Any] = {}
        host = address.rsplit(":", 1)[0]
        with contextlib.suppress(ValueError):
            if ipaddress.ip_address(host).is_loopback:
                extra["_node_ip_address"] = host
        with _keeping_sigterm():
            ray.init(address=address, **quiet, **extra)
    except TimeoutError:
        raise BackendUnavailable(
            f"no Ray cluster answered at {address} within {CONNECT_SECONDS:.0f} s"
        ) from None
    except (ConnectionError, RuntimeError) as exc:
        raise BackendUnavailable(f"cannot join the Ray cluster at {address} ({exc})") from None
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)
    return False


def plan_nodes(workers: int, cpus: dict[str, int]) -> dict[str, int]:
    """Workers per node id, from each node's CPUs: the nodes with the most CPUs filled
    first, so that as few leaders as can hold the workers play each batch (fewer calls, and
    more of each group's passes on the node that played it). Ties go by node id."""
    plan: dict[str, int] = {}
    left = workers
    for node, count in sorted(cpus.items(), key=lambda item: (-item[1], item[0])):
        if left == 0 or count < 1:
            break
        plan[node] = min(count, left)
        left -= plan[node]
    if left:
        raise WorkerError(
            f"the Ray cluster has {workers - left} CPUs for workers, fewer than the "
            f"{workers} asked for (--workers)"
        )
    return plan


class RayBackend(BackendBase):
    """The local pool on each node of a Ray cluster (a local Ray instance, or a cluster at
    `address`), driven through one leader actor a node."""

    def __init__(self, spec: RolloutSpec, address: str | None = None) -> None:
        """Remember the spec; Ray is started or joined by `start`."""
        super().__init__(spec)
        self.address = address
        self._owns_ray = False
        self._leaders: list[_Leader] = []
        self._versions: OrderedDict[int, Any] = OrderedDict()  # weights refs, oldest first
        self._calls: list[_Call] = []  # in flight, in submission order
        self._seq = 0
        self._unheard: dict[Any, int] = {}  # refs of cancelled calls -> their leader
        self._ready: deque[EpisodeStats | GroupSum] = deque()  # reported, not yet yielded
        # Which leader keeps each episode's trajectory (the one that played it, or was sent
        # it), for the actor-critic's passes: episode index -> leader number.
        self._holder: dict[int, int] = {}
        self.group_sums = 0  # made on the cluster
        self.data_sent = 0  # passes sent with their trajectory (to a node that lacks it)

    def start(self) -> None:
        """Start or join Ray and start a leader, with its pool, on each node it needs;
        WorkerError if one cannot start."""
        self._owns_ray = connect(self.address, self.spec.workers)
        try:
            nodes = [node for node in ray.nodes() if node.get("Alive")]
            cpus = {node["NodeID"]: int(node.get("Resources", {}).get("CPU", 0)) for node in nodes}
            plan = plan_nodes(self.spec.workers, cpus)
            self._leaders = [
                _Leader(self._new_actor(node, count), node, count) for node, count in plan.items()
            ]
            for leader in self._leaders:
                self._open(leader)
        except BaseException:
            self.close()
            raise

    def _new_actor(self, node: str, workers: int, soft: bool = False) -> Any:
        where = NodeAffinitySchedulingStrategy(node_id=node, soft=soft)
        spec = dataclasses.replace(self.spec, workers=workers)
        return NodeLeader.options(num_cpus=workers, scheduling_strategy=where).remote(spec)

    def _open(self, leader: _Leader) -> None:
        # Wait for the leader's pool to start (WorkerError if it could not). A leader on this
        # machine gets its weights through its pool's block, and returns its sums in one.
        try:
            start: LeaderStart = _get(leader.actor.started.remote(), _START_SECONDS)
        except ray.exceptions.RayActorError as exc:
            raise worker_error("a node's leader failed to start", _plain(exc)) from None
        except ray.exceptions.GetTimeoutError:
            raise WorkerError(
                f"workers did not start within {_START_SECONDS:.0f} s: does the cluster "
                f"have {self.spec.workers} free CPUs?"
            ) from None
        if start.error is not None:
            raise worker_error(start.error, start.traceback)
        leader.node, leader.pids = start.node, start.pids
        leader.close_blocks()
        if start.node == ray.get_runtime_context().get_node_id() and self.spec.lag == 0:
            shape, _ = block_shapes(self.spec)
            with contextlib.suppress(OSError):  # another /dev/shm: the object store, then
                leader.weights = SharedWeights.attach_untracked(start.weights_block, shape)

    def worker_pids(self) -> list[int]:
        """Process ids of the workers, node by node, as the leaders last reported them (for
        fault tests): a leader busy with a call answers nothing else until it is done."""
        return [pid for leader in self._leaders for pid in leader.pids]

    def actor_nodes(self) -> list[str]:
        """Ids of the nodes the leaders run on, one per leader."""
        return [leader.node for leader in self._leaders]

    def close(self) -> None:
        """Close the leaders' pools (a leader still busy is killed, and its workers follow
        it within a second), and stop Ray if this backend started it."""
        leaders, self._leaders = self._leaders, []
        busy = {call.leader for call in self._calls}
        if self._unheard:  # (a Ray call with no Ray running would start one)
            with contextlib.suppress(Exception):
                done, _ = ray.wait(list(self._unheard), num_returns=len(self._unheard), timeout=0)
                busy |= {n for ref, n in self._unheard.items() if ref not in done}
        self._calls.clear()
        self._unheard.clear()
        self._ready.clear()
        for leader in leaders:
            leader.close_blocks()
        self._versions.clear()
        self._holder.clear()
        # A busy leader first ends its call (its episodes are being thrown away). Killing it
        # instead would take its resource tracker along (Ray ends the actor's process
        # group), leaving its shared memory behind.
        closing = []
        for n, leader in enumerate(leaders):
            with contextlib.suppress(Exception):
                if n in busy:
                    leader.actor.abort.remote()
                closing.append(leader.actor.close.remote())
        if closing:
            with contextlib.suppress(Exception):
                ray.wait(closing, num_returns=len(closing), timeout=_JOIN_SECONDS)
        for leader in leaders:
            with contextlib.suppress(Exception):
                ray.kill(leader.actor)
        if self._owns_ray and ray.is_initialized():
            ray.shutdown()
            _stop_reaper()
            self._owns_ray = False

    def weights_room(self) -> np.ndarray | None:
        """The slot the next `publish` writes in the block of the first leader on this
        machine (`SharedWeights.room`); None where no leader is on it."""
        here = next((lead.weights for lead in self._leaders if lead.weights is not None), None)
        return None if here is None else here.room()

    def publish(self, version: int, weights: np.ndarray) -> None:
        """Write float32 `weights` into the pool's block of each leader on this machine, and
        put them in the object store once for the others (one transfer per node, zero-copy
        reads); keep the last spec.lag + 1 versions."""
        for leader in self._leaders:
            if leader.weights is not None:
                leader.weights.write(weights, version)
        remote = any(leader.weights is None for leader in self._leaders)
        self._versions[version] = ray.put(weights) if remote else None
        while len(self._versions) > self.spec.lag + 1:
            self._versions.popitem(last=False)

    def submit(self, version: int, tasks: list[Task]) -> None:
        """Send `tasks`, as groups of batch_sum.GROUP, to the leaders: a group of passes to
        the leader that keeps its episodes' data, others to the leader with the least work a
        worker; one call per leader."""
        if not self._leaders:
            raise RuntimeError("RayBackend.start() was not called")
        if version not in self._versions:
            raise ValueError(f"weights version {version} was not published (or was dropped)")
        if any(not isinstance(task, PassTask) for task in tasks):
            self._holder.clear()  # a batch to play: the last one's passes are over
        first = tasks[0].index if tasks else 0
        load = [0] * len(self._leaders)
        calls: dict[int, list[LeaderGroup]] = {}
        for number, start in enumerate(range(0, len(tasks), GROUP)):
            group = LeaderGroup(number, first, tasks[start : start + GROUP])
            n = self._holder.get(group.tasks[0].index)
            if n is None:
                n = min(range(len(load)), key=lambda i: (load[i] / self._leaders[i].workers, i))
            load[n] += len(group.tasks)
            calls.setdefault(n, []).append(group)
        for n, groups in calls.items():
            self._seq += 1
            self._call(_Call(self._seq, n, version, groups))

    def _call(self, call: _Call) -> None:
        sent = [
            group._replace(tasks=[self._light(call.leader, task) for task in group.tasks])
            for group in call.groups
        ]
        leader = self._leaders[call.leader]
        weights = None if leader.weights is not None else self._versions[call.version]
        call.ref = leader.actor.run.remote(weights, call.version, sent)
        self._calls.append(call)

    def _light(self, leader: int, task: Task) -> Task:
        # A pass goes without its episode's data to the leader that keeps it.
        if not isinstance(task, PassTask) or task.data is None:
            return task
        if self._holder.get(task.index) == leader:
            return dataclasses.replace(task, data=None)
        self._holder[task.index] = leader
        self.data_sent += 1
        return task

    def cancel(self) -> None:
        """Drop the calls in flight and their reports; a leader finishes the call it is on,
        unheard."""
        self._unheard.update({call.ref: call.leader for call in self._calls})
        self._calls.clear()
        self._ready.clear()

    def results(self) -> Iterator[EpisodeStats | GroupSum]:
        """Yield each episode's result (without its gradient) and each group's gradient sum,
        made on the node that played it, as the leaders report them."""
        if not self._leaders:
            raise RuntimeError("RayBackend.start() was not called")
        while self._ready or self._calls:
            if self._ready:
                yield self._ready.popleft()
                continue
            calls = {call.ref: call for call in self._calls}
            ready, _ = ray.wait(list(calls), num_returns=1, timeout=POLL_SECONDS)
            check_stop()
            for ref in ready:
                call = calls[ref]
                self._calls.remove(call)
                try:
                    report: LeaderReport = ray.get(ref)
                except ray.exceptions.RayActorError as exc:
                    self._leader_lost(call, f"its node's leader died ({type(exc).__name__})")
                    continue
                except ray.exceptions.RayTaskError as exc:
                    raise worker_error("a node's leader failed", _plain(exc)) from None
                self._take(call, report)

    def _take(self, call: _Call, report: LeaderReport) -> None:
        node = self._leaders[call.leader].node[:8]
        for line in report.warnings:
            log.warning(f"node {node}: {line}")
        if report.error is not None:
            raise worker_error(report.error, report.traceback)
        self.replacements += report.replaced
        self._leaders[call.leader].pids = report.pids
        self._holder.update({s.index: call.leader for s in report.stats if s.data is not None})
        self.group_sums += len(report.sums) + len(report.in_block)
        self._ready.extend(report.stats)
        self._ready.extend(report.sums)
        if report.in_block:
            self._ready.extend(self._shared_sums(call, report))

    def _shared_sums(self, call: _Call, report: LeaderReport) -> list[GroupSum]:
        # The sums the leader on this machine left in its block: views, valid until its next
        # call (the trainer adds them before it submits the next round).
        leader = self._leaders[call.leader]
        width = 1 + max(report.in_block)
        mapped = leader.sums
        if mapped is None or mapped[0] != report.sums_block or len(mapped[1]) < width:
            shape = BlockShape(self.spec.shape, width, self.spec.value_head)
            leader.sums = (report.sums_block, map_sums(report.sums_block, shape))
        slots, first = leader.sums[1], call.groups[0].first_index
        return [GroupSum(number, slots[number], first) for number in report.in_block]

    def _leader_lost(self, call: _Call, why: str) -> None:
        # Its pool's workers, its kept data and its calls' results went with it: a new
        # leader (on the same node if that is still there) plays its calls again, in their
        # order, with the same seeds, which gives the same bytes.
        call.failures += 1
        first = call.groups[0].tasks[0].index
        if call.failures > self.spec.max_retries:
            raise WorkerError(
                f"episodes {first}.. lost their node's leader {call.failures} times (last: {why})"
            )
        log.warning(f"episodes {first}..: {why}; playing them again on a new one")
        leader = self._leaders[call.leader]
        with contextlib.suppress(Exception):
            ray.kill(leader.actor)
        kept, leader.weights, leader.sums = leader.weights, None, None
        leader.actor = self._new_actor(leader.node, leader.workers, soft=True)
        self._open(leader)
        # The weights versions kept, oldest first, where the new leader reads them: from the
        # old block (a leader on this machine) or the object store (one elsewhere).
        for version, ref in self._versions.items():
            flat = kept.flat(version) if kept is not None else ray.get(ref)
            if leader.weights is not None:
                leader.weights.write(flat, version)
            elif ref is None:
                self._versions[version] = ray.put(flat)
        if kept is not None:
            kept.close()
        self.replacements += 1
        self._holder = {i: n for i, n in self._holder.items() if n != call.leader}
        again = sorted([c for c in self._calls if c.leader == call.leader] + [call],
                       key=lambda c: c.seq)  # fmt: skip
        for other in again:
            if other in self._calls:
                self._calls.remove(other)
            self._call(other)


def _plain(exc: Exception) -> str:
    """Ray's traceback of `exc`, with its terminal colour codes taken out for logs."""
    return re.sub(r"\x1b\[[0-9;]*m", "", str(exc))
