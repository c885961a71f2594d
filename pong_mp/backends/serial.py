"""The serial backend: every episode in this process, one after the other (the reference)."""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np
from threadpoolctl import threadpool_limits

from pong_mp.backends.base import ContextManaged
from pong_mp.backends.worker import EpisodeWorker
from pong_mp.episode import EpisodeResult, EpisodeTask
from pong_mp.policy import Weights32


class SerialBackend(EpisodeWorker, ContextManaged):
    """An EpisodeWorker in the calling process: the backend that is the worker itself."""

    def start(self) -> None:
        """Create the env."""
        self.open()

    def run_batch(self, params: np.ndarray, tasks: list[EpisodeTask]) -> Iterator[EpisodeResult]:
        """Play `tasks` in order, with BLAS on one thread as in the workers (same bytes)."""
        if not self.is_open:
            raise RuntimeError("SerialBackend.start() was not called")
        weights = Weights32.from_params(params, self.spec.hidden)
        for task in tasks:
            with threadpool_limits(limits=1):
                result = self.play(weights, task)
            yield result
