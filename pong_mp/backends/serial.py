"""The serial backend: every episode in this process, one after the other (the reference)."""

from __future__ import annotations

import traceback
from collections import OrderedDict, deque
from collections.abc import Iterator

import numpy as np
from threadpoolctl import ThreadpoolController

from pong_mp.backends.base import BackendBase, Retries, RolloutSpec
from pong_mp.backends.episode_worker import EpisodeWorker
from pong_mp.episode import EpisodeResult, Task
from pong_mp.policy import Weights32
from pong_mp.signals import Interrupted, at_once


class SerialBackend(EpisodeWorker, BackendBase):
    """An EpisodeWorker in the calling process: submitted episodes wait in one queue, each
    with its weights version, and `results` plays them one at a time."""

    def __init__(self, spec: RolloutSpec) -> None:
        """Remember the spec; the env is built by `start`."""
        super().__init__(spec)
        self._versions: OrderedDict[int, Weights32] = OrderedDict()
        self._queue: deque[tuple[int, Task]] = deque()
        # Found once: looking for the BLAS libraries reads /proc/self/maps (~1 ms), which
        # the actor-critic's many short tasks would pay each time.
        self._threads = ThreadpoolController()
        self._retries = Retries(spec.max_retries)

    def start(self) -> None:
        """Create the env."""
        with at_once():  # the user's env, made here, may hang: a stop signal ends it
            self.open()

    def publish(self, version: int, weights: np.ndarray) -> None:
        """Keep a copy of `weights` as `version`, and the last spec.lag + 1 versions only."""
        self._versions[version] = Weights32.from_flat32(np.array(weights), self.spec.shape)
        while len(self._versions) > self.spec.lag + 1:
            self._versions.popitem(last=False)

    def submit(self, version: int, tasks: list[Task]) -> None:
        """Queue `tasks` behind those submitted before."""
        if version not in self._versions:
            raise ValueError(f"weights version {version} was not published (or was dropped)")
        self._queue.extend((version, task) for task in tasks)

    def cancel(self) -> None:
        """Forget the episodes not played yet."""
        self._queue.clear()

    def results(self) -> Iterator[EpisodeResult]:
        """Play the queued episodes in order, with BLAS on one thread as in the workers
        (same bytes)."""
        if not self.is_open:
            raise RuntimeError("SerialBackend.start() was not called")
        while self._queue:
            version, task = self._queue[0]
            try:
                # In this process, the user's env may hang in a step: a stop signal ends it.
                with self._threads.limit(limits=1), at_once():
                    result = self.play(self._versions[version], task)
            except (KeyboardInterrupt, Interrupted):
                raise  # a stop
            except BaseException:  # the env failed (sys.exit too): played again, as in a worker
                tb = traceback.format_exc()
                count = self._retries.count(task, lambda n: f"failed {n} times", tb)
                self._retries.say_retry(task, count, tb)
                continue  # still first in the queue
            self._queue.popleft()  # only once played: a stop or an error leaves it queued
            self._retries.forget(task.index)
            yield result
