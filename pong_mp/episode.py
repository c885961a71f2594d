"""What workers are handed and hand back (tasks and results), and the one loop of an
episode.

Every episode is played through `run_episode` (pg.py's gradient, ppo.py's trajectory,
play's games): everything random in it comes from its seed, a pure function of (run seed,
global episode index), so an episode gives the same bytes wherever it runs. What a task
means is the learner's (`backends.base.WorkerSpec`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import ClassVar

import gymnasium as gym
import numpy as np

from pong_mp import policy
from pong_mp.frames import NO_PIXELS, NO_VALUES, InputStream


@dataclass(frozen=True)
class EpisodeTask:
    """What a worker needs to play one episode: its global index and its seed."""

    index: int  # global episode index in the run (across all batches and resumes)
    seed: int  # of the env reset and of the action sampling
    gradient: bool = True
    """Whether playing it gives a gradient (Karpathy's learner); the actor-critic's play
    gives the episode's data instead (EpisodeStats.data)."""


@dataclass(frozen=True)
class PassTask:
    """What a worker needs for one episode's share of a gradient pass over an episode played
    before: the learner's subclass adds what the pass is (ppo.EpochTask). A pass gives a
    gradient, computed from the episode's data without playing."""

    index: int  # the episode's, as its EpisodeTask's
    seed: int
    data: object | None
    """The data its play left (EpisodeStats.data); None on its way to a worker that keeps
    it (`backends/kept.py`), which puts it back before the pass."""

    gradient: ClassVar[bool] = True  # a pass gives a gradient


@dataclass(frozen=True)
class EpisodeStats:
    """An episode's small statistics: what travels between processes and nodes (its
    gradient stays where it was made: a worker's shared slot, a Ray node's store)."""

    index: int  # global episode index, as in the task
    reward_sum: float  # agent points minus opponent points
    steps: int  # env steps played
    seconds: float  # wall time spent on the episode in the worker
    entropy: float = 0.0  # sum over its steps of the policy's entropy (nats)
    data: object | None = None
    """What a play left for the passes over the episode (the actor-critic's trajectory),
    kept where it was played; else None."""
    report: object | None = None  # what a pass saw (the actor-critic's ppo.PassStats)


Task = EpisodeTask | PassTask
"""What a backend hands a worker: an episode to play, or an episode's share of a pass. Both
have the episode's `index` and `seed`, and say whether they give a `gradient`."""


@dataclass(frozen=True)
class ZeroRows:
    """Which rows of W1 (the first rows of a flat gradient) are known to hold +0.0: the flags
    `sparse.ppo_accumulate` keeps with a worker's gradient slot, so that a sum need not read
    those rows (the actor-critic's pass touches the W1 rows of its inputs only)."""

    flags: np.ndarray  # uint8, one per row: 1 where the row holds +0.0
    width: int  # elements in a row (the hidden units)


@dataclass
class EpisodeResult:
    """An episode with its gradient, as the coordinator sums it."""

    stats: EpisodeStats
    grad: np.ndarray | None
    """Flat gradient of the episode's objective w.r.t. the parameters (float32): an array of
    its own, or a view of a worker's shared slot, valid until that worker plays again; None
    for a task that gives none (`Task.gradient`)."""
    stays: bool = False
    """Whether `grad` stays as it is until its round of tasks is summed (a slot of the
    local pool's for each position of the batch): BatchSum keeps the view and sums the round
    when it is complete, on several threads, instead of adding each as it arrives."""
    zeroed: ZeroRows | None = None  # rows of `grad` known to hold +0.0, where a slot keeps them


def episode_seed(run_seed: int, index: int) -> int:
    """The seed of global episode `index` of a run: independent streams via SeedSequence."""
    words = np.random.SeedSequence(run_seed, spawn_key=(index,)).generate_state(2, np.uint32)
    return int(words[0]) << 32 | int(words[1])


def make_tasks(
    run_seed: int, first_index: int, count: int, gradient: bool = True
) -> list[EpisodeTask]:
    """Tasks for episodes first_index .. first_index + count - 1 of a run (`gradient`: see
    EpisodeTask)."""
    return [
        EpisodeTask(index=i, seed=episode_seed(run_seed, i), gradient=gradient)
        for i in range(first_index, first_index + count)
    ]


def _number(reward: object) -> float:
    """A step's reward as a Python float: a wrapper's numpy float32 would reach the metrics'
    JSON, which cannot say it. One that is not a number (a string, an array) is refused."""
    if isinstance(reward, str | bytes) or getattr(reward, "ndim", 0) != 0:
        raise TypeError(f"the env gave {repr(reward)[:40]} for a reward, not a number")
    return float(reward)  # type: ignore[arg-type]


def _ended(terminated: object, truncated: object) -> bool:
    """Whether a step ended the game. A flag that is not a bool (or an int, as some envs
    give) is refused: None would never end the game, and a string would end it at once."""
    for name, flag in (("terminated", terminated), ("truncated", truncated)):
        if not isinstance(flag, (bool, int, np.bool_, np.integer)):
            raise TypeError(f"the env gave {repr(flag)[:40]} for {name}, not a bool")
    return bool(terminated or truncated)


def run_episode(
    env: gym.Env,
    inputs: InputStream,
    seed: int,
    p_up: Callable[[np.ndarray, np.ndarray], float],
    on_step: Callable[[int, float, float], None],
    greedy: bool = False,
) -> None:
    """The loop of every episode, trained or watched: reset from `seed`, then step until the
    game ends. Each step, `p_up(pixels, values)` gives P(UP) for its sparse input, the action
    is chosen (`policy.choose_action`, `greedy` or not), then `on_step(action, p_up, reward)`
    sees what happened."""
    # Everything random in an episode: the env's reset and the draws that pick the actions,
    # two independent streams of `seed`.
    env_seq, action_seq = np.random.SeedSequence(seed).spawn(2)
    obs, _ = env.reset(seed=int(env_seq.generate_state(1)[0]))
    inputs.reset(obs)
    uniform = np.random.default_rng(action_seq).random
    idx, vals = NO_PIXELS, NO_VALUES  # the first input is all zeros
    done = False
    while not done:
        p = p_up(idx, vals)
        action = policy.choose_action(p, uniform, greedy)
        obs, reward, terminated, truncated, _ = env.step(action)
        on_step(action, p, _number(reward))
        done = _ended(terminated, truncated)
        idx, vals = inputs.step(obs)
