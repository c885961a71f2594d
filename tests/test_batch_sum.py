"""The batch's gradient sum: one fixed order of additions, however results arrive."""

from __future__ import annotations

import random
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from itertools import pairwise

import numpy as np
import pytest

from pong_mp.batch_sum import GROUP, BatchSum, GroupSum, group_count, sum_group, sum_in_blocks
from pong_mp.episode import EpisodeResult, EpisodeStats

SIZE = 500



def sum_gradients(results: list[EpisodeResult]) -> np.ndarray:
    """Sum of a batch's gradients (float64), added in the batch's fixed order."""
    first = min(r.stats.index for r in results)
    summed = BatchSum(first, len(results), np.empty(results[0].grad.shape))
    for result in results:
        summed.add(result)
    return summed.total

def _results(count: int, first: int = 0, seed: int = 0) -> list[EpisodeResult]:
    # float64 values of magnitudes 1e-8 to 1e8: every order of additions shows in the bytes.
    rng = np.random.default_rng(seed)
    return [
        EpisodeResult(
            EpisodeStats(index=first + i, reward_sum=float(i), steps=i + 1, seconds=0.0),
            grad=rng.standard_normal(SIZE) * 10.0 ** rng.integers(-8, 8),
        )
        for i in range(count)
    ]


def _tree(results: list[EpisodeResult]) -> np.ndarray:
    """The documented order, written out: groups left to right, then their sums."""
    grads = [r.grad for r in sorted(results, key=lambda r: r.stats.index)]
    total = None
    for start in range(0, len(grads), GROUP):
        group = grads[start].astype(np.float64)
        for grad in grads[start + 1 : start + GROUP]:
            group += grad
        total = group if total is None else total + group
    return total


@pytest.mark.parametrize("count", [1, 10, GROUP, GROUP + 1, 2 * GROUP + 7])
def test_the_sum_follows_the_tree_whatever_the_arrival_order(count: int) -> None:
    results = _results(count, first=1234)
    expected = _tree(results).tobytes()
    for seed in range(4):
        shuffled = results[:]
        random.Random(seed).shuffle(shuffled)
        assert sum_gradients(shuffled).tobytes() == expected


def test_a_batch_of_one_group_is_the_plain_sum_in_episode_order() -> None:
    results = _results(GROUP, first=5)
    plain = np.zeros(SIZE)
    for result in results:
        plain += result.grad
    assert sum_gradients(results[::-1]).tobytes() == plain.tobytes()


def test_group_sums_made_elsewhere_give_the_same_bytes() -> None:
    count = 2 * GROUP + 7
    results = _results(count, first=40)
    groups = [
        GroupSum(g, sum_group(r.grad for r in results[g * GROUP : (g + 1) * GROUP]))
        for g in range(group_count(count))
    ]
    # As the Ray backend sends them: episodes' statistics, and the groups' sums.
    items: list[EpisodeStats | GroupSum] = [r.stats for r in results]
    items += groups
    random.Random(1).shuffle(items)
    summed = BatchSum(40, count, np.empty(SIZE))
    for item in items:
        assert not summed.complete
        summed.add(item)
    assert summed.complete
    assert summed.total.tobytes() == _tree(results).tobytes()
    assert summed.episode_rewards == [float(i) for i in range(count)]
    assert summed.steps == sum(range(1, count + 1))


def test_an_episode_added_twice_is_refused() -> None:
    results = _results(3)
    summed = BatchSum(0, 3, np.empty(SIZE))
    summed.add(results[1])
    with pytest.raises(ValueError, match="episode 1 was added twice"):
        summed.add(results[1])


def test_a_float32_gradient_is_added_as_numpy_adds_it() -> None:
    # The compiled addition of a worker's float32 gradient into the float64 sum gives
    # numpy's bytes, for magnitudes far apart, infinities, NaN and signed zeros.
    from pong_mp import sparse

    rng = np.random.default_rng(3)
    total = rng.standard_normal(10_001) * 1e3
    grad = (rng.standard_normal(10_001) * rng.choice([1e-30, 1.0, 1e30], 10_001)).astype(
        np.float32
    )
    grad[:5] = [np.inf, -np.inf, np.nan, -0.0, 0.0]
    total[5:8] = [-0.0, np.inf, 1e308]
    expected = total.copy()
    with np.errstate(over="ignore", invalid="ignore"):
        expected += grad
    got = total.copy()
    sparse.add_float32(got, [grad])
    assert got.tobytes() == expected.tobytes()
    # A float32 sum of these in float64 differs in its bytes: the test sees an addition
    # done in the wrong width.
    with np.errstate(over="ignore", invalid="ignore"):
        narrow = (total.astype(np.float32) + grad).astype(np.float64)
    assert narrow.tobytes() != expected.tobytes()
    with pytest.raises(ValueError, match="mismatched sizes"):
        sparse.add_float32(got, [grad, grad[:-1]])


