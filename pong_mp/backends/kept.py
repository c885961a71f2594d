"""The data a worker keeps between the passes of an update, so that a PassTask need not
carry its episode again to the worker that played it.

With --algo ppo each episode's data, its trajectory (~0.5 MB), is needed by every pass of the
update (--epochs x --minibatches). A worker keeps the data of the episodes it played, and of
the PassTasks it was sent whole; the local pool keeps a record of the same, a `KeptData` per
worker, and sends a PassTask to a worker that keeps its data with `data=None` (`light`).

Both sides apply one rule to the same messages in the same order, so they agree on what is
kept without telling each other:

- an episode handed out (the worker: received) after a pass drops everything kept, the
  data of the update before; once played (its data came back), it is kept;
- a PassTask handed out (received): its data, if it carries any, is kept;
- a PassTask that failed: the pool forgets that its worker keeps that episode, so the
  retry goes whole (the worker may keep it still, which is harmless).

So a worker keeps at most one update's data (about one batch at worst). A replaced worker
starts with nothing kept, and so does its record. Only the local pool's workers keep
anything. The gradient is a pure function of the weights and the task, whole or light, so
no bit depends on who keeps what.
"""

from __future__ import annotations

import dataclasses

from pong_mp.episode import PassTask


class KeptData:
    """Episodes' data by episode index, under the rule in the module's docstring."""

    def __init__(self) -> None:
        """Nothing kept."""
        self._kept: dict[int, object] = {}
        self._passed = False  # a PassTask came since the last episode handed out

    def __len__(self) -> int:
        return len(self._kept)

    def playing(self) -> None:
        """An episode was handed out (or received): after a pass, drop everything kept."""
        if self._passed:
            self._kept.clear()
            self._passed = False

    def played(self, index: int, data: object) -> None:
        """Episode `index` was played, leaving `data`."""
        self._kept[index] = data

    def forget(self, index: int) -> None:
        """Episode `index` is no longer counted as kept (its pass failed)."""
        self._kept.pop(index, None)

    def passed(self, task: PassTask) -> None:
        """`task` was handed out (or received): keep its data if it carries any."""
        self._passed = True
        if task.data is not None:
            self._kept[task.index] = task.data

    def holds(self, task: PassTask) -> bool:
        """Whether the data kept for `task`'s episode is the very object it carries (the
        coordinator's side: its records hold the objects the trainer's tasks carry)."""
        return task.data is not None and self._kept.get(task.index) is task.data

    def light(self, task: PassTask) -> PassTask:
        """`task` without its data, for a worker that keeps it (see `holds`)."""
        return dataclasses.replace(task, data=None)

    def whole(self, task: PassTask) -> PassTask:
        """`task` with its data: as given, or the data kept (the worker's side); LookupError if
        a light task's episode is not kept (the two sides disagree, which the rule rules out)."""
        if task.data is not None:
            return task
        kept = self._kept.get(task.index)
        if kept is None:
            raise LookupError(
                f"a pass over episode {task.index} came without its data, which this worker "
                "does not keep"
            )
        return dataclasses.replace(task, data=kept)
