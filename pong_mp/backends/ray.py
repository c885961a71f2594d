"""The Ray backend: the same episodes on Ray actors, on one machine or across a cluster.

`ray` is imported only here. Each actor keeps one env, with BLAS pinned to one thread, and
plays one episode at a time; episodes go to whichever actor is idle. The float32 weights go
into the object store once per update (one transfer per node, zero-copy reads). Gradients
come back through the object store and the trainer adds them in episode order, so the
weights are bit-identical to the local backend's. An actor that dies or hangs is replaced
and its episode played again with the same seed; an exception inside an episode comes back
with the actor's traceback and is retried a bounded number of times.
"""

from __future__ import annotations

import contextlib
import ipaddress
import logging
import os
import re
import signal
import socket
import time
from collections import deque
from collections.abc import Iterator
from dataclasses import dataclass
from types import FrameType
from typing import Any

import numpy as np
import ray
import ray.exceptions

from pong_mp import policy
from pong_mp.backends.base import (
    BackendUnavailable,
    RolloutSpec,
    WorkerError,
    prepare_worker_process,
    raise_worker_error,
)
from pong_mp.episode import EpisodeResult, EpisodeTask

log = logging.getLogger("pong_mp")

CONNECT_SECONDS = 30.0
"""How long joining a cluster may take before pong-mp gives up with one clear line."""
_START_SECONDS = 180.0  # actors import numpy, gymnasium and ALE, then build their env
_POLL_SECONDS = 1.0


@ray.remote(num_cpus=1)
class EpisodeActor:
    """One env in one Ray worker process, playing episodes on demand."""

    def __init__(self, spec: RolloutSpec) -> None:
        """Set up the process as a worker's, and build the env (once)."""
        from pong_mp.envs import make_training_env
        from pong_mp.episode import EpisodeGradient

        prepare_worker_process()
        self.spec = spec

        self.env, self.inputs = make_training_env(spec.env_id, **spec.env_kwargs)
        self.work = EpisodeGradient(spec.hidden)

    def pid(self) -> int:
        """This actor's process id (readiness check, and for fault tests)."""
        return os.getpid()

    def node_id(self) -> str:
        """The id of the Ray node this actor runs on."""
        return ray.get_runtime_context().get_node_id()

    def play(self, flat32: np.ndarray, task: EpisodeTask) -> EpisodeResult:
        """Play one episode with the float32 weights `flat32` (a zero-copy view)."""
        from pong_mp.episode import play_episode

        w1t, w2 = policy.split(flat32, self.spec.hidden)
        weights = policy.Weights32(w1t, w2)
        return play_episode(self.env, self.inputs, weights, self.spec.gamma, task, work=self.work)


@dataclass
class _Slot:
    actor: Any
    task: EpisodeTask | None = None
    ref: Any = None
    since: float = 0.0


def _alarm(signum: int, frame: FrameType | None) -> None:
    raise TimeoutError


def _loopback_host(address: str) -> str | None:
    host = address.rsplit(":", 1)[0]
    with contextlib.suppress(ValueError):
        if ipaddress.ip_address(host).is_loopback:
            return host
    return None


def _use_token_if_available() -> None:
    # `ray start --head` enables token authentication and writes ~/.ray/auth_token, but a
    # driver sends the token only in token mode: opt in when a token is at hand and the
    # user chose no mode.
    if "RAY_AUTH_MODE" in os.environ:
        return
    token_file = os.environ.get("RAY_AUTH_TOKEN_PATH", os.path.expanduser("~/.ray/auth_token"))
    if "RAY_AUTH_TOKEN" in os.environ or os.path.isfile(token_file):
        os.environ["RAY_AUTH_MODE"] = "token"


def connect(address: str | None, num_cpus: int) -> bool:
    """Start a local Ray instance (address None) or join the cluster at `address`.

    Returns whether this call started Ray (and so should shut it down). Raises
    BackendUnavailable, within about CONNECT_SECONDS, when the cluster cannot be joined.
    """
    if ray.is_initialized():
        return False
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")  # no reports sent home unasked
    quiet = {"logging_level": logging.ERROR, "log_to_driver": False}
    if address is None:
        # A private instance on loopback: nothing to reach from elsewhere.
        ray.init(num_cpus=num_cpus, include_dashboard=False, _node_ip_address="127.0.0.1", **quiet)
        return True
    _use_token_if_available()
    host, _, port = address.rpartition(":")
    try:
        with socket.create_connection((host, int(port)), timeout=5):
            pass
    except (OSError, ValueError) as exc:
        raise BackendUnavailable(f"cannot reach a Ray cluster at {address} ({exc})") from None
    # Ray retries a failed handshake for minutes; an alarm bounds the wait.
    previous = signal.signal(signal.SIGALRM, _alarm)
    signal.alarm(int(CONNECT_SECONDS))
    try:
        loopback = _loopback_host(address)
        extra = {"_node_ip_address": loopback} if loopback else {}
        ray.init(address=address, **quiet, **extra)
    except TimeoutError:
        raise BackendUnavailable(
            f"no Ray cluster answered at {address} within {CONNECT_SECONDS:.0f} s"
        ) from None
    except (ConnectionError, RuntimeError) as exc:
        raise BackendUnavailable(f"cannot join the Ray cluster at {address} ({exc})") from None
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)
    return False