@pytest.mark.parametrize("first", [True, False], ids=["first-copied", "onto-total"])
def test_several_gradients_added_in_one_pass_are_numpys_additions_in_turn(first: bool) -> None:
    # The local pool's round sum adds a group's gradients chunk by chunk in one pass; every
    # element must still see numpy's additions, one gradient after the other. 10,001
    # elements end in a part chunk; the magnitudes make any other order or width differ.
    from pong_mp import sparse

    rng = np.random.default_rng(11)
    total = rng.standard_normal(10_001) * 1e3
    grads = [
        (rng.standard_normal(10_001) * rng.choice([1e-8, 1.0, 1e8], 10_001)).astype(np.float32)
        for _ in range(7)
    ]
    expected = grads[0].astype(np.float64) if first else total.copy()
    for grad in grads[1:] if first else grads:
        expected += grad
    got = total.copy()
    sparse.add_float32(got, grads, first=first)
    assert got.tobytes() == expected.tobytes()
    backwards = grads[0].astype(np.float64) if first else total.copy()
    for grad in reversed(grads[1:] if first else grads):
        backwards += grad
    assert backwards.tobytes() != expected.tobytes()  # the test sees another order
    with pytest.raises(ValueError, match="no gradient"):
        sparse.add_float32(got, [])


@pytest.mark.parametrize("first", [True, False], ids=["first-copied", "onto-total"])
def test_rows_flagged_as_zeros_are_not_read_and_the_bytes_stay_numpys(first: bool) -> None:
    # A slot's flags say which W1 rows hold +0.0 (ppo_accumulate keeps them): the sum adds
    # +0.0 there without reading the row. Rows of 7 cross the chunks of 512; the ranges
    # start anywhere, as the threads' do; the totals hold -0.0, which +0.0 turns into +0.0.
    from pong_mp import sparse

    rng = np.random.default_rng(17)
    hidden, rows = 7, 300
    size = rows * hidden + 50  # W1, then parameters no flag covers
    grads, flags = [], []
    for count in range(5):
        grad = (rng.standard_normal(size) * 10.0 ** rng.integers(-6, 6, size)).astype(np.float32)
        grad[rng.integers(0, size, 40)] = -0.0
        flag = (rng.random(rows) < 0.6).astype(np.uint8)
        grad[: rows * hidden].reshape(rows, hidden)[flag == 1] = 0.0
        grads.append(grad)
        flags.append(None if count == 2 else flag)
    for start, stop in [(0, size), (3, 1_500), (1_201, size), (2_099, 2_101)]:
        total = rng.standard_normal(stop - start)
        total[rng.random(stop - start) < 0.3] = -0.0
        parts = [grad[start:stop] for grad in grads]
        expected = total.copy()
        sparse.add_float32(expected, parts, first=first)
        got = total.copy()
        sparse.add_float32(got, parts, first=first, zeroed=flags, start=start, hidden=hidden)
        assert got.tobytes() == expected.tobytes(), (start, stop)
    # Flagged rows are not read: garbage in them does not reach the sum.
    garbage = [grad.copy() for grad in grads]
    for grad, flag in zip(garbage, flags, strict=True):
        if flag is not None:
            grad[: rows * hidden].reshape(rows, hidden)[flag == 1] = 1e30
    got = np.zeros(size)
    sparse.add_float32(got, garbage, first=first, zeroed=flags, hidden=hidden)
    expected = np.zeros(size)
    sparse.add_float32(expected, grads, first=first)
    assert got.tobytes() == expected.tobytes()
    with pytest.raises(ValueError, match="zeroed"):
        sparse.add_float32(got, grads, zeroed=flags[:2], hidden=hidden)


