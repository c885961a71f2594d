"""Measurements: `pong-mp bench` puts pong-mp's training speed next to the emulator's limit.

All figures come from one run on one machine; the ones that matter are ratios within it
(docs/performance.md lists them: raw, pong-mp's training, Ray's example's dense loop).
"""

from __future__ import annotations

import contextlib
import dataclasses
import multiprocessing as mp
import os
import platform
import time
import traceback
from collections.abc import Callable, Iterator
from multiprocessing.connection import Connection
from multiprocessing.process import BaseProcess
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np

from pong_mp import policy
from pong_mp.backends.base import WorkerError, worker_error
from pong_mp.backends.worker_process import (
    exit_with_parent,
    how_it_ended,
    ignore_in_worker,
    start_process,
    stdout_to_stderr,
)
from pong_mp.config import TrainConfig, stored_option
from pong_mp.envs import FAKE_PONG_ID, exception_line, make_env
from pong_mp.signals import Interrupted, at_once, check_stop, wait
from pong_mp.tools import markdown_table

RAW_RUNS = "in the raw runs"
"""Where an env that fails as its raw speed is measured failed, in the bench's line."""


@contextlib.contextmanager
def env_here(env_id: str, where: str) -> Iterator[None]:
    """Inside, env `env_id` runs in this process: what it raises, sys.exit too but not a stop,
    is a WorkerError that says it failed `where`, with its traceback; a first stop signal ends
    it at once (`at_once`: it may hang where no check comes, and a measurement saves nothing)."""
    try:
        with at_once():
            yield
    except (KeyboardInterrupt, Interrupted):
        raise
    except BaseException as exc:
        message = f"{env_id} failed {where}: {exception_line(exc)}"
        raise worker_error(message, traceback.format_exc())  # noqa: B904 (its cause: that)


def env_steps_per_sec(env_id: str, seconds: float, seed: int = 0) -> float:
    """Env steps per second in this process with random UP/DOWN actions, resets included."""
    env = make_env(env_id)
    rng = np.random.default_rng(seed)
    actions = rng.choice([2, 3], size=4096)
    try:
        env.reset(seed=seed)
        steps = 0
        start = time.perf_counter()
        while time.perf_counter() - start < seconds:  # ~50 ns: small beside any env step
            check_stop()  # as small: a stop ends the measurement at the next step
            _, _, terminated, truncated, _ = env.step(int(actions[steps % 4096]))
            steps += 1
            if terminated or truncated:
                env.reset()
        return steps / (time.perf_counter() - start)
    finally:
        env.close()


def compare_envs(env_ids: tuple[str, ...], seconds: float, rounds: int) -> dict[str, list[float]]:
    """Steps/s of each env in `rounds` alternating rounds of `seconds` each."""
    rates: dict[str, list[float]] = {env_id: [] for env_id in env_ids}
    for r in range(rounds):
        for env_id in env_ids:
            with env_here(env_id, RAW_RUNS):
                rates[env_id].append(env_steps_per_sec(env_id, seconds, seed=r))
    return rates


def format_env_comparison(rates: dict[str, list[float]]) -> str:
    """Each env's median rate, and the last env's against the first's."""
    medians = {env_id: float(np.median(r)) for env_id, r in rates.items()}
    width = max(12, *(len(env_id) for env_id in medians))
    lines = [
        f"{env_id:<{width}} {median:>10,.0f} steps/s (median of {len(rates[env_id])} rounds)"
        for env_id, median in medians.items()
    ]
    names = list(medians)
    first, last = names[0], names[-1]
    lines.append(f"{last} / {first}: {medians[last] / medians[first]:.1f}x")
    return "\n".join(lines)


class _Returned(NamedTuple):
    """What a bench process's call returned."""

    value: Any


class _Raised(NamedTuple):
    """What a bench process's call raised ("Type: message"), and its traceback."""

    error: str
    traceback: str


