"""A Ray cluster on a real network stack: nodes in their own network namespaces, joined by a
bridge, links shaped to 1 Gbit/s (bin/ray-netns-cluster). Runs where the machine allows it
(root, iproute2, Ray); elsewhere it skips with the reason."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from pong_mp import policy
from pong_mp.batch_sum import group_count
from tests.fault_envs import SLOW_PONG
from tests.helpers import checkpoint_weights

pytestmark = [pytest.mark.ray, pytest.mark.own_ray, pytest.mark.slow]

SCRIPT = Path(__file__).resolve().parents[1] / "bin" / "ray-netns-cluster"
NODES = 4  # the head (0 CPUs: the driver's node) and 3 worker nodes of 1 CPU
HIDDEN = 32
BATCH = 12
GAME = ["--env-arg", "points_to_win=2"]


def _script(*args: str, timeout: float = 300) -> subprocess.CompletedProcess:
    env = {**os.environ, "RAY": str(Path(sys.executable).parent / "ray")}
    return subprocess.run(
        [str(SCRIPT), *args], capture_output=True, text=True, timeout=timeout, env=env
    )


def _why_not_here() -> str | None:
    if os.geteuid() != 0:
        return "needs root to make network namespaces"
    if shutil.which("ip") is None or shutil.which("tc") is None:
        return "needs iproute2 (ip, tc)"
    if subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout.count(
        "pmray-"
    ):
        return "a pmray cluster is up already (bin/ray-netns-cluster down)"
    probe = subprocess.run(["ip", "netns", "add", "pmray-probe"], capture_output=True, text=True)
    if probe.returncode != 0:
        return f"cannot make network namespaces here ({probe.stderr.strip()})"
    subprocess.run(["ip", "netns", "del", "pmray-probe"], check=True)
    return None


@pytest.fixture(scope="module")
def cluster() -> Iterator[str]:
    """The address of a netns Ray cluster of NODES nodes, torn down afterwards."""
    pytest.importorskip("ray")
    why = _why_not_here()
    if why is not None:
        pytest.skip(why)
    try:
        up = _script("up", str(NODES))
        assert up.returncode == 0, up.stderr
        yield up.stdout.strip().splitlines()[-1]
    finally:
        down = _script("down")
        assert down.returncode == 0, down.stderr
        # Nothing left that a later local Ray start would join.
        current = Path("/tmp/ray/ray_current_cluster")
        assert not current.exists() or "10.77.0.1" not in current.read_text()


def _in_head(*args: str) -> list[str]:
    return [str(SCRIPT), "run", *args]


def _train(run_dir: Path, *args: str) -> list[str]:
    return [
        # Karpathy's learner: one group sum per update, the traffic the test counts.
        sys.executable, "-m", "pong_mp", "train", "--preset", "pg", "--hidden", str(HIDDEN),
        "--batch-size", str(BATCH), "--run-dir", str(run_dir), *GAME, *args,
    ]  # fmt: skip


def _reference(run_dir: Path, batches: int) -> bytes:
    done = subprocess.run(
        _train(run_dir, "--env", "FakePong-v0", "--backend", "serial", "--batches", str(batches)),
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    return checkpoint_weights(run_dir)


def _driver_rx_bytes() -> int:
    read = ["cat", "/sys/class/net/eth0/statistics/rx_bytes"]
    return int(subprocess.run(_in_head(*read), capture_output=True, text=True).stdout)


def test_the_cluster_gives_local_bytes_and_the_driver_gets_group_sums(
    cluster: str, tmp_path: Path
) -> None:
    batches = 4
    before = _driver_rx_bytes()
    done = subprocess.run(
        _in_head(*_train(tmp_path / "ray", "--env", "FakePong-v0", "--ray-address", cluster,
                         "--workers", "2", "--batches", str(batches), "--quiet")),
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    received = _driver_rx_bytes() - before
    assert done.returncode == 0, done.stderr
    assert checkpoint_weights(tmp_path / "ray") == _reference(tmp_path / "serial", batches)
    # Per update the driver fetches one float64 sum per group and the episodes' small
    # results: not one float32 gradient per episode (BATCH times more bytes).
    params = policy.param_count(policy.NetShape(HIDDEN))
    promised = group_count(BATCH) * 8 * params
    per_update = received / batches
    assert promised <= per_update < 1.5 * promised
    assert per_update < BATCH * 4 * params / 4


def _playing_node() -> int | None:
    """The worker node whose pong-mp workers have used the most CPU: the one that plays the
    batch (a batch of up to 30 episodes is one group, played on one node)."""
    used: dict[int, int] = {}
    for node in range(1, NODES):
        pids = subprocess.run(
            ["ip", "netns", "pids", f"pmray-{node}"], capture_output=True, text=True
        ).stdout.split()
        for pid in pids:
            try:
                stat = Path(f"/proc/{pid}/stat").read_text()
            except OSError:
                continue
            name, fields = stat.split("(", 1)[1].rsplit(")", 1)
            if name.startswith("pong-mp-worker"):
                ticks = sum(int(x) for x in fields.split()[11:13])  # utime, stime
                used[node] = used.get(node, 0) + ticks
    return max(used, key=lambda node: used[node]) if used else None


def test_a_node_whose_link_is_cut_is_replaced_and_the_bytes_stay(
    cluster: str, tmp_path: Path
) -> None:
    batches = 6
    run_dir = tmp_path / "cut"
    # SlowPong: FakePong's bytes, slow enough that the cut lands mid-run.
    train = _train(run_dir, "--env", SLOW_PONG, "--env-arg", "delay=0.002",
                   "--ray-address", cluster, "--workers", "2", "--batches", str(batches),
                   "--episode-timeout", "30")  # fmt: skip
    run = subprocess.Popen(_in_head(*train), stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                           text=True)  # fmt: skip
    try:
        deadline = time.monotonic() + 120
        metrics = run_dir / "metrics.jsonl"
        while not (metrics.exists() and metrics.read_text().strip()):
            assert run.poll() is None and time.monotonic() < deadline, "no update came"
            time.sleep(0.2)
        node = _playing_node()
        assert node is not None, "no pong-mp worker found in the worker nodes' namespaces"
        cut = _script("cut", str(node))
        assert cut.returncode == 0, cut.stderr
        cut_after = len(metrics.read_text().splitlines())
        output, _ = run.communicate(timeout=240)
    finally:
        if run.poll() is None:
            run.kill()
            run.wait()
    assert run.returncode == 0, output
    assert cut_after < batches  # the cut came mid-run
    assert "its node's leader died" in output and "playing them again" in output
    lines = [json.loads(line) for line in metrics.read_text().splitlines()]
    assert [line["batch"] for line in lines] == list(range(1, batches + 1))
    assert checkpoint_weights(run_dir) == _reference(tmp_path / "serial", batches)


def test_the_script_names_its_usage_in_one_line() -> None:
    done = _script("sideways")
    assert done.returncode == 2
    assert done.stderr.count("\n") == 1 and "usage:" in done.stderr
