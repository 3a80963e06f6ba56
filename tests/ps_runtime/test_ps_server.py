"""The PS service through its client: creation, pulls, pushes, errors, checkpoints."""

from __future__ import annotations

from pathlib import Path

import grpc
import numpy as np
import pytest

from ps_runtime.cluster import LocalCluster
from ps_runtime.optimizers import SGD, Adagrad
from ps_runtime.strategy import ParameterServerStrategy, create_table, create_variable


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
