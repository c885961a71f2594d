"""One episode of policy-gradient Pong: play it, then compute its gradient.

This is the one place the algorithm's rollout lives (`run_episode`, the one loop): every
backend's EpisodeWorker calls `play_episode`, or with --algo ppo `play_recorded` (the
episode kept as a trajectory) and `epoch_pass` (its share of a minibatch's gradient).
Everything random in an episode comes from its seed, and the seed is a pure function of
(run seed, global episode index), so an episode gives the same bytes wherever it runs.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

import gymnasium as gym
import numpy as np

from pong_mp import policy, ppo
from pong_mp.frames import NO_PIXELS, NO_VALUES, InputStream
from pong_mp.gradient import EpisodeGradient


@dataclass(frozen=True)
class EpisodeTask:
    """What a worker needs to play one episode: its global index and its seed."""

    index: int
    """Global episode index in the run (0, 1, 2, ... across all batches and resumes)."""
    seed: int
    """Seed of the env reset and of the action sampling."""


@dataclass(frozen=True)
class EpisodeStats:
    """An episode's small statistics: what travels between processes and nodes (its
    gradient stays where it was made: a worker's shared slot, a Ray node's store)."""

    index: int
    """Global episode index, as in the task."""
    reward_sum: float
    """Sum of the episode's rewards (agent points minus opponent points)."""
    steps: int
    """Env steps played."""
    seconds: float
    """Wall time spent on the episode in the worker."""
    entropy: float = 0.0
    """Sum over its steps of the policy's entropy (nats): how undecided it played."""
    trajectory: ppo.Trajectory | None = None
    """The episode as the actor-critic keeps it (--algo ppo's play), else None."""
    ppo_pass: ppo.PassStats | None = None
    """What a pass of the actor-critic saw (an EpochTask's result), else None."""


Task = EpisodeTask | ppo.EpochTask
"""What a backend hands a worker: an episode to play, or (--algo ppo) an episode's share of
a minibatch's gradient. Both have the episode's `index` and `seed`."""


@dataclass
class EpisodeResult:
    """An episode with its gradient, as the coordinator sums it."""

    stats: EpisodeStats
    """The episode's statistics."""
    grad: np.ndarray
    """Flat gradient of the episode's objective w.r.t. the parameters (float32): an array of
    its own, or a view of a worker's shared slot, valid until that worker plays again."""


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


def run_episode(
    env: gym.Env,
    inputs: InputStream,
    seed: int,
    p_up: Callable[[np.ndarray, np.ndarray], float],
    on_step: Callable[[int, float, float], None],
    greedy: bool = False,
) -> None:
    """The loop of every episode, trained or watched: reset from `seed`, then step until the
    game ends.

    Each step, `p_up(pixels, values)` gives P(UP) for the step's sparse input; the action is
    UP with that probability (one number from the episode's seeded generator), or if it is
    the likelier one when `greedy` (`policy.choose_action`); then
    `on_step(action, p_up, reward)` sees what happened.
    """
    uniform = start_episode(env, inputs, seed)
    idx, vals = NO_PIXELS, NO_VALUES  # the first input is all zeros
    done = False
    while not done:
        p = p_up(idx, vals)
        action = policy.choose_action(p, uniform, greedy)
        obs, reward, terminated, truncated, _ = env.step(action)
        on_step(action, p, reward)
        done = terminated or truncated
        idx, vals = inputs.step(obs)


def play_episode(
    env: gym.Env,
    inputs: InputStream,
    weights: policy.Weights32,
    gamma: float,
    task: EpisodeTask,
    out: np.ndarray | None = None,
    work: EpisodeGradient | None = None,
) -> EpisodeResult:
    """Play one episode with the stochastic policy `weights`, and return its gradient.

    The gradient is written into `out` (flat float32) when given, else into a new array.
    `work` is the gradient's working memory; a worker passes the same one to every episode
    so that nothing large is allocated per episode. The env is reset with a seed derived
    from the task's seed, and actions are sampled from a generator seeded the same way, so
    the result depends only on (weights, task).
    """
    start = time.perf_counter()
    hidden = weights.w2.shape[0]
    if work is None:
        work = EpisodeGradient(hidden, baseline=weights.value is not None)
    work.start(weights, gamma)
    record = work.add

    def on_step(action: int, p_up: float, reward: float) -> None:
        # dlogp: d log pi(a) / d logit
        record((1.0 if action == policy.UP else 0.0) - p_up, reward)

    run_episode(env, inputs, task.seed, work.forward, on_step)
    grad = np.empty(work.size, np.float32) if out is None else out
    work.finish(grad)
    stats = EpisodeStats(
        index=task.index,
        reward_sum=work.reward_sum,
        steps=work.steps,
        seconds=time.perf_counter() - start,
        entropy=work.entropy_sum,
    )
    return EpisodeResult(stats, grad)


def play_recorded(
    env: gym.Env,
    inputs: InputStream,
    weights: policy.Weights32,
    gamma: float,
    lam: float,
    task: EpisodeTask,
    recorder: ppo.TrajectoryRecorder | None = None,
) -> EpisodeStats:
    """Play one episode with the actor-critic's weights (with a value head) and return its
    statistics with its trajectory (GAE(`lam`) advantages); `recorder` is the working memory
    a worker reuses. Like `play_episode`, the result depends only on (weights, task)."""
    start = time.perf_counter()
    if recorder is None:
        recorder = ppo.TrajectoryRecorder(weights.w2.shape[0], weights.channels)
    recorder.start(weights)

    def on_step(action: int, p_up: float, reward: float) -> None:
        recorder.add(action, reward)

    run_episode(env, inputs, task.seed, recorder.forward, on_step)
    reward_sum, entropy = recorder.reward_sum, recorder.entropy_sum
    trajectory = recorder.finish(gamma, lam)
    return EpisodeStats(
        index=task.index,
        reward_sum=reward_sum,
        steps=trajectory.steps,
        seconds=time.perf_counter() - start,
        entropy=entropy,
        trajectory=trajectory,
    )


def epoch_pass(
    weights: policy.Weights32,
    task: ppo.EpochTask,
    settings: ppo.PPOSettings,
    out: np.ndarray | None = None,
    work: ppo.PassWork | None = None,
) -> EpisodeResult:
    """An episode's share of one minibatch's gradient (`ppo.epoch_gradient`) at `weights`,
    written into `out` (flat float32) when given; its `steps` are the steps it covers.
    `work` is the working memory a worker reuses."""
    start = time.perf_counter()
    size = policy.param_count(weights.w2.shape[0], True, weights.channels)
    grad = np.empty(size, np.float32) if out is None else out
    seen = ppo.epoch_gradient(weights, task, settings, grad, work)
    stats = EpisodeStats(
        index=task.index,
        reward_sum=0.0,
        steps=seen.steps,
        seconds=time.perf_counter() - start,
        entropy=seen.entropy,
        ppo_pass=seen,
    )
    return EpisodeResult(stats, grad)
