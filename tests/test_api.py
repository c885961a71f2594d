"""The Python API: pong_mp.train and pong_mp.Agent, used as a script or a notebook would."""

from __future__ import annotations

import json
import re
import signal
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import numpy as np
import pytest

import pong_mp
from pong_mp import checkpoint, policy
from pong_mp.config import ConfigError
from pong_mp.envs import make_env
from pong_mp.frames import BinaryInputs
from tests.fault_envs import SLOW_PONG
from tests.helpers import assert_agent_acts_as

SMALL = dict(env="FakePong-v0", env_arg={"points_to_win": 2}, batch_size=2, hidden=8)


def test_train_returns_the_state_and_resumes(tmp_path: Path, clean_system) -> None:
    state = pong_mp.train(tmp_path / "R", batches=2, workers=2, progress=False, **SMALL)
    assert (state.batch, state.episodes) == (2, 4) and state.running_reward is not None
    config = json.loads((tmp_path / "R" / "config.json").read_text())
    assert (config["hidden"], config["workers"]) == (8, 2)
    assert config["env_kwargs"] == {"points_to_win": 2}
    state = pong_mp.train(tmp_path / "R", resume=True, batches=3, progress=False)
    assert state.batch == 3
    # The same run through the trainer in one go gives the same weights.
    whole = pong_mp.train(tmp_path / "W", batches=3, backend="serial", progress=False, **SMALL)
    assert whole.params.tobytes() == state.params.tobytes()


def test_a_fork_keeps_its_runs_algorithm_but_for_the_options_given(tmp_path: Path) -> None:
    pong_mp.train(tmp_path / "A", batches=1, seed=3, backend="serial", progress=False, **SMALL)
    state = pong_mp.train(
        tmp_path / "B", fork_from=str(tmp_path / "A"), lr=0.002, batches=2, backend="serial",
        progress=False,
    )
    config = json.loads((tmp_path / "B" / "config.json").read_text())
    assert (config["seed"], config["hidden"], config["lr"], state.batch) == (3, 8, 0.002, 2)


def test_train_takes_presets_and_refuses_unknown_options(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="unknown options: batch, env_kwargs"):
        pong_mp.train(tmp_path / "R", batch=3, env_kwargs={})
    with pytest.raises(ConfigError, match="--lr must be > 0"):
        pong_mp.train(tmp_path / "R", lr=-1.0, **SMALL)
    with pytest.raises(ConfigError, match=r"^env_arg must be a dict of env arguments, not \["):
        pong_mp.train(tmp_path / "R", **{**SMALL, "env_arg": ["a"]})
    for flag in ("resume", "progress"):  # progress="no" showed the bar
        with pytest.raises(ConfigError, match=rf"^{flag} must be True or False, not 'no'$"):
            pong_mp.train(tmp_path / "R", **{**SMALL, flag: "no"})
    raised: list[BaseException] = []

    def in_a_thread() -> None:
        try:
            pong_mp.train(tmp_path / "R", **SMALL)
        except BaseException as exc:  # what was raised, for the test to look at
            raised.append(exc)

    thread = threading.Thread(target=in_a_thread)
    thread.start()
    thread.join(timeout=60)
    assert len(raised) == 1 and isinstance(raised[0], ConfigError), raised
    assert str(raised[0]).startswith("pong_mp.train runs in the main thread only")
    assert not (tmp_path / "R").exists()
    pong_mp.train(
        tmp_path / "K", preset="karpathy", env="FakePong-v0", env_arg={"points_to_win": 1},
        batches=1, backend="serial", progress=False,
    )
    config = json.loads((tmp_path / "K" / "config.json").read_text())
    assert (config["lr"], config["hidden"], config["batch_size"]) == (1e-4, 200, 10)


def _script(tmp_path: Path, body: str) -> Path:
    path = tmp_path / "script.py"
    path.write_text(textwrap.dedent(body))
    return path


