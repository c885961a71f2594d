"""FakePongs that fail or dawdle on purpose, for the fault-tolerance tests.

They are FakePong's game (the same bytes while nothing goes wrong) and are not part of the
package: a test names one by its module path, in gymnasium's "module:EnvId" form
(`CRASHING_PONG`, `SLOW_PONG`), which makes gymnasium import this module, and so register
them, wherever the env is made: in the test process, in a spawned worker process, in a Ray
actor. conftest.py puts the repository on PYTHONPATH so that child processes can import it.
"""

from __future__ import annotations

import multiprocessing
import os
import signal
import sys
import time
from typing import Any

import gymnasium as gym
import numpy as np

from pong_mp.envs.fake_pong import FakePong

CRASHING_PONG = "tests.fault_envs:CrashingPong-v0"
"""The env id of `CrashingPong`, with the module that registers it."""
EXITING_PONG = "tests.fault_envs:ExitingPong-v0"
"""`CrashingPong` that calls sys.exit(0) in its first episode: for commands without env args."""
SLOW_PONG = "tests.fault_envs:SlowPong-v0"
"""The env id of `SlowPong`, with the module that registers it."""


class CrashingPong(FakePong):
    """FakePong that fails inside chosen episodes, for fault-tolerance tests.

    The episodes are counted per env instance (0 = the first reset of this instance), so a
    retried episode, played by a fresh or another worker, goes through. `mode` "raise"
    raises RuntimeError; "kill" kills the whole process with SIGKILL, like a segfault;
    "hang" sleeps for an hour, like a stuck emulator; "exit" calls sys.exit(0); "close" closes
    every descriptor it did not open (a worker's pipe among them), then exits 7 0.2 s later.
    `start_seconds` makes the env that long to build, like an emulator loading on a busy
    machine. `close_fails` makes its close raise
    "everywhere", or "in_workers" only (processes that have a parent Python process).
    """

    def __init__(
        self,
        crash_episodes: tuple[int, ...] = (0,),
        crash_at_step: int = 5,
        mode: str = "raise",
        start_seconds: float = 0.0,
        close_fails: str = "",
        **kwargs: Any,
    ) -> None:
        """See the class docstring; other arguments go to FakePong."""
        super().__init__(**kwargs)
        time.sleep(start_seconds)
        if mode not in ("raise", "kill", "hang", "exit", "close"):
            raise ValueError("mode must be 'raise', 'kill', 'hang', 'exit' or 'close'")
        self.crash_episodes = tuple(crash_episodes)
        self.crash_at_step = crash_at_step
        self.mode = mode
        self.close_fails = close_fails
        self._resets = 0

    def close(self) -> None:
        """Close as FakePong, or fail where `close_fails` says."""
        if self.close_fails == "everywhere" or (
            self.close_fails == "in_workers" and multiprocessing.parent_process() is not None
        ):
            raise RuntimeError("CrashingPong: planned failure as it closes")
        super().close()

    def reset(self, **kwargs: Any) -> tuple[np.ndarray, dict[str, Any]]:
        """Count the episode, then reset as FakePong."""
        self._resets += 1
        return super().reset(**kwargs)

    def step(self, action: int) -> tuple[np.ndarray, float, bool, bool, dict[str, Any]]:
        """Step as FakePong, but fail at `crash_at_step` of a chosen episode."""
        if self._resets - 1 in self.crash_episodes and self.steps + 1 == self.crash_at_step:
            if self.mode == "kill":
                os.kill(os.getpid(), signal.SIGKILL)
            if self.mode == "hang":
                time.sleep(3600)
            if self.mode == "exit":  # as if all were well: the worst a step can say
                sys.exit(0)
            if self.mode == "close":
                os.closerange(3, 4096)
                time.sleep(0.2)  # the coordinator sees the pipe's end first
                os._exit(7)
            raise RuntimeError(f"CrashingPong: planned failure in episode {self._resets - 1}")
        return super().step(action)


class SlowPong(FakePong):
    """FakePong that sleeps `delay` seconds per step, for interrupt and timeout tests."""

    def __init__(self, delay: float = 0.01, **kwargs: Any) -> None:
        """`delay` is the sleep per step; other arguments go to FakePong."""
        super().__init__(**kwargs)
        self.delay = delay

    def step(self, action: int) -> tuple[np.ndarray, float, bool, bool, dict[str, Any]]:
        """Sleep, then step as FakePong."""
        time.sleep(self.delay)
        return super().step(action)


for _name, _cls, _kwargs in (
    ("CrashingPong-v0", CrashingPong, {}),
    ("ExitingPong-v0", CrashingPong, {"mode": "exit"}),
    ("SlowPong-v0", SlowPong, {}),
):
    if _name not in gym.registry:
        # As FakePong is registered: no checker or order wrappers, which cost more per step
        # than the game itself.
        gym.register(
            id=_name, entry_point=_cls, kwargs=_kwargs, disable_env_checker=True,
            order_enforce=False,
        )  # fmt: skip
