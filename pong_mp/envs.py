"""Making environments by id: real Atari Pong through ale-py, and FakePong-v0 for tests."""

from __future__ import annotations

from typing import Any

import gymnasium as gym

from pong_mp.frames import InputStream, input_stream

FAKE_PONG_ID = "FakePong-v0"
FAULT_ENV_IDS = {"CrashingPong-v0": "CrashingPong", "SlowPong-v0": "SlowPong"}
"""FakePong variants that fail or dawdle on purpose, for fault-tolerance tests and demos."""


class UnknownEnvError(ValueError):
    """The env id names no registered environment."""


def register_fake_pong() -> None:
    """Register FakePong-v0 and its fault-injecting variants with gymnasium (idempotent)."""
    for env_id, cls in {FAKE_PONG_ID: "FakePong", **FAULT_ENV_IDS}.items():
        if env_id not in gym.registry:
            # No checker or order wrappers: they cost more per step than FakePong itself.
            gym.register(
                id=env_id,
                entry_point=f"pong_mp.fake_pong:{cls}",
                disable_env_checker=True,
                order_enforce=False,
            )


def _register_ale() -> None:
    import ale_py  # imported lazily: it loads the emulator library

    # Without this every worker prints ALE's banner to stderr when its env is made.
    ale_py.ALEInterface.setLoggerMode(ale_py.LoggerMode.Error)
    gym.register_envs(ale_py)


def check_env_id(env_id: str) -> None:
    """Raise UnknownEnvError, with a short message, if `env_id` is not a known env."""
    if env_id.startswith("ALE/"):
        _register_ale()
    if env_id not in gym.registry:
        raise UnknownEnvError(f"unknown env id {env_id!r} (try ALE/Pong-v5 or {FAKE_PONG_ID})")


def make_env(env_id: str, **kwargs: Any) -> gym.Env:
    """A new env for `env_id`, with ALE's environments registered when the id needs them."""
    check_env_id(env_id)
    return gym.make(env_id, **kwargs)


register_fake_pong()


def make_training_env(env_id: str, **kwargs: Any) -> tuple[gym.Env, InputStream]:
    """An env for training and the input stream that reads it.

    ALE ids get FastAtari (v5 semantics, seeded sticky actions, the screen read from the
    emulator) unless `kwargs` has fast=False, which keeps gymnasium's own env.
    """
    fast = kwargs.pop("fast", True)
    if env_id.startswith("ALE/") and fast:
        check_env_id(env_id)
        from pong_mp.atari import FastAtari

        env: gym.Env = FastAtari(env_id, **kwargs)
    else:
        env = make_env(env_id, **kwargs)
    return env, input_stream(env)
