"""EpisodeWorker: what plays episodes in every backend.

One env, its input stream and one gradient workspace, built once (`open`) and reused for
every episode (`play`), closed on every path (`close`). The serial backend is one; a local
backend's worker process, a Ray actor and `pong-mp bench` each wrap one. So the serial
backend runs the very code a worker runs, and their bytes agree.
"""

from __future__ import annotations

import gymnasium as gym
import numpy as np

from pong_mp import policy
from pong_mp.backends.base import RolloutSpec
from pong_mp.backends.kept import KeptTrajectories
from pong_mp.envs import make_training_env
from pong_mp.episode import EpisodeResult, Task, epoch_pass, play_episode, play_recorded
from pong_mp.frames import InputStream
from pong_mp.gradient import EpisodeGradient
from pong_mp.ppo import EpochTask, PassWork, TrajectoryRecorder


class EpisodeWorker:
    """Plays episodes of a run (its spec) with one persistent env and workspace."""

    def __init__(self, spec: RolloutSpec, keep: bool = False) -> None:
        """Remember the spec; the env is built by `open`. With `keep`, the worker keeps
        trajectories for EpochTasks that come without theirs (`kept`: the local pool's)."""
        self.spec = spec
        self._keep = keep
        self._env: gym.Env | None = None
        self._inputs: InputStream | None = None
        self._work: EpisodeGradient | None = None
        self._recorder: TrajectoryRecorder | None = None
        self._passes: PassWork | None = None
        self.kept = KeptTrajectories()
        """With `keep`: the trajectories of the episodes it played or was sent whole."""

    @property
    def is_open(self) -> bool:
        """Whether `open` built the env (and `close` has not closed it)."""
        return self._env is not None

    def open(self) -> None:
        """Build the env and the gradient's working memory (once; again after close)."""
        if self.is_open:
            return
        env, inputs = make_training_env(self.spec.env_id, **self.spec.env_kwargs)
        self._env, self._inputs = env, inputs
        if self.spec.algo == "ppo":
            self._recorder = TrajectoryRecorder(self.spec.hidden, self.spec.channels)
            self._passes = PassWork(self.spec.hidden, self.spec.channels)
            return
        self._work = EpisodeGradient(
            self.spec.hidden,
            entropy_bonus=self.spec.entropy_bonus,
            baseline=self.spec.baseline == "value",
        )

    def play(
        self, weights: policy.Weights32, task: Task, out: np.ndarray | None = None
    ) -> EpisodeResult:
        """Play `task` with `weights`; its gradient goes into `out` (float32) if given.

        With the actor-critic, an EpisodeTask is played into a trajectory (which comes
        back in the statistics; the gradient is zero) and an EpochTask gives its share of
        a minibatch's gradient, playing nothing: with the trajectory it carries, or, when
        it carries none, with the one kept of that episode (`kept`)."""
        if self._env is None or self._inputs is None:
            raise RuntimeError("EpisodeWorker.play() before open()")
        if isinstance(task, EpochTask):
            if self._keep:
                self.kept.passed(task)
                task = self.kept.whole(task)
            return epoch_pass(weights, task, self.spec.ppo, out, self._passes)
        if self._keep:
            self.kept.playing()
        if self._recorder is not None:
            stats = play_recorded(
                self._env, self._inputs, weights, self.spec.gamma, self.spec.ppo.gae_lambda,
                task, self._recorder,
            )
            if self._keep and stats.trajectory is not None:
                self.kept.played(task.index, stats.trajectory)
            size = policy.param_count(self.spec.hidden, True, self.spec.channels)
            grad = np.empty(size, np.float32) if out is None else out
            grad[:] = 0.0
            return EpisodeResult(stats, grad)
        return play_episode(
            self._env, self._inputs, weights, self.spec.gamma, task, out, self._work
        )

    def close(self) -> None:
        """Close the env; safe to call more than once."""
        env, self._env, self._inputs, self._work = self._env, None, None, None
        self._recorder = self._passes = None
        self.kept = KeptTrajectories()
        if env is not None:
            env.close()
