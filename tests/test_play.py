"""Playing games with a trained policy: `pong_mp.tools.play` and `pong-mp play`."""

from __future__ import annotations

import json
import signal
from pathlib import Path

import gymnasium as gym
import numpy as np
import pytest

from pong_mp import policy
from pong_mp.envs import make_training_env
from pong_mp.signals import Interrupted, stop_signals_raise
from pong_mp.tools.play import GameScore, play_games, summary
from tests.fault_envs import SLOW_PONG
from tests.helpers import SignalsWhenDropped, pong_mp, pong_mp_here, signal_self

GAME = {"points_to_win": 3}
SHAPE = policy.NetShape(8)


def test_games_are_full_and_repeatable() -> None:
    params = policy.init_params(SHAPE, 0)
    a = play_games(params, SHAPE, "FakePong-v0", 3, seed=4, env_kwargs=GAME)
    b = play_games(params, SHAPE, "FakePong-v0", 3, seed=4, env_kwargs=GAME)
    assert a == b and len(a) == 3
    assert all(max(s.agent, s.opponent) == 3 and s.steps > 0 for s in a)
    assert play_games(params, SHAPE, "FakePong-v0", 3, seed=5, env_kwargs=GAME) != a


def test_a_stop_python_only_printed_ends_the_games_after_the_game_it_came_in() -> None:
    played: list[GameScore] = []

    def on_game(score: GameScore) -> None:
        played.append(score)
        if len(played) == 1:
            SignalsWhenDropped(signal.SIGINT)  # a Ctrl-C handled inside a finalizer

    params = policy.init_params(SHAPE, 0)
    with pytest.raises(Interrupted), stop_signals_raise():
        play_games(params, SHAPE, "FakePong-v0", 4, env_kwargs=GAME, on_game=on_game)
    assert len(played) == 1


def test_a_stop_signal_ends_the_game_it_comes_in() -> None:
    frames: list[int] = []

    def on_frame(frame: np.ndarray) -> None:
        frames.append(1)
        if len(frames) == 5:
            signal_self(signal.SIGTERM)

    long_game = {"points_to_win": 1000}
    with pytest.raises(Interrupted) as stop, stop_signals_raise():
        play_games(
            policy.init_params(SHAPE, 0), SHAPE, "FakePong-v0", 1, env_kwargs=long_game,
            on_frame=on_frame, on_game=lambda score: pytest.fail("the game went on"),
        )  # fmt: skip
    assert stop.value.signum == signal.SIGTERM and len(frames) <= 6


class _Recorder(gym.Wrapper):
    """Remembers every action sent to the env."""

    actions: list[int] = []  # noqa: RUF012  (shared on purpose: the test reads it)

    def step(self, action):
        _Recorder.actions.append(action)
        return self.env.step(action)


@pytest.mark.parametrize(
    ("greedy", "expected"), [(True, {policy.UP}), (False, {policy.UP, policy.DOWN})]
)
def test_greedy_takes_the_likelier_action_and_sampling_both(
    monkeypatch: pytest.MonkeyPatch, greedy: bool, expected: set[int]
) -> None:
    params = policy.init_params(SHAPE, 0)
    policy.split(params, SHAPE)[1][:] = 0.0  # W2 = 0: p(UP) is exactly 0.5 on every frame
    monkeypatch.setattr(
        "pong_mp.tools.play.make_training_env",
        lambda *a, **k: (lambda env, inputs: (_Recorder(env), inputs))(*make_training_env(*a, **k)),
    )
    _Recorder.actions = []
    play_games(params, SHAPE, "FakePong-v0", 1, seed=0, greedy=greedy, env_kwargs=GAME)
    assert len(_Recorder.actions) > 20 and set(_Recorder.actions) == expected


def test_summary_counts_wins_and_mean_difference() -> None:
    scores = [GameScore(21, 15, 100), GameScore(3, 21, 100)]
    assert summary(scores) == (
        "won 1 of 2 games, lost 1; point difference -6.00 on average (std 12.00)"
    )


def test_cli_play_uses_the_env_the_policy_was_trained_on(
    fake_checkpoint: Path, clean_system
) -> None:
    done = pong_mp("play", str(fake_checkpoint), "--episodes", "2")
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert len(lines) == 3 and lines[0].startswith("game 1: agent ")
    assert all(" 2 opponent" in line or "agent 2 " in line for line in lines[:2])
    assert lines[2].startswith("won ")


def _model(path: Path, **replace) -> None:
    arrays = {
        "W1": np.zeros((8, 6400), np.float32),
        "W2": np.zeros(8, np.float32),
        "config": {"hidden": 8, "env": "FakePong-v0"},
        **replace,
    }
    arrays["config"] = np.str_(json.dumps(arrays["config"]))
    with open(path, "wb") as fh:
        np.savez(fh, **arrays)


