"""The trajectories a worker keeps between the passes of an update, so that an EpochTask
need not carry its episode again to the worker that played it.

With --algo ppo each episode's trajectory (~0.5 MB) is needed by every EpochTask of the
update: --epochs x --minibatches of them. A worker keeps the trajectories of the episodes it
played, and of the EpochTasks it was sent whole; the local pool keeps a record of the same,
one `KeptTrajectories` per worker, and sends an EpochTask to a worker that keeps its
trajectory with `trajectory=None` (`light`).

Both sides apply one rule to the same messages in the same order, so they agree on what is
kept without telling each other:

- an episode handed out (the worker: received) after a pass drops everything kept, the
  trajectories of the update before; once played (its trajectory came back), it is kept;
- an EpochTask handed out (received): its trajectory, if it carries one, is kept;
- an EpochTask that failed: the pool forgets that its worker keeps that episode, so the
  retry goes whole (the worker may keep it still, which is harmless).

So a worker keeps at most one update's trajectories (those it played and those it was sent
whole; about one batch at worst, ~0.5 MB a game). A replaced worker starts with nothing
kept, and so does its record. Only the local pool's workers keep anything: the serial
backend's tasks carry their trajectories, and a Ray actor's come whole. The gradient is a
pure function of the weights and the task, whole or light, so no bit depends on who keeps
what.
"""

from __future__ import annotations

import dataclasses

from pong_mp.ppo import EpochTask, Trajectory


class KeptTrajectories:
    """Trajectories by episode index, under the rule in the module's docstring."""

    def __init__(self) -> None:
        """Nothing kept."""
        self._kept: dict[int, Trajectory] = {}
        self._passed = False  # an EpochTask came since the last episode handed out

    def __len__(self) -> int:
        return len(self._kept)

    def playing(self) -> None:
        """An episode was handed out (or received): after a pass, drop everything kept."""
        if self._passed:
            self._kept.clear()
            self._passed = False

    def played(self, index: int, trajectory: Trajectory) -> None:
        """Episode `index` was played into `trajectory`."""
        self._kept[index] = trajectory

    def forget(self, index: int) -> None:
        """Episode `index` is no longer counted as kept (its pass failed)."""
        self._kept.pop(index, None)

    def passed(self, task: EpochTask) -> None:
        """`task` was handed out (or received): keep its trajectory if it carries one."""
        self._passed = True
        if task.trajectory is not None:
            self._kept[task.index] = task.trajectory

    def holds(self, task: EpochTask) -> bool:
        """Whether the trajectory kept for `task`'s episode is the very one it carries (the
        coordinator's side: its records hold the objects the trainer's tasks carry)."""
        return task.trajectory is not None and self._kept.get(task.index) is task.trajectory

    def light(self, task: EpochTask) -> EpochTask:
        """`task` without its trajectory, for a worker that keeps it (see `holds`)."""
        return dataclasses.replace(task, trajectory=None)

    def whole(self, task: EpochTask) -> EpochTask:
        """`task` with its trajectory: as given, or the one kept (the worker's side).

        Raises LookupError if a light task's episode is not kept: the two sides disagree,
        which the rule rules out.
        """
        if task.trajectory is not None:
            return task
        kept = self._kept.get(task.index)
        if kept is None:
            raise LookupError(
                f"an EpochTask of episode {task.index} came without its trajectory, which this "
                "worker does not keep"
            )
        return dataclasses.replace(task, trajectory=kept)
