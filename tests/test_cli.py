"""The command line, run as a user runs it: a real process, real signals, real files. Input
refused before any work starts is run in this process (`pong_mp_here`), as a notebook runs it:
the same code and output, without a new process's half second of imports."""

from __future__ import annotations

import contextlib
import io
import json
import logging
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from pong_mp import checkpoint, policy
from tests.fault_envs import SLOW_PONG
from tests.helpers import METRIC_FIELDS, checkpoint_weights, pong_mp, pong_mp_here

SMALL = (
    "--env FakePong-v0 --hidden 16 --channels 4 --batch-size 4 --batches 3 --seed 1 "
    "--env-arg points_to_win=3"
).split()  # the default learner on a small net: the commands' work, not the net's, is tested


def test_train_writes_the_run_directory(tmp_path: Path, clean_system) -> None:
    run_dir = tmp_path / "R"
    done = pong_mp(
        *"train --env FakePong-v0 --workers 2 --batch-size 4 --batches 3 --seed 1".split(),
        *"--env-arg points_to_win=3 --run-dir".split(),  # short games: the defaults' net
        str(run_dir),
    )
    assert done.returncode == 0, done.stderr
    config = json.loads((run_dir / "config.json").read_text())
    # The defaults: the actor-critic on the convolutional policy.
    assert (config["seed"], config["algo"], config["policy"]) == (1, "ppo", "conv")
    records = [json.loads(x) for x in (run_dir / "metrics.jsonl").read_text().splitlines()]
    assert len(records) == 3
    ppo_fields = {"entropy_bonus", "value_loss", "clip_fraction", "approx_kl"}
    for r in records:
        assert set(r) >= METRIC_FIELDS | ppo_fields
        assert r["entropy_bonus"] == 0.01
    with np.load(run_dir / "checkpoint.npz", allow_pickle=False) as npz:
        assert npz["W1"].shape == (200, policy.NetShape(200, 16).rows) and npz["W2"].shape == (200,)
        assert npz["conv"].shape == (policy.CONV_SIZE, policy.CONV_SIZE, 16)
        for key in ("W1", "W2", "conv", "value"):
            assert np.all(np.isfinite(npz[key])), key
    out = done.stdout.splitlines()
    assert len([line for line in out if line.startswith("batch ")]) == 3
    assert out[-1].startswith("pong-mp: done: 3 updates, 12 episodes")


def test_worker_counts_and_serial_give_the_same_bytes(tmp_path: Path, clean_system) -> None:
    runs = {"w1": ["--workers", "1"], "w3": ["--workers", "3"], "serial": ["--backend", "serial"]}
    for name, extra in runs.items():
        done = pong_mp("train", *SMALL, *extra, "--run-dir", str(tmp_path / name))
        assert done.returncode == 0, done.stderr
    weights = {name: checkpoint_weights(tmp_path / name) for name in runs}
    assert weights["w1"] == weights["w3"] == weights["serial"]


