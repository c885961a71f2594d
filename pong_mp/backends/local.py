"""The local backend: a pool of persistent worker processes on this machine, described in
docs/how-it-works.md, 'The pool' (a worker's side is `worker_process.py`).

Each worker has its own duplex pipe, so the coordinator always knows which episode a worker
holds, a worker killed mid-message can only break its own pipe, and a death is seen at once
through the process sentinel. Episodes go one at a time, in submission order, to whichever
worker is idle, whatever batch they belong to.

With --algo ppo, an idle worker takes first the passes (PassTasks) over the episodes whose
data it keeps (`kept.py`), which go without it: a trajectory crosses the pipe once an update
instead of once a pass, and again only to a worker that would otherwise wait. A round's
gradients stay in a slot per position until the round is complete, then the coordinator's
threads sum it (`batch_sum.sum_in_blocks`), not one gradient at a time as they arrive; a
batch much larger than the pool (`POSITION_BLOCK_EPISODES`) would hold memory for little
gain, so there each worker has a slot or two of its own.

Data flow of one batch:

    coordinator (publish, submit, results)          worker N (worker_main, an EpisodeWorker)
    --------------------------------------          ----------------------------------------
    publish: weights -> SharedWeights slot (v)  ~~ shm ~~>  weights.read(v)
      (the actor-critic's step writes them there: weights_room)
    submit: Play(v, task, s) queued,    -- pipe -->  play(weights, task, slot)
            sent                                       gradient -> SharedGradient N, slot s
    EpisodeResult(stats, slot s view    <-- pipe --  Done(stats, gradient, s) |
                  or None)                          Failed(index, traceback)
      -> BatchSum (fixed order)
    sentinel N fires (death), or no answer within --episode-timeout of the worker being ready
    (a replacement's start, building its env, is not the episode's time): replace the worker,
    play its episode again with the same seed.
"""

from __future__ import annotations

import contextlib
import errno
import logging
import multiprocessing as mp
import os
import time
from collections import deque
from collections.abc import Iterator
from dataclasses import dataclass, field
from multiprocessing.connection import Connection
from multiprocessing.process import BaseProcess

import numpy as np

from pong_mp.backends.base import (
    MAIN_GUARD_EXIT,
    BackendBase,
    BackendUnavailable,
    Retries,
    RolloutSpec,
    WorkerError,
    main_guard_error,
    skip_stall,
    worker_error,
)
from pong_mp.backends.kept import KeptData
from pong_mp.backends.shm import (
    SharedGradient,
    SharedMemoryFull,
    SharedWeights,
    check_room,
    free_bytes,
    remove_stale_blocks,
    room_error,
    start_resource_tracker,
)
from pong_mp.backends.worker_process import (
    Done,
    Failed,
    Play,
    Ready,
    Stop,
    block_shapes,
    gradient_slots,
    how_it_ended,
    start_process,
    worker_main,
)
from pong_mp.episode import EpisodeResult, PassTask, Task
from pong_mp.signals import check_stop, wait

log = logging.getLogger("pong_mp")

_JOIN_SECONDS = 5.0  # how long close() waits for a worker before it is killed
_START_SECONDS = 120.0  # how long start() waits for workers to import and build their envs
_POLL_SECONDS = 1.0  # longest wait between checks for hung workers
# A batch of up to this many episodes (or 4 a worker) gets a gradient slot for each position
# (4.6 MB each with the conv policy): the defaults' 10 take 46 MB of /dev/shm.
POSITION_BLOCK_EPISODES = 16


@dataclass
class _Worker:
    slot: int
    process: BaseProcess
    conn: Connection
    grad: SharedGradient
    job: Play | None = None  # the episode it plays, with its weights version
    queued: Play | None = None  # a pass sent to start when `job` is done (its other slot)
    since: float = 0.0  # when the current job was sent, or when the worker became ready
    ready: bool = False  # it has built its env: its job's clock runs from then
    abandoned: bool = False  # stopped with its episode dropped: replaced at the next results
    sent: float = 0.0  # perf_counter when its job was sent (for the pipes' share)
    idle_since: float | None = None  # perf_counter since when it waits for a job, if it does
    kept: KeptData = field(default_factory=KeptData)  # what it keeps, mirrored


