"""The envs: making them by id, for training and for checking options.

    registry.py    ids: FakePong and ALE registered with gymnasium, check_env_id, make_env;
                   what the user's env code raised, said in one line (pass_stops, ...)
    atari.py       FastAtari: ALE Pong with v5's semantics, seeded sticky actions, fast resets
    fake_pong.py   FakePong-v0, a pure-numpy Pong for tests
"""

from __future__ import annotations

from typing import Any

import gymnasium as gym

from pong_mp.envs.registry import (
    FAKE_PONG_ID,
    SUPPORTED,
    UnknownEnvError,
    check_env_id,
    exception_line,
    exit_call,
    first_line,
    is_pong,
    make_env,
    most_points,
    pass_stops,
    register_fake_pong,
    shown,
    what_it_did,
)
from pong_mp.frames import FRAME_SHAPE, BinaryInputs, InputStream, input_stream
from pong_mp.signals import at_once

__all__ = [
    "FAKE_PONG_ID",
    "SUPPORTED",
    "UnknownEnvError",
    "check_env",
    "check_env_id",
    "env_args_text",
    "exception_line",
    "exit_call",
    "first_line",
    "is_pong",
    "make_env",
    "make_training_env",
    "most_points",
    "pass_stops",
    "register_fake_pong",
    "shown",
    "what_it_did",
]

def env_args_text(env_kwargs: dict[str, Any]) -> str:
    """An env's arguments as --env-arg gives them: "KEY=VALUE ..." ("" for none)."""
    return " ".join(f"{k}={v!r}" for k, v in env_kwargs.items())


def check_env(env_id: str, env_kwargs: dict[str, Any]) -> None:
    """Raise UnknownEnvError unless `env_id` is a supported Pong that can be built with
    `env_kwargs`: the env is made once (and closed), so that a bad --env-arg is refused before
    any worker starts or any file is written.

    An id with its module ("package.module:Name-v0") names the user's own env: that it shows
    Pong's frames is the user's word, and only their shape and its actions are checked.
    """
    with at_once():  # its module or its making may hang: a stop signal ends them
        check_env_id(env_id)
        if not is_pong(env_id) and ":" not in env_id:
            raise UnknownEnvError(
                f"{env_id} is not Pong: pong-mp learns Pong from its frames; use {SUPPORTED}"
            )
        args = env_args_text(env_kwargs) or "no --env-arg"
        env, inputs = _made(env_id, env_kwargs, args)
        try:
            actions = getattr(env.action_space, "n", 0)
            # The stream that binarizes observations needs frames (FastAtari's reads the screen).
            seen = getattr(env.observation_space, "shape", None)
            frames = not isinstance(inputs, BinaryInputs) or seen == FRAME_SHAPE
            moves = _moves(env, env_id)
        finally:  # closed however its checks end: the user's env may hold a process, a file
            _close(env, env_id)
        if actions < 4:
            raise UnknownEnvError(
                f"{env_id} has {actions} actions, not Pong's UP (2) and DOWN (3)"
            )
        if not frames:
            raise UnknownEnvError(
                f"{env_id} cannot be made with {args}: its observations are {seen}, not the "
                f"RGB frames {FRAME_SHAPE} pong-mp learns from"
            )
        if moves != ["RIGHT", "LEFT"]:  # full_action_space: 2 is UP, which Pong ignores
            raise UnknownEnvError(
                f"{env_id} cannot be made with {args}: its actions 2 and 3 are {moves[0]} and "
                f"{moves[1]}, not Pong's paddle moves up and down (RIGHT and LEFT)"
            )


def _made(env_id: str, env_kwargs: dict[str, Any], args: str) -> tuple[gym.Env, InputStream]:
    """The env made as training makes it, and its input stream: whatever its constructor
    raises (sys.exit and other BaseExceptions included) is an UnknownEnvError naming it."""
    try:
        return make_training_env(env_id, **env_kwargs)
    except BaseException as exc:  # an env constructor may raise anything on bad arguments
        pass_stops(exc)
        if isinstance(exc, SystemExit):  # it would end pong-mp, with a status that says nothing
            message = f"it called {exit_call(exc)}"
        else:
            # gymnasium appends the whole kwargs dict; the arguments are named already.
            message = first_line(exc).split(" was raised from the environment creator")[0]
        raise UnknownEnvError(
            f"{env_id} cannot be made with {args}: {message or type(exc).__name__}"
        ) from None


def _moves(env: gym.Env, env_id: str) -> list[str]:
    """The names of the env's actions 2 and 3 by its get_action_meanings (ALE's envs have
    it; without it the env is taken at its word). The user's code: whatever it raises, exits
    with or gives that is not such names is an UnknownEnvError."""
    try:
        names = getattr(env.unwrapped, "get_action_meanings", None)
        if not callable(names):
            return ["RIGHT", "LEFT"]
        given = names()
    except BaseException as exc:
        pass_stops(exc)
        raise UnknownEnvError(
            f"{env_id}'s get_action_meanings() failed: {what_it_did(exc)}"
        ) from None
    if not (isinstance(given, list | tuple) and len(given) >= 4
            and all(isinstance(name, str) for name in given[2:4])):
        raise UnknownEnvError(
            f"{env_id}'s get_action_meanings() gave {shown(given)}, not a list of its actions' "
            "names (Pong's 2 and 3 are RIGHT and LEFT)"
        )
    return list(given[2:4])


def _close(env: gym.Env, env_id: str) -> None:
    """Close the env made to check it; what its close raises is an UnknownEnvError."""
    try:
        env.close()
    except BaseException as exc:  # the user's env: it may raise anything
        pass_stops(exc)
        what = exit_call(exc) if isinstance(exc, SystemExit) else shown(exc)
        raise UnknownEnvError(f"{env_id} failed as it was closed: {what}") from None


def make_training_env(env_id: str, **kwargs: Any) -> tuple[gym.Env, InputStream]:
    """An env for training and the input stream that reads it: FastAtari for ALE ids, unless
    `kwargs` has fast=False, which keeps gymnasium's own env."""
    fast = kwargs.pop("fast", True)
    if not isinstance(fast, bool):
        raise ValueError(f"fast must be true or false, not {fast!r}")
    if env_id.startswith("ALE/") and fast:
        check_env_id(env_id)
        from pong_mp.envs.atari import FastAtari

        env: gym.Env = FastAtari(env_id, **kwargs)
    else:
        env = make_env(env_id, **kwargs)
    return env, input_stream(env)