@pytest.mark.ale
def test_train_on_real_pong(tmp_path: Path, clean_system) -> None:
    done = pong_mp(
        *"train --env ALE/Pong-v5 --workers 2 --batch-size 2 --batches 1".split(),
        "--run-dir",
        str(tmp_path / "R"),
    )
    assert done.returncode == 0, done.stderr
    record = json.loads((tmp_path / "R" / "metrics.jsonl").read_text())
    assert record["steps"] > 500 and record["episodes"] == 2
    assert "A.L.E" not in done.stderr  # the emulator's banner is silenced


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--workers", "0"], "--workers must be >= 1"),
        (["--batch-size", "-1"], "--batch-size must be >= 1"),
        (["--env", "Nope-v0"], "unknown env id 'Nope-v0'"),
        (["--lr", "-1"], "--lr must be > 0"),
        (["--workers", "two"], "'two' is not a valid integer"),
        (["--backend", "gpu"], "'gpu' is not one of"),
        (["--env-arg", "nonsense"], "is not KEY=VALUE"),
        (["--resume"], "nothing to resume"),
        (["--preset", "fast"], "'fast' is not one of 'batch16', 'karpathy', 'pg', 'ppo'"),
        (["--lr", "inf"], "--lr must be a finite number"),
        (["--lr-drop-at", "-5"], "--lr-drop-at must be env steps > 0 in increasing order"),
        (["--lr-drop-at", "2e6,1e6"], "--lr-drop-at must be env steps > 0 in increasing order"),
        (["--lr-drop-to", "0"], "--lr-drop-to must be > 0 and at most 1"),
        (["--entropy-bonus", "-11"], "--entropy-bonus must be between -10 and 10"),
        (["--entropy-drop-at", "0,5"], "--entropy-drop-at must be env steps > 0 in increasing"),
        (["--entropy-drop-at", "1e6,1e6"], "--entropy-drop-at must be env steps > 0 in"),
        (["--entropy-drop-at", "1e6,x"], "'1e6,x' is not a number or comma-separated numbers"),
        (
            ["--entropy-drop-at", "4e6,6e6"],
            "--entropy-drop-to needs one value for each --entropy-drop-at point: 2 points "
            "(4e6,6e6), 3 values (-0.03,0,-0.1); give both",
        ),
        (
            ["--lr-drop-at", "4e6", "--lr-drop-to", "3e-4,1e-4"],
            "--lr-drop-to needs one value for each --lr-drop-at point: 1 point (4e6), 2 values",
        ),
        (["--entropy-drop-to", "0,0,11"], "--entropy-drop-to must be between -10 and 10"),
        (["--entropy-drop-to", "-11,0,0"], "--entropy-drop-to must be between -10 and 10"),
        (
            ["--preset", "pg", "--entropy-drop-at", "1e6", "--entropy-drop-to", "-0.1"],
            "--entropy-drop-at 1e6 works with --algo ppo only",
        ),
        (["--advantage", "batch"], "pong-mp no longer has --advantage; the code of commit"),
        (["--run-dir", " "], "--run-dir must name a directory"),
        (["--workers", "100000"], "--workers must be at most"),
        (["--hidden", "1000000"], "--hidden must be between 1 and 4096"),
        (["--env", "ALE/Breakout-v5"], "ALE/Breakout-v5 is not Pong"),
        (["--env", "CartPole-v1"], "CartPole-v1 is not Pong"),
        (["--env", "ALE/Pong-v5", "--env-arg", "foo=1"], "cannot be made with foo=1"),
        (["--env-arg", "points_to_win=x"], "FakePong-v0 cannot be made with points_to_win='x'"),
        (["--env-arg", "fast=maybe"], "fast must be true or false"),
        (["--optimizer", "sgd"], "'sgd' is not one of"),
        (["--conv-layers", "2"], "pong-mp no longer has --conv-layers; the code of commit"),
        (["--target-reward", "high"], "'high' is not a valid float"),
        # blank, it used to train locally; a bad port failed after the banner
        (["--ray-address", ""], "--ray-address must be HOST:PORT"),
        (["--ray-address", "10.0.0.5:99999"], "--ray-address must be HOST:PORT"),
    ],
)
def test_bad_input_is_one_line_and_writes_nothing(
    tmp_path: Path, args: list[str], message: str
) -> None:
    run_dir = tmp_path / "R"
    done = pong_mp_here("train", "--env", "FakePong-v0", "--run-dir", str(run_dir), *args)
    assert done.returncode == 2
    assert done.stderr.count("\n") == 1 and "Traceback" not in done.stderr
    assert done.stderr.startswith("pong-mp: error: ") and message in done.stderr
    assert not run_dir.exists()


def test_commands_run_in_one_process_say_each_warning_once_where_stderr_is_now() -> None:
    # A notebook (or a test) runs commands in its own process: each command added a handler,
    # which said every later warning again, to the stderr of the command that added it.
    for _ in range(2):
        pong_mp_here("train", "--lr", "nan")
    said = io.StringIO()
    with contextlib.redirect_stderr(said):
        logging.getLogger("pong_mp.backends").warning("a worker replaced")
    assert said.getvalue() == "pong-mp: a worker replaced\n"


def test_preset_karpathy_stores_pg_pong_and_options_beside_it_win(
    tmp_path: Path, clean_system
) -> None:
    small = "--env FakePong-v0 --env-arg points_to_win=1 --batches 1 --backend serial".split()
    done = pong_mp("train", *small, "--preset", "karpathy", "--run-dir", str(tmp_path / "K"))
    assert done.returncode == 0, done.stderr
    config = json.loads((tmp_path / "K" / "config.json").read_text())
    assert (config["optimizer"], config["lr"], config["batch_size"], config["hidden"]) == (
        "rmsprop", 1e-4, 10, 200,
    )
    assert (config["decay_rate"], config["policy_lag"]) == (0.99, 0)
    assert config["entropy_bonus"] == 0
    assert (config["lr_drop_at"], config["entropy_drop_at"]) == ([], [])  # no drop
    done = pong_mp(
        "train", *small, "--preset", "karpathy", "--lr", "3e-4", "--run-dir", str(tmp_path / "L")
    )
    assert done.returncode == 0, done.stderr
    config = json.loads((tmp_path / "L" / "config.json").read_text())
    assert (config["lr"], config["batch_size"]) == (3e-4, 10)


