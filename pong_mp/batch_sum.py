"""The sum of a batch's gradients: one fixed order of additions, whoever does them.

Floating-point addition is not associative, so "the same weights whatever the worker count
or backend" needs one order of additions that does not depend on where or when episodes
ran. That order is a fixed two-level tree over the episodes' positions in the batch:

- positions 0..GROUP-1, GROUP..2*GROUP-1, ... form groups; each group's float32 gradients
  are added in position order into a float64 group sum (`sum_group`);
- the group sums are added in group order into the batch's total.

A backend may hand back single episodes (added as they arrive), group sums made with
`sum_group` on the node that played them (Ray), or episodes whose gradients stay in the
local pool's slots until the round is complete (`sum_in_blocks` then adds the whole tree on
several threads, each on its own blocks of the parameters). Each element sees the same
additions in the same order, so all give the same bytes.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass

import numpy as np

from pong_mp import sparse
from pong_mp.episode import EpisodeResult, EpisodeStats, ZeroRows

GROUP = 30
"""Episodes per group: about what one node of the cluster in Ray's example (18 cores) plays in
an update of 300 episodes, so that a cluster sends about one array per node to the driver."""


@dataclass
class GroupSum:
    """The float64 sum of one group's gradients, made by `sum_group`."""

    group: int  # its number in its batch (its first episode's position // GROUP)
    grad: np.ndarray
    first_index: int = 0  # its batch's first episode: which batch, when several are in flight