@pytest.mark.parametrize(
    ("make", "message"),
    [
        (lambda p: None, "no such checkpoint"),
        (lambda p: p.mkdir(), "a directory with no checkpoint.npz in it"),
        (lambda p: p.write_bytes(b"PK\x03\x04 truncated"), "damaged checkpoint"),
        (lambda p: np.save(p.with_suffix(".npy"), np.zeros(3)) or p.with_suffix(".npy").rename(p),
         "not a pong-mp checkpoint or model"),
        (lambda p: _model(p, W1=np.full((8, 6400), "a")), "W1 holds <U1 values, not floats"),
        (lambda p: _model(p, config={"hidden": 8, "env": 3}), "bad config (env must be a"),
        (lambda p: _model(p, config=[8]), "its config does not match its weights"),
        (lambda p: _model(p, config={"hidden": 8, "inputs": "pixels"}),
         "this run was made with --inputs 'pixels', which pong-mp no longer has"),
    ],
)
def test_cli_play_on_a_bad_file_is_one_line(tmp_path: Path, make, message: str) -> None:
    path = tmp_path / "model.npz"
    make(path)
    done = pong_mp_here("play", str(path))
    assert done.returncode == 2 and done.stderr.count("\n") == 1
    assert done.stderr.startswith(f"pong-mp: error: {path}: {message}")
    assert "Traceback" not in done.stderr


def test_cli_exports_a_model_that_plays(fake_checkpoint: Path, tmp_path: Path) -> None:
    model = tmp_path / "pong.npz"
    done = pong_mp("export", str(fake_checkpoint), str(model))
    assert done.returncode == 0 and done.stdout.startswith(f"wrote {model}")
    played = pong_mp("play", str(model), "--episodes", "1")
    assert played.returncode == 0, played.stderr
    assert played.stdout.splitlines()[-1].startswith("won ")


def test_a_run_directory_stands_for_its_checkpoint(
    fake_checkpoint: Path, tmp_path: Path, clean_system
) -> None:
    run_dir = fake_checkpoint.parent
    by_file = pong_mp("play", str(fake_checkpoint), "--episodes", "2", "--json")
    by_dir = pong_mp("play", str(run_dir), "--episodes", "2", "--json")
    assert by_dir.returncode == 0, by_dir.stderr
    games = [json.loads(done.stdout)["scores"] for done in (by_file, by_dir)]
    assert games[0] == games[1] and len(games[0]) == 2
    model = tmp_path / "pong.npz"
    assert pong_mp("export", str(run_dir), str(model)).returncode == 0
    w1 = np.load(model)["W1"]
    assert w1.dtype == np.float32
    assert np.array_equal(w1, np.load(fake_checkpoint)["W1"].astype(np.float32))


@pytest.mark.parametrize(
    ("target", "message"),
    [
        (lambda tmp: tmp, "needs a .gif or .mp4 file"),
        (lambda tmp: (tmp / "d.gif").mkdir() or tmp / "d.gif", "is a directory"),
        (lambda tmp: tmp / "missing" / "game.gif", "no directory"),
        (lambda tmp: tmp / "game.avi", "needs a .gif or .mp4 file"),
    ],
)
def test_cli_record_to_a_bad_place_is_one_line_before_any_game(
    fake_checkpoint: Path, tmp_path: Path, target, message: str
) -> None:
    path = target(tmp_path)
    done = pong_mp_here("play", str(fake_checkpoint), "--record", str(path))
    assert done.returncode == 2 and done.stderr.count("\n") == 1, done.stderr
    assert message in done.stderr and "Traceback" not in done.stderr
    assert done.stdout == ""  # no game was played


def test_a_failed_recording_leaves_no_file(
    fake_checkpoint: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from pong_mp.tools.recording import VideoRecorder

    out = tmp_path / "game.gif"
    recorder = VideoRecorder(out)
    recorder.add(np.zeros((210, 160, 3), np.uint8))
    recorder.abort()
    assert list(tmp_path.iterdir()) == []
    with VideoRecorder(out, scale=1) as finished:
        finished.add(np.zeros((210, 160, 3), np.uint8))
    assert [p.name for p in tmp_path.iterdir()] == ["game.gif"]


def test_cli_play_warns_when_the_env_is_not_the_one_trained_on(fake_checkpoint: Path) -> None:
    done = pong_mp(
        "play", str(fake_checkpoint), "--env", SLOW_PONG, "--episodes", "1",
        "--env-arg", "points_to_win=1",
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert done.stderr == (
        f"pong-mp: warning: this policy was trained on FakePong-v0, not {SLOW_PONG}; "
        "expect it to play badly\n"
    )


def test_cli_play_reports_json_for_scripts(fake_checkpoint: Path) -> None:
    done = pong_mp("play", str(fake_checkpoint), "--episodes", "3", "--json", "--greedy")
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    diffs = [s["agent"] - s["opponent"] for s in report["scores"]]
    assert report["games"] == 3 and len(diffs) == 3 and report["greedy"] is True
    assert report["won"] == sum(d > 0 for d in diffs)
    assert report["lost"] == sum(d < 0 for d in diffs)
    assert report["mean_difference"] == pytest.approx(np.mean(diffs))
    assert report["std_difference"] == pytest.approx(np.std(diffs))


def test_cli_play_env_args_override_the_trained_ones(fake_checkpoint: Path) -> None:
    done = pong_mp(
        "play", str(fake_checkpoint), "--episodes", "2", "--env-arg", "points_to_win=1", "--json"
    )
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    assert report["env_kwargs"] == {"points_to_win": 1}
    assert all(max(s["agent"], s["opponent"]) == 1 for s in report["scores"])
    done = pong_mp_here("play", str(fake_checkpoint), "--env-arg", "points_to_win=x")
    assert done.returncode == 2 and "cannot be made with points_to_win='x'" in done.stderr