def test_target_reward_ends_the_run_with_exit_0(tmp_path: Path, clean_system) -> None:
    run_dir = tmp_path / "R"
    # FakePong's running reward is never below -3 in 3-point games: reached at update 1.
    done = pong_mp(
        "train", *SMALL, "--workers", "1", "--target-reward", "-3", "--run-dir", str(run_dir)
    )
    assert done.returncode == 0, done.stderr
    assert "pong-mp: done: target -3 reached; 1 updates" in done.stdout
    assert checkpoint.load(run_dir / "checkpoint.npz")[0].batch == 1


def test_export_and_bench_refuse_bad_targets_in_one_line(
    fake_checkpoint: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)  # where a file named "-" would go
    done = pong_mp_here("export", str(fake_checkpoint), str(tmp_path))
    assert done.returncode == 2 and "is a directory" in done.stderr
    done = pong_mp_here("export", str(fake_checkpoint), str(tmp_path / "no" / "m.npz"))
    assert done.returncode == 2 and "No such file or directory" in done.stderr
    done = pong_mp_here("export", str(fake_checkpoint), "-")  # not standard output: a file "-"
    assert done.returncode == 2 and done.stderr == (
        "pong-mp: error: -: a model file is .npz; name one that ends with .npz\n"
    )
    done = pong_mp_here("bench", "--env", "CartPole-v1")
    assert done.returncode == 2 and "CartPole-v1 is not Pong" in done.stderr
    for run in (done,):
        assert run.stderr.count("\n") == 1 and "Traceback" not in run.stderr
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize(
    "args",
    [
        ["bench", "--seconds", "nan"],
        ["bench", "--entropy-bonus", "inf"],
        ["plot", "RUN", "--rate", "nan"],
        ["plot", "RUN", "--max-steps", "inf"],
        ["plot", "RUN", "--min-steps", "nan"],
    ],
)
def test_numbers_that_are_not_finite_are_one_line(args: list[str]) -> None:
    # nan passes every range check (it compares false); it must not reach a measurement
    # that never ends or a table of "nan min".
    done = pong_mp_here(*args)
    assert done.returncode == 2 and done.stderr.count("\n") == 1, done.stderr
    # (bench's training options say it as train does: "--entropy-bonus must be a finite
    # number")
    assert "finite number" in done.stderr and done.stdout == ""


def test_no_arguments_shows_the_help() -> None:
    done = pong_mp()
    assert done.returncode == 0 and done.stdout.startswith("Usage: pong-mp [OPTIONS] COMMAND")
    assert "train" in done.stdout and done.stderr == ""
    done = pong_mp("train", "--help")
    assert "Examples:" in done.stdout and "ALE/Pong-v5" in done.stdout
    assert "CHECKPOINT|MODEL" in pong_mp("play", "--help").stdout


def test_train_help_shows_at_most_32_options_group_by_group() -> None:
    import dataclasses

    from pong_mp import cli
    from pong_mp.config import OPTION_GROUPS, TrainConfig

    help_text = pong_mp_here("train", "--help").stdout
    headings = [line for line in help_text.splitlines() if line.endswith(" options:")]
    assert headings == [f"{group.capitalize()} options:" for group in OPTION_GROUPS]
    options = [param for param in cli.train_command.params if isinstance(param, cli.click.Option)]
    assert len(options) <= 32
    assert {param.group for param in options} == set(OPTION_GROUPS)
    fields = dataclasses.fields(TrainConfig)
    assert all(f.metadata["group"] in OPTION_GROUPS for f in fields)
    # The everyday ones first: a run's options lead, with --resume and --preset on top.
    run = help_text.split("Run options:")[1].split("Learner options:")[0]
    assert run.index("\n  --resume") < run.index("\n  --preset") < run.index("\n  --run-dir")