def test_numpy_numbers_and_paths_are_the_plain_values_they_hold(tmp_path: Path) -> None:
    # A notebook's values: numpy scalars and arrays (a sweep's np.arange), pathlib paths.
    serial = dict(SMALL, backend="serial", progress=False)
    plain = pong_mp.train(tmp_path / "A", batches=1, **serial)
    serial["batch_size"] = np.int64(2)
    serial["env_arg"] = {"points_to_win": np.int64(2)}  # refused as "not JSON"
    typed = pong_mp.train(
        tmp_path / "B", batches=np.int32(1), lr=np.float64(1e-3),
        entropy_drop_at=np.array([1e9]), entropy_drop_to=(np.float64(0.0),), **serial,
    )  # fmt: skip
    assert typed.params.tobytes() == plain.params.tobytes()
    config = json.loads((tmp_path / "B" / "config.json").read_text())
    assert (config["batch_size"], config["entropy_drop_at"]) == (2, [1e9])
    fork = pong_mp.train(tmp_path / "F", fork_from=tmp_path / "A", batches=2, progress=False)
    assert fork.batch == 2
    for run_dir, options, message in (
        (tmp_path / "C", {"fork_from": b"runs/a"}, "fork_from must be a string or null, not b'"),
        (tmp_path / "C", {"hidden": {8}}, "hidden must be a whole number, not {8}"),
        (tmp_path / "C", {"preset": ["pg"]}, "preset must be a preset's name, not ['pg']"),
        (5, {}, "run_dir must be a path, not 5"),
    ):
        with pytest.raises(ConfigError, match=re.escape(message)):
            pong_mp.train(run_dir, progress=False, **options)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["A", "B", "F"]


class _BytesPath:
    """A path whose __fspath__ gives bytes, which pathlib refuses."""

    def __fspath__(self) -> bytes:
        return b"runs/a"


def _nested(levels: int) -> object:
    value: object = 1
    for _ in range(levels):
        value = [value]
    return value


def test_values_no_run_could_hold_are_config_errors(tmp_path: Path) -> None:
    # Each one reached a RecursionError, a ValueError of Python's own limits, or a run that
    # config.json could not read back.
    for run_dir, options, error, message in (
        (tmp_path / "C", {"env_arg": {"x": _nested(5000)}}, ConfigError,
         "--env-arg values nest more than 30 levels deep"),
        (tmp_path / "C", {"env_arg": {"x": _nested(31)}}, ConfigError,
         "--env-arg values nest more than 30 levels deep"),
        (tmp_path / "C", {"seed": 10**5000}, ConfigError,
         "seed must be a whole number, not a number of 16,610 bits, past 2**1024"),
        (tmp_path / "C", {"batches": 2**20000}, ConfigError,
         "batches must be a whole number or null, not a number of 20,001 bits, past 2**1024"),
        (tmp_path / "a\0b", {}, ConfigError, "run_dir must be a path, not "),
        (_BytesPath(), {}, ConfigError, "run_dir must be a path, not b'runs/a'"),
        (tmp_path / ("x" * 300), {}, pong_mp.FileError,
         f"{str(tmp_path / ('x' * 300))[:40]}...{'x' * 18}/config.json: path "
         f"too long for the file system ({len(str(tmp_path)) + 313} characters)"),
    ):  # fmt: skip
        with pytest.raises(error, match=re.escape(message)):
            pong_mp.train(run_dir, progress=False, **{**SMALL, **options})
    assert list(tmp_path.iterdir()) == []


def test_the_errors_the_api_raises_are_the_packages_names(tmp_path: Path, monkeypatch) -> None:
    # `except pong_mp.ConfigError` in a notebook, as the docs name them.
    import multiprocessing

    from pong_mp.backends.base import BackendUnavailable, MainGuardError
    from pong_mp.checkpoint import CheckpointError
    from pong_mp.files import FileError
    from pong_mp.rundir import RunDirError

    for error in (ConfigError, RunDirError, CheckpointError, FileError, MainGuardError,
                  BackendUnavailable):  # fmt: skip
        assert getattr(pong_mp, error.__name__) is error and error.__name__ in pong_mp.__all__
    # A daemon (a multiprocessing.Pool's worker) may start no process: multiprocessing
    # asserted it, a bare AssertionError.
    monkeypatch.setattr(multiprocessing.current_process(), "daemon", True)
    with pytest.raises(BackendUnavailable, match=r"^this process is a daemon \(a multi"):
        pong_mp.train(tmp_path / "R", progress=False, batches=1, **SMALL)
    assert list(tmp_path.iterdir()) == []


