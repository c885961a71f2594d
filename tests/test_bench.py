"""The env-speed measurement (figures themselves are for README, never asserted)."""

from __future__ import annotations

import contextlib
import json
import multiprocessing
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import gymnasium as gym
import numpy as np
import pytest

from pong_mp import policy
from pong_mp.backends import WorkerError
from pong_mp.config import PRESETS
from pong_mp.envs import make_env
from pong_mp.tools.bench import (
    TrainingSetup,
    compare_envs,
    env_steps_per_sec,
    episode_memory,
    format_bench,
    format_env_comparison,
)
from tests.fault_envs import CRASHING_PONG, EXITING_PONG, SLOW_PONG
from tests.helpers import (
    another_thread,
    children_of,
    pong_mp,
    pong_mp_here,
    running,
    signal_self,
    start,
)

PG = {
    name: PRESETS["pg"][name]
    for name in ("algo", "optimizer", "entropy_bonus", "entropy_drop_at", "policy")
}
"""Bench's options for Karpathy's learner (--preset pg), which the tests of its sums train."""


def test_env_rate_counts_steps_across_resets() -> None:
    assert env_steps_per_sec("FakePong-v0", seconds=0.2) > 0


def test_dense_reference_rate_survives_the_time_running_out_in_a_reset(monkeypatch) -> None:
    from pong_mp.tools import bench

    class SlowReset(gym.Wrapper):
        def reset(self, **kwargs):
            time.sleep(0.3)
            return self.env.reset(**kwargs)

    assert bench.dense_reference_rate("FakePong-v0", seconds=0.3, hidden=8) > 0
    monkeypatch.setattr(bench, "make_env", lambda env_id: SlowReset(make_env(env_id)))
    # The first reset takes the whole budget: no step is played, and no episode is summed.
    assert bench.dense_reference_rate("FakePong-v0", seconds=0.2, hidden=8) == 0.0


def test_compare_envs_alternates_rounds() -> None:
    rates = compare_envs(("FakePong-v0", SLOW_PONG), seconds=0.05, rounds=2)
    assert list(rates) == ["FakePong-v0", SLOW_PONG]
    assert all(len(r) == 2 for r in rates.values())
    # SlowPong sleeps 10 ms a step: it cannot reach 200 steps/s, FakePong easily does (in
    # its better round: one round of 0.05 s on a loaded machine measured 179).
    assert max(rates[SLOW_PONG]) < 200 < max(rates["FakePong-v0"])