def test_a_damaged_checkpoint_is_named_and_left_alone(tmp_path: Path, clean_system) -> None:
    run_dir = tmp_path / "R"
    assert pong_mp("train", *SMALL, "--workers", "1", "--run-dir", str(run_dir)).returncode == 0
    ckpt = run_dir / "checkpoint.npz"
    ckpt.write_bytes(ckpt.read_bytes()[:1000])
    damaged = ckpt.read_bytes()
    done = pong_mp_here("train", "--run-dir", str(run_dir), "--resume", "--batches", "5")
    assert done.returncode == 2 and done.stderr.count("\n") == 1
    assert f"{ckpt}: damaged checkpoint" in done.stderr
    assert ckpt.read_bytes() == damaged


def test_an_existing_run_is_not_overwritten(tmp_path: Path, clean_system) -> None:
    run_dir = tmp_path / "R"
    assert pong_mp("train", *SMALL, "--workers", "1", "--run-dir", str(run_dir)).returncode == 0
    before = {p.name: p.read_bytes() for p in run_dir.iterdir()}
    done = pong_mp_here("train", *SMALL, "--workers", "1", "--run-dir", str(run_dir))
    assert done.returncode == 2 and "already holds a run" in done.stderr
    assert {p.name: p.read_bytes() for p in run_dir.iterdir()} == before


def test_ctrl_c_saves_a_checkpoint_that_resumes(tmp_path: Path, clean_system) -> None:
    run_dir = tmp_path / "R"
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "pong_mp",
            "train",
            "--env",
            SLOW_PONG,
            "--env-arg",
            "delay=0.001",
            "--env-arg",
            "points_to_win=2",
            "--workers",
            "2",
            "--batch-size",
            "2",
            "--hidden",
            "8",
            "--checkpoint-every",
            "1000",
            "--run-dir",
            str(run_dir),
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    metrics = run_dir / "metrics.jsonl"
    deadline = time.monotonic() + 60
    while not (metrics.exists() and metrics.read_text().count("\n") >= 2):
        assert proc.poll() is None and time.monotonic() < deadline, proc.communicate()
        time.sleep(0.05)
    os.kill(proc.pid, signal.SIGINT)
    sent = time.monotonic()
    _, err = proc.communicate(timeout=30)
    assert time.monotonic() - sent < 10
    assert proc.returncode == 130, err
    assert "stopped by SIGINT" in err and "Traceback" not in err
    state, _ = checkpoint.load(run_dir / "checkpoint.npz")
    lines = metrics.read_text().splitlines()
    assert state.batch == len(lines) >= 2  # the checkpoint is the last update logged
    done = pong_mp(
        "train", "--run-dir", str(run_dir), "--resume", "--batches", str(state.batch + 1)
    )
    assert done.returncode == 0, done.stderr
    assert checkpoint.load(run_dir / "checkpoint.npz")[0].batch == state.batch + 1


def test_a_checkpoint_from_another_run_is_refused(tmp_path: Path, clean_system) -> None:
    for name, seed in (("A", "1"), ("B", "2")):
        args = ["train", *SMALL, "--workers", "1", "--seed", seed, "--hidden", "8"]
        assert pong_mp(*args, "--run-dir", str(tmp_path / name)).returncode == 0
    (tmp_path / "B" / "checkpoint.npz").write_bytes(
        (tmp_path / "A" / "checkpoint.npz").read_bytes()
    )
    done = pong_mp_here("train", "--resume", "--batches", "5", "--run-dir", str(tmp_path / "B"))
    assert done.returncode == 2 and done.stderr.count("\n") == 1
    assert "checkpoint.npz: belongs to another run (seed 1, config.json says 2)" in done.stderr


def test_a_fork_changes_only_the_options_typed(tmp_path: Path, clean_system) -> None:
    source = tmp_path / "A"
    made = pong_mp("train", *SMALL, "--preset", "pg", "--workers", "1", "--run-dir", str(source))
    assert made.returncode == 0, made.stderr
    fork = tmp_path / "B"
    args = ["--fork-from", str(source), "--run-dir", str(fork)]
    done = pong_mp("train", *args, "--lr", "0.002", "--batches", "4", "--workers", "1")
    assert done.returncode == 0, done.stderr
    config = json.loads((fork / "config.json").read_text())
    assert (config["seed"], config["env_kwargs"], config["lr"]) == (1, {"points_to_win": 3}, 0.002)
    assert [json.loads(x)["batch"] for x in (fork / "metrics.jsonl").read_text().splitlines()] == [
        1, 2, 3, 4
    ]
    done = pong_mp_here("train", *args[:2], "--run-dir", str(tmp_path / "C"), "--hidden", "8")
    assert done.returncode == 2 and done.stderr.count("\n") == 1
    assert "may widen the hidden layer" in done.stderr and not (tmp_path / "C").exists()
