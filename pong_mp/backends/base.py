"""What every backend shares: the rollout spec (with what its workers run, `WorkerSpec`), the
interface, and the errors it raises."""

from __future__ import annotations

import contextlib
import ctypes
import logging
import os
import sys
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any, Protocol

import gymnasium as gym
import numpy as np

from pong_mp import policy
from pong_mp.batch_sum import GroupSum
from pong_mp.episode import EpisodeResult, EpisodeStats, Task, ZeroRows
from pong_mp.frames import InputStream

log = logging.getLogger("pong_mp")

_M_MMAP_THRESHOLD = -3  # mallopt's parameter number in glibc's malloc.h


def prepare_worker_process() -> None:
    """Set up a process that plays episodes: BLAS on one thread (one process per core is
    the parallelism), and glibc's malloc told to hand large freed blocks back to the OS.

    glibc raises its mmap threshold each time a large block is freed, after which blocks of a
    few hundred KB come from the heap, whose fragments make a worker's RSS creep up episode
    after episode. A fixed threshold (its default, 128 KiB) keeps every large temporary in
    its own mapping. Elsewhere than glibc this is skipped.
    """
    from threadpoolctl import threadpool_limits

    threadpool_limits(limits=1)
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL("libc.so.6").mallopt(_M_MMAP_THRESHOLD, 128 * 1024)


MAIN_GUARD_EXIT = 86
"""Exit code of a worker process that found itself running the user's training script."""


class MainGuardError(RuntimeError):
    """Workers could not start: the script that trains has no `if __name__ == "__main__":`."""


def refuse_in_a_starting_worker() -> None:
    """Exit at once, with MAIN_GUARD_EXIT, if called while a spawned worker is starting.

    A spawned worker runs the parent's main script again as it starts: one that trains at its
    top level would train again in every worker, which leaves quietly instead (the
    coordinator raises `main_guard_error`).
    """
    import multiprocessing

    if getattr(multiprocessing.current_process(), "_inheriting", False):
        os._exit(MAIN_GUARD_EXIT)


def main_guard_error() -> MainGuardError:
    """The error for workers that exited with MAIN_GUARD_EXIT while starting."""
    script = getattr(sys.modules.get("__main__"), "__file__", None) or "the main script"
    return MainGuardError(
        f"worker processes run {script} again as they start, and it started training "
        'again: put the training call under `if __name__ == "__main__":`'
    )


class WorkerLearner(Protocol):
    """A learner's side in a worker: what it does with a task, in the worker's env."""

    def run(
        self,
        env: gym.Env,
        inputs: InputStream,
        weights: policy.Weights32,
        task: Task,
        out: np.ndarray | None,
        zeroed: ZeroRows | None = None,
    ) -> EpisodeResult:
        """Do `task` with `weights`: play an episode in `env`, or a pass over one played
        before; a gradient goes into `out` (flat float32), or None comes back for none.
        `zeroed`, where `out` is a slot that keeps them, flags the W1 rows `out` holds as
        +0.0: a learner that writes `out` keeps them true (or clears them)."""


class WorkerSpec(Protocol):
    """What a learner's workers run: small picklable settings (pg.PGWork, ppo.PPOWork) that
    build the worker's side."""

    @property
    def value_head(self) -> bool:
        """Whether the weights carry a value head."""

    def worker(self, shape: policy.NetShape) -> WorkerLearner:
        """The working memory of one worker, for policies of `shape`."""


@dataclass(frozen=True)
class RolloutSpec:
    """How episodes are played; the same for every worker of a run."""

    env_id: str  # e.g. ALE/Pong-v5 or FakePong-v0
    shape: policy.NetShape
    learner: WorkerSpec  # what the workers run: the learner's side of a task
    workers: int = 1  # processes or actors (ignored by the serial backend)
    env_kwargs: dict[str, Any] = field(default_factory=dict)  # for the env's constructor
    episode_timeout: float = 600.0  # seconds before an episode's worker is judged hung
    max_retries: int = 2  # plays of an episode after it failed, before the run stops
    lag: int = 0  # policy lag: the backend keeps lag + 1 weights versions
    # Episodes a batch: the local pool gives the actor-critic's passes a gradient slot for
    # each position (0: each worker a slot or two of its own).
    batch_size: int = 0

    @property
    def value_head(self) -> bool:
        """Whether the weights carry a value head (the learner's)."""
        return self.learner.value_head


BackendItem = EpisodeResult | EpisodeStats | GroupSum
"""What a backend yields: an episode with its gradient; or an episode's statistics alone,
its gradient coming in its group's sum (a GroupSum made where the group was played)."""


