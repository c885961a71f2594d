"""Checkpoints: atomic save, exact round trip, and validation of what is loaded."""

from __future__ import annotations

import json
import os
import zipfile
from pathlib import Path

import numpy as np
import pytest

from pong_mp import checkpoint, policy
from pong_mp.checkpoint import CheckpointError
from pong_mp.state import TrainState

HIDDEN = 4
SHAPE = policy.NetShape(HIDDEN)
CONFIG = json.dumps({"hidden": HIDDEN, "env": "FakePong-v0"})


def _state() -> TrainState:
    params = policy.init_params(SHAPE, 0)
    return TrainState(
        params=params,
        cache=np.abs(params) / 7,
        batch=3,
        episodes=30,
        steps=12345,
        running_reward=-19.5,
        elapsed=12.5,
        optimizer_steps=2,
    )


def test_round_trip_is_exact_and_plain_numpy(tmp_path: Path) -> None:
    path = tmp_path / "checkpoint.npz"
    state = _state()
    checkpoint.save(path, state, SHAPE, CONFIG)
    with np.load(path, allow_pickle=False) as npz:
        assert npz["W1"].shape == (HIDDEN, 6400) and npz["W2"].shape == (HIDDEN,)
    with np.load(path, allow_pickle=False) as npz:  # files hold W1 as H x 6400
        np.testing.assert_array_equal(npz["W1"], policy.split(state.params, SHAPE)[0].T)
    loaded, config = checkpoint.load(path)
    assert loaded.params.tobytes() == state.params.tobytes()
    assert loaded.cache.tobytes() == state.cache.tobytes()
    assert (loaded.batch, loaded.episodes, loaded.steps) == (3, 30, 12345)
    assert loaded.running_reward == -19.5 and loaded.elapsed == 12.5
    assert loaded.optimizer_steps == 2  # not the updates: a fork may have zeroed them
    assert config == json.loads(CONFIG)
    assert [p.name for p in tmp_path.iterdir()] == ["checkpoint.npz"]  # no temp file left


def test_the_members_of_a_checkpoint_come_in_one_order(tmp_path: Path) -> None:
    # Their order is part of the file's bytes: the actor-critic's state (conv filters, value
    # head, Adam's moments) saves to the same bytes from one version of pong-mp to the next.
    shape = policy.NetShape(HIDDEN, channels=2)
    params = policy.init_params(shape, 0, value=True)
    state = _state()
    state.params, state.cache, state.momentum = params, np.abs(params) / 7, params / 3
    checkpoint.save(tmp_path / "c.npz", state, shape, CONFIG)
    with zipfile.ZipFile(tmp_path / "c.npz") as npz:
        names = [name.removesuffix(".npy") for name in npz.namelist()]
    counters = ["batch", "episodes", "steps", "elapsed", "optimizer_steps", "running_reward"]
    assert names == [
        "W1", "W2", "rmsprop_W1", "rmsprop_W2", *counters, "config", "format_version",
        "adam_m_W1", "adam_m_W2", "value", "rmsprop_value", "adam_m_value", "conv",
        "rmsprop_conv", "adam_m_conv",
    ]


def test_running_reward_none_survives(tmp_path: Path) -> None:
    state = _state()
    state.running_reward = None
    checkpoint.save(tmp_path / "c.npz", state, SHAPE, CONFIG)
    assert checkpoint.load(tmp_path / "c.npz")[0].running_reward is None


def test_a_failed_save_keeps_the_old_checkpoint(tmp_path: Path) -> None:
    path = tmp_path / "checkpoint.npz"
    checkpoint.save(path, _state(), SHAPE, CONFIG)
    before = path.read_bytes()
    bad = _state()
    bad.params[5] = np.nan
    with pytest.raises(CheckpointError, match="non-finite params"):
        checkpoint.save(path, bad, SHAPE, CONFIG)
    assert path.read_bytes() == before
    assert [p.name for p in tmp_path.iterdir()] == ["checkpoint.npz"]


def test_missing_truncated_and_garbage_files_are_named(tmp_path: Path) -> None:
    path = tmp_path / "checkpoint.npz"
    with pytest.raises(CheckpointError, match="no such checkpoint"):
        checkpoint.load(path)
    checkpoint.save(path, _state(), SHAPE, CONFIG)
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])
    with pytest.raises(CheckpointError, match=r"checkpoint.npz: damaged checkpoint"):
        checkpoint.load(path)
    path.write_bytes(b"not a zip file at all")
    with pytest.raises(CheckpointError, match="damaged checkpoint"):
        checkpoint.load(path)


