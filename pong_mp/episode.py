"""One episode of policy-gradient Pong: play it, then compute its gradient.

This is the one place the algorithm's rollout lives; every backend calls `play_episode`.
Everything random in an episode comes from its seed, and the seed is a pure function of
(run seed, global episode index), so an episode gives the same bytes wherever it runs.
"""

from __future__ import annotations

import time
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
    grad: np.ndarray
    """Flat gradient of the episode's objective w.r.t. the parameters (float32)."""
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


def play_episode(
    env: gym.Env,
    inputs: InputStream,
    weights: policy.Weights32,
    gamma: float,
    task: EpisodeTask,
) -> EpisodeResult:
    """Play one episode with the stochastic policy `weights`, and return its gradient.

    The env is reset with a seed derived from the task's seed, and actions are sampled from
    a generator seeded the same way, so the result depends only on (weights, task). Each
    step keeps only the input's non-zero pixels (indices and signs), its (y - p) and its
    reward: about 100 bytes instead of a 51 KB dense row.
    """
    start = time.perf_counter()
    env_seq, action_seq = np.random.SeedSequence(task.seed).spawn(2)
    uniform = np.random.default_rng(action_seq).random

    obs, _ = env.reset(seed=int(env_seq.generate_state(1)[0]))
    inputs.reset(obs)
    idx, vals = NO_PIXELS, NO_VALUES  # the first input is all zeros
    indices: list[np.ndarray] = []
    values: list[np.ndarray] = []
    dlogps: list[float] = []
    rewards: list[float] = []
    done = False
    while not done:
        p_up = policy.forward_sparse(weights, idx, vals)
        up = uniform() < p_up
        indices.append(idx)
        values.append(vals)
        dlogps.append((1.0 if up else 0.0) - p_up)  # d log pi(a) / d logit
        obs, reward, terminated, truncated, _ = env.step(policy.UP if up else policy.DOWN)
        rewards.append(float(reward))
        done = terminated or truncated
        idx, vals = inputs.step(obs)

    steps = len(rewards)
    indptr = np.zeros(steps + 1, dtype=np.int32)
    np.cumsum([len(i) for i in indices], out=indptr[1:])
    xs = scipy.sparse.csr_matrix(
        (np.concatenate(values), np.concatenate(indices).astype(np.int32), indptr),
        shape=(steps, policy.INPUT_SIZE),
    )
    rewards_arr = np.asarray(rewards)
    advantages = policy.standardize(policy.discount_rewards(rewards_arr, gamma))
    weighted = (np.asarray(dlogps) * advantages).astype(np.float32)
    grad = np.empty(policy.param_count(weights.w2.shape[0]), dtype=np.float32)
    policy.backward_sparse(weights, xs, weighted, grad)
    return EpisodeResult(
        index=task.index,
        grad=grad,
        reward_sum=float(rewards_arr.sum()),
        steps=steps,
        seconds=time.perf_counter() - start,
    )
