"""The PS service through its client: creation, pulls, pushes, errors, checkpoints."""

from __future__ import annotations

from pathlib import Path

import grpc
import numpy as np
import pytest

from ps_runtime.coordinator.cluster import LocalCluster
from ps_runtime.coordinator.strategy import ParameterServerStrategy, create_table, create_variable
from ps_runtime.proto import ps_pb2
from ps_runtime.server.optimizers import SGD, Adagrad
from ps_runtime.shards.sharding import min_size_partitioner
from ps_runtime.wire.codec import encode_tensor


def test_dense_variable_pull_push_and_stats() -> None:
    with LocalCluster(num_ps=2, num_workers=1) as cluster:
        strategy = ParameterServerStrategy(cluster.resolver)
        with strategy.scope():
            v = create_variable(
                "w", initial_value=np.ones((2, 3), np.float32), optimizer=SGD(learning_rate=0.5)
            )
            t = create_table("t", 2, initializer=("constant", {"value": 1.0}))
        np.testing.assert_array_equal(v.read(), np.ones((2, 3)))
        assert v.push_gradient(np.full((2, 3), 2.0)) == 1
        np.testing.assert_allclose(v.read(), np.zeros((2, 3)))
        np.testing.assert_array_equal(t.lookup(np.array([10, 11])), np.ones((2, 2)))
        stats = {var.name: var for shard in strategy.stats() for var in shard.variables}
        assert stats["w"].pushes == 1 and stats["w"].kind == "dense"
        assert stats["t"].kind == "table"
        strategy.close()


def test_recreate_is_idempotent_but_mismatch_is_rejected() -> None:
    with LocalCluster() as cluster:
        strategy = ParameterServerStrategy(cluster.resolver)
        strategy.create_table("t", 4)
        strategy.create_table("t", 4)
        with pytest.raises(grpc.RpcError) as info:
            strategy.create_table("t", 5)
        assert info.value.code() == grpc.StatusCode.ALREADY_EXISTS
        assert "already exists" in info.value.details()
        strategy.close()


def test_unknown_variable_and_bad_push_are_clear_errors() -> None:
    with LocalCluster() as cluster:
        strategy = ParameterServerStrategy(cluster.resolver)
        t = strategy.create_table("t", 3)
        with pytest.raises(grpc.RpcError) as info:
            strategy.ps_client.pull_dense(0, "missing")
        assert info.value.code() == grpc.StatusCode.NOT_FOUND
        assert "create it first" in info.value.details()
        with pytest.raises(grpc.RpcError) as info:
            strategy.ps_client.push_rows("t", np.array([1]), np.ones((1, 2)))
        assert info.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        with pytest.raises(grpc.RpcError) as info:
            strategy.create_table("u", 3, initializer="glorot")
        assert "choose one of" in info.value.details()
        assert t.lookup(np.array([1])).shape == (1, 3)
        strategy.close()


def test_scope_is_required_for_module_level_creation() -> None:
    with pytest.raises(RuntimeError, match=r"strategy\.scope"):
        create_table("t", 2)


def test_checkpoint_save_and_restore(tmp_path: Path) -> None:
    with LocalCluster(num_ps=2, checkpoint_dir=str(tmp_path)) as cluster:
        strategy = ParameterServerStrategy(cluster.resolver)
        t = strategy.create_table("t", 2, optimizer=Adagrad(learning_rate=0.1))
        v = strategy.create_variable("v", (3,), initializer=("uniform", {"seed": 2}))
        ids = np.array([1, 2, 3, 40])
        t.push_gradients(ids, np.ones((4, 2)))
        saved_rows, saved_v = t.lookup(ids), v.read().copy()
        paths = strategy.save_checkpoint("step-1")
        assert len(paths) == 2 and all(Path(p).exists() for p in paths)
        t.push_gradients(ids, np.ones((4, 2)))
        v.push_gradient(np.ones(3))
        strategy.restore_checkpoint("step-1")
        np.testing.assert_array_equal(t.lookup(ids), saved_rows)
        np.testing.assert_array_equal(v.read(), saved_v)
        with pytest.raises(grpc.RpcError) as info:
            strategy.save_checkpoint("../escape")
        assert info.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        strategy.close()