ADAM = {
    "adam_m_W1": np.zeros((HIDDEN, 6400)),
    "adam_m_W2": np.zeros(HIDDEN),
    "optimizer_steps": np.int64(2),
}
"""What a checkpoint of Adam's adds to `_save_raw`'s (two steps taken)."""


def _save_raw(path: Path, **overrides: object) -> None:
    state = _state()
    w1t, w2 = policy.split(state.params, SHAPE)
    c1t, c2 = policy.split(state.cache, SHAPE)
    arrays = dict(
        W1=w1t.T.copy(),
        W2=w2,
        rmsprop_W1=c1t.T.copy(),
        rmsprop_W2=c2,
        batch=np.int64(1),
        episodes=np.int64(10),
        steps=np.int64(100),
        elapsed=np.float64(1.0),
        running_reward=np.float64(-20),
        config=np.str_(CONFIG),
    )
    arrays.update(overrides)
    arrays = {k: v for k, v in arrays.items() if v is not None}
    np.savez(path, **arrays)


@pytest.mark.parametrize(
    ("overrides", "problem"),
    [
        ({"W2": None}, "missing W2"),
        ({"W1": np.zeros((HIDDEN, 100))}, "shapes"),
        ({"rmsprop_W2": np.zeros(HIDDEN + 1)}, "rmsprop_W2 has shape"),
        ({"W1": np.zeros((HIDDEN, 6400), dtype=np.float32)}, "dtype float32"),
        ({"W2": np.array([np.inf] * HIDDEN)}, "W2 holds non-finite"),
        # Finite in float64, but the workers' float32 copy would play it as inf.
        ({"W2": np.array([1e300] * HIDDEN)}, "W2 holds values beyond float32's range"),
        ({"running_reward": np.float64(np.inf)}, "running_reward must be finite, not inf"),
        ({"config": np.str_(json.dumps({"hidden": 99}))}, "does not match its weights"),
        ({"config": np.str_("{not json")}, "bad counters or config"),
        (
            {"config": np.str_("[" * 5000 + "]" * 5000)},
            r"bad counters or config \(JSON nested more than 32 levels deep\)",
        ),
        ({"batch": np.int64(-3)}, "batch must be a number >= 0, not -3"),
        ({"elapsed": np.float64(np.nan)}, "elapsed must be a number >= 0"),
        ({"steps": np.str_("many")}, "steps must be a number >= 0, not 'many'"),
        ({"optimizer_steps": np.float64(2.5)}, "optimizer_steps must be a whole number"),
        ({"optimizer_steps": np.int64(-1)}, "optimizer_steps must be a whole number"),
        # Counters no run reaches, which would overflow int64 as the run counts on.
        ({"batch": np.int64(2**63 - 1)}, r"batch must be a whole number from 0 to 2\*\*53"),
        ({"episodes": np.float64(2.5)}, "episodes must be a whole number from 0 to"),
        ({"steps": np.bool_(True)}, "steps must be a whole number from 0 to"),
        ({"optimizer_steps": np.int64(2**62)}, "optimizer_steps must be a whole number"),
        ({"format_version": np.int64(3)}, "format_version 3 is not one this pong-mp reads"),
        ({"late_units": np.array([[2, 1]])}, "late_units in a checkpoint without Adam's state"),
        ({**ADAM, "late_units": np.array([2, 1])}, r"late_units is int64 \(2,\), not"),
        ({**ADAM, "late_units": np.array([[2.0, 1.0]])}, "late_units is float64"),
        ({**ADAM, "late_units": np.array([[HIDDEN, 1]])}, r"units \[4\] are not increasing"),
        ({**ADAM, "late_units": np.array([[2, 1], [1, 1]])}, "units .2, 1. are not increasing"),
        ({**ADAM, "late_units": np.array([[2, 0]])}, r"steps \[0\] are not in order \(equal"),
        ({**ADAM, "late_units": np.array([[2, 3]])}, r"steps \[3\] are not in order .* in 1..2"),
        ({"format_version": np.str_("1")}, "format_version '1' is not a whole number"),
        ({"format_version": np.array([1, 1])}, r"format_version \[1, 1\] is not a whole number"),
        ({"format_version": np.bool_(True)}, "format_version True is not a whole number"),
        ({"adam_m_W1": np.zeros((HIDDEN, 6400))}, "only one of adam_m_W1 and adam_m_W2"),
        ({"rmsprop_W1": np.full((HIDDEN, 6400), "x")}, "rmsprop_W1 has dtype <U1"),
    ],
)
def test_validation_names_the_problem(tmp_path: Path, overrides: dict, problem: str) -> None:
    path = tmp_path / "c.npz"
    _save_raw(path, **overrides)
    with pytest.raises(CheckpointError, match=problem):
        checkpoint.load(path)


