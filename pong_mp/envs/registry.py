"""The env ids pong-mp knows: registering FakePong and ALE with gymnasium, checking an id,
making a plain env. Apart from `pong_mp.envs`, which imports FastAtari, which needs it."""

from __future__ import annotations

import importlib
from typing import Any

import gymnasium as gym

FAKE_PONG_ID = "FakePong-v0"
PONG_POINTS = 21
"""The points that win a game of Pong: ALE's, and FakePong's unless points_to_win says."""


class UnknownEnvError(ValueError):
    """The env id names no registered environment."""


def register_fake_pong() -> None:
    """Register FakePong-v0 with gymnasium (idempotent)."""
    if FAKE_PONG_ID not in gym.registry:
        # No checker or order wrappers: they cost more per step than FakePong itself.
        gym.register(
            id=FAKE_PONG_ID,
            entry_point="pong_mp.envs.fake_pong:FakePong",
            disable_env_checker=True,
            order_enforce=False,
        )


def _register_ale() -> None:
    import ale_py  # imported lazily: it loads the emulator library

    # Without this every worker prints ALE's banner to stderr when its env is made.
    ale_py.ALEInterface.setLoggerMode(ale_py.LoggerMode.Error)
    gym.register_envs(ale_py)


def check_env_id(env_id: str) -> None:
    """Raise UnknownEnvError, with a short message, if `env_id` is not a known env.

    An id may name the module that registers its env ("module:EnvId"), imported here as
    gymnasium.make does: whatever its import raises (sys.exit included) is an UnknownEnvError
    in the coordinator, so a module that fails never reaches the workers.
    """
    module, _, name = env_id.rpartition(":")
    if module:
        try:
            importlib.import_module(module)
        except ImportError as exc:
            raise UnknownEnvError(f"env id {env_id!r}: cannot import {module} ({exc})") from None
        except SystemExit as exc:
            # It would end pong-mp itself, with a status that says nothing (often 0).
            raise UnknownEnvError(
                f"env id {env_id!r}: importing {module} called sys.exit({exc.code!r})"
            ) from None
        except Exception as exc:  # the user's module may raise anything at import
            lines = str(exc).strip().splitlines()
            raise UnknownEnvError(
                f"env id {env_id!r}: cannot import {module} "
                f"({type(exc).__name__}{': ' + lines[0] if lines else ''})"
            ) from None
    if name.startswith("ALE/"):
        _register_ale()
    if name not in gym.registry:
        raise UnknownEnvError(f"unknown env id {env_id!r}; use {SUPPORTED}")


SUPPORTED = f"ALE/Pong-v5 (gymnasium's Atari Pong, any ALE/Pong version) or {FAKE_PONG_ID}"


def is_pong(env_id: str) -> bool:
    """Whether `env_id` is a Pong whose frames and actions the policy understands."""
    return env_id.startswith("ALE/Pong-") or env_id == FAKE_PONG_ID


def most_points(env_id: str, env_kwargs: dict[str, Any]) -> int | None:
    """The most points a game of `env_id` (with `env_kwargs`) gives either side, so that its
    score lies between minus and plus this; None for an env pong-mp does not know."""
    if not is_pong(env_id):
        return None
    points = env_kwargs.get("points_to_win", PONG_POINTS) if env_id == FAKE_PONG_ID else PONG_POINTS
    return points if isinstance(points, int) else None


def make_env(env_id: str, **kwargs: Any) -> gym.Env:
    """A new env for `env_id`, with ALE's environments registered when the id needs them."""
    check_env_id(env_id)
    return gym.make(env_id, **kwargs)


register_fake_pong()
