"""TensorBoard event files, read back with TensorBoard itself."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from pong_mp.config import TrainConfig
from pong_mp.tracking import SCALARS
from tests.helpers import fake_config, train

event_accumulator = pytest.importorskip(
    "tensorboard.backend.event_processing.event_accumulator",
    reason="reading events back needs TensorBoard (pip install 'pong-mp[test]')",
)


def _config(run_dir: Path, **overrides) -> TrainConfig:
    return fake_config(run_dir, backend="serial", batch_size=2, hidden=8, **overrides)


def _scalars(run_dir: Path) -> dict[str, list[tuple[int, float]]]:
    acc = event_accumulator.EventAccumulator(str(run_dir), purge_orphaned_data=True)
    acc.Reload()
    return {tag: [(e.step, e.value) for e in acc.Scalars(tag)] for tag in acc.Tags()["scalars"]}


def test_every_update_is_an_event_at_its_env_steps(tmp_path: Path) -> None:
    train(_config(tmp_path), log=lambda line: None)
    records = [json.loads(x) for x in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    scalars = _scalars(tmp_path)
    assert set(scalars) == set(SCALARS)
    assert scalars["reward/running"] == [
        (r["total_steps"], pytest.approx(r["running_reward"])) for r in records
    ]
    assert [v for _, v in scalars["progress/updates"]] == [1.0, 2.0, 3.0]
    assert all(v > 0 for _, v in scalars["update/grad_norm"])


def test_a_resumed_run_replaces_the_updates_it_plays_again(tmp_path: Path) -> None:
    train(_config(tmp_path, batches=2), log=lambda line: None)
    saved = (tmp_path / "checkpoint.npz").read_bytes()
    train(_config(tmp_path, batches=3), resume=True, log=lambda line: None)
    # As if the run had died after logging update 3 but before its checkpoint.
    (tmp_path / "checkpoint.npz").write_bytes(saved)
    train(_config(tmp_path, batches=4), resume=True, log=lambda line: None)
    assert len(list(tmp_path.glob("events.out.tfevents.*"))) == 3
    records = [json.loads(x) for x in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    updates = _scalars(tmp_path)["progress/updates"]
    # Update 3 was played twice; TensorBoard shows only the second time, as metrics.jsonl.
    assert updates == [(r["total_steps"], float(r["batch"])) for r in records]
    assert [r["batch"] for r in records] == [1, 2, 3, 4]


def test_no_event_files_when_asked(tmp_path: Path) -> None:
    train(_config(tmp_path, tensorboard=False), log=lambda line: None)
    assert not list(tmp_path.glob("events.out.tfevents.*"))
