"""The Ray backend: the same episodes on Ray actors, on one machine or across a cluster.

`ray` is imported only here. Each actor keeps one env and plays one episode at a time;
episodes go to whichever actor is idle. The float32 weights go into the object store once
per version (one transfer per node, zero-copy reads). Gradients stay in the object store of
the node that played them: each group of batch_sum.GROUP episodes is summed there, in
batch_sum's order, and the driver fetches one float64 sum per group and the episodes' small
results; episodes go preferably to actors on the node that plays the rest of their group.
So the weights are bit-identical to the local backend's, with ~GROUP times fewer bytes to
the driver. With --algo ppo each episode's data goes into the object store once an update,
and its passes carry a reference to it. An actor that dies or hangs is replaced and its
episode played again with the same seed; an exception comes back with the actor's
traceback and is retried a bounded number of times.
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
import time
from collections import OrderedDict, deque
from collections.abc import Iterator
from dataclasses import dataclass, field
from types import FrameType
from typing import Any

import numpy as np
import ray
import ray.exceptions
from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

from pong_mp import policy
from pong_mp.backends.base import (
    BackendBase,
    BackendUnavailable,
    Retries,
    RolloutSpec,
    WorkerError,
    prepare_worker_process,
    worker_error,
)
from pong_mp.batch_sum import GROUP, GroupSum, sum_group
from pong_mp.episode import EpisodeStats, PassTask, Task
from pong_mp.signals import POLL_SECONDS, check_stop

log = logging.getLogger("pong_mp")

CONNECT_SECONDS = 30.0
"""How long joining a cluster may take before pong-mp gives up with one clear line."""
_START_SECONDS = 180.0  # actors import numpy, gymnasium and ALE, then build their env


@ray.remote(num_cpus=1)
class EpisodeActor:
    """One env in one Ray worker process, playing episodes on demand."""

    def __init__(self, spec: RolloutSpec) -> None:
        """Set up the process as a worker's, and build the env (once)."""
        from pong_mp.backends.episode_worker import EpisodeWorker

        prepare_worker_process()
        self.spec = spec
        self.worker = EpisodeWorker(spec)
        self.worker.open()
        # The last gradient's array, written again by the next task: Ray copies a result
        # into the object store as the call returns, and a new 5 MB array a call cost its
        # page faults each time (a fifth of the actors' task time on 2 cores, in Ray's
        # timeline; end to end, within the noise: docs/ray.md).
        self._grad: np.ndarray | None = None

    def pid(self) -> int:
        """This actor's process id (readiness check, and for fault tests)."""
        return os.getpid()

    def node_id(self) -> str:
        """The id of the Ray node this actor runs on."""
        return ray.get_runtime_context().get_node_id()

    @ray.method(num_returns=2)
    def play(
        self, flat32: np.ndarray, task: Task, data: object | None = None
    ) -> tuple[EpisodeStats, np.ndarray | None]:
        """Do one task with the float32 weights `flat32` (a zero-copy view); a PassTask's
        episode data may come apart from it, as `data`. Returns the stats and the gradient
        (or None) as two objects: the driver fetches only the small one, the gradient stays
        on this node for its group's sum."""
        if data is not None:
            task = dataclasses.replace(task, data=data)
        weights = policy.Weights32.from_flat32(flat32, self.spec.shape)
        result = self.worker.play(weights, task, self._grad if task.gradient else None)
        if result.grad is not None:
            self._grad = result.grad
        return result.stats, result.grad


@ray.remote(num_cpus=0)
class GroupSummer:
    """Sums groups of gradients on its node (one per node that has episode actors)."""

    def sum(self, refs: list[Any]) -> np.ndarray:
        """The gradients of `refs` (position order) summed in batch_sum's order.

        The refs come in a list, fetched here zero-copy: as top-level arguments Ray took
        seconds to hand 30 gradients of 5 MB to a call. An actor, not a task: a task may
        need a new worker process (~2 s) per update."""
        return sum_group(ray.get(refs))


