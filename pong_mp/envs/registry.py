"""The env ids pong-mp knows: registering FakePong and ALE with gymnasium, checking an id,
making a plain env; and what the user's env code raised, as one line. Apart from
`pong_mp.envs`, which imports FastAtari, which needs it."""

from __future__ import annotations

import importlib
import reprlib
from typing import Any

import gymnasium as gym

from pong_mp.progress import output_stop
from pong_mp.signals import Interrupted

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


def check_env_id(env_id: str) -> None:
    """Raise UnknownEnvError, with a short message, if `env_id` is not a known env.

    An id may name the module that registers its env ("module:EnvId"), imported here as
    gymnasium.make does: whatever its import raises (sys.exit and other BaseExceptions
    included) is an UnknownEnvError in the coordinator, so a module that fails never reaches
    the workers. A stop passes (`pass_stops`).
    """
    module, _, name = env_id.rpartition(":")
    if module:
        try:
            importlib.import_module(module)
        except BaseException as exc:  # the user's module may raise anything at import
            pass_stops(exc)
            if isinstance(exc, SystemExit):
                # It would end pong-mp itself, with a status that says nothing (often 0).
                raise UnknownEnvError(
                    f"env id {env_id!r}: importing {module} called {exit_call(exc)}"
                ) from None
            what = first_line(exc) if isinstance(exc, ImportError) else ""
            raise UnknownEnvError(
                f"env id {env_id!r}: cannot import {module} ({what or exception_line(exc)})"
            ) from None
    if name.startswith("ALE/"):
        import ale_py  # imported lazily: it loads the emulator library

        # Without this every worker prints ALE's banner to stderr when its env is made.
        ale_py.ALEInterface.setLoggerMode(ale_py.LoggerMode.Error)
        gym.register_envs(ale_py)
    if name not in gym.registry:
        raise UnknownEnvError(f"unknown env id {env_id!r}; use {SUPPORTED}")


def pass_stops(exc: BaseException) -> None:
    """Raise `exc` again if the user's env code that raised it was stopped, not broken: a
    Ctrl-C or pong-mp's own stop. A failed write to standard output (a module that prints,
    `| head -1`) is raised as the stop it calls for, as a failed write of pong-mp's own is."""
    if isinstance(exc, KeyboardInterrupt | Interrupted):
        raise exc
    stop = output_stop(exc) if isinstance(exc, OSError) else None
    if stop is not None:
        raise stop from None


def first_line(exc: BaseException) -> str:
    """The first line of `exc`'s message, "" for none: that of the user's exception, whose
    __str__ may itself raise, or say nothing."""
    try:
        lines = str(exc).strip().splitlines()
    except (KeyboardInterrupt, Interrupted):
        raise
    except BaseException:  # the user's code too: it may raise anything
        return ""
    return lines[0] if lines else ""


def exception_line(exc: BaseException) -> str:
    """`exc` as one line: "Type: the first line of its message", or "Type" alone."""
    line = first_line(exc)
    return f"{type(exc).__name__}: {line}" if line else type(exc).__name__


def what_it_did(exc: BaseException) -> str:
    """What the user's code did, as one line: "it called sys.exit(CODE)" for a SystemExit,
    else `exception_line`."""
    return f"it called {exit_call(exc)}" if isinstance(exc, SystemExit) else exception_line(exc)


def exit_call(exc: SystemExit) -> str:
    """The call that raised `exc`, as "sys.exit(CODE)": its code (the user's) shown short."""
    return f"sys.exit({shown(exc.code)})"


def shown(value: object) -> str:
    """`value`, the user's code's, as its repr cut to about 160 characters; an object whose
    repr raises an Exception is shown by its type (reprlib's way)."""
    return _SHORT.repr(value)


_SHORT = reprlib.Repr()
_SHORT.maxstring = _SHORT.maxother = 160


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
