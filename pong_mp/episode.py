"""One episode of policy-gradient Pong: play it, then compute its gradient.

This is the one place the algorithm's rollout lives; every backend calls `play_episode`.
Everything random in an episode comes from its seed, and the seed is a pure function of
(run seed, global episode index), so an episode gives the same bytes wherever it runs.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass

import gymnasium as gym
import numpy as np
import scipy.sparse

from pong_mp import policy
from pong_mp.frames import NO_PIXELS, NO_VALUES, InputStream


@dataclass(frozen=True)
class EpisodeTask:
    """What a worker needs to play one episode: its global index and its seed."""

    index: int
    """Global episode index in the run (0, 1, 2, ... across all batches and resumes)."""
    seed: int
    """Seed of the env reset and of the action sampling."""


@dataclass
class EpisodeResult:
    """What one episode gives back to the coordinator."""

    index: int
    """Global episode index, as in the task."""
    grad: np.ndarray | None
    """Flat gradient of the episode's objective w.r.t. the parameters (float32). None only
    while a result travels from a worker whose gradient is in shared memory."""
    reward_sum: float
    """Sum of the episode's rewards (agent points minus opponent points)."""
    steps: int
    """Env steps played."""
    seconds: float
    """Wall time spent on the episode in the worker."""


def episode_seed(run_seed: int, index: int) -> int:
    """The seed of global episode `index` of a run: independent streams via SeedSequence."""
    words = np.random.SeedSequence(run_seed, spawn_key=(index,)).generate_state(2, np.uint32)
    return int(words[0]) << 32 | int(words[1])


def make_tasks(run_seed: int, first_index: int, count: int) -> list[EpisodeTask]:
    """Tasks for episodes first_index .. first_index + count - 1 of a run."""
    return [
        EpisodeTask(index=i, seed=episode_seed(run_seed, i))
        for i in range(first_index, first_index + count)
    ]


def start_episode(env: gym.Env, inputs: InputStream, seed: int) -> Callable[[], float]:
    """Reset `env` and `inputs` for an episode with `seed`; return its action sampler.

    Everything random in an episode comes from here: the env's reset (ALE's sticky actions,
    FakePong's serves) and the uniform draws that pick the actions are two independent
    streams of `seed`.
    """
    env_seq, action_seq = np.random.SeedSequence(seed).spawn(2)
    obs, _ = env.reset(seed=int(env_seq.generate_state(1)[0]))
    inputs.reset(obs)
    return np.random.default_rng(action_seq).random


def play_episode(
    env: gym.Env,
    inputs: InputStream,
    weights: policy.Weights32,
    gamma: float,
    task: EpisodeTask,
    out: np.ndarray | None = None,
) -> EpisodeResult:
    """Play one episode with the stochastic policy `weights`, and return its gradient.

    The gradient is written into `out` (flat float32) when given, else into a new array.
    The env is reset with a seed derived from the task's seed, and actions are sampled from
    a generator seeded the same way, so the result depends only on (weights, task). Each
    step keeps only the input's non-zero pixels (indices and signs), its (y - p) and its
    reward (see Trajectory): about 70 bytes instead of a 51 KB dense row.
    """
    start = time.perf_counter()
    uniform = start_episode(env, inputs, task.seed)
    idx, vals = NO_PIXELS, NO_VALUES  # the first input is all zeros
    trajectory = Trajectory()
    done = False
    while not done:
        p_up = policy.forward_sparse(weights, idx, vals)
        up = uniform() < p_up
        dlogp = (1.0 if up else 0.0) - p_up  # d log pi(a) / d logit
        obs, reward, terminated, truncated, _ = env.step(policy.UP if up else policy.DOWN)
        trajectory.add(idx, vals, dlogp, reward)
        done = terminated or truncated
        idx, vals = inputs.step(obs)

    rewards, dlogps = trajectory.finish()
    advantages = policy.standardize(policy.discount_rewards(rewards, gamma))
    weighted = (dlogps * advantages).astype(np.float32)
    grad = np.empty(policy.param_count(weights.w2.shape[0]), np.float32) if out is None else out
    policy.backward_sparse(weights, trajectory.blocks(weighted), grad)
    return EpisodeResult(
        index=task.index,
        grad=grad,
        reward_sum=float(rewards.sum()),
        steps=len(rewards),
        seconds=time.perf_counter() - start,
    )


class Trajectory:
    """An episode's steps, compacted every BLOCK steps into sparse blocks: ~70 bytes a step
    (int16 pixel indices, int8 signs, the step's dlogp and reward), so that memory barely
    depends on the episode's length. Each block is one chunk of the backward pass."""

    BLOCK = 1024

    def __init__(self) -> None:
        """An empty trajectory."""
        self._blocks: list[tuple[np.ndarray, np.ndarray, np.ndarray]] = []
        self._scalars: list[np.ndarray] = []
        self._idx: list[np.ndarray] = []
        self._vals: list[np.ndarray] = []
        self._steps: list[tuple[float, float]] = []

    def add(self, idx: np.ndarray, vals: np.ndarray, dlogp: float, reward: float) -> None:
        """Record one step: its input's non-zero pixels, its dlogp and its reward."""
        self._idx.append(idx)
        self._vals.append(vals)
        self._steps.append((reward, dlogp))
        if len(self._steps) == self.BLOCK:
            self._compact()

    def _compact(self) -> None:
        if not self._steps:
            return
        indptr = np.zeros(len(self._idx) + 1, dtype=np.int32)
        np.cumsum([len(i) for i in self._idx], out=indptr[1:])
        indices = np.concatenate(self._idx).astype(np.int16)
        signs = np.concatenate(self._vals).astype(np.int8)
        self._blocks.append((indptr, indices, signs))
        self._scalars.append(np.array(self._steps, dtype=np.float64))
        self._idx, self._vals, self._steps = [], [], []

    def finish(self) -> tuple[np.ndarray, np.ndarray]:
        """Close the episode: (rewards, dlogps) of all its steps."""
        self._compact()
        scalars = np.concatenate(self._scalars)
        return scalars[:, 0], scalars[:, 1]

    def blocks(self, weights: np.ndarray) -> Iterator[tuple[scipy.sparse.csr_matrix, np.ndarray]]:
        """(inputs as a CSR matrix, float32 per-step weights) block by block."""
        start = 0
        for indptr, indices, signs in self._blocks:
            steps = len(indptr) - 1
            xs = scipy.sparse.csr_matrix(
                (signs.astype(np.float32), indices.astype(np.int32), indptr),
                shape=(steps, policy.INPUT_SIZE),
            )
            yield xs, weights[start : start + steps]
            start += steps
