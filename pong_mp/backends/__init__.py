"""Backends play batches of episodes: serial (in process), local (process pool), ray."""

from __future__ import annotations

from pong_mp.backends.base import Backend, RolloutSpec, WorkerError
from pong_mp.config import ConfigError

BACKENDS = ("local", "serial", "ray")


def make_backend(name: str, spec: RolloutSpec, ray_address: str | None = None) -> Backend:
    """A backend by name; ray is imported only when it is asked for."""
    if name == "serial":
        from pong_mp.backends.serial import SerialBackend

        return SerialBackend(spec)
    if name == "local":
        from pong_mp.backends.local import LocalBackend

        return LocalBackend(spec)
    if name == "ray":
        raise ConfigError("the ray backend is not available yet: use --backend local or serial")
    raise ValueError(f"unknown backend {name!r}; choose one of {', '.join(BACKENDS)}")


__all__ = ["BACKENDS", "Backend", "RolloutSpec", "WorkerError", "make_backend"]