@pytest.mark.parametrize("kind", ["plain", "read-only", "strided", "float64"])
def test_a_group_sum_gives_numpy_bytes_for_any_gradient_array(kind: str) -> None:
    # Whichever way the addition goes (the compiled loop or numpy's), the bytes are the
    # plain numpy sum's in order.
    rng = np.random.default_rng(5)
    grads = [
        (rng.standard_normal(2 * SIZE) * 10.0 ** rng.integers(-8, 8, 2 * SIZE)).astype(np.float32)
        for _ in range(4)
    ]
    grads = [g[::2] if kind == "strided" else g[:SIZE] for g in grads]
    if kind == "float64":
        grads = [g.astype(np.float64) for g in grads]
    if kind == "read-only":
        for g in grads:
            g.flags.writeable = False
    expected = grads[0].astype(np.float64)
    for g in grads[1:]:
        expected = expected + g
    assert sum_group(grads).tobytes() == expected.tobytes()


def _staying(results: list[EpisodeResult]) -> list[EpisodeResult]:
    # As the local pool's slot-per-position results come: float32 views that stay.
    return [
        EpisodeResult(r.stats, r.grad.astype(np.float32), stays=True) for r in results
    ]


def _ranges_of(size: int) -> Callable[[Callable[[int, int], object]], None]:
    # Uneven element ranges, run on 3 threads in reverse order: no range may depend on another.
    cuts = [0, 7, 123, 124, size]

    def ranges(part: Callable[[int, int], object]) -> None:
        with ThreadPoolExecutor(3) as pool:
            for future in [pool.submit(part, a, b) for a, b in reversed(list(pairwise(cuts)))]:
                future.result()

    return ranges


@pytest.mark.parametrize("count", [1, 10, GROUP, GROUP + 1, 2 * GROUP + 7])
@pytest.mark.parametrize("threads", [False, True])
def test_a_round_whose_gradients_stay_is_summed_at_its_end_to_the_same_bytes(
    count: int, threads: bool
) -> None:
    results = _staying(_results(count, first=40))
    one_by_one = [EpisodeResult(r.stats, r.grad) for r in results]  # added as they arrive
    expected = sum_gradients(one_by_one).tobytes()
    shuffled = results[:]
    random.Random(count).shuffle(shuffled)
    summed = BatchSum(40, count, np.empty(SIZE), _ranges_of(SIZE) if threads else None)
    for number, result in enumerate(shuffled):
        assert not summed.complete
        summed.add(result)
        if number < count - 1:  # nothing is added before the round is complete
            assert summed._staying and len(summed._staying) == number + 1
    assert summed.complete and summed.total.tobytes() == expected


@pytest.mark.parametrize("kind", ["float32", "strided", "float64"])
def test_a_round_summed_in_blocks_is_the_fixed_tree_for_any_gradient_array(kind: str) -> None:
    # Two groups over ranges that cross the compiled loop's chunks: flat float32 gradients
    # take the one-pass loop, others numpy's additions; both are the tree's bytes.
    size, count = 1300, GROUP + 3
    rng = np.random.default_rng(9)
    grads = [
        (rng.standard_normal(2 * size) * 10.0 ** rng.integers(-8, 8, 2 * size)).astype(np.float32)
        for _ in range(count)
    ]
    grads = [g[::2] if kind == "strided" else g[:size] for g in grads]
    if kind == "float64":
        grads = [g.astype(np.float64) for g in grads]
    expected, later = (np.array(group[0], np.float64) for group in (grads[:GROUP], grads[GROUP:]))
    for grad in grads[1:GROUP]:
        expected += grad
    for grad in grads[GROUP + 1 :]:
        later += grad
    expected += later
    total = np.full(size, np.nan)
    sum_in_blocks(total, grads, _ranges_of(size))
    assert total.tobytes() == expected.tobytes()


def test_a_batch_whose_gradients_partly_stay_is_refused() -> None:
    results = _results(3, first=0)
    staying = _staying(results)
    summed = BatchSum(0, 3, np.empty(SIZE))
    summed.add(results[0])
    with pytest.raises(ValueError, match="either all stay or none"):
        summed.add(staying[1])
    summed = BatchSum(0, 3, np.empty(SIZE))
    summed.add(staying[1])
    with pytest.raises(ValueError, match="either all stay or none"):
        summed.add(results[0])