@dataclass
class _Group:
    """One group of a batch's episodes (batch_sum.GROUP), on its way to one sum."""

    number: int
    first_index: int  # its batch's first episode
    version: int  # of the weights its episodes are played with
    tasks: list[Task]
    pending: deque[Task] = field(init=False)
    node: str | None = None  # where its episodes are preferably played, and summed
    grads: dict[int, Any] = field(default_factory=dict)  # episode index -> gradient ref
    reported: set[int] = field(default_factory=set)  # episodes whose stats were yielded
    sum_ref: Any = None
    failures: int = 0

    def __post_init__(self) -> None:
        self.pending = deque(self.tasks)


@dataclass
class _Slot:
    actor: Any
    node: str = ""
    task: Task | None = None
    group: _Group | None = None  # the task's; None for a call whose batch was cancelled
    ref: Any = None  # the result's
    grad_ref: Any = None
    since: float = 0.0


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


def _loopback_host(address: str) -> str | None:
    host = address.rsplit(":", 1)[0]
    with contextlib.suppress(ValueError):
        if ipaddress.ip_address(host).is_loopback:
            return host
    return None


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
        # A private instance on loopback: nothing to reach from elsewhere. "local", because
        # a bare ray.init() would join whatever RAY_ADDRESS or the last `ray start` names
        # (and then refuse num_cpus with a traceback); only --ray-address joins a cluster.
        ray.init(
            address="local",
            num_cpus=num_cpus,
            include_dashboard=False,
            _node_ip_address="127.0.0.1",
            **quiet,
        )
        return True
    _use_token_if_available()
    host, _, port = address.rpartition(":")
    try:
        with socket.create_connection((host, int(port)), timeout=5):
            pass
    except (OSError, ValueError) as exc:
        raise BackendUnavailable(f"cannot reach a Ray cluster at {address} ({exc})") from None
    # Ray retries a failed handshake for minutes; an alarm bounds the wait.
    previous = signal.signal(signal.SIGALRM, _alarm)
    signal.alarm(int(CONNECT_SECONDS))
    try:
        loopback = _loopback_host(address)
        extra = {"_node_ip_address": loopback} if loopback else {}
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


