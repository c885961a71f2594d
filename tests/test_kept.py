"""The rule by which a worker and the pool agree on the trajectories the worker keeps."""

from __future__ import annotations

import numpy as np
import pytest

from pong_mp import ppo
from pong_mp.backends.kept import KeptData


def _trajectory(steps: int) -> ppo.Trajectory:
    zeros = np.zeros(steps)
    return ppo.Trajectory(
        pixels=np.zeros(0, np.uint16), signs=np.zeros(0, np.int8),
        indptr=np.zeros(steps + 1, np.int64), actions=np.zeros(steps, np.uint8),
        logp_old=zeros, values=zeros, rewards=zeros, advantages=zeros, returns=zeros,
    )


def _task(index: int, trajectory: ppo.Trajectory | None) -> ppo.EpochTask:
    return ppo.EpochTask(index, 100 + index, trajectory, 0, 0, 1, 0.0, 1.0, 0.01)


def test_a_played_episode_is_kept_and_its_passes_go_light() -> None:
    kept, played = KeptData(), _trajectory(5)
    kept.played(3, played)
    task = _task(3, played)
    assert kept.holds(task)
    light = kept.light(task)
    assert light.trajectory is None and light.index == 3 and light.seed == task.seed
    assert kept.whole(light).trajectory is played
    assert kept.whole(task) is task  # a whole task stays as it is
    # An equal trajectory that is another object is not the one kept: it goes whole.
    assert not kept.holds(_task(3, _trajectory(5)))
    assert not kept.holds(_task(4, played))


def test_a_whole_task_received_is_kept_for_the_next_passes() -> None:
    kept, sent = KeptData(), _trajectory(7)
    assert not kept.holds(_task(1, sent))
    kept.passed(_task(1, sent))
    assert kept.holds(_task(1, sent))
    kept.passed(kept.light(_task(1, sent)))  # a light one adds nothing, removes nothing
    assert kept.whole(_task(1, None)).trajectory is sent


def test_an_episode_handed_out_after_a_pass_drops_the_last_update() -> None:
    kept, old, new = KeptData(), _trajectory(4), _trajectory(6)
    for index in (0, 1):  # episodes of one update accumulate
        kept.playing()
        kept.played(index, old)
    assert len(kept) == 2
    kept.passed(_task(0, None))
    kept.playing()  # the next update's first episode, before it is played
    assert len(kept) == 0
    kept.played(10, new)
    kept.playing()
    kept.played(11, new)
    assert len(kept) == 2 and kept.holds(_task(10, new)) and not kept.holds(_task(0, old))


def test_a_failed_pass_is_forgotten_so_that_its_retry_goes_whole() -> None:
    kept, played = KeptData(), _trajectory(3)
    kept.played(2, played)
    kept.forget(2)
    assert not kept.holds(_task(2, played))
    kept.forget(2)  # twice is harmless


def test_a_light_task_of_an_episode_not_kept_is_refused() -> None:
    with pytest.raises(LookupError, match="episode 9 came without its data"):
        KeptData().whole(_task(9, None))
    with pytest.raises(ValueError, match="carries no trajectory"):
        ppo.epoch_pass(None, _task(9, None), ppo.PPOSettings(), np.zeros(1))  # type: ignore[arg-type]