def group_count(batch_size: int) -> int:
    """How many groups a batch of `batch_size` episodes has."""
    return -(-batch_size // GROUP)


def sum_group(
    grads: Iterable[np.ndarray],
    out: np.ndarray | None = None,
    zeroed: Sequence[ZeroRows | None] = (),
    start: int = 0,
) -> np.ndarray:
    """The float64 sum of a group's gradients, given in position order, into `out` where
    given (overwritten): in one compiled pass over memory where all are flat float32 (the
    local pool's slots), else `_add` one after the other. `zeroed`, where given, has each
    gradient's flags of the W1 rows it holds as +0.0 (or None), which are then not read,
    and the gradients are the range of the flat parameters that begins at element `start`."""
    grads = list(grads)
    if not grads:
        raise ValueError("a group has at least one gradient")
    total = np.empty(grads[0].shape, np.float64) if out is None else out
    if all(_compiled_add(total, grad) for grad in grads):
        width = next((z.width for z in zeroed if z is not None), 0)
        flags = [None if z is None else z.flags for z in zeroed] if width else None
        sparse.add_float32(total, grads, first=True, zeroed=flags, start=start, hidden=width)
        return total
    for count, grad in enumerate(grads):
        _add(total, grad, first=count == 0)
    return total


Ranges = Callable[[Callable[[int, int], object]], object]
"""Runs a function of an element range (start, stop) over all the parameters' ranges, on
threads (`optim.MeanStep.ranges`)."""


def sum_in_blocks(
    total: np.ndarray,
    grads: list[np.ndarray],
    ranges: Ranges | None,
    zeroed: Sequence[ZeroRows | None] = (),
) -> None:
    """The batch's whole tree of additions over `grads` (float32, in position order) into
    `total`, range by range (on threads where `ranges` runs them so): each element gets
    exactly the additions, in the same order, that adding the gradients one by one gives.
    `zeroed`: as `sum_group`'s, a flag array (or None) for each gradient."""

    def part(start: int, stop: int) -> None:
        out = total[start:stop]
        for first in range(0, len(grads), GROUP):
            members = [g[start:stop] for g in grads[first : first + GROUP]]
            # Group 0 is summed straight into the total, whose first term it is anyway.
            group = sum_group(members, None if first else out, zeroed[first : first + GROUP], start)
            _add(out, group, first=first == 0)

    if ranges is None:
        part(0, len(total))
    else:
        ranges(part)


def _add(total: np.ndarray | None, grad: np.ndarray, first: bool) -> np.ndarray:
    # The one addition step of the tree: the first term is copied (exact), the others added.
    if first:
        if total is None:
            return np.array(grad, dtype=np.float64)
        if grad is not total:  # group 0 is summed in the total itself: nothing to copy
            np.copyto(total, grad)
        return total
    assert total is not None
    if _compiled_add(total, grad):
        sparse.add_float32(total, [grad])
    else:
        total += grad
    return total


def _compiled_add(total: np.ndarray, grad: np.ndarray) -> bool:
    # Workers' float32 gradients into a float64 sum, both flat and contiguous: the compiled
    # loop (same bits); any other pair (a group's float64 sum) numpy's own addition.
    return (
        total.dtype == np.float64
        and grad.dtype == np.float32
        and total.ndim == grad.ndim == 1
        and all(array.flags.c_contiguous and array.flags.aligned for array in (total, grad))
        and total.flags.writeable
        and not np.may_share_memory(total, grad)
    )


class BatchSum:
    """Adds a batch's gradients in the fixed order as they arrive, in any order.

    Episodes are added to their group's sum as soon as every earlier episode of the group
    is, group sums to the total as soon as every earlier group is. A gradient that has to
    wait is copied, since backends may reuse its memory.
    """

    def __init__(
        self,
        first_index: int,
        batch_size: int,
        out: np.ndarray | None,
        ranges: Ranges | None = None,
    ) -> None:
        """Sum episodes first_index .. first_index + batch_size - 1 into `out` (overwritten);
        with `out` None, a round of tasks that give no gradient (`Task.gradient`) is only
        counted. A round whose gradients stay (`EpisodeResult.stays`) is summed when complete,
        its ranges run by `ranges` (None: in one)."""
        self.total = out
        self._ranges = ranges
        # The gradients that stay, by position, each with its flags.
        self._staying: dict[int, tuple[np.ndarray, ZeroRows | None]] = {}
        self.count = 0  # episodes whose results arrived
        self.steps = 0
        self.rewards: dict[int, float] = {}
        self._entropies: dict[int, float] = {}
        self._first = first_index
        self._groups = group_count(batch_size) if out is not None else 0
        self._batch_size = batch_size
        # The group sums into the total. One that waits for earlier groups is its own array
        # (made here or by a backend), or a Ray leader's slot, written again only in a later
        # round: it can wait as it is.
        self._sums = _InOrder(0, self._groups, out, copy=False)
        self._open: dict[int, _InOrder] = {}

    @property
    def episode_rewards(self) -> list[float]:
        """The episodes' reward sums, in episode order."""
        return [self.rewards[i] for i in sorted(self.rewards)]

    @property
    def entropy(self) -> float:
        """The sum of the policy's entropy over the steps of the episodes that arrived,
        added in episode order (the same bits whatever order they arrived in)."""
        return sum(self._entropies[i] for i in sorted(self._entropies))

    @property
    def complete(self) -> bool:
        """Whether every episode and every group is in the total."""
        return self.count == self._batch_size and self._sums.done

    def add(self, item: EpisodeResult | EpisodeStats | GroupSum) -> None:
        """Take whatever a backend yielded: an episode with its gradient, an episode's
        statistics alone (its gradient comes in a group's sum, or it gives none), or a group's
        sum (made by `sum_group` where its episodes played)."""
        if isinstance(item, GroupSum):
            self._sums.add(item.group, item.grad)
            return
        stats, grad = (item.stats, item.grad) if isinstance(item, EpisodeResult) else (item, None)
        if grad is not None and self._groups == 0:
            raise ValueError(f"episode {stats.index}'s gradient has no sum to go into")
        if stats.index in self.rewards:
            raise ValueError(f"episode {stats.index} was added twice")
        self.count += 1
        self.steps += stats.steps
        self._entropies[stats.index] = stats.entropy
        self.rewards[stats.index] = stats.reward_sum
        if grad is None:
            return
        position = stats.index - self._first
        if isinstance(item, EpisodeResult) and item.stays:
            self._stay(position, grad, item.zeroed)
            return
        if self._staying:
            raise ValueError("a batch's gradients either all stay or none does")
        group = position // GROUP
        if group not in self._open:
            end = min(self._batch_size, (group + 1) * GROUP)
            # Group 0 is summed straight into the total, whose first term it is anyway.
            out = self.total if group == 0 else None
            self._open[group] = _InOrder(group * GROUP, end, out, copy=True)
        pending = self._open[group]
        pending.add(position, grad)
        if pending.done:
            del self._open[group]
            assert pending.total is not None
            self._sums.add(group, pending.total)

    def _stay(self, position: int, grad: np.ndarray, zeroed: ZeroRows | None) -> None:
        if self._open or self._sums.next:
            raise ValueError("a batch's gradients either all stay or none does")
        self._staying[position] = grad, zeroed
        if len(self._staying) == self._batch_size:
            assert self.total is not None
            grads, flags = zip(*(self._staying[p] for p in range(self._batch_size)), strict=True)
            sum_in_blocks(self.total, list(grads), self._ranges, flags)
            self._staying.clear()
            self._sums.next = self._groups


class _InOrder:
    """Terms at positions first .. end - 1 added into `total` in position order (`_add`'s
    steps) as they arrive in any order: a group's episodes (`sum_group`'s additions), or the
    batch's group sums. A term that comes early waits, a copy where `copy` says so."""

    def __init__(self, first: int, end: int, out: np.ndarray | None, copy: bool) -> None:
        self.total = out
        self._first = self.next = first
        self._end = end
        self._copy = copy
        self._waiting: dict[int, np.ndarray] = {}

    @property
    def done(self) -> bool:
        return self.next == self._end

    def add(self, position: int, term: np.ndarray) -> None:
        if position != self.next:
            self._waiting[position] = np.array(term, copy=True) if self._copy else term
            return
        following: np.ndarray | None = term
        while following is not None:
            self.total = _add(self.total, following, first=self.next == self._first)
            self.next += 1
            following = self._waiting.pop(self.next, None)
