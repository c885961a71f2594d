"""What every backend shares: the rollout spec, the interface, and the errors it raises."""

from __future__ import annotations

import contextlib
import ctypes
import os
import sys
from collections import deque
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any, Protocol

import numpy as np

from pong_mp.batch_sum import GroupSum
from pong_mp.episode import EpisodeResult, EpisodeStats, EpisodeTask

_M_MMAP_THRESHOLD = -3  # mallopt's parameter number in glibc's malloc.h


def prepare_worker_process() -> None:
    """Set up a process that plays episodes: BLAS on one thread (one process per core is
    the parallelism), and glibc's malloc told to hand large freed blocks back to the OS.

    glibc raises its mmap threshold each time a large block is freed, after which blocks
    of a few hundred KB come from the heap, whose fragments pile up: a worker's RSS then
    creeps up episode after episode. A fixed threshold (its default, 128 KiB) keeps every
    large temporary in its own mapping, so that memory does not depend on how long a
    worker or an episode runs. Elsewhere than glibc this is skipped.
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

    A spawned worker runs the parent's main script again as it starts. A script that trains
    at its top level, with no `if __name__ == "__main__":`, would start training again in
    every worker; the worker leaves quietly instead, and the coordinator raises
    MainGuardError (see `main_guard_error`).
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


@dataclass(frozen=True)
class RolloutSpec:
    """How episodes are played; the same for every worker of a run."""

    env_id: str
    """Gymnasium env id, e.g. ALE/Pong-v5 or FakePong-v0."""
    hidden: int
    """Hidden units of the policy."""
    gamma: float
    """Discount factor of the returns."""
    advantage: str = "episode"
    """Returns standardised per episode, or over the batch (the gradient is then A and B)."""
    workers: int = 1
    """Worker processes or actors (ignored by the serial backend)."""
    env_kwargs: dict[str, Any] = field(default_factory=dict)
    """Extra keyword arguments for the env constructor (FakePong's points_to_win, ...)."""
    episode_timeout: float = 600.0
    """Seconds one episode may take before its worker is treated as hung and replaced."""
    max_retries: int = 2
    """How many times an episode is played again after it failed, before the run stops."""


class Backend(Protocol):
    """Plays batches of episodes; the trainer never knows which backend it talks to.
    A backend is also a context manager: `with make_backend(...) as b:` starts it and
    always closes it."""

    def __enter__(self) -> Backend:
        """Start the backend."""

    def __exit__(self, *exc: object) -> None:
        """Close the backend."""

    def start(self) -> None:
        """Create the envs and workers."""

    def run_batch(
        self, params: np.ndarray, tasks: list[EpisodeTask]
    ) -> Iterator[EpisodeResult | EpisodeStats | GroupSum]:
        """Play `tasks` (one batch, in position order) with flat float64 `params`; yield
        each result as soon as it is ready, in any order, every task exactly once (the
        caller orders them). A result's gradient may be valid only until the next item is
        asked for. A backend that sums groups itself (`batch_sum.sum_group`) yields each
        episode's EpisodeStats and one GroupSum per group instead."""

    def close(self) -> None:
        """Stop workers and free every resource; safe to call more than once."""


class ContextManaged:
    """`with backend:` for the backends: start on entry, close on every exit."""

    def start(self) -> None:
        """Create the envs and workers."""
        raise NotImplementedError

    def close(self) -> None:
        """Stop workers and free every resource."""
        raise NotImplementedError

    def __enter__(self) -> Any:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


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
    """WorkerError(message) with the worker's traceback attached as its cause:
    `raise worker_error(...)`."""
    error = WorkerError(message)
    error.__cause__ = RemoteTraceback(tb)
    error.__suppress_context__ = True
    return error


class Retries:
    """A batch's failed episodes: how often each failed, and when to give up."""

    def __init__(self, max_retries: int) -> None:
        """An episode failing more than `max_retries` times stops the batch."""
        self.max_retries = max_retries
        self.failures: dict[int, int] = {}
        """Failures so far, by episode index."""

    def again(
        self,
        task: EpisodeTask,
        pending: deque[EpisodeTask],
        what: Callable[[int], str],
        tb: str | None = None,
    ) -> int:
        """Count one more failure of `task` and put it back first in `pending` (the same
        seed gives the same result); returns its failure count.

        Past `max_retries` it raises WorkerError(f"episode I {what(count)}"), with the
        worker's traceback `tb` as its cause when there is one.
        """
        count = self.failures[task.index] = self.failures.get(task.index, 0) + 1
        if count > self.max_retries:
            message = f"episode {task.index} {what(count)}"
            raise worker_error(message, tb) if tb is not None else WorkerError(message)
        pending.appendleft(task)
        return count