class RayBackend(BackendBase):
    """Episodes on Ray actors: a local Ray instance, or a cluster at `address`."""

    def __init__(self, spec: RolloutSpec, address: str | None = None) -> None:
        """Remember the spec; Ray is started or joined by `start`."""
        super().__init__(spec)
        self.address = address
        self._owns_ray = False
        self._slots: list[_Slot] = []
        self._summers: dict[str, Any] = {}  # node id -> its GroupSummer
        self._versions: OrderedDict[int, Any] = OrderedDict()  # weights refs, oldest first
        self._groups: list[_Group] = []  # in flight, in submission order
        self._retries: Retries[Task] = Retries(spec.max_retries)
        self.group_sums = 0  # made on the cluster
        # Each episode's data (the actor-critic's trajectory) goes into the object store once
        # an update, not with each of its passes (16 minibatches x 4 passes of ~0.5 MB):
        # episode index -> (the data, its ref), dropped when the next batch is played.
        self._data: dict[int, tuple[object, Any]] = {}
        self.data_puts = 0  # episodes' data put into the object store

    def start(self) -> None:
        """Start or join Ray and create the actors; WorkerError if one cannot start."""
        # ray.init makes SIGTERM end the driver at once (exit 15, nothing saved): the run's
        # own handler goes back in.
        sigterm = signal.getsignal(signal.SIGTERM)
        self._owns_ray = connect(self.address, self.spec.workers)
        if sigterm is not None and signal.getsignal(signal.SIGTERM) is not sigterm:
            signal.signal(signal.SIGTERM, sigterm)
        try:
            self._slots = [_Slot(self._new_actor()) for _ in range(self.spec.workers)]
            refs = [s.actor.pid.remote() for s in self._slots]
            try:
                _get(refs, _START_SECONDS)
            except ray.exceptions.RayActorError as exc:
                raise worker_error("an actor failed to start", str(exc))  # noqa: B904
            except ray.exceptions.GetTimeoutError:
                raise WorkerError(
                    f"actors did not start within {_START_SECONDS:.0f} s: does the cluster "
                    f"have {self.spec.workers} free CPUs?"
                ) from None
            for slot, node in zip(self._slots, self.actor_nodes(), strict=True):
                slot.node = node
            for node in {slot.node for slot in self._slots}:
                self._summer(node)
        except BaseException:
            self.close()
            raise

    def _new_actor(self) -> Any:
        return EpisodeActor.remote(self.spec)

    def worker_pids(self) -> list[int]:
        """Process ids of the current actors (for fault tests)."""
        return ray.get([s.actor.pid.remote() for s in self._slots])

    def actor_nodes(self) -> list[str]:
        """Ids of the nodes the current actors run on."""
        return ray.get([s.actor.node_id.remote() for s in self._slots])

    def close(self) -> None:
        """Kill the actors, and stop Ray if this backend started it."""
        slots, self._slots = self._slots, []
        summers, self._summers = list(self._summers.values()), {}
        self._groups.clear()
        self._versions.clear()
        self._data.clear()
        for actor in [slot.actor for slot in slots] + summers:
            with contextlib.suppress(Exception):
                ray.kill(actor)
        if self._owns_ray and ray.is_initialized():
            ray.shutdown()
            self._owns_ray = False

    def publish(self, version: int, weights: np.ndarray) -> None:
        """Put float32 `weights` in the object store once (one transfer per node, zero-copy
        reads); keep the last spec.lag + 1 versions."""
        self._versions[version] = ray.put(weights)
        while len(self._versions) > self.spec.lag + 1:
            self._versions.popitem(last=False)

    def submit(self, version: int, tasks: list[Task]) -> None:
        """Queue `tasks` as groups of batch_sum.GROUP behind those submitted before."""
        if version not in self._versions:
            raise ValueError(f"weights version {version} was not published (or was dropped)")
        if any(not isinstance(task, PassTask) for task in tasks):
            self._data.clear()  # a batch to play: the last one's passes are over
        first = tasks[0].index if tasks else 0
        self._groups.extend(
            _Group(number, first, version, tasks[start : start + GROUP])
            for number, start in enumerate(range(0, len(tasks), GROUP))
        )

    def cancel(self) -> None:
        """Drop the groups in flight; calls still running are left to end, unheard."""
        self._groups.clear()
        for slot in self._slots:
            slot.group = None

    def results(self) -> Iterator[EpisodeStats | GroupSum]:
        """Play the submitted groups on the actors; yield each episode's result (without
        its gradient) as it arrives, and each group's gradient sum, made on the node that
        played most of it."""
        if not self._slots:
            raise RuntimeError("RayBackend.start() was not called")
        while self._groups:
            for slot in self._slots:
                if slot.task is None:
                    self._hand_out(slot)
            busy = {s.ref: s for s in self._slots if s.task is not None}
            summing = {g.sum_ref: g for g in self._groups if g.sum_ref is not None}
            ready, _ = ray.wait([*busy, *summing], num_returns=1, timeout=POLL_SECONDS)
            check_stop()
            for ref in ready:
                if ref in summing:
                    group = summing[ref]
                    group.sum_ref = None
                    try:
                        total = ray.get(ref)
                    except ray.exceptions.RayError as exc:
                        self._summers.pop(group.node or "", None)  # made anew if needed
                        self._replay_group(group, f"its sum failed ({type(exc).__name__})")
                        continue
                    self._groups.remove(group)
                    group.grads.clear()
                    yield GroupSum(group.number, total, group.first_index)
                    continue
                slot = busy[ref]
                task, group, grad_ref = slot.task, slot.group, slot.grad_ref
                slot.task = slot.group = slot.ref = slot.grad_ref = None
                assert task is not None
                try:
                    result: EpisodeStats = ray.get(ref)
                except ray.exceptions.RayActorError as exc:
                    if group is not None:
                        why = f"its actor died ({type(exc).__name__})"
                        self._retry(task, group.pending, why)
                    self._replace(slot)
                    continue
                except ray.exceptions.RayTaskError as exc:
                    if group is not None:
                        # Ray's traceback, with its terminal colour codes taken out for logs.
                        tb = re.sub(r"\x1b\[[0-9;]*m", "", str(exc))
                        self._retry(task, group.pending, "it raised", tb=tb)
                    continue
                if group is None:
                    continue  # its batch was cancelled
                self._retries.forget(task.index)
                group.grads[task.index] = grad_ref
                if len(group.grads) == len(group.tasks):
                    if task.gradient:
                        self._sum(group)
                    else:  # nothing to sum: the group is done with its last result
                        self._groups.remove(group)
                if task.index not in group.reported:
                    group.reported.add(task.index)
                    yield result
            now = self._stall_skipped(self._slots)
            for slot in self._slots:
                if slot.task is not None and now - slot.since > self.spec.episode_timeout:
                    task, group = slot.task, slot.group
                    slot.task = slot.group = slot.ref = slot.grad_ref = None
                    if group is not None:
                        self._retry(task, group.pending, f"hung for {now - slot.since:.0f} s")
                    ray.kill(slot.actor)
                    self._replace(slot)

    def _hand_out(self, slot: _Slot) -> None:
        # The earliest batch with episodes left goes first: it is the one the trainer waits
        # for. Within it, an actor takes work from a group of its own node first, then opens
        # a new group for its node, and only then helps another node's group: most of a
        # group is played, and so summed, on one node, while no actor waits while work is
        # left.
        open_groups = [g for g in self._groups if g.pending]
        if not open_groups:
            return
        batch = open_groups[0].first_index
        group = min(
            (g for g in open_groups if g.first_index == batch),
            key=lambda g: (g.node != slot.node, g.node is not None),  # own, fresh, other
        )  # min keeps the first of equals: the lowest group number
        if group.node is None:
            group.node = slot.node
        slot.task, slot.group, slot.since = group.pending.popleft(), group, time.monotonic()
        weights = self._versions[group.version]
        task = slot.task
        if isinstance(task, PassTask) and task.data is not None:
            light = dataclasses.replace(task, data=None)
            call = slot.actor.play.remote(weights, light, self._data_ref(task))
        else:
            call = slot.actor.play.remote(weights, task)
        slot.ref, slot.grad_ref = call

    def _data_ref(self, task: PassTask) -> Any:
        # The object of `task`'s episode data, put on its first pass. The same object, not
        # an equal one: data is identified as the local pool's kept data is.
        kept = self._data.get(task.index)
        if kept is None or kept[0] is not task.data:
            assert task.data is not None
            kept = self._data[task.index] = (task.data, ray.put(task.data))
            self.data_puts += 1
        return kept[1]

    def _sum(self, group: _Group) -> None:
        refs = [group.grads[index] for index in sorted(group.grads)]
        group.sum_ref = self._summer(group.node or "").sum.remote(refs)
        self.group_sums += 1

    def _summer(self, node: str) -> Any:
        # The summer of `node`, made on first use. An actor that has not said where it runs
        # (node "") borrows any summer. The affinity is hard: a soft one left zero-CPU actors
        # on other nodes, where every gradient had to be fetched. If the node goes, so does
        # its summer, and the group is played again.
        if not node and self._summers:
            return next(iter(self._summers.values()))
        if node not in self._summers:
            where = NodeAffinitySchedulingStrategy(node_id=node, soft=False) if node else None
            self._summers[node] = GroupSummer.options(scheduling_strategy=where).remote()
        return self._summers[node]

    def _replay_group(self, group: _Group, why: str) -> None:
        # The group's gradients are gone with their node: play its episodes again (same
        # seeds, same gradients, same sum).
        group.failures += 1
        if group.failures > self.spec.max_retries:
            raise WorkerError(
                f"the sum of episodes {group.tasks[0].index}.. failed {group.failures} times "
                f"on Ray (last: {why})"
            )
        log.warning(f"group {group.number}: {why}; playing its episodes again")
        group.pending = deque(group.tasks)
        group.grads.clear()
        group.node = None

    def _retry(self, task: Task, pending: deque[Task], why: str, tb: str | None = None) -> None:
        what = f"times on Ray actors (last: {why})"
        count = self._retries.again(task, pending, task, lambda n: f"failed {n} {what}", tb)
        log.warning(
            f"episode {task.index}: {why}; playing it again ({count}/{self.spec.max_retries})"
        )

    def _replace(self, slot: _Slot) -> None:
        slot.actor = self._new_actor()
        slot.node = ""  # unknown until it answers
        with contextlib.suppress(ray.exceptions.RayError):
            slot.node = _get(slot.actor.node_id.remote(), _START_SECONDS)
        self.replacements += 1