class Backend(Protocol):
    """Plays episodes with published weights; the trainer never knows which backend it talks
    to. Several batches may be in flight at once (--policy-lag), each with its own weights.
    `with make_backend(...) as b:` starts it and always closes it."""

    def __enter__(self) -> Backend:
        """Start the backend."""

    def __exit__(self, *exc: object) -> None:
        """Close the backend."""

    def start(self) -> None:
        """Create the envs and workers."""

    def publish(self, version: int, weights: np.ndarray) -> None:
        """Make flat float32 `weights` playable as `version`, keeping the last `spec.lag + 1`
        versions only; the backend copies them, so the caller may reuse them."""

    def weights_room(self) -> np.ndarray | None:
        """Where the next `publish` copies its weights (a writable flat float32 array), for
        a caller that fills it and publishes it as it is, sparing the copy; None where the
        backend has no such place. Filling it drops the oldest version kept."""

    def submit(self, version: int, tasks: list[Task]) -> None:
        """Queue one batch, `tasks` in position order, to be played with weights `version`
        (published). Earlier submitted batches are played first."""

    def results(self) -> Iterator[BackendItem]:
        """Yield the submitted episodes' results as they are ready, in any order, each
        exactly once, until none is left in flight (the caller orders them).

        The caller may stop asking at any time: the next call goes on. A result's gradient
        may be valid only until the next item is asked for. A backend that sums groups itself
        yields each episode's EpisodeStats and one GroupSum per group instead of gradients."""

    def cancel(self) -> None:
        """Drop every submitted episode not yet yielded; the backend stays usable."""

    def close(self) -> None:
        """Stop workers and free every resource; safe to call more than once."""


class BackendBase:
    """What the backends share: their start (`__init__`) and `with backend:`. Subclasses
    implement the rest of `Backend`."""

    def __init__(self, spec: RolloutSpec) -> None:
        """Remember the spec; the workers are made by `start`."""
        if spec.workers < 1:
            raise ValueError("workers must be >= 1")
        self.spec = spec
        self.replacements = 0
        """How many workers were replaced after dying or hanging (for tests and logs)."""

    def weights_room(self) -> np.ndarray | None:
        """None: the weights are copied (`Backend.weights_room`)."""
        return None

    def __enter__(self) -> Any:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


STALL_SECONDS = 3.0
"""A longer gap between two of a backend's checks for hung workers (about one a second while
it waits) means the coordinator did not run for a while: stopped by Ctrl-Z or SIGSTOP (often
with its workers), or held up elsewhere."""


class Clocked(Protocol):
    """A worker or actor whose episode's clock started at `since` (time.monotonic)."""

    since: float


def skip_stall(clocks: Iterable[Clocked], checked: float, now: float) -> None:
    """Take a stall off the episode clocks: if the coordinator last checked them at
    `checked`, longer than STALL_SECONDS before `now`, each clock skips what of that gap it
    has run through, so that no worker is taken for hung on `fg`. A truly hung one is found
    at most that much later."""
    if now - checked > STALL_SECONDS:
        for clock in clocks:
            clock.since += max(0.0, now - max(clock.since, checked))


class RemoteTraceback(Exception):
    """A traceback from another process, shown as the __cause__ of a WorkerError."""

    def __init__(self, tb: str) -> None:
        super().__init__(tb)
        self.tb = tb

    def __str__(self) -> str:
        return f'\n"""\n{self.tb}"""'


class BackendUnavailable(RuntimeError):
    """The backend cannot run here: ray is not installed, or no cluster can be joined."""


class WorkerError(RuntimeError):
    """An episode failed in a worker more often than allowed; `__cause__` has its traceback."""


def worker_error(message: str, tb: str) -> WorkerError:
    """WorkerError(message) with the worker's traceback `tb` attached as its cause."""
    error = WorkerError(message)
    error.__cause__ = RemoteTraceback(tb)
    error.__suppress_context__ = True
    return error


class Retries:
    """Failed episodes: how often each failed, and when to give up."""

    def __init__(self, max_retries: int) -> None:
        """An episode failing more than `max_retries` times stops the run."""
        self.max_retries = max_retries
        self.failures: dict[int, int] = {}  # by episode index

    def count(self, task: Task, what: Callable[[int], str], tb: str | None = None) -> int:
        """Count one more failure of `task`; returns its failure count. Past `max_retries`
        it raises WorkerError(f"episode I {what(count)}"), caused by `tb`."""
        count = self.failures[task.index] = self.failures.get(task.index, 0) + 1
        if count > self.max_retries:
            message = f"episode {task.index} {what(count)}"
            raise worker_error(message, tb) if tb is not None else WorkerError(message)
        return count

    def say_retry(self, task: Task, count: int, tb: str, where: str = "") -> None:
        """Log that `task` raised `where` (" in worker 2"; "" in this process), with the last
        line of its traceback `tb`, and is played again: its `count`th failure."""
        last_line = tb.strip().splitlines()[-1]
        log.warning(
            f"episode {task.index} failed{where} ({last_line}); "
            f"retrying ({count}/{self.max_retries})"
        )

    def forget(self, index: int) -> None:
        """Episode `index` was played at last: its failures no longer count."""
        self.failures.pop(index, None)