def test_the_bar_needs_a_stderr_that_takes_writes_and_the_run_goes_on_without_one(
    tmp_path: Path, monkeypatch
) -> None:
    # A script run with 2>&- has no sys.stderr; a closed one made tqdm raise as it started.
    import io

    closed = io.StringIO()
    closed.close()
    for name, stderr in (("none", None), ("closed", closed)):
        monkeypatch.setattr(sys, "stderr", stderr)
        state = pong_mp.train(tmp_path / name, batches=1, backend="serial", **SMALL)
        assert state.batch == 1


def test_a_script_without_a_main_guard_gets_one_clear_message(
    tmp_path: Path, clean_system
) -> None:
    script = _script(
        tmp_path,
        f"""
        import pong_mp
        pong_mp.train({str(tmp_path / "R")!r}, env="FakePong-v0", batches=1, workers=2,
                      batch_size=2, hidden=8, progress=False)
        """,
    )
    done = subprocess.run(
        [sys.executable, str(script)], capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 1
    last = done.stderr.strip().splitlines()[-1]
    assert last.startswith("pong_mp.backends.base.MainGuardError: worker processes run ")
    assert 'put the training call under `if __name__ == "__main__":`' in last
    assert "WorkerError" not in done.stderr


def test_a_script_read_from_stdin_trains_on_worker_processes(
    tmp_path: Path, clean_system
) -> None:
    # `python - < script.py`, or a heredoc: its __main__.__file__ is "<stdin>", which a
    # spawned worker would try to run again as a file.
    source = textwrap.dedent(
        f"""
        import pong_mp
        state = pong_mp.train({str(tmp_path / "R")!r}, env="FakePong-v0", batches=1, workers=2,
                              batch_size=2, hidden=8, progress=False)
        print("update", state.batch)
        """
    )
    done = subprocess.run(
        [sys.executable, "-"], input=source, capture_output=True, text=True, timeout=120,
        cwd=tmp_path,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "update 1" and "Traceback" not in done.stderr


def test_ctrl_c_saves_the_checkpoint_and_raises_keyboard_interrupt(
    tmp_path: Path, clean_system
) -> None:
    run_dir = tmp_path / "R"
    script = _script(
        tmp_path,
        f"""
        import pong_mp
        if __name__ == "__main__":
            try:
                pong_mp.train({str(run_dir)!r}, env={SLOW_PONG!r},
                              env_arg={{"delay": 0.002, "points_to_win": 3}}, batch_size=2,
                              hidden=8, workers=1, checkpoint_every=1000, progress=False)
            except KeyboardInterrupt as exc:
                print("KeyboardInterrupt:", exc)
        """,
    )
    proc = subprocess.Popen(
        [sys.executable, str(script)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    deadline = time.monotonic() + 90
    while not (run_dir / "metrics.jsonl").exists() or not (run_dir / "metrics.jsonl").read_text():
        assert time.monotonic() < deadline and proc.poll() is None
        time.sleep(0.05)
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 0, err
    saved = checkpoint.load(run_dir / "checkpoint.npz")[0].batch
    assert saved >= 1
    assert f"KeyboardInterrupt: stopped by SIGINT; checkpoint saved at update {saved}" in out
    assert "resume=True" in out


@pytest.fixture(scope="module")
def shipped() -> Path:
    return Path(__file__).resolve().parents[1] / "models" / "pong.npz"


def test_agent_acts_like_the_training_policy(fake_checkpoint: Path) -> None:
    agent = pong_mp.Agent.load(fake_checkpoint, seed=0)
    params, config = checkpoint.load_policy(fake_checkpoint)
    assert_agent_acts_as(agent, params, checkpoint.stored_shape(config), 50)
    assert agent.config["env"] == "FakePong-v0"


@pytest.mark.parametrize("channels", [0, 4], ids=["mlp", "conv"])
def test_the_agents_probabilities_are_the_bits_training_computes(channels: int) -> None:
    shape = policy.NetShape(8, channels)
    params = policy.init_params(shape, 5)
    agent = pong_mp.Agent(params, shape, seed=0)
    weights = policy.Weights32.from_params(params, shape)
    forward = policy.SparseForward(shape)
    stream = BinaryInputs()
    env = make_env("FakePong-v0", points_to_win=1)
    obs, _ = env.reset(seed=3)
    agent.reset()
    stream.reset(obs)
    p_up = agent.probability_up(obs)
    assert p_up == forward.p_up(weights, np.zeros(0, np.int32), np.zeros(0, np.float32))
    for _ in range(40):
        obs, *_ = env.step(policy.UP if p_up >= 0.5 else policy.DOWN)
        p_up = agent.probability_up(obs)
        assert p_up == forward.p_up(weights, *stream.step(obs))


def test_agent_refuses_what_is_not_a_pong_frame(fake_checkpoint: Path) -> None:
    agent = pong_mp.Agent.load(fake_checkpoint, seed=0)
    for observation, what in (
        (None, "None"),
        (np.zeros((210, 160)), "float64 (210, 160)"),
        (np.zeros((100, 100, 3), np.uint8), "uint8 (100, 100, 3)"),  # once taken as a first frame
        ((np.zeros((210, 160, 3), np.uint8), {}), "a tuple of 2 (reset() returns the frame first)"),
    ):
        message = f"uint8 array (ALE's Pong observations), not {what}"
        with pytest.raises(ValueError, match=re.escape(message)):
            agent.act(observation)
    assert agent.act(np.zeros((210, 160, 3), np.uint8)) in (2, 3)
    masked = np.ma.masked_array(np.ones((210, 160, 3), np.uint8))  # failed in the loops
    assert agent.act(masked) in (2, 3)


def test_agent_samples_both_actions_and_refuses_bad_files(tmp_path: Path) -> None:
    shape = policy.NetShape(8)
    params = policy.init_params(shape, 0)
    policy.split(params, shape)[1][:] = 0.0  # p(UP) = 0.5 on every frame
    agent = pong_mp.Agent(params, shape, seed=1)
    frame = np.zeros((210, 160, 3), np.uint8)
    assert {agent.act(frame) for _ in range(50)} == {policy.UP, policy.DOWN}
    with pytest.raises(checkpoint.CheckpointError, match="no such checkpoint"):
        pong_mp.Agent.load(tmp_path / "missing.npz")
    for path in (None, b"m.npz", 3):
        with pytest.raises(checkpoint.CheckpointError, match=r"^a model is named by its path"):
            pong_mp.Agent.load(path)  # type: ignore[arg-type]
    for seed in ("x", -1, 1.5, True):
        with pytest.raises(ValueError, match=r"^seed must be a whole number >= 0 or None"):
            pong_mp.Agent(params, shape, seed=seed)  # type: ignore[arg-type]
    pong_mp.Agent(params, shape, seed=np.int64(3))


@pytest.mark.ale
def test_the_shipped_agent_plays_gymnasiums_own_pong(shipped: Path) -> None:
    env = make_env("ALE/Pong-v5")
    agent = pong_mp.Agent.load(shipped, seed=0)
    obs, _ = env.reset(seed=0)
    agent.reset()
    points = []
    while len(points) < 4:  # the first points of a game: the agent returns the ball
        obs, reward, terminated, truncated, _ = env.step(agent.act(obs))
        if reward:
            points.append(reward)
        assert not (terminated or truncated)
    env.close()
    assert points.count(1.0) >= 1, points