def test_the_env_comparison_is_one_command_of_pong_mp_bench() -> None:
    done = pong_mp(
        "bench", "--compare-envs", "--env", SLOW_PONG, "--seconds", "1", "--rounds", "1",
        "--json",
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    rates = json.loads(done.stdout)
    assert list(rates) == [SLOW_PONG, "FakePong-v0"] and len(rates["FakePong-v0"]) == 1
    assert rates[SLOW_PONG][0] < 200 < rates["FakePong-v0"][0]
    same = pong_mp_here("bench", "--compare-envs", "--env", "FakePong-v0")
    assert same.returncode == 2 and "name another" in same.stderr


def test_format_env_comparison_gives_medians_and_the_ratio() -> None:
    text = format_env_comparison({"ALE/Pong-v5": [3000.0, 2900.0, 3100.0], "FakePong-v0": [
        90000.0, 95000.0, 93000.0]})
    assert text.splitlines() == [
        "ALE/Pong-v5       3,000 steps/s (median of 3 rounds)",
        "FakePong-v0      93,000 steps/s (median of 3 rounds)",
        "FakePong-v0 / ALE/Pong-v5: 31.0x",
    ]


def test_format_bench_shows_every_figure() -> None:
    results = {
        "env": "ALE/Pong-v5",
        "workers": 2,
        "raw_steps_per_sec": 8000.0,
        "raw_steps_per_sec_before_after": [8100.0, 7900.0],
        "raw_one_process_steps_per_sec": 4000.0,
        "reference_steps_per_sec": 1800.0,
        "reference_ratio": 0.45,
        "train_steps_per_sec": 7600.0,
        "train_ratio": 0.95,
        "train_updates": 12,
        "workers_busy": 0.934,
        "policy_lag": 1,
        "coordinator_share": 0.004,
        "peak_worker_rss_mb": 85.0,
        "episode_memory_mb_1k_steps": {"before": 56.0, "peak": 68.0, "added": 12.0},
        "episode_memory_mb_10k_steps": {"before": 56.0, "peak": 71.0, "added": 15.0},
    }
    text = format_bench(results)
    for figure in (
        "8,000 steps/s",
        "7,600 steps/s",
        "0.95x raw",
        "policy lag 1, entropy bonus 0, new weights",
        "workers busy 93% of the time",
        "0.45x one raw process",
        "0.40%",
        "85 MB",
        "68.0 MB at 1,000 steps",
        "71.0 MB at 10,000 steps (1.044x)",
        "adds 12.0 and 15.0 MB",
    ):
        assert figure in text
    results["episode_memory_mb_1k_steps"] = None
    results["peak_worker_rss_mb"] = None
    assert "n/a" in format_bench(results)


def test_episode_memory_measures_a_fresh_process() -> None:
    memory = episode_memory(200, TrainingSetup(hidden=8), repeats=1)
    assert memory is not None  # Linux CI
    assert 10 < memory["before"] < memory["peak"] < 1000


def test_episode_memory_is_that_of_the_learner_benched() -> None:
    # The actor-critic's worker keeps the episode it played for the passes (~0.5 MB a
    # thousand steps); Karpathy's learner folds its gradient in as it plays, in fixed memory.
    memory = {
        (learner, steps): episode_memory(steps, setup, repeats=1)
        for learner, setup in (("ppo", TrainingSetup(hidden=8)), ("pg", TrainingSetup(**PG)))
        for steps in (1_000, 20_000)
    }
    if None in memory.values():
        pytest.skip("needs Linux's /proc")
    grown = {learner: memory[learner, 20_000]["added"] - memory[learner, 1_000]["added"]
             for learner in ("ppo", "pg")}
    assert grown["ppo"] > 5.0 and grown["pg"] < 2.0, grown


def test_scaling_measures_every_worker_count_against_as_many_raw_processes(
    monkeypatch, clean_system
) -> None:
    from pong_mp.tools import bench

    raw_calls = []
    monkeypatch.setattr(
        bench,
        "raw_rate",
        lambda env, workers, seconds: raw_calls.append(workers) or 100.0 * workers,
    )
    monkeypatch.setattr(
        bench,
        "training_rate",
        lambda env, workers, seconds, setup: {
            "steps_per_sec": 90.0 * workers,
            "coordinator_share": 0.01,
            "workers_busy": 0.9,
            "updates": 2,
        },
    )
    rows = bench.run_scaling(3, 1.0, "FakePong-v0", bench.TrainingSetup(batch_size=6))
    assert raw_calls == [1, 1, 2, 2, 3, 3]  # before and after each training run
    assert [r["workers"] for r in rows] == [1, 2, 3]
    assert bench.worker_counts(16) == [1, 2, 4, 8, 16] and bench.worker_counts(6) == [1, 2, 4, 6]
    assert all(r["train_ratio"] == pytest.approx(0.9) and r["batch_size"] == 6 for r in rows)
    table = bench.format_scaling(rows)
    assert "| 3 | 300 | 270 | 0.90 | 3.00x |" in table


def test_scaling_runs_for_real_on_fakepong(clean_system) -> None:
    done = pong_mp(
        "bench",
        "--scaling",
        "--workers",
        "2",
        "--seconds",
        "1",
        "--env",
        "FakePong-v0",
        "--batch-size",
        "4",
        "--hidden",
        "16",
        "--channels",
        "4",
        "--json",
    )
    assert done.returncode == 0, done.stderr
    rows = json.loads(done.stdout)
    assert [r["workers"] for r in rows] == [1, 2]
    assert all(r["train_steps_per_sec"] > 0 and r["raw_steps_per_sec"] > 0 for r in rows)
    # A record names where it was made: another machine's figures are read with that.
    from pong_mp import sparse

    assert all(r["loops"] == sparse.BUILD and r["cpus"] >= 1 and "commit" in r for r in rows)


def test_the_simulation_measures_powers_of_two_up_to_the_workers_on_a_sleeping_env(
    monkeypatch,
) -> None:
    from pong_mp.tools import bench

    calls = []

    def fake_rate(env, workers, seconds, setup, env_kwargs):
        calls.append((env, workers, env_kwargs))
        return {"steps_per_sec": 100.0 * workers**0.5, "coordinator_share": 0.1,
                "play_share": 0.4, "workers_busy": 0.5, "cpu_busy": 0.9, "updates": 3}

    monkeypatch.setattr(bench, "training_rate", fake_rate)
    rows = bench.run_simulation(6, 1.0, 0.003, bench.TrainingSetup(batch_size=6))
    assert [c[1] for c in calls] == [1, 2, 4, 6]
    assert all(c[0] == "FakePong-v0" and c[2]["step_seconds"] == 0.003 for c in calls)
    assert rows[2]["speed_up"] == pytest.approx(2.0) and rows[2]["efficiency"] == 0.5
    assert "| 4 | 200 | 2.00x | 0.50 | 10% | 40% | 90% | 3 |" in bench.format_simulation(rows)


def test_sleeping_fakepong_steps_take_their_time() -> None:
    env = make_env("FakePong-v0", step_seconds=0.02)
    env.reset(seed=0)
    start = time.perf_counter()
    env.step(0)
    assert time.perf_counter() - start >= 0.02
    # Shorter steps sleep in runs, and a game's end sleeps what its steps still owe.
    env = make_env("FakePong-v0", step_seconds=0.003, points_to_win=1)
    env.reset(seed=0)
    start = time.perf_counter()
    steps, done = 0, False
    while not done:
        _, _, terminated, truncated, _ = env.step(0)
        steps, done = steps + 1, terminated or truncated
    assert time.perf_counter() - start >= 0.003 * steps
    with pytest.raises(ValueError, match="step_seconds"):
        make_env("FakePong-v0", step_seconds=-1.0)


def test_the_simulation_runs_for_real(clean_system) -> None:
    done = pong_mp(
        "bench", "--simulate", "0.001", "--workers", "2", "--seconds", "1",
        "--batch-size", "2", "--policy", "mlp", "--hidden", "8", "--json",
    )
    assert done.returncode == 0, done.stderr
    rows = json.loads(done.stdout)
    assert [r["workers"] for r in rows] == [1, 2]
    assert all(r["train_steps_per_sec"] > 0 for r in rows)
    assert rows[0]["env_kwargs"]["step_seconds"] == 0.001


def test_training_rate_starts_from_a_model_with_its_lag(
    fake_checkpoint, monkeypatch, clean_system
) -> None:
    import pong_mp.trainer as trainer
    from pong_mp.checkpoint import load_policy
    from pong_mp.tools import bench

    played = []
    original = trainer.updates

    def spy(config, state, backend):
        played.append((config.hidden, config.policy_lag, state.params.copy()))
        return original(config, state, backend)

    monkeypatch.setattr(trainer, "updates", spy)  # training_rate imports it when called
    setup = bench.TrainingSetup(**PG, batch_size=2, policy_lag=1, model=fake_checkpoint)
    rate = bench.training_rate("FakePong-v0", 2, 0.5, setup)
    params, _ = load_policy(fake_checkpoint)
    hidden, lag, start = played[0]
    assert (hidden, lag) == (8, 1) and np.array_equal(start, params)
    assert rate["updates"] >= 1 and rate["steps_per_sec"] > 0
    # Approximate at the window's ends: with the lag, an episode that a worker began before
    # the half-second window (a few updates) and reported in it counts whole.
    assert 0 < rate["workers_busy"] <= 1.5
    assert 0 < rate["play_share"] < 1  # pg's play: its episodes and their gradients
    assert rate["cpu_busy"] is None or 0 < rate["cpu_busy"] <= 1
    shares = rate["idle_shares"]
    assert set(shares) == {"barrier", "coordinator", "pipes", "other"}
    assert all(0 <= share <= 1 for share in shares.values())
    assert sum(shares.values()) == pytest.approx(1.0)
    assert shares["pipes"] > 0  # every episode's round trip takes some time


def test_the_bench_says_where_idle_time_goes() -> None:
    from pong_mp.tools import bench

    results = {
        "workers_busy": 0.9,
        "idle_shares": {"barrier": 0.6, "coordinator": 0.25, "pipes": 0.1, "other": 0.05},
    }
    assert bench._idle_line(results) == [
        "workers idle 10.0% of the time: batch barrier 60%, coordinator 25%, pipes 10%, "
        "other 5% of it"
    ]
    assert bench._idle_line({"workers_busy": 0.9}) == []  # results of older versions


def test_the_bench_says_how_an_update_splits_into_play_and_learning() -> None:
    from pong_mp.tools import bench

    assert bench._play_line({"play_share": 0.25}) == [
        "playing the batch: 25% of each update's wall time; learning from it 75%"
    ]
    assert bench._play_line({"play_share": 0.25, "cpu_busy": 0.6}) == [
        "playing the batch: 25% of each update's wall time; learning from it 75%; the "
        "machine's CPUs busy 60% of the time"
    ]
    assert bench._play_line({}) == []  # results of older versions


def test_cpu_busy_is_the_busy_share_of_all_cpu_time_between_two_readings() -> None:
    from pong_mp.tools import bench

    assert bench.cpu_busy((100, 400), (250, 600)) == pytest.approx(0.75)
    assert bench.cpu_busy(None, (250, 600)) is None  # no /proc/stat
    assert bench.cpu_busy((100, 400), (100, 400)) is None  # no time between them
    now = bench.cpu_ticks()
    if now is not None:  # Linux: busy ticks within all ticks, both counting up
        assert 0 <= now[0] <= now[1]
        sum(range(3_000_000))  # some CPU time
        later = bench.cpu_ticks()
        assert later is not None and later[1] >= now[1] and later[0] >= now[0]


def test_bench_names_a_bad_model_in_one_line(tmp_path) -> None:
    bad = tmp_path / "model.npz"
    bad.write_text("not a model")
    done = pong_mp_here("bench", "--env", "FakePong-v0", "--model", str(bad))
    assert done.returncode == 2
    assert done.stderr.count("\n") == 1 and "damaged checkpoint" in done.stderr


@pytest.mark.parametrize(
    ("mode", "where"),
    [
        ([], "in the raw runs"),
        (["--compare-envs", "--rounds", "1"], "in the raw runs"),
        (["--project", "--hidden", "8"], "as its episodes were measured"),
    ],
)
@pytest.mark.parametrize(
    ("env", "error"),
    [
        (CRASHING_PONG, "RuntimeError: CrashingPong: planned failure in episode 0"),
        (EXITING_PONG, "SystemExit: 0"),
    ],
)
def test_an_env_that_fails_as_bench_measures_it_is_one_line_and_its_traceback(
    mode: list[str], where: str, env: str, error: str, clean_system
) -> None:
    # The env fails in its first episode: in a raw run's process, or in this one for
    # --compare-envs and --project. Each used to end in a traceback of pong-mp's own; a
    # sys.exit(0) in a raw run's process, in a wait for ever, or in this one, in exit 0.
    done = pong_mp("bench", "--env", env, "--workers", "1", "--seconds", "1", *mode, timeout=60)
    assert done.returncode == 1, done.stderr
    first, *rest = done.stderr.splitlines()
    assert first == f"pong-mp: error: {env} failed {where}: {error}"
    assert done.stderr.count("Traceback") == 1  # the env's stack, for the user to debug it
    assert 'fault_envs.py", line' in done.stderr and rest[-1] == '"""'


SHIPPED = str(Path(__file__).resolve().parents[1] / "models" / "pong.npz")


@pytest.mark.parametrize(
    ("args", "said"),
    [
        (["--scaling", "--project"], "--scaling and --project are separate measurements"),
        (["--simulate", "0.002", "--scaling"], "--scaling and --simulate are separate"),
        (["--compare-envs", "--scaling"], "--scaling and --compare-envs are separate"),
        (["--seconds", "1e308"], "1e+308 is not in the range 1<=x<=86400"),
        (["--model", SHIPPED, "--hidden", "8"], "--model brings its own network: leave out --h"),
        (["--model", SHIPPED, "--policy", "mlp"], "its own network: leave out --policy"),
        (["--rounds", "2"], "--rounds counts the rounds of --compare-envs: give it with that"),
        (["--rounds", "2", "--scaling"], "--rounds counts the rounds of --compare-envs"),
    ],
)
def test_bench_refuses_what_it_cannot_measure_in_one_line(args: list[str], said: str) -> None:
    # --scaling --project used to run only the projection; 1e308 seconds, until stopped; a
    # model's own network replaced --hidden; --rounds alone was ignored
    done = pong_mp_here("bench", "--env", "FakePong-v0", *args)
    assert done.returncode == 2, done.stderr
    assert done.stderr.count("\n") == 1 and said in done.stderr, done.stderr


@pytest.mark.parametrize("how", ["SIGKILL", "Ctrl-C to the group"])
def test_a_stopped_bench_takes_its_stepping_processes_with_it(how: str) -> None:
    # Killed, they used to step on, orphaned, for the rest of --seconds; a terminal's Ctrl-C
    # printed a KeyboardInterrupt traceback from each.
    bench_run = start(
        "bench", "--env", "FakePong-v0", "--workers", "2", "--seconds", "600", group=True
    )
    deadline = time.monotonic() + 60
    while len(stepping := children_of(bench_run.pid)) < 3 and time.monotonic() < deadline:
        time.sleep(0.2)  # the pool's 2 processes and its resource tracker
    assert len(stepping) >= 3
    while sum(_ignores_sigint(p) for p in stepping) < 2 and time.monotonic() < deadline:
        time.sleep(0.2)  # the pool's processes started: a Ctrl-C then reaches them
    if how == "SIGKILL":
        bench_run.kill()
    else:
        os.killpg(bench_run.pid, signal.SIGINT)
        _, err = bench_run.communicate(timeout=30)
        assert (bench_run.returncode, err) == (130, "pong-mp: stopped by SIGINT\n")
    bench_run.wait()
    deadline = time.monotonic() + 10
    while (left := {p for p in stepping if running(p)}) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not left


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGHUP])
def test_a_stop_while_its_processes_start_is_kept_for_the_bench(
    monkeypatch: pytest.MonkeyPatch, signum: int
) -> None:
    # The bench's processes must start deaf to it; the bench must not be, as it was, even
    # where another thread (numpy's BLAS threads) takes the signal: with the bench ignoring
    # it meanwhile, that thread dropped it, and a Ctrl-C to its group was lost.
    from pong_mp import signals
    from pong_mp.tools import bench

    class Process:
        def __init__(self, **kwargs: object) -> None:
            self.started = False

        def start(self) -> None:
            assert signum in signal.pthread_sigmask(signal.SIG_BLOCK, [])  # what exec hands on
            assert signal.getsignal(signum) != signal.SIG_IGN
            signal_self(signum, settle=0.2)  # the other thread takes it
            self.started = True

        def is_alive(self) -> bool:
            return False

        def join(self) -> None:
            pass

    context = multiprocessing.get_context("spawn")
    monkeypatch.setattr(context, "Process", Process)
    with (
        another_thread(),
        pytest.raises(signals.Interrupted) as stop,
        signals.stop_signals_raise(),
        bench._processes([(print, ())]) as started,
    ):
        assert [process.started for process, _ in started] == [True]
        signals.check_stop()
    assert stop.value.signum == signum


