"""The serial backend: every episode in this process, one after the other (the reference)."""

from __future__ import annotations

from collections.abc import Iterator

import gymnasium as gym
import numpy as np
from threadpoolctl import threadpool_limits

from pong_mp.backends.base import RolloutSpec
from pong_mp.envs import make_training_env
from pong_mp.episode import EpisodeGradient, EpisodeResult, EpisodeTask, play_episode
from pong_mp.frames import InputStream
from pong_mp.policy import Weights32


class SerialBackend:
    """Plays episodes in the calling process with one persistent env."""

    def __init__(self, spec: RolloutSpec) -> None:
        """Remember the spec; nothing is created until `start`."""
        self.spec = spec
        self._env: gym.Env | None = None
        self._inputs: InputStream | None = None
        self._work: EpisodeGradient | None = None

    def start(self) -> None:
        """Create the env."""
        self._env, self._inputs = make_training_env(self.spec.env_id, **self.spec.env_kwargs)
        self._work = EpisodeGradient(self.spec.hidden)

    def run_batch(self, params: np.ndarray, tasks: list[EpisodeTask]) -> Iterator[EpisodeResult]:
        """Play `tasks` in order, with BLAS on one thread as in the workers (same bytes)."""
        if self._env is None or self._inputs is None:
            raise RuntimeError("SerialBackend.start() was not called")
        weights = Weights32.from_params(params, self.spec.hidden)
        for task in tasks:
            with threadpool_limits(limits=1):
                result = play_episode(
                    self._env, self._inputs, weights, self.spec.gamma, task, work=self._work
                )
            yield result

    def close(self) -> None:
        """Close the env."""
        if self._env is not None:
            self._env.close()
            self._env = None
