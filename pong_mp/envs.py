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
        raise UnknownEnvError(f"unknown env id {env_id!r}; use {SUPPORTED}")


SUPPORTED = f"ALE/Pong-v5 (gymnasium's Atari Pong, any ALE/Pong version) or {FAKE_PONG_ID}"
"""What --env accepts, in words."""


def is_pong(env_id: str) -> bool:
    """Whether `env_id` is a Pong whose frames and actions the policy understands."""
    return env_id.startswith("ALE/Pong-") or env_id == FAKE_PONG_ID or env_id in FAULT_ENV_IDS


def check_env(env_id: str, env_kwargs: dict[str, Any]) -> None:
    """Raise UnknownEnvError, in one line, unless `env_id` is a supported Pong that can be
    built with `env_kwargs`: the env is made once (and closed), so that a bad --env-arg is
    refused before any worker starts or any file is written."""
    check_env_id(env_id)
    if not is_pong(env_id):
        raise UnknownEnvError(
            f"{env_id} is not Pong: pong-mp learns Pong from its frames; use {SUPPORTED}"
        )
    try:
        env, _ = make_training_env(env_id, **env_kwargs)
    except Exception as exc:  # an env constructor may raise anything on bad arguments
        args = " ".join(f"{k}={v!r}" for k, v in env_kwargs.items()) or "no --env-arg"
        message = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        # gymnasium appends the whole kwargs dict; the arguments are named already.
        message = message.split(" was raised from the environment creator")[0]
        raise UnknownEnvError(f"{env_id} cannot be made with {args}: {message}") from None
    try:
        actions = getattr(env.action_space, "n", 0)
        if actions < 4:
            raise UnknownEnvError(f"{env_id} has {actions} actions, not Pong's UP (2) and DOWN (3)")
    finally:
        env.close()


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
    kwargs = dict(kwargs)
    fast = kwargs.pop("fast", True)
    if not isinstance(fast, bool):
        raise ValueError(f"fast must be true or false, not {fast!r}")
    if env_id.startswith("ALE/") and fast:
        check_env_id(env_id)
        from pong_mp.atari import FastAtari

        env: gym.Env = FastAtari(env_id, **kwargs)
    else:
        env = make_env(env_id, **kwargs)
    return env, input_stream(env)