def test_checkpoint_without_directory_says_how_to_fix() -> None:
    with LocalCluster() as cluster:
        strategy = ParameterServerStrategy(cluster.resolver)
        with pytest.raises(grpc.RpcError) as info:
            strategy.save_checkpoint("x")
        assert "TRAINHUB_CHECKPOINT_DIR" in info.value.details()
        strategy.close()


def test_large_dense_variables_stream_in_chunks_and_split_over_shards() -> None:
    with LocalCluster(num_ps=2) as cluster:
        strategy = ParameterServerStrategy(
            cluster.resolver, variable_partitioner=min_size_partitioner(1 << 20)
        )
        strategy.ps_client.chunk_bytes = 256 * 1024  # many chunks per part
        value = np.arange(3 * (1 << 20), dtype=np.float32).reshape(-1, 1024)  # 12 MiB
        v = strategy.create_variable("big", initial_value=value, optimizer=SGD(learning_rate=1.0))
        assert [s for s, _, _ in v.parts] == [0, 1]
        np.testing.assert_array_equal(v.read(), value)
        v.push_gradient(np.ones_like(value))
        np.testing.assert_array_equal(v.read(), value - 1)
        buffer = np.empty_like(value)
        assert v.read(out=buffer) is buffer
        np.testing.assert_array_equal(buffer, value - 1)
        stats = strategy.stats()
        assert sum(s.bytes_out for s in stats) >= 2 * value.nbytes
        assert sum(s.bytes_in for s in stats) >= 2 * value.nbytes
        assert all(s.update_latency_ms_mean > 0 for s in stats)
        assert sum(s.parameters for s in stats) == value.size
        strategy.close()


def test_too_large_and_malformed_requests_get_clear_errors() -> None:
    with LocalCluster() as cluster:
        strategy = ParameterServerStrategy(cluster.resolver)
        strategy.create_variable("v", (4,))
        stub = strategy.ps_client._routes.servers[0].stub
        md = strategy.ps_client._kw(0)["metadata"]
        huge = ps_pb2.PushDenseRequest(
            name="v", grad=ps_pb2.Tensor(dtype="<f4", shape=[1], data=b"\0" * (40 << 20))
        )
        with pytest.raises(grpc.RpcError) as info:
            stub.PushDenseGrad(huge, metadata=md, timeout=30)
        assert info.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
        bad = ps_pb2.PushDenseRequest(
            name="v", grad=ps_pb2.Tensor(dtype="<f4", shape=[4], data=b"x")
        )
        with pytest.raises(grpc.RpcError) as info:
            stub.PushDenseGrad(bad, metadata=md, timeout=30)
        assert info.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert "needs 16 bytes" in info.value.details()
        chunk = ps_pb2.PushDenseChunk(
            name="v", chunk=ps_pb2.TensorChunk(dtype="<f4", shape=[4], offset=3, data=b"\0" * 8)
        )
        with pytest.raises(grpc.RpcError) as info:
            stub.PushDenseStream(iter([chunk]), metadata=md, timeout=30)
        assert info.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert "outside" in info.value.details()
        np.testing.assert_array_equal(strategy.ps_client.pull_dense(0, "v"), np.zeros(4))
        strategy.close()