def _process_main(
    conn: Connection, parent_pid: int, call: Callable[..., Any], args: tuple[Any, ...]
) -> None:
    """A bench process: starts as the trainer's workers do (a terminal's Ctrl-C goes to the
    whole group, and the bench stops its processes itself; a bench killed takes them along),
    then sends back what call(*args) returned or raised."""
    ignore_in_worker()
    stdout_to_stderr()
    exit_with_parent(parent_pid)
    answer: _Returned | _Raised
    try:
        answer = _Returned(call(*args))
    except BaseException as exc:  # the env's, sys.exit too: this process ignores Ctrl-C
        answer = _Raised(exception_line(exc), traceback.format_exc())
    conn.send(answer)


@contextlib.contextmanager
def _processes(
    calls: list[tuple[Callable[..., Any], tuple[Any, ...]]],
) -> Iterator[list[tuple[BaseProcess, Connection]]]:
    """Each call(*args) of `calls` in a spawned process of its own: (process, the pipe its
    answer comes on). They start deaf to the terminal's signals, as the trainer's workers
    do (`start_process`). On leaving, every one still running is killed, and all are
    reaped. A process the system will not start is a WorkerError."""
    context = mp.get_context("spawn")
    started: list[tuple[BaseProcess, Connection]] = []
    try:
        for i, (call, args) in enumerate(calls):
            try:  # a limit on processes or open files: one line, not a traceback
                started.append(
                    start_process(
                        context, _process_main, (os.getpid(), call, args), f"pong-mp-bench-{i}"
                    )
                )
            except OSError as exc:
                raise WorkerError(f"cannot start a bench process: {exc.strerror or exc}") from None
        yield started
    finally:
        for process, conn in started:
            if process.is_alive():
                process.kill()
            process.join()
            conn.close()


def _answers(started: list[tuple[BaseProcess, Connection]], env_id: str | None = None) -> list:
    """What each of `started`'s calls returned, in order, waited for where a stop signal ends
    the wait. One that raised, or whose process died, is a WorkerError: with `env_id`, one
    that says the env failed in the raw runs, with its traceback."""
    what = f"{env_id} failed {RAW_RUNS}" if env_id else "a bench process failed"
    answers: dict[int, Any] = {}
    while len(answers) < len(started):
        waiting = [(i, p, c) for i, (p, c) in enumerate(started) if i not in answers]
        ready = wait([end for _, p, c in waiting for end in (c, p.sentinel)], None)
        for i, process, conn in waiting:
            if conn not in ready and process.sentinel not in ready:
                continue
            try:
                answer = conn.recv() if conn.poll() else None
            except (EOFError, OSError):
                answer = None  # cut off by its death
            if isinstance(answer, _Raised):
                raise worker_error(f"{what}: {answer.error}", answer.traceback)
            if not isinstance(answer, _Returned):
                raise WorkerError(f"{what}: its process {how_it_ended(process)}")
            answers[i] = answer.value
    return [answers[i] for i in range(len(started))]


def raw_rate(env_id: str, processes: int, seconds: float) -> float:
    """Total env steps/s of `processes` processes stepping at once."""
    with _processes([(env_steps_per_sec, (env_id, seconds, i)) for i in range(processes)]) as ps:
        return float(sum(_answers(ps, env_id)))


