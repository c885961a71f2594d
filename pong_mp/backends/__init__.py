"""Backends play batches of episodes: serial (in process), local (process pool), ray.

    base.py            RolloutSpec (with the learner's WorkerSpec), the Backend protocol,
                       errors and retries
    episode_worker.py  EpisodeWorker: one env and the learner's working memory doing tasks
                       (every backend's); kept.py the episodes' data it keeps
    serial.py          an EpisodeWorker in this process: the reference
    local.py           the pool of worker processes; shm.py its shared-memory blocks
    worker_process.py  a pool worker's main loop and the messages it exchanges with the pool
    ray_cluster.py     the local pool on each node of a Ray cluster, under one leader actor
"""

from __future__ import annotations

from pong_mp.backends.base import Backend, BackendUnavailable, RolloutSpec, WorkerError

BACKENDS = ("local", "serial", "ray")
"""Where episodes are played, the default first: a process pool, this process, or Ray
actors (`make_backend`'s names, which --backend offers)."""


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