def test_a_retransmitted_push_is_applied_once() -> None:
    with LocalCluster() as cluster:
        strategy = ParameterServerStrategy(cluster.resolver, optimizer=SGD(learning_rate=1.0))
        t = strategy.create_table("t", 2, initializer="zeros")
        client = strategy.ps_client
        origin = ps_pb2.PushOrigin(worker="w0", incarnation=1, sequence=7)
        req = ps_pb2.PushRowsRequest(
            name="t",
            ids=encode_tensor(np.array([3])),
            grads=encode_tensor(np.ones((1, 2), np.float32)),
            origin=origin,
        )
        replies = [
            client._routes.servers[0].stub.PushRowGrads(req, **client._kw(0)) for _ in range(2)
        ]
        assert [r.duplicate for r in replies] == [False, True]
        np.testing.assert_array_equal(t.lookup(np.array([3])), [[-1.0, -1.0]])
        # A new incarnation of the same worker starts a fresh sequence space.
        req.origin.incarnation = 2
        client._routes.servers[0].stub.PushRowGrads(req, **client._kw(0))
        np.testing.assert_array_equal(t.lookup(np.array([3])), [[-2.0, -2.0]])
        strategy.close()


def test_learning_rate_changes_live_and_duplicates_are_summed() -> None:
    with LocalCluster(num_ps=2) as cluster:
        strategy = ParameterServerStrategy(cluster.resolver, optimizer=SGD(learning_rate=1.0))
        t = strategy.create_table("t", 1, initializer="zeros")
        t.push_gradients(np.array([4, 4, 9, 4]), np.array([[1.0], [2.0], [5.0], [3.0]]))
        np.testing.assert_array_equal(t.lookup(np.array([4, 9])), [[-6.0], [-5.0]])
        assert strategy.set_learning_rate(0.5) == 2  # the table's part on each shard
        t.push_gradients(np.array([9]), np.array([[2.0]]))
        np.testing.assert_array_equal(t.lookup(np.array([9])), [[-6.0]])
        with pytest.raises(grpc.RpcError) as info:
            strategy.ps_client.set_hyperparams({"beta1": 0.5})
        assert "allowed" in info.value.details()
        strategy.close()


def test_delayed_model_updating_pushes_every_k_steps() -> None:
    with LocalCluster() as cluster:
        strategy = ParameterServerStrategy(cluster.resolver, optimizer=SGD(learning_rate=1.0))
        t = strategy.create_table("t", 1, initializer="zeros", accumulate_steps=3)
        for _ in range(2):
            t.push_gradients(np.array([1]), np.array([[1.0]]))
        np.testing.assert_array_equal(t.lookup(np.array([1])), [[0.0]])
        t.push_gradients(np.array([1, 2]), np.array([[1.0], [4.0]]))
        np.testing.assert_array_equal(t.lookup(np.array([1, 2])), [[-3.0], [-4.0]])
        strategy.close()


def test_overlapped_pulls_and_table_lifecycle_over_rpc() -> None:
    with LocalCluster(num_ps=2) as cluster:
        strategy = ParameterServerStrategy(cluster.resolver)
        t = strategy.create_table("t", 3, admit_after=2, max_rows_per_shard=80)
        pending = t.lookup_async(np.arange(10))
        rows = pending.result()
        assert rows.shape == (10, 3)
        t.lookup(np.arange(200))
        stats = [v for s in strategy.stats() for v in s.variables]
        assert sum(v.shape[0] for v in stats) == 10  # only ids seen twice got rows
        for start in range(0, 1000, 100):
            t.lookup(np.arange(start, start + 100))
            t.lookup(np.arange(start, start + 100))
        stats = [v for s in strategy.stats() for v in s.variables]
        assert all(v.shape[0] <= 80 for v in stats)
        assert sum(v.rows_evicted for v in stats) > 0
        strategy.close()


def test_push_log_is_exact_and_bounded() -> None:
    from ps_runtime.server.store import PushLog

    log = PushLog()
    assert log.first_time("w", 1, 5, "a") and log.first_time("w", 1, 5, "b")
    assert not log.first_time("w", 1, 5, "a")
    log.forget("w", 1, 5, "a")
    assert log.first_time("w", 1, 5, "a")
    assert log.first_time("", 0, 0, "a") and log.first_time("", 0, 0, "a")  # anonymous
    for i in range(PushLog.MAX_ORIGINS + 10):
        log.first_time(f"worker-{i}", 1, 1, "a")
    assert len(log._seen) == PushLog.MAX_ORIGINS