def test_array_headers_are_held_to_what_a_policy_can_need(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Checked before numpy allocates: a claim the file's bytes would back (a zip bomb, a
    # file of gigabytes) is refused all the same beyond what pong-mp's limits let a policy
    # hold, an array at a time and in all.
    path = tmp_path / "c.npz"
    checkpoint.save(path, _state(), SHAPE, CONFIG)
    assert checkpoint.MAX_ARRAY_BYTES == 8 * 4096 * 6400 * 4  # --policy-lag 8's, at --hidden 4096
    w1 = HIDDEN * 6400 * 8
    monkeypatch.setattr(checkpoint, "MAX_ARRAY_BYTES", w1 - 1)
    claim = r"W1.npy claims float64 \(4, 6400\), 204,800 bytes, more than any array of a pong"
    with pytest.raises(CheckpointError, match=claim):
        checkpoint.load(path)
    monkeypatch.setattr(checkpoint, "MAX_ARRAY_BYTES", w1)
    monkeypatch.setattr(checkpoint, "MAX_FILE_BYTES", 2 * w1)  # W1 and its RMSProp cache only
    with pytest.raises(CheckpointError, match=r"its arrays claim 4\d\d,\d{3} bytes, more than a "):
        checkpoint.load(path)


def _with_member(path: Path, name: str, header: str, body: bytes = b"") -> None:
    """Adds member `name` to the .npz at `path`: a .npy of format 1.0 with `header`."""
    header_bytes = header.encode("latin1")
    header_bytes += b" " * (-(10 + len(header_bytes) + 1) % 64) + b"\n"
    npy = b"\x93NUMPY\x01\x00" + len(header_bytes).to_bytes(2, "little") + header_bytes + body
    with zipfile.ZipFile(path, "a") as archive:
        archive.writestr(name, npy)


@pytest.mark.parametrize(
    ("name", "header", "problem"),
    [
        # numpy reads a shape of True, then its reshape fails with a TypeError.
        ("W1.npy", "{'descr': '<f8', 'fortran_order': False, 'shape': (True, 6400), }",
         r"W1.npy claims a shape of \(True, 6400\)"),
        # 0 bytes a value, so any count claims 0 bytes; the reshape overflows.
        ("W1.npy", "{'descr': '<U0', 'fortran_order': False, 'shape': (1180591620717411303424,), }",
         r"W1.npy claims <U0 \(1180591620717411303424,\): no pong-mp array is that long"),
    ],
)  # fmt: skip
def test_a_header_numpy_would_choke_on_is_named(
    tmp_path: Path, name: str, header: str, problem: str
) -> None:
    path = tmp_path / "c.npz"
    _save_raw(path, W1=None)
    _with_member(path, name, header)
    with pytest.raises(CheckpointError, match=problem):
        checkpoint.load(path)
    with pytest.raises(CheckpointError, match=problem):
        checkpoint.load_policy(path)


def test_a_member_named_with_and_without_npy_is_named_twice(tmp_path: Path) -> None:
    # numpy reads both as W1 and keeps the last; other zip readers take the first.
    path = tmp_path / "c.npz"
    _save_raw(path)
    with zipfile.ZipFile(path, "a") as archive:
        archive.writestr("W1", archive.read("W1.npy"))
    with pytest.raises(CheckpointError, match=r"damaged checkpoint \(it holds W1 twice\)$"):
        checkpoint.load(path)


def test_a_member_that_is_not_an_array_is_named(tmp_path: Path) -> None:
    # numpy hands such a member back as bytes, which no check of an array expects.
    path = tmp_path / "c.npz"
    _save_raw(path)
    with zipfile.ZipFile(path, "a") as archive:
        archive.writestr("notes.npy", b"not an array")
    not_an_array = r"damaged checkpoint \(notes.npy is not a .npy array\)$"
    with pytest.raises(CheckpointError, match=not_an_array):
        checkpoint.load(path)


def test_a_valid_raw_checkpoint_loads(tmp_path: Path) -> None:
    _save_raw(tmp_path / "c.npz")
    state, _ = checkpoint.load(tmp_path / "c.npz")
    assert state.episodes == 10


@pytest.mark.parametrize(
    ("config", "steps"),
    [({"hidden": HIDDEN}, 2), ({"hidden": HIDDEN, "algo": "ppo", "epochs": 3}, 2 * 3 * 4)],
)
def test_a_checkpoint_without_its_optimizer_steps_counts_them_from_its_updates(
    tmp_path: Path, config: dict, steps: int
) -> None:
    # Written before the state counted them: one step an update, or one a minibatch.
    path = tmp_path / "c.npz"
    params = policy.init_params(SHAPE, 0, value=config.get("algo") == "ppo")
    state = TrainState(
        params=params, cache=np.zeros_like(params), batch=2, episodes=4, steps=400
    )
    checkpoint.save(path, state, SHAPE, json.dumps(config))
    with np.load(path, allow_pickle=False) as npz:
        arrays = {key: npz[key] for key in npz.files if key != "optimizer_steps"}
    np.savez(path, **arrays)
    assert checkpoint.load(path)[0].optimizer_steps == steps


@pytest.mark.parametrize(("episodes", "steps"), [(1, 400), (4, 3)])
def test_counters_out_of_order_are_refused(tmp_path: Path, episodes: int, steps: int) -> None:
    # 2 updates of 1 episode, or 4 episodes of fewer than a step each: no run counts so.
    path = tmp_path / "c.npz"
    params = policy.init_params(SHAPE, 0)
    state = TrainState(params=params, cache=np.zeros_like(params), batch=2)
    checkpoint.save(path, state, SHAPE, json.dumps({"hidden": HIDDEN}))
    with np.load(path, allow_pickle=False) as npz:
        arrays = {key: npz[key] for key in npz.files}
    np.savez(path, **{**arrays, "episodes": np.array(episodes), "steps": np.array(steps)})
    with pytest.raises(checkpoint.CheckpointError, match=r"counters out of order: an update"):
        checkpoint.load(path)


def test_a_model_whose_config_names_no_policy_of_pong_mp_is_refused(
    tmp_path: Path, fake_checkpoint
) -> None:
    model = checkpoint.export_model(fake_checkpoint, tmp_path / "model.npz")
    with np.load(model, allow_pickle=False) as npz:
        arrays = {key: npz[key] for key in npz.files}
    stored = {**json.loads(str(arrays["config"])), "policy": "transformer"}
    np.savez(model, **{**arrays, "config": np.array(json.dumps(stored))})
    with pytest.raises(checkpoint.CheckpointError, match="policy 'transformer' is no pong-mp"):
        checkpoint.load_policy(model)


def test_an_exported_model_is_small_float32_and_plays(tmp_path: Path, fake_checkpoint) -> None:
    model = checkpoint.export_model(fake_checkpoint, tmp_path / "model.npz")
    with np.load(model, allow_pickle=False) as npz:
        assert npz["W1"].dtype == np.float32 and npz["W1"].shape == (8, 6400)
        assert "rmsprop_W1" not in npz.files  # no optimizer state: it plays, it does not train
    params, config = checkpoint.load_policy(model)
    full, _ = checkpoint.load(fake_checkpoint)
    np.testing.assert_array_equal(params, full.params.astype(np.float32).astype(np.float64))
    assert config["hidden"] == 8
    assert checkpoint.load_policy(fake_checkpoint)[0].tobytes() == full.params.tobytes()


def test_an_exported_model_names_its_run_and_holds_no_path(tmp_path: Path) -> None:
    run_dir = tmp_path / "runs" / "late-fork"
    run_dir.mkdir(parents=True)
    config = {
        "hidden": HIDDEN,
        "env": "FakePong-v0",
        "lr": 5e-4,
        "run_dir": str(run_dir),
        "fork_from": str(tmp_path / "runs" / "base"),
        "ray_address": "10.0.0.1:6379",
    }
    checkpoint.save(run_dir / "checkpoint.npz", _state(), SHAPE, json.dumps(config))
    for source in (run_dir, run_dir / "checkpoint.npz"):
        model = checkpoint.export_model(source, tmp_path / "model.npz")
        with np.load(model, allow_pickle=False) as npz:
            texts = [str(npz[key]) for key in npz.files if npz[key].dtype.kind == "U"]
            provenance = {key: npz[key].item() for key in ("run", "batch", "episodes", "steps")}
            options = json.loads(str(npz["config"]))
        assert provenance == {"run": "late-fork", "batch": 3, "episodes": 30, "steps": 12345}
        assert options == {"hidden": HIDDEN, "env": "FakePong-v0", "lr": 5e-4, "fork_from": "base"}
        assert not [text for text in texts if str(tmp_path) in text or "10.0.0.1" in text]
        assert checkpoint.load_policy(model)[1]["lr"] == 5e-4  # still a model that plays


def test_load_policy_names_bad_files(tmp_path: Path) -> None:
    with pytest.raises(CheckpointError, match="no such checkpoint"):
        checkpoint.load_policy(tmp_path / "nope.npz")
    os.mkfifo(tmp_path / "fifo.npz")
    with pytest.raises(CheckpointError, match=r"fifo\.npz: not a regular file"):
        checkpoint.load_policy(tmp_path / "fifo.npz")
    (tmp_path / "loop.npz").symlink_to("loop.npz")
    with pytest.raises(CheckpointError, match=r"loop\.npz: a symbolic link that leads to no file"):
        checkpoint.load_policy(tmp_path / "loop.npz")
    # A run directory's checkpoint is named for what it is, not taken for missing.
    (tmp_path / "run").mkdir()
    (tmp_path / "run" / "checkpoint.npz").symlink_to("/dev/zero")
    with pytest.raises(CheckpointError, match=r"run/checkpoint\.npz: not a regular file"):
        checkpoint.load_policy(tmp_path / "run")
    (tmp_path / "run" / "checkpoint.npz").unlink()
    (tmp_path / "run" / "checkpoint.npz").symlink_to("gone.npz")
    with pytest.raises(CheckpointError, match=r"checkpoint\.npz: a symbolic link that leads to no"):
        checkpoint.load_policy(tmp_path / "run")
    np.savez(tmp_path / "other.npz", x=np.zeros(3))
    with pytest.raises(CheckpointError, match="not a pong-mp model or checkpoint"):
        checkpoint.load_policy(tmp_path / "other.npz")
    np.savez(
        tmp_path / "bad.npz",
        W1=np.full((2, 6400), np.nan, np.float32),
        W2=np.zeros(2, np.float32),
        config=np.str_('{"hidden": 2}'),
    )
    with pytest.raises(CheckpointError, match="non-finite"):
        checkpoint.load_policy(tmp_path / "bad.npz")
    np.savez(
        tmp_path / "newer.npz",
        W1=np.zeros((2, 6400), np.float32),
        W2=np.zeros(2, np.float32),
        config=np.str_('{"hidden": 2, "policy": "mlp"}'),
        format_version=np.int64(checkpoint.FORMAT_VERSION + 1),
    )
    with pytest.raises(CheckpointError, match="a newer pong-mp wrote it"):
        checkpoint.load_policy(tmp_path / "newer.npz")


def test_export_never_overwrites_a_checkpoint_or_a_foreign_file(
    tmp_path: Path, fake_checkpoint
) -> None:
    import shutil

    ckpt = tmp_path / "checkpoint.npz"
    shutil.copy(fake_checkpoint, ckpt)
    before = ckpt.read_bytes()
    with pytest.raises(CheckpointError, match="is the checkpoint itself"):
        checkpoint.export_model(ckpt, ckpt)
    other = tmp_path / "other.npz"
    shutil.copy(fake_checkpoint, other)
    with pytest.raises(CheckpointError, match="is a training checkpoint: refusing"):
        checkpoint.export_model(ckpt, other)
    notes = tmp_path / "notes.npz"
    notes.write_text("mine")
    with pytest.raises(CheckpointError, match="is not a model file: refusing"):
        checkpoint.export_model(ckpt, notes)
    for name in ("-", "model", "model.npy"):  # "-" is no standard output here
        with pytest.raises(CheckpointError, match=r"a model file is \.npz; name one that ends"):
            checkpoint.export_model(ckpt, tmp_path / name)
        assert not (tmp_path / name).exists()
    assert ckpt.read_bytes() == before and notes.read_text() == "mine"
    model = tmp_path / "model.npz"
    checkpoint.export_model(ckpt, model)
    checkpoint.export_model(ckpt, model)  # an older model file may be replaced
    assert checkpoint.load_policy(model)[1]["hidden"] == 8


def test_a_file_that_is_not_npz_is_named_in_one_short_line(tmp_path: Path) -> None:
    path = tmp_path / "config.json"
    path.write_text('{"hidden": 8}')
    not_npz = r"config.json: damaged checkpoint \(not an .npz file\)$"
    with pytest.raises(CheckpointError, match=not_npz):
        checkpoint.load_policy(path)


def test_a_path_too_long_and_a_model_for_a_checkpoint_are_named(
    tmp_path: Path, fake_checkpoint: Path
) -> None:
    with pytest.raises(CheckpointError, match=r"path too long for the file system \(3\d\d char"):
        checkpoint.load_policy(tmp_path / ("x" * 300))  # was an OSError
    model = checkpoint.export_model(fake_checkpoint, tmp_path / "model.npz")
    with pytest.raises(CheckpointError, match="a model file, not a checkpoint: it has no optim"):
        checkpoint.load(model)  # was "missing rmsprop_W1, rmsprop_W2, ..." of an Adam run