class LocalBackend(BackendBase):
    """Persistent spawned worker processes with shared-memory weights."""

    def __init__(self, spec: RolloutSpec) -> None:
        """Remember the spec; processes and shared memory are created by `start`."""
        super().__init__(spec)
        self._ctx = mp.get_context("spawn")
        self._weights: SharedWeights | None = None
        self._grads: list[SharedGradient] = []
        self._workers: list[_Worker] = []
        self._pending: deque[Play] = deque()  # submitted, not yet sent to a worker
        self._retries = Retries(spec.max_retries)
        self._slots = gradient_slots(spec)
        self._by_position = False  # one block, a slot per position of the batch (see above)
        self._checked = time.monotonic()  # when the workers were last checked for hangs
        # For `pong-mp bench`, summed over workers: the time spent playing the episodes whose
        # results came back, and where the rest went: done with their part of a batch while
        # others played its last episodes (barrier); from the batch's last result (or their
        # own) until sent their next episode (coordinator); an episode's round trip less its
        # play (pipe).
        self.busy_seconds = 0.0
        self.barrier_seconds = 0.0
        self.coordinator_seconds = 0.0
        self.pipe_seconds = 0.0
        self._last_result = 0.0  # perf_counter of the latest result received
        # PassTasks sent without their episode's data (to a worker that keeps it), with it,
        # and to a worker still busy with the one before (queued):
        self.light_passes = 0
        self.whole_passes = 0
        self.queued_passes = 0

    # lifecycle

    def start(self) -> None:
        """Create the shared memory (first removing blocks of runs killed with their resource
        tracker), spawn the workers and wait for their envs; WorkerError if one cannot start."""
        if mp.current_process().daemon:  # multiprocessing would only assert it
            raise BackendUnavailable(
                "this process is a daemon (a multiprocessing.Pool's worker, or a Process made "
                "with daemon=True), which may start no worker processes: use --backend serial, "
                "or train from a process that is not a daemon"
            )
        remove_stale_blocks()
        start_resource_tracker()
        # Before anything is made, and before the workers start. The layouts of the gradient
        # slots only differ in speed: where /dev/shm has no room for one, the next is tried,
        # and where it has none for the last, the error names that need.
        layouts = self._layouts()
        for number, (slots, by_position) in enumerate(layouts):
            try:
                check_room(*self._room(slots, by_position))
                break
            except SharedMemoryFull:
                if number == len(layouts) - 1:
                    raise
        self._slots, self._by_position = slots, by_position
        weights_shape, grad_shape = block_shapes(self.spec, self._slots)
        try:
            try:
                self._weights = SharedWeights.create(weights_shape)
                for _ in range(1 if by_position else self.spec.workers):
                    self._grads.append(SharedGradient.create(grad_shape))
            except OSError as exc:
                if exc.errno in (errno.ENOSPC, errno.ENOMEM):
                    # The room was there a moment ago, or a limit other than the size bit.
                    raise room_error(*self._room(slots, by_position), free_bytes()) from exc
                raise BackendUnavailable(
                    f"cannot create shared memory in /dev/shm: {exc.strerror or exc}"
                ) from exc
            for slot in range(self.spec.workers):  # each closed with the rest if one fails
                self._workers.append(self._spawn(slot))
            self._await_ready()
        except BaseException:
            self.close()
            raise

    def _layouts(self) -> list[tuple[int, bool]]:
        """The layouts of the gradient slots, fastest first: (slots, whether one block has a
        slot per position of the batch, or each worker a block of its own)."""
        own = [(slots, False) for slots in range(gradient_slots(self.spec), 0, -1)]
        batch = self.spec.batch_size
        most = max(POSITION_BLOCK_EPISODES, 4 * self.spec.workers)
        if self.spec.value_head and batch and batch <= most:
            return [(batch, True), *own]
        return own

    def _room(self, slots: int, by_position: bool) -> tuple[int, str]:
        """The bytes of /dev/shm the weights and the gradient slots of a layout take, and
        what they are, for `check_room`."""
        weights_shape, grad_shape = block_shapes(self.spec, slots)
        blocks = 1 if by_position else self.spec.workers
        needed = SharedWeights.size(weights_shape) + blocks * SharedGradient.size(grad_shape)
        if by_position:
            return needed, f"the weights and a gradient slot for each of {slots} episodes"
        each = "a gradient slot" if slots == 1 else f"{slots} gradient slots"
        return needed, f"the weights and {each} for each of {blocks} workers"

    def _await_ready(self) -> None:
        waiting = {w.conn: w for w in self._workers}
        deadline = time.monotonic() + _START_SECONDS
        while waiting:
            # A stop signal ends the wait (raised there); a wake with nothing ready is no
            # timeout until the deadline.
            ready = wait(list(waiting), timeout=max(0.0, deadline - time.monotonic()))
            if not ready and time.monotonic() >= deadline:
                raise WorkerError(f"workers did not start within {_START_SECONDS:.0f} s")
            for conn in [c for c in waiting if c.poll()]:
                w = waiting.pop(conn)
                try:
                    message = conn.recv()
                except (EOFError, OSError):
                    w.process.join(timeout=5)
                    if w.process.exitcode == MAIN_GUARD_EXIT:
                        raise main_guard_error() from None
                    raise WorkerError(
                        f"worker {w.slot} died while starting (exit code {w.process.exitcode})"
                    ) from None
                if isinstance(message, Failed):
                    raise worker_error(f"worker {w.slot} failed to start", message.traceback)
                w.ready = True

    def _spawn(self, slot: int) -> _Worker:
        assert self._weights is not None
        grad = self._grads[0 if self._by_position else slot]
        try:  # a limit on processes or open files is a failed run, not a traceback
            process, ours = start_process(
                self._ctx,
                worker_main,
                (self.spec, self._weights.name, grad.name, os.getpid(), self._slots),
                name=f"pong-mp-worker-{slot}",
                duplex=True,
            )
        except OSError as exc:
            raise WorkerError(
                f"cannot start worker process {slot}: {exc.strerror or exc}"
            ) from None
        return _Worker(slot=slot, process=process, conn=ours, grad=grad)

    @property
    def weights_name(self) -> str:
        """The name of the weights' shared-memory block (once started)."""
        return self._started_weights().name

    def _started_weights(self) -> SharedWeights:
        if self._weights is None:
            raise RuntimeError("LocalBackend.start() was not called")
        return self._weights

    def worker_pids(self) -> list[int]:
        """Pids of the current worker processes."""
        return [w.process.pid for w in self._workers if w.process.pid is not None]

    def close(self) -> None:
        """Ask workers to stop, kill those that do not, and unlink the shared memory."""
        workers, self._workers = self._workers, []
        self._pending.clear()
        try:
            for w in workers:
                if w.job is not None:
                    _kill(w.process)  # its episode is being thrown away: no need to wait
                    continue
                with contextlib.suppress(OSError, ValueError):
                    w.conn.send(Stop())
            deadline = time.monotonic() + _JOIN_SECONDS
            for w in workers:
                w.process.join(max(0.0, deadline - time.monotonic()))
            for w in workers:
                _kill(w.process)
                w.conn.close()
        finally:
            for grad in self._grads:
                grad.close()
                grad.unlink()
            self._grads = []
            if self._weights is not None:
                self._weights.close()
                self._weights.unlink()
                self._weights = None

    # episodes

    def weights_room(self) -> np.ndarray | None:
        """The shared slot the next `publish` writes (`SharedWeights.room`)."""
        return self._started_weights().room()

    def publish(self, version: int, weights: np.ndarray) -> None:
        """Write `weights` into shared memory as `version`, over the oldest version kept."""
        self._started_weights().write(weights, version)
        # New weights: a batch is complete. Those who waited for its last results did so
        # at the barrier; from the last result on, they wait for the coordinator.
        for w in self._workers:
            if w.job is None and w.idle_since is not None:
                self.barrier_seconds += max(0.0, self._last_result - w.idle_since)
                w.idle_since = max(w.idle_since, self._last_result)

    def submit(self, version: int, tasks: list[Task]) -> None:
        """Queue `tasks` behind those submitted before, to be played with `version`; idle
        workers get theirs at once, to play while the coordinator does its bookkeeping."""
        if version not in self._started_weights().versions:
            raise ValueError(f"weights version {version} was not published (or was dropped)")
        self._pending.extend(Play(version, task) for task in tasks)
        self._dispatch()

    def _dispatch(self) -> None:
        """Replace the workers stopped by `cancel` or dead while idle, and hand the next
        episodes to idle workers."""
        for w in list(self._workers):
            if w.abandoned:
                w.conn.close()
                self._workers[self._workers.index(w)] = self._spawn(w.slot)
            elif w.job is None and w.process.exitcode is not None:
                self._replace(w, "died while idle")
        idle = [w for w in self._workers if w.job is None]
        # Each idle worker takes first a pass whose episode's data it keeps; then the rest go in
        # order, a pass to a worker that does not keep it (which gets it whole) rather than
        # waiting for the one that does.
        for w in idle:
            job = self._kept_job(w) if self._pending and len(w.kept) else None
            if job is not None:
                self._send(w, job)
        for w in idle:
            if w.job is None and self._pending:
                self._send(w, self._pending.popleft())
        # A worker still busy with a pass gets the next pass whose data it keeps, to start
        # as soon as it is done, into its other gradient slot: no round trip of the pipe and
        # the coordinator between the passes of a round.
        for w in self._workers:
            if w.job is not None and w.queued is None and w.ready and self._pending:
                job = self._kept_job(w) if self._slots > 1 and len(w.kept) else None
                if job is not None:
                    self._send(w, job)

    def _kept_job(self, w: _Worker) -> Play | None:
        """Take from the pending jobs the first pass whose episode's data `w` keeps, if any."""
        for position, job in enumerate(self._pending):
            if isinstance(job.task, PassTask) and w.kept.holds(job.task):
                del self._pending[position]
                return job
        return None

    def cancel(self) -> None:
        """Drop the episodes not yet yielded. Workers still playing one are stopped: their
        answers would come among later results. The next `results` starts fresh ones."""
        self._pending.clear()
        for w in self._workers:
            if w.job is not None:
                _kill(w.process)
                w.job, w.queued, w.abandoned = None, None, True

    def results(self) -> Iterator[EpisodeResult]:
        """Play the submitted episodes on the pool, in submission order; yield results as
        they arrive. A result's gradient is a view of a shared slot: valid until the next
        result is asked for (the worker gets no new episode before), or where it `stays`
        (a slot per position), until the next round is submitted."""
        self._started_weights()
        self._dispatch()
        while self._pending or any(w.job is not None for w in self._workers):
            self._dispatch()
            busy = [w for w in self._workers if w.job is not None]
            ready = wait([w.conn for w in busy] + [w.process.sentinel for w in busy], _POLL_SECONDS)
            for w in busy:
                if w.conn in ready or w.process.sentinel in ready:
                    result = self._collect(w, ready)
                    if result is not None:
                        yield result
            now = time.monotonic()  # with a stall since the last check taken off the clocks
            skip_stall(self._workers, self._checked, now)
            self._checked = now
            for w in busy:
                if w.job is None:
                    continue
                if w.ready and now - w.since > self.spec.episode_timeout:
                    self._replace(w, f"hung for {now - w.since:.0f} s")
                elif not w.ready and now - w.since > _START_SECONDS:
                    self._replace(w, f"did not start within {_START_SECONDS:.0f} s")

    def _send(self, w: _Worker, job: Play) -> None:
        if w.job is None:
            job = job._replace(slot=self._slot(job, 0))
            w.job, w.since, w.sent = job, time.monotonic(), time.perf_counter()
            if w.idle_since is not None:
                self.coordinator_seconds += w.sent - w.idle_since
                w.idle_since = None
        else:  # queued behind its job, into a slot the job does not write
            job = w.queued = job._replace(slot=self._slot(job, 1 - w.job.slot))
            self.queued_passes += 1
        message = job
        if isinstance(job.task, PassTask):
            if w.kept.holds(job.task):
                message = job._replace(task=w.kept.light(job.task))
                self.light_passes += 1
            else:
                self.whole_passes += 1
            w.kept.passed(message.task)  # as the worker will on receiving it
        else:
            w.kept.playing()
        # If it died, sending fails or goes nowhere; its sentinel reports the death next wait.
        with contextlib.suppress(OSError, ValueError):
            w.conn.send(message)

    def _slot(self, job: Play, own: int) -> int:
        # Its position's slot (the positions of a round's tasks are consecutive indices, so
        # each has its own), or slot `own` of the worker's block.
        return job.task.index % self._slots if self._by_position else own

    def _collect(self, w: _Worker, ready: list[object]) -> EpisodeResult | None:
        """The result `w` sent, or None after handling its death, failure or readiness."""
        message = None
        try:
            if w.conn in ready or w.conn.poll():
                message = w.conn.recv()
        except (EOFError, OSError):
            message = None  # a message cut off by the worker's death
        if message is None:
            self._replace(w, how_it_ended(w.process))
            return None
        if isinstance(message, Ready):
            # A replacement has built its env: its episode starts now, not when it was sent.
            w.ready, w.since = True, time.monotonic()
            return None
        if isinstance(message, Done):
            received = time.perf_counter()
            self.busy_seconds += message.stats.seconds
            self.pipe_seconds += max(0.0, received - w.sent - message.stats.seconds)
            self._last_result = received
            self._next_job(w, received)
            self._retries.forget(message.stats.index)
            if message.stats.data is not None:  # as the worker kept it
                w.kept.played(message.stats.index, message.stats.data)
            # A view of the slot: valid until this worker gets its next episode, or where it
            # is its position's, until the next round.
            if not message.gradient:
                return EpisodeResult(message.stats, None)
            grad, zeroed = w.grad.slots[message.slot], w.grad.zeroed(message.slot)
            return EpisodeResult(message.stats, grad, stays=self._by_position, zeroed=zeroed)
        index, tb = message.index, message.traceback
        job = w.job
        if job is None or index is None:  # it failed before it could play anything
            raise worker_error(f"worker {w.slot} failed to start", tb)
        self._next_job(w, time.perf_counter())
        if isinstance(job.task, PassTask):
            w.kept.forget(job.task.index)  # its retry goes whole, wherever it goes
        count = self._retries.count(job.task, lambda n: f"failed {n} times in a worker", tb)
        self._pending.appendleft(job)  # played again first: the same seed gives the same result
        self._retries.say_retry(job.task, count, tb, f" in worker {w.slot}")
        return None

    def _next_job(self, w: _Worker, now: float) -> None:
        # Its job is over: the pass queued behind it, if any, is what it plays now.
        w.job, w.queued = w.queued, None
        if w.job is None:
            w.idle_since = now
        else:
            w.since, w.sent = time.monotonic(), now

    def _replace(self, w: _Worker, why: str) -> None:
        # A SIGTERM to the process group stops the run and kills its workers: a death seen
        # before the stop was raised is the stop's, not one to replace and report.
        check_stop()
        job = w.job
        _kill(w.process)
        w.conn.close()
        if w.queued is not None:  # never started: back in line, no failure counted
            self._pending.appendleft(w.queued)
        if job is not None:
            self._retries.count(job.task, lambda n: f"lost its worker {n} times (last: {why})")
            self._pending.appendleft(job)  # before its queued pass: played again first
        replay = f"; episode {job.task.index} will be played again" if job is not None else ""
        log.warning(f"worker {w.slot} {why}: replaced{replay}")
        self._workers[self._workers.index(w)] = self._spawn(w.slot)
        self.replacements += 1


def _kill(process: BaseProcess) -> None:
    """End a worker process for sure and reap it."""
    if process.is_alive():
        process.kill()
    process.join(_JOIN_SECONDS)
