"""EpisodeWorker: what does the tasks of every backend.

One env, its input stream and the learner's working memory, built once (`open`), reused for
every task (`play`) and closed on every path (`close`). The serial backend is one; a local
worker process, a Ray actor and `pong-mp bench` each wrap one: the same code, the same bytes.
"""

from __future__ import annotations

import gymnasium as gym
import numpy as np

from pong_mp import policy
from pong_mp.backends.base import RolloutSpec, WorkerLearner
from pong_mp.backends.kept import KeptData
from pong_mp.envs import make_training_env
from pong_mp.episode import EpisodeResult, PassTask, Task, ZeroRows
from pong_mp.frames import InputStream


class EpisodeWorker:
    """Does the tasks of a run (its spec) with one persistent env and working memory."""

    def __init__(self, spec: RolloutSpec, keep: bool = False) -> None:
        """Remember the spec; the env is built by `open`. With `keep` (the local pool's), the
        worker keeps its episodes' data for PassTasks that come without theirs (`kept`)."""
        self.spec = spec
        self._keep = keep
        self._env: gym.Env | None = None
        self._inputs: InputStream | None = None
        self._learner: WorkerLearner | None = None
        self.kept = KeptData()  # with `keep`: the data of episodes it played or was sent

    @property
    def is_open(self) -> bool:
        """Whether `open` built the env (and `close` has not closed it)."""
        return self._env is not None

    def open(self) -> None:
        """Build the env and the learner's working memory (once; again after close)."""
        if self.is_open:
            return
        self._env, self._inputs = make_training_env(self.spec.env_id, **self.spec.env_kwargs)
        self._learner = self.spec.learner.worker(self.spec.shape)

    def play(
        self,
        weights: policy.Weights32,
        task: Task,
        out: np.ndarray | None = None,
        zeroed: ZeroRows | None = None,
    ) -> EpisodeResult:
        """Do `task` with `weights`; a gradient goes into `out` (float32) if given, `zeroed`
        the flags kept with it (`WorkerLearner.run`). With `keep`, a PassTask without its
        episode's data gets the data kept, and a play's data is kept."""
        if self._env is None or self._inputs is None or self._learner is None:
            raise RuntimeError("EpisodeWorker.play() before open()")
        if self._keep and isinstance(task, PassTask):
            self.kept.passed(task)
            task = self.kept.whole(task)
        elif self._keep:
            self.kept.playing()
        # An env's inf or huge rewards make inf and nan here: the coordinator refuses a sum
        # that is not finite in one line (NonFiniteError), so numpy's warnings add only noise.
        with np.errstate(all="ignore"):
            result = self._learner.run(self._env, self._inputs, weights, task, out, zeroed)
        if self._keep and result.stats.data is not None:
            self.kept.played(task.index, result.stats.data)
        return result

    def close(self) -> None:
        """Close the env; safe to call more than once."""
        env, self._env, self._inputs, self._learner = self._env, None, None, None
        self.kept = KeptData()
        if env is not None:
            env.close()
