"""Backends play batches of episodes: serial (in process), local (process pool), ray."""

from __future__ import annotations

from pong_mp.backends.base import Backend, BackendUnavailable, RolloutSpec, WorkerError
from pong_mp.config import BACKENDS


def make_backend(name: str, spec: RolloutSpec, ray_address: str | None = None) -> Backend:
    """A backend by name; ray is imported only when it is asked for."""
    if name == "serial":
        from pong_mp.backends.serial import SerialBackend

        return SerialBackend(spec)
    if name == "local":
        from pong_mp.backends.local import LocalBackend

        return LocalBackend(spec)
    if name == "ray":
        try:
            from pong_mp.backends.ray_cluster import RayBackend
        except ImportError:
            raise BackendUnavailable(
                "the ray backend needs Ray: pip install 'pong-mp[ray]'"
            ) from None
        return RayBackend(spec, ray_address)
    raise BackendUnavailable(f"unknown backend {name!r}; choose one of {', '.join(BACKENDS)}")


__all__ = [
    "BACKENDS",
    "Backend",
    "BackendUnavailable",
    "RolloutSpec",
    "WorkerError",
    "make_backend",
]
