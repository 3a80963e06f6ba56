"""Checkpoints: atomic shard files, commit by manifest, keep-N, re-sharding, SIGKILL."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import grpc
import numpy as np
import pytest

from ps_runtime.coordinator.cluster import ClusterResolver, LocalCluster
from ps_runtime.coordinator.strategy import ParameterServerStrategy
from ps_runtime.launch.local import free_ports
from ps_runtime.server import checkpoint
from ps_runtime.server.optimizers import Adagrad, Adam

ROOT = Path(__file__).resolve().parents[3]


def _model(strategy: ParameterServerStrategy) -> tuple:
    table = strategy.create_table(
        "emb", 4, initializer=("uniform", {"seed": 1}), optimizer=Adam(learning_rate=0.05)
    )
    small = strategy.create_variable("bias", (3,), optimizer=Adagrad(learning_rate=0.1))
    big = strategy.create_variable(
        "big", (9, 2), initializer=("normal", {"seed": 2}), optimizer=Adam(learning_rate=0.05)
    )
    return table, small, big


def _train(table, small, big, rng: np.random.Generator, steps: int) -> None:
    for _ in range(steps):
        ids = rng.integers(0, 200, size=50)
        table.push_gradients(ids, rng.normal(size=(50, 4)))
        small.push_gradient(rng.normal(size=3))
        big.push_gradient(rng.normal(size=(9, 2)))


def _split(shape: tuple[int, ...], itemsize: int, n: int) -> int:
    return n if shape[0] >= 9 else 1


@pytest.mark.parametrize(("save_ps", "load_ps"), [(2, 3), (3, 1), (2, 2)])
def test_restore_with_a_different_number_of_shards(
    tmp_path: Path, save_ps: int, load_ps: int
) -> None:
    ids = np.arange(200)
    with LocalCluster(num_ps=save_ps, checkpoint_dir=str(tmp_path)) as cluster:
        s = ParameterServerStrategy(cluster.resolver, variable_partitioner=_split)
        table, small, big = _model(s)
        _train(table, small, big, np.random.default_rng(0), 5)
        saved = (table.lookup(ids), small.read().copy(), big.read().copy())
        s.save_checkpoint("ckpt-5", step=5)
        # What happens after the save must not matter.
        _train(table, small, big, np.random.default_rng(1), 2)
        after_save = [s.stats()]
        s.close()
    assert after_save
    with LocalCluster(num_ps=load_ps, checkpoint_dir=str(tmp_path)) as cluster:
        s = ParameterServerStrategy(cluster.resolver, variable_partitioner=_split)
        table, small, big = _model(s)
        s.restore_checkpoint()  # newest committed
        np.testing.assert_array_equal(table.lookup(ids), saved[0])
        np.testing.assert_array_equal(small.read(), saved[1])
        np.testing.assert_array_equal(big.read(), saved[2])
        # Slots came along: one more identical step gives identical values on both sides.
        rows = sum(v.shape[0] for shard in s.stats() for v in shard.variables if v.name == "emb")
        assert rows == 200
        s.close()


def test_keep_last_n_and_half_written_checkpoints_are_ignored(tmp_path: Path) -> None:
    with LocalCluster(num_ps=2, checkpoint_dir=str(tmp_path)) as cluster:
        s = ParameterServerStrategy(cluster.resolver)
        v = s.create_variable("v", (2,))
        for step in range(1, 5):
            v.push_gradient(np.ones(2))
            s.save_checkpoint(f"ckpt-{step}", step=step, keep=2)
        assert sorted(os.listdir(tmp_path)) == ["ckpt-3", "ckpt-4"]
        # A save that never committed (shard files only, plus a temp file).
        half = tmp_path / "ckpt-9"
        half.mkdir()
        (half / "shard-0.npz").write_bytes(b"partial")
        (half / "shard-1.npz.tmp-123").write_bytes(b"partial")
        assert checkpoint.latest(str(tmp_path)) == str(tmp_path / "ckpt-4")
        with pytest.raises(grpc.RpcError) as info:
            s.restore_checkpoint("ckpt-9")
        assert info.value.code() == grpc.StatusCode.NOT_FOUND
        assert "not saved completely" in info.value.details()
        v.push_gradient(np.ones(2))
        s.restore_checkpoint()
        np.testing.assert_allclose(v.read(), -0.04 * np.ones(2))  # 4 SGD steps of 0.01
        manifest = json.loads((tmp_path / "ckpt-4" / "MANIFEST.json").read_text())
        assert manifest["num_shards"] == 2 and manifest["step"] == 4
        assert manifest["format"] == checkpoint.FORMAT_VERSION
        s.close()


def _start_ps(port: int, token: str, ckpt: Path) -> subprocess.Popen[bytes]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("TRAINHUB_")}
    env.update(
        PYTHONPATH=str(ROOT),
        TRAINHUB_ROLE="ps",
        TRAINHUB_TASK_INDEX="0",
        TRAINHUB_BIND=f"127.0.0.1:{port}",
        TRAINHUB_JOB_TOKEN=token,
        TRAINHUB_CHECKPOINT_DIR=str(ckpt),
    )
    return subprocess.Popen(
        [sys.executable, "-m", "ps_runtime.task"],
        cwd=ROOT,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )


@pytest.mark.slow
def test_sigkill_during_save_leaves_previous_checkpoint_loadable(tmp_path: Path) -> None:
    (port,) = free_ports(1)
    token = "tok"
    address = f"127.0.0.1:{port}"
    resolver = ClusterResolver([address], ["127.0.0.1:1"], token)
    proc = _start_ps(port, token, tmp_path)
    try:
        _wait(address, token)
        s = ParameterServerStrategy(resolver)
        # 256 MiB so that writing the second checkpoint takes a while.
        v = s.create_variable("v", (64, 1 << 20), initializer=("constant", {"value": 1.0}))
        t = s.create_table("t", 8, initializer=("uniform", {"seed": 3}))
        t.push_gradients(np.arange(1000), np.ones((1000, 8)))
        expected_rows = t.lookup(np.arange(1000))
        s.save_checkpoint("ckpt-1", step=1)
        v.push_gradient(np.full((64, 1 << 20), 100.0, np.float32))  # 1 - 0.01 * 100 = 0
        future = s.ps_client._routes.servers[0].stub.SaveCheckpoint.future(
            checkpoint_request("ckpt-2", 2), metadata=s.ps_client._kw(0)["metadata"]
        )
        deadline = time.monotonic() + 30
        while not any(".tmp-" in f for _, _, fs in os.walk(tmp_path) for f in fs):
            assert time.monotonic() < deadline, "the second save never started writing"
            time.sleep(0.001)
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=10)
        with pytest.raises(grpc.RpcError):
            future.result()
        s.close()
    finally:
        if proc.poll() is None:
            proc.kill()
    assert checkpoint.latest(str(tmp_path)) == str(tmp_path / "ckpt-1")
    proc = _start_ps(port, token, tmp_path)
    try:
        _wait(address, token)
        s = ParameterServerStrategy(resolver)
        v = s.create_variable("v", (64, 1 << 20), initializer=("constant", {"value": 1.0}))
        t = s.create_table("t", 8, initializer=("uniform", {"seed": 3}))
        v.push_gradient(np.full((64, 1 << 20), 50.0, np.float32))
        s.restore_checkpoint()
        value = v.read()
        assert value.shape == (64, 1 << 20) and float(value.min()) == float(value.max()) == 1.0
        np.testing.assert_array_equal(t.lookup(np.arange(1000)), expected_rows)
        s.close()
    finally:
        proc.terminate()
        proc.wait(timeout=15)


def checkpoint_request(name: str, step: int) -> Any:
    from ps_runtime.proto import ps_pb2

    return ps_pb2.CheckpointRequest(name=name, step=step, num_shards=1)


def _wait(address: str, token: str) -> None:
    from ps_runtime.wire import rpc

    deadline = time.monotonic() + 30
    while not rpc.check_health(address, token):
        assert time.monotonic() < deadline, f"PS at {address} did not start"
        time.sleep(0.1)


@pytest.mark.parametrize(("configured", "expected"), [("0", 0.0), ("12.5", 12.5), ("", 300.0)])
def test_checkpoint_interval_comes_from_the_task_environment(
    monkeypatch: pytest.MonkeyPatch, configured: str, expected: float
) -> None:
    """A spec's `checkpoint_every_seconds: 0` means a checkpoint at every chance, not the
    default: only an unset variable falls back to 300 s."""
    from ps_runtime import taskenv
    from ps_runtime.coordinator.checkpoint_manager import CheckpointManager

    monkeypatch.setenv(taskenv.CHECKPOINT_EVERY_SECONDS.name, configured)
    assert CheckpointManager(strategy=None).every_seconds == expected