class RayBackend:
    """Episodes on Ray actors: a local Ray instance, or a cluster at `address`."""

    def __init__(self, spec: RolloutSpec, address: str | None = None) -> None:
        """Remember the spec; Ray is started or joined by `start`."""
        if spec.workers < 1:
            raise ValueError("workers must be >= 1")
        self.spec = spec
        self.address = address
        self._owns_ray = False
        self._slots: list[_Slot] = []
        self.replacements = 0
        """How many actors were replaced after dying or hanging."""

    def start(self) -> None:
        """Start or join Ray and create the actors; WorkerError if one cannot start."""
        self._owns_ray = connect(self.address, self.spec.workers)
        try:
            self._slots = [_Slot(self._new_actor()) for _ in range(self.spec.workers)]
            refs = [s.actor.pid.remote() for s in self._slots]
            try:
                ray.get(refs, timeout=_START_SECONDS)
            except ray.exceptions.RayActorError as exc:
                raise_worker_error("an actor failed to start", str(exc))
            except ray.exceptions.GetTimeoutError:
                raise WorkerError(
                    f"actors did not start within {_START_SECONDS:.0f} s: does the cluster "
                    f"have {self.spec.workers} free CPUs?"
                ) from None
        except BaseException:
            self.close()
            raise

    def _new_actor(self) -> Any:
        return EpisodeActor.remote(self.spec)

    def worker_pids(self) -> list[int]:
        """Process ids of the current actors (for fault tests)."""
        return ray.get([s.actor.pid.remote() for s in self._slots])

    def actor_nodes(self) -> list[str]:
        """Ids of the nodes the current actors run on."""
        return ray.get([s.actor.node_id.remote() for s in self._slots])

    def close(self) -> None:
        """Kill the actors, and stop Ray if this backend started it."""
        slots, self._slots = self._slots, []
        for slot in slots:
            with contextlib.suppress(Exception):
                ray.kill(slot.actor)
        if self._owns_ray and ray.is_initialized():
            ray.shutdown()
            self._owns_ray = False

    def run_batch(self, params: np.ndarray, tasks: list[EpisodeTask]) -> Iterator[EpisodeResult]:
        """Play `tasks` on the actors with `params`; yield results as they arrive."""
        if not self._slots:
            raise RuntimeError("RayBackend.start() was not called")
        # The same float32 bytes as Weights32.from_params, put in the store once.
        weights = ray.put(params.astype(np.float32))
        pending = deque(tasks)
        failures: dict[int, int] = {}
        remaining = len(tasks)
        while remaining:
            for slot in self._slots:
                if slot.task is None and pending:
                    slot.task, slot.since = pending.popleft(), time.monotonic()
                    slot.ref = slot.actor.play.remote(weights, slot.task)
            busy = {s.ref: s for s in self._slots if s.task is not None}
            ready, _ = ray.wait(list(busy), num_returns=1, timeout=_POLL_SECONDS)
            for ref in ready:
                slot = busy[ref]
                task, slot.task, slot.ref = slot.task, None, None
                assert task is not None
                try:
                    result: EpisodeResult = ray.get(ref)
                except ray.exceptions.RayActorError as exc:
                    self._retry(task, pending, failures, f"its actor died ({type(exc).__name__})")
                    self._replace(slot)
                    continue
                except ray.exceptions.RayTaskError as exc:
                    # Ray's traceback, with its terminal colour codes taken out for logs.
                    tb = re.sub(r"\x1b\[[0-9;]*m", "", str(exc))
                    self._retry(task, pending, failures, "it raised", tb=tb)
                    continue
                remaining -= 1
                yield result
            now = time.monotonic()
            for slot in self._slots:
                if slot.task is not None and now - slot.since > self.spec.episode_timeout:
                    task, slot.task, slot.ref = slot.task, None, None
                    self._retry(task, pending, failures, f"hung for {now - slot.since:.0f} s")
                    ray.kill(slot.actor)
                    self._replace(slot)

    def _retry(
        self,
        task: EpisodeTask,
        pending: deque[EpisodeTask],
        failures: dict[int, int],
        why: str,
        tb: str | None = None,
    ) -> None:
        failures[task.index] = failures.get(task.index, 0) + 1
        count = failures[task.index]
        if count > self.spec.max_retries:
            message = f"episode {task.index} failed {count} times on Ray actors (last: {why})"
            if tb is not None:
                raise_worker_error(message, tb)
            raise WorkerError(message)
        log.warning(
            f"episode {task.index}: {why}; playing it again ({count}/{self.spec.max_retries})"
        )
        pending.appendleft(task)  # same seed: same result

    def _replace(self, slot: _Slot) -> None:
        slot.actor = self._new_actor()
        self.replacements += 1