def dense_reference_rate(env_id: str, seconds: float, hidden: int = 200) -> float:
    """Steps/s of the serial loop of Ray's example: dense float64 rows and backward."""
    from threadpoolctl import threadpool_limits

    shape = policy.NetShape(hidden)
    with threadpool_limits(limits=1):
        env = make_env(env_id)
        w1t, w2 = policy.split(policy.init_params(shape, 0), shape)
        rng = np.random.default_rng(0)
        steps = 0
        start = time.perf_counter()
        try:
            while time.perf_counter() - start < seconds:
                obs, _ = env.reset()
                prev = None
                xs, hs, dlogps, rewards = [], [], [], []
                done = False
                while not done and time.perf_counter() - start < seconds:
                    check_stop()
                    cur = policy.preprocess(obs)
                    x = cur - prev if prev is not None else np.zeros(policy.INPUT_SIZE)
                    prev = cur
                    p_up, h = policy.forward(w1t, w2, x)
                    up = rng.random() < p_up
                    xs.append(x)
                    hs.append(h)
                    dlogps.append((1.0 if up else 0.0) - p_up)
                    obs, reward, terminated, truncated, _ = env.step(2 if up else 3)
                    rewards.append(reward)
                    steps += 1
                    done = terminated or truncated
                if not xs:  # the time ran out during the reset
                    break
                adv = policy.standardize(policy.discount_rewards(np.array(rewards), 0.99))
                dlogp, grad = np.array(dlogps) * adv, np.empty(policy.param_count(shape))
                policy.backward(w2, np.vstack(xs), np.vstack(hs), dlogp, grad)
        finally:
            env.close()
        return steps / (time.perf_counter() - start)


def _rss_mb(pid: int, field: str = "VmHWM") -> float | None:
    """A process's peak (VmHWM) or current (VmRSS) resident memory in MB, where /proc has it."""
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith(f"{field}:"):
                return int(line.split()[1]) / 1024
    except OSError:
        pass
    return None