_DEAF_FROM_THE_START = """
import signal
import time
from pathlib import Path
from pong_mp.tools import bench
deaf = (1 << (signal.SIGINT - 1)) | (1 << (signal.SIGHUP - 1))
with bench._processes([(time.sleep, (30,)), (time.sleep, (30,))]) as started:
    for process, _ in started:
        lines = Path(f"/proc/{process.pid}/status").read_text().splitlines()
        status = dict(line.split(":", 1) for line in lines)
        blocked, ignored = (int(status[k].split()[0], 16) for k in ("SigBlk", "SigIgn"))
        print((blocked | ignored) & deaf == deaf)
"""


def test_a_bench_processes_are_deaf_to_the_terminal_from_their_start() -> None:
    # Started with SIGINT and SIGHUP blocked (then ignored as they start), so that a Ctrl-C
    # to the group while they import prints no traceback from them. The resource tracker,
    # which multiprocessing starts as it makes its first lock, used to unblock SIGINT before
    # they were started. A new process: its first processes start the tracker.
    done = subprocess.run(
        [sys.executable, "-c", _DEAF_FROM_THE_START], capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["True", "True"]


@pytest.mark.parametrize(
    ("call", "said"),
    [
        ((sys.exit, (0,)), "a bench process failed: SystemExit: 0"),
        ((os._exit, (3,)), "a bench process failed: its process died (exit code 3)"),
        ((signal.raise_signal, (signal.SIGKILL,)), "its process died (exit code -9)"),
    ],
)
def test_a_bench_process_that_exits_or_dies_is_an_error_not_a_wait_for_ever(
    call: tuple, said: str
) -> None:
    # multiprocessing's Pool replaced such a process and waited for its answer for ever; a
    # stop signal then hung in the pool's terminate. Beside it, another process's answer.
    from pong_mp.tools import bench

    with bench._processes([(time.sleep, (60,)), call]) as started:
        with pytest.raises(WorkerError) as failed:
            bench._answers(started)
        assert str(failed.value).endswith(said)
    assert not any(process.is_alive() for process, _ in started)  # the sleeper too
    with bench._processes([(abs, (-2,)), (abs, (-3,))]) as started:
        assert bench._answers(started) == [2, 3]


def _ignores_sigint(pid: int) -> bool:
    with contextlib.suppress(OSError, StopIteration):
        status = Path(f"/proc/{pid}/status").read_text().splitlines()
        ignored = next(line for line in status if line.startswith("SigIgn:"))
        return bool(int(ignored.split()[1], 16) & (1 << (signal.SIGINT - 1)))
    return False


def test_bench_trains_with_the_entropy_bonus_and_reports_it(monkeypatch, clean_system) -> None:
    import pong_mp.trainer as trainer
    from pong_mp.tools import bench

    seen = []
    original = trainer.updates

    def spy(config, state, backend):
        seen.append(config.entropy_bonus)
        return original(config, state, backend)

    monkeypatch.setattr(trainer, "updates", spy)
    monkeypatch.setattr(bench, "raw_rate", lambda env, workers, seconds: 1000.0)
    monkeypatch.setattr(bench, "dense_reference_rate", lambda env, seconds: 100.0)
    memory = []
    monkeypatch.setattr(
        bench,
        "episode_memory",
        lambda steps, setup=None, repeats=3: memory.append(setup.entropy_bonus) or None,
    )
    setup = bench.TrainingSetup(**{**PG, "entropy_bonus": 0.25}, batch_size=1)
    results = bench.run_bench(1, 0.2, "FakePong-v0", setup)
    assert seen == [0.25] and memory == [0.25, 0.25]
    assert results["entropy_bonus"] == 0.25 and results["batch_size"] == 1
    assert "entropy bonus 0.25" in bench.format_bench(results)
    done = pong_mp_here("bench", "--env", "FakePong-v0", "--entropy-bonus", "-11")
    assert done.returncode == 2 and done.stderr.count("\n") == 1


def test_the_entropy_bonus_adds_its_sum_to_a_workers_episode_memory() -> None:
    from pong_mp.tools import bench

    plain = bench.episode_memory(1_000, TrainingSetup(**{**PG, "entropy_bonus": 0.0},
                                                      hidden=100), repeats=1)
    bonus = bench.episode_memory(1_000, TrainingSetup(**{**PG, "entropy_bonus": 0.1},
                                                      hidden=100), repeats=1)
    if plain is None or bonus is None:
        pytest.skip("needs Linux's /proc")
    # The third sum E: 100 x 6,401 float64, 5.1 MB.
    assert 4.0 < bonus["peak"] - plain["peak"] < 7.0


def test_bench_trains_with_the_defaults_of_train_the_actor_critic_on_conv(
    monkeypatch, clean_system
) -> None:
    import pong_mp.trainer as trainer
    from pong_mp.tools import bench

    seen = []
    original = trainer.updates

    def spy(config, state, backend):
        head = policy.value_head(state.params, config.shape)
        seen.append(
            (
                config.algo, config.optimizer, config.policy, head is not None,
                config.epochs, config.minibatches,
            )
        )
        return original(config, state, backend)

    monkeypatch.setattr(trainer, "updates", spy)
    monkeypatch.setattr(bench, "raw_rate", lambda env, workers, seconds: 1000.0)
    monkeypatch.setattr(bench, "dense_reference_rate", lambda env, seconds: 100.0)
    monkeypatch.setattr(bench, "episode_memory", lambda *args, **kwargs: None)
    results = bench.run_bench(1, 0.2, "FakePong-v0", bench.TrainingSetup(batch_size=1))
    assert seen == [("ppo", "adam", "conv", True, 4, 16)]
    assert results["algo"] == "ppo" and results["policy"] == "conv"
    assert results["train_updates"] >= 1
    assert "ppo with adam, 4 passes of 16 minibatches" in bench.format_bench(results)
    # One worker played every episode: every pass went without its trajectory.
    assert results["passes_light_share"] == 1.0
    assert "passes sent without their trajectory: 100%" in bench.format_bench(results)
    more = bench.TrainingSetup(batch_size=1, epochs=2, minibatches=16)
    results = bench.run_bench(1, 0.2, "FakePong-v0", more)
    assert seen[-1][-2:] == (2, 16) and (results["epochs"], results["minibatches"]) == (2, 16)
    assert "2 passes of 16 minibatches" in bench.format_bench(results)


def test_bench_takes_a_preset_where_its_options_are_not_given(monkeypatch) -> None:
    from pong_mp import cli

    seen = []
    monkeypatch.setattr(
        cli, "run_bench", lambda workers, seconds, env, setup: seen.append(setup) or {}
    )
    monkeypatch.setattr(cli, "format_bench", lambda results: "")
    for args in (["--preset", "pg"], ["--preset", "pg", "--optimizer", "adam"]):
        done = pong_mp_here("bench", "--env", "FakePong-v0", *args)
        assert done.returncode == 0, done.stderr
    for args in (["--minibatches", "16"], ["--preset", "ppo", "--minibatches", "16"]):
        done = pong_mp_here("bench", "--env", "FakePong-v0", *args)
        assert done.returncode == 0, done.stderr
    pg, adam, passes, ppo = seen
    assert (pg.algo, pg.optimizer, pg.entropy_bonus, pg.policy) == ("pg", "rmsprop", 0.0, "mlp")
    assert (adam.algo, adam.optimizer, adam.policy) == ("pg", "adam", "mlp")
    assert (passes.algo, passes.epochs, passes.minibatches) == ("ppo", 4, 16)
    assert (ppo.algo, ppo.policy, ppo.minibatches) == ("ppo", "mlp", 16)  # given beats preset


def test_bench_refuses_a_mix_train_refuses_before_it_measures(tmp_path) -> None:
    for args, says in (
        (["--algo", "pg"], "--policy conv works with --algo ppo"),
        (["--policy-lag", "1"], "--algo ppo works with --policy-lag 0"),
    ):
        done = pong_mp_here("bench", "--env", "FakePong-v0", "--seconds", "30", *args)
        assert done.returncode == 2 and done.stderr.count("\n") == 1, done.stderr
        assert says in done.stderr