def cpu_ticks() -> tuple[int, int] | None:
    """The machine's CPU time so far, in ticks, busy and in all, where /proc/stat has it."""
    try:
        fields = [int(x) for x in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    except (OSError, ValueError):
        return None
    if len(fields) < 5:  # a kernel too old to count iowait apart
        return None
    # user nice system idle iowait irq softirq steal (guest time is inside user already)
    total = sum(fields[:8])
    return total - fields[3] - fields[4], total


def cpu_busy(before: tuple[int, int] | None, after: tuple[int, int] | None) -> float | None:
    """The share of all CPUs' time that was busy between two `cpu_ticks` (None if unknown)."""
    if before is None or after is None or after[1] <= before[1]:
        return None
    return (after[0] - before[0]) / (after[1] - before[1])


BENCH_GROUPS = ("learner", "policy", "schedule")
"""The groups of `pong-mp train`'s options that decide what bench's training runs compute."""

_DEFAULTS = {
    f.name: f.default
    for f in dataclasses.fields(TrainConfig)
    if f.metadata["group"] in BENCH_GROUPS
}


class TrainingSetup:
    """What bench's training runs train with: train's options of BENCH_GROUPS (its defaults
    where not given) and the weights they start from."""

    def __init__(self, model: Path | None = None, **options: Any) -> None:
        """Runs from the weights of `model` (a model or checkpoint; None: new ones) with
        `options`, keywords of TrainConfig (a model's policy network is its own)."""
        unknown = sorted(set(options) - set(_DEFAULTS))
        if unknown:
            raise TypeError(f"not options of bench's training runs: {', '.join(unknown)}")
        self.model = model
        self.options: dict[str, Any] = {**_DEFAULTS, **options}
        vars(self).update(self.options)  # each also by its name (setup.algo), as in TrainConfig

    def describe(self) -> dict[str, Any]:
        """The setup as JSON fields of the results: every option (None where unused), and the
        model."""
        unused = set()
        if self.options["policy"] != "conv":
            unused.add("channels")
        if self.options["algo"] != "ppo":
            unused.update(("epochs", "minibatches"))
        return {
            **{name: None if name in unused else value for name, value in self.options.items()},
            "model": None if self.model is None else str(self.model),
        }


def training_config(
    env_id: str, workers: int, setup: TrainingSetup, env_kwargs: dict[str, Any] | None = None
) -> tuple[TrainConfig, np.ndarray]:
    """The checked config (ConfigError) of `setup`'s runs on `env_id`, and their weights."""
    from pong_mp.checkpoint import load_policy

    options = dict(setup.options)
    params = None  # new weights, drawn once the config says their shape
    if setup.model is not None:
        params, stored = load_policy(setup.model)
        options.update({name: stored_option(stored, name) for name in ("policy", "channels")})
        options["hidden"] = int(stored["hidden"])
    config = TrainConfig(env=env_id, workers=workers, env_kwargs=env_kwargs or {}, **options)
    config.validate()
    if params is None:
        params = policy.init_params(config.shape, 0)
    # A model has no value head: the runs add a new one, as a fork does.
    return config, policy.with_value_head(params, config.shape, config.value_head)


def training_rate(
    env_id: str,
    workers: int,
    seconds: float,
    setup: TrainingSetup | None = None,
    env_kwargs: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """Train as `setup` says on the local backend for about `seconds` after one warm-up."""
    setup = setup or TrainingSetup()  # train's defaults, new weights
    from pong_mp.backends.local import LocalBackend
    from pong_mp.state import initial_state
    from pong_mp.trainer import rollout_spec, updates

    config, params = training_config(env_id, workers, setup, env_kwargs)
    with LocalBackend(rollout_spec(config)) as backend:
        records = []
        # A new run's state (the optimizer's at zero), from `setup`'s weights.
        stream = updates(config, dataclasses.replace(initial_state(config), params=params), backend)
        next(stream)  # warm-up: first touches of memory and caches
        counters = (
            "busy_seconds", "barrier_seconds", "coordinator_seconds", "pipe_seconds",
            "light_passes", "whole_passes",
        )
        before = {name: getattr(backend, name) for name in counters}
        ticks = cpu_ticks()
        start = time.perf_counter()
        for _, record in stream:
            records.append(record)
            if time.perf_counter() - start >= seconds:
                break
        busy = cpu_busy(ticks, cpu_ticks())
        spent = {name: getattr(backend, name) - before[name] for name in counters}
        passes = spent["light_passes"] + spent["whole_passes"]
        rss = [_rss_mb(pid) for pid in backend.worker_pids()]
    wall = sum(r["seconds"] for r in records)
    played = sum(r["play_seconds"] for r in records)
    # From each batch's last result until the new weights and the next episodes are out.
    coordinator = sum(r["update_seconds"] for r in records)
    # Approximate by up to one episode per worker at either end of the window: where the
    # parts add up to more than the idle time the episodes' clocks leave, they are it.
    parts = {
        "barrier": spent["barrier_seconds"],
        "coordinator": spent["coordinator_seconds"],
        "pipes": spent["pipe_seconds"],
    }
    idle = max(workers * wall - spent["busy_seconds"], sum(parts.values()), 1e-12)
    parts["other"] = idle - sum(parts.values())
    shares = {part: seconds / idle for part, seconds in parts.items()}
    return {
        "steps_per_sec": sum(r["steps"] for r in records) / wall,
        "updates": len(records),
        "coordinator_share": coordinator / wall,
        "play_share": played / wall,
        # The whole machine's: on a quiet machine, how much of its CPUs training used.
        "cpu_busy": busy,
        "workers_busy": spent["busy_seconds"] / (workers * wall),
        "idle_shares": shares,
        "peak_worker_rss_mb": max((r for r in rss if r is not None), default=None),
        # Actor-critic passes taken by the worker that kept the episode's data (None: pg).
        "passes_light_share": spent["light_passes"] / passes if passes else None,
    }


def _episode_memory(steps: int, setup: TrainingSetup) -> tuple[float, float]:
    from pong_mp.backends.base import prepare_worker_process
    from pong_mp.backends.episode_worker import EpisodeWorker
    from pong_mp.episode import EpisodeTask
    from pong_mp.trainer import rollout_spec

    prepare_worker_process()
    # What a worker of `setup`'s learner holds for all its episodes: its env and working
    # memory, and Karpathy's learner's gradient slot; the actor-critic's keeps the episode
    # played, as the local pool's workers do for its passes.
    game = {"points_to_win": 10_000, "max_steps": steps}
    config, params = training_config(FAKE_PONG_ID, 1, setup, game)
    worker = EpisodeWorker(rollout_spec(config), keep=True)
    worker.open()
    weights = policy.Weights32.from_params(params, config.shape)
    grad = (
        np.ones(policy.param_count(config.shape), dtype=np.float32) if config.algo == "pg" else None
    )
    before = _rss_mb(os.getpid(), "VmRSS")
    # Reset the peak so that set-up does not hide what the episode itself needs.
    Path("/proc/self/clear_refs").write_text("5")
    result = worker.play(weights, EpisodeTask(0, 0), grad)
    peak = _rss_mb(os.getpid())
    worker.close()
    if result.stats.steps != steps:
        raise RuntimeError(f"the episode took {result.stats.steps} steps, not {steps}")
    if before is None or peak is None:
        raise RuntimeError("needs Linux's /proc")
    return before, peak


def episode_memory(
    steps: int, setup: TrainingSetup | None = None, repeats: int = 3
) -> dict[str, float] | None:
    """RSS (MB) of a fresh worker-like process of `setup`'s learner (default: train's
    defaults) before one episode of exactly `steps` steps, and its peak during it (median of
    `repeats` processes); None where /proc cannot tell."""
    setup = setup or TrainingSetup()
    runs = []
    for _ in range(repeats):
        with _processes([(_episode_memory, (steps, setup))]) as started:
            try:
                runs.append(_answers(started)[0])
            except (OSError, RuntimeError):
                return None
    before, peak = sorted(runs, key=lambda run: run[1])[len(runs) // 2]
    return {"before": before, "peak": peak, "added": peak - before}


def run_bench(
    workers: int,
    seconds: float,
    env_id: str,
    setup: TrainingSetup,
) -> dict[str, Any]:
    """Every measurement of `pong-mp bench`, as one dict."""
    raw_before = raw_rate(env_id, workers, seconds)
    training = training_rate(env_id, workers, seconds, setup)
    raw_after = raw_rate(env_id, workers, seconds)
    raw = (raw_before + raw_after) / 2
    raw_one = raw_rate(env_id, 1, seconds)
    with env_here(env_id, "in Ray's example's loop"):
        reference = dense_reference_rate(env_id, seconds)
    short = episode_memory(1_000, setup)
    long = episode_memory(10_000, setup)
    return {
        "env": env_id,
        "workers": workers,
        "seconds": seconds,
        "raw_steps_per_sec": raw,
        "raw_steps_per_sec_before_after": [raw_before, raw_after],
        "raw_one_process_steps_per_sec": raw_one,
        "reference_steps_per_sec": reference,
        "reference_ratio": reference / raw_one,
        "train_steps_per_sec": training["steps_per_sec"],
        "train_ratio": training["steps_per_sec"] / raw,
        "train_updates": training["updates"],
        **time_shares(training),
        **setup.describe(),
        "passes_light_share": training.get("passes_light_share"),
        "peak_worker_rss_mb": training["peak_worker_rss_mb"],
        "episode_memory_mb_1k_steps": short,
        "episode_memory_mb_10k_steps": long,
        **where_measured(),
    }


def time_shares(training: dict[str, Any]) -> dict[str, Any]:
    """Where a training measurement's time went, as each record gives it: the coordinator's
    share of the wall time, the play's, the workers' busy and idle shares, and the CPUs'."""
    return {
        key: training.get(key)
        for key in ("coordinator_share", "play_share", "workers_busy", "idle_shares", "cpu_busy")
    }


def where_measured() -> dict[str, Any]:
    """What a record names of the machine and code it was measured with."""
    from pong_mp import sparse
    from pong_mp.rundir import code_commit

    return {
        "cpus": mp.cpu_count(),
        "python": platform.python_version(),
        "numpy": np.__version__,
        "machine": platform.machine(),
        "loops": sparse.BUILD,  # the compiled loops' build: "avx2" or "portable"
        "commit": code_commit(),  # the code measured: a record stays remakeable
    }


def format_bench(r: dict[str, Any]) -> str:
    """The bench's results as readable lines."""
    rss = r["peak_worker_rss_mb"]
    before, after = r["raw_steps_per_sec_before_after"]
    # The actor-critic's passes over each batch; older results and pg's runs have none.
    epochs = r.get("epochs")
    passes = "" if epochs is None else f"{epochs} passes of {r['minibatches']} minibatches, "
    lines = [
        f"raw {r['env']}, {r['workers']} process{'es' * (r['workers'] != 1)}: "
        f"{r['raw_steps_per_sec']:,.0f} steps/s (before training {before:,.0f}, "
        f"after {after:,.0f})",
        f"pong-mp train, {r['workers']} local worker{'s' * (r['workers'] != 1)}: "
        f"{r['train_steps_per_sec']:,.0f} steps/s = {r['train_ratio']:.2f}x raw "
        f"({r['train_updates']} updates of {r.get('batch_size', 10)} episodes, "
        f"{r.get('algo', 'pg')} with {r.get('optimizer', 'rmsprop')}, {passes}policy lag "
        f"{r.get('policy_lag', 0)}, entropy bonus {r.get('entropy_bonus', 0):g}, "
        f"{'from ' + r['model'] if r.get('model') else 'new weights'}); "
        f"workers busy {100 * r.get('workers_busy', float('nan')):.0f}% of the time",
        f"Ray's example (dense float64 loop), 1 process: {r['reference_steps_per_sec']:,.0f} "
        f"steps/s = {r['reference_ratio']:.2f}x one raw process "
        f"({r['raw_one_process_steps_per_sec']:,.0f})",
        "coordinator (sum, optimizer, broadcast, hand-out): "
        f"{100 * r['coordinator_share']:.2f}% of each update's wall time",
        *_play_line(r),
        *_idle_line(r),
        "peak worker RSS: " + ("n/a" if rss is None else f"{rss:.0f} MB"),
    ]
    short, long = r["episode_memory_mb_1k_steps"], r["episode_memory_mb_10k_steps"]
    if short is None or long is None:
        lines.append("memory one episode adds to a worker: n/a (needs Linux's /proc)")
    else:
        lines.append(
            f"peak RSS of a worker over one episode: {short['peak']:.1f} MB at 1,000 steps, "
            f"{long['peak']:.1f} MB at 10,000 steps ({long['peak'] / short['peak']:.3f}x); "
            f"the episode adds {short['added']:.1f} and {long['added']:.1f} MB"
        )
    return "\n".join(lines)


def run_scaling(
    max_workers: int,
    seconds: float,
    env_id: str,
    setup: TrainingSetup,
) -> list[dict[str, Any]]:
    """Training against raw with as many processes, one row for each count of
    `worker_counts` (1, 2, 4, ... and `max_workers`)."""
    where = where_measured()
    rows = []
    for workers in worker_counts(max_workers):
        before = raw_rate(env_id, workers, seconds)
        training = training_rate(env_id, workers, seconds, setup)
        after = raw_rate(env_id, workers, seconds)
        raw = (before + after) / 2
        rows.append(
            {
                "workers": workers,
                **setup.describe(),
                "raw_steps_per_sec": raw,
                "train_steps_per_sec": training["steps_per_sec"],
                "train_ratio": training["steps_per_sec"] / raw,
                **time_shares(training),
                **where,
            }
        )
    return rows


def worker_counts(max_workers: int) -> list[int]:
    """The worker counts `--scaling` and `--simulate` measure: 1, 2, 4, ... and `max_workers`."""
    powers = (2**i for i in range(max_workers.bit_length()) if 2**i < max_workers)
    return sorted({1, *powers, max_workers})


def simulated_env(step_seconds: float) -> dict[str, Any]:
    """The FakePong-v0 arguments of `--simulate`: steps that sleep `step_seconds`, and games
    of ~300 steps, so that one worker's update takes seconds, not minutes."""
    return {"points_to_win": 3, "step_seconds": step_seconds}


def run_simulation(
    max_workers: int, seconds: float, step_seconds: float, setup: TrainingSetup
) -> list[dict[str, Any]]:
    """Training on FakePong-v0 whose steps sleep `step_seconds` (no CPU, so the orchestration
    limits the speed-up), one row per count of `worker_counts`, with its speed-up over
    one worker and its efficiency (speed-up / workers; 1 is ideal)."""
    env_kwargs = simulated_env(step_seconds)
    where = where_measured()
    rows: list[dict[str, Any]] = []
    for workers in worker_counts(max_workers):
        training = training_rate(FAKE_PONG_ID, workers, seconds, setup, env_kwargs)
        one = rows[0]["train_steps_per_sec"] if rows else training["steps_per_sec"]
        rows.append(
            {
                "workers": workers,
                **setup.describe(),
                "env": FAKE_PONG_ID,
                "env_kwargs": env_kwargs,
                "train_steps_per_sec": training["steps_per_sec"],
                "train_updates": training["updates"],
                "speed_up": training["steps_per_sec"] / one,
                "efficiency": training["steps_per_sec"] / one / workers,
                **time_shares(training),
                **where,
            }
        )
    return rows


def format_simulation(rows: list[dict[str, Any]]) -> str:
    """The simulation's rows as a Markdown table."""
    return markdown_table(
        "workers | training steps/s | speed-up over 1 worker | efficiency | coordinator | play "
        "| CPUs busy | updates",
        (
            f"{r['workers']} | {r['train_steps_per_sec']:,.0f} | {r['speed_up']:.2f}x "
            f"| {r['efficiency']:.2f} | {100 * r['coordinator_share']:.0f}% "
            f"| {_percent(r.get('play_share'))} | {_percent(r.get('cpu_busy'))} "
            f"| {r['train_updates']}"
            for r in rows
        ),
    )


def format_scaling(rows: list[dict[str, Any]]) -> str:
    """The scaling rows as a Markdown table, with each count's speed-up over one worker."""
    one = rows[0]["train_steps_per_sec"]
    return markdown_table(
        "workers | raw steps/s (same processes) | training steps/s | training / raw | "
        "speed-up over 1 worker",
        (
            f"{r['workers']} | {r['raw_steps_per_sec']:,.0f} | {r['train_steps_per_sec']:,.0f} "
            f"| {r['train_ratio']:.2f} | {r['train_steps_per_sec'] / one:.2f}x"
            for r in rows
        ),
    )


def _percent(share: float | None) -> str:
    return "n/a" if share is None else f"{100 * share:.0f}%"


def _play_line(r: dict[str, Any]) -> list[str]:
    # The update's two phases (older versions' results have no play_share).
    play = r.get("play_share")
    if play is None:
        return []
    line = (f"playing the batch: {100 * play:.0f}% of each update's wall time; learning from it "
            f"{100 * (1 - play):.0f}%")
    if r.get("cpu_busy") is not None:
        line += f"; the machine's CPUs busy {100 * r['cpu_busy']:.0f}% of the time"
    return [line]


def _idle_line(r: dict[str, Any]) -> list[str]:
    # Where the workers' idle time went (older versions' results have none).
    shares = r.get("idle_shares")
    if not shares:
        return []
    idle = 1 - r["workers_busy"]
    lines = [
        f"workers idle {100 * idle:.1f}% of the time: batch barrier "
        f"{100 * shares['barrier']:.0f}%, coordinator {100 * shares['coordinator']:.0f}%, "
        f"pipes {100 * shares['pipes']:.0f}%, other {100 * shares['other']:.0f}% of it"
    ]
    light = r.get("passes_light_share")
    if light is not None:
        lines.append(f"actor-critic passes sent without their trajectory: {100 * light:.0f}%")
    return lines
