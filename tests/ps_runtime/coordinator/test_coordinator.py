"""ClusterCoordinator: scheduling, results, errors, per-worker caching, worker failure."""

from __future__ import annotations

import numpy as np
import pytest

from ps_runtime.coordinator.cluster import ClusterResolver, LocalCluster
from ps_runtime.coordinator.cluster_coordinator import (
    ClosureCancelledError,
    ClosureError,
    ClusterCoordinator,
)
from ps_runtime.coordinator.strategy import ParameterServerStrategy
from ps_runtime.coordinator.worker_server import create_worker_server
from ps_runtime.server.optimizers import SGD
from ps_runtime.server.servicer import create_ps_server
from tests.ps_runtime import closure_fns


def test_schedule_fetch_join_done() -> None:
    with LocalCluster(num_workers=2) as cluster:
        strategy = ParameterServerStrategy(cluster.resolver)
        with ClusterCoordinator(strategy) as coordinator:
            values = [coordinator.schedule(closure_fns.add, (i, 10)) for i in range(20)]
            arr = coordinator.schedule(
                "tests.ps_runtime.closure_fns:add", (np.arange(3), np.ones(3))
            )
            coordinator.join()
            assert coordinator.done()
            assert [v.fetch() for v in values] == list(range(10, 30))
            np.testing.assert_array_equal(arr.fetch(), [1, 2, 3])
        strategy.close()


def test_closure_error_surfaces_with_remote_traceback() -> None:
    with LocalCluster() as cluster:
        strategy = ParameterServerStrategy(cluster.resolver)
        with ClusterCoordinator(strategy, max_in_flight_per_worker=1) as coordinator:
            bad = coordinator.schedule(closure_fns.fail, ("boom",))
            later = [coordinator.schedule(closure_fns.slow_identity, (i, 0.01)) for i in range(5)]
            with pytest.raises(ClosureError, match="ValueError: boom") as info:
                coordinator.join()
            assert "closure_fns.py" in info.value.remote_traceback
            with pytest.raises(ClosureError):
                bad.fetch()
            errors = [v for v in later if v.done()]
            assert len(errors) == 5
            assert any(isinstance(_error(v), ClosureCancelledError) for v in later)
            # the error was raised once; the coordinator keeps working
            assert coordinator.schedule(closure_fns.add, (1, 2)).fetch() == 3
        strategy.close()


def _error(value: object) -> BaseException | None:
    try:
        value.fetch()  # type: ignore[attr-defined]
    except BaseException as e:
        return e
    return None


def test_functions_must_be_importable() -> None:
    with LocalCluster() as cluster:
        strategy = ParameterServerStrategy(cluster.resolver)
        with ClusterCoordinator(strategy) as coordinator:
            with pytest.raises(ValueError, match="module level"):
                coordinator.schedule(lambda: 1)
            with pytest.raises(TypeError, match="no pickle"):
                coordinator.schedule(closure_fns.add, (object(), 1))
        strategy.close()


def test_per_worker_dataset_is_built_once_per_worker_process() -> None:
    with LocalCluster(num_workers=1) as cluster:
        strategy = ParameterServerStrategy(cluster.resolver)
        with ClusterCoordinator(strategy) as coordinator:
            ds = coordinator.create_per_worker_dataset(closure_fns.load_counter, "/data/x")
            results = [coordinator.schedule(closure_fns.read_dataset, (ds,)) for _ in range(10)]
            coordinator.join()
            loads = {r.fetch()["loads"] for r in results}
            assert len(loads) == 1
            assert {r.fetch()["path"] for r in results} == {"/data/x"}
        strategy.close()


def test_workers_push_to_tables_on_the_ps() -> None:
    with LocalCluster(num_ps=2, num_workers=2) as cluster:
        strategy = ParameterServerStrategy(cluster.resolver)
        table = strategy.create_table("t", 2, initializer="zeros", optimizer=SGD(learning_rate=1.0))
        with ClusterCoordinator(strategy) as coordinator:
            for _ in range(4):
                coordinator.schedule(
                    closure_fns.push_rows, (table, [1, 2, 2], np.ones((3, 2), np.float32))
                )
            coordinator.join()
        np.testing.assert_allclose(table.lookup(np.array([1, 2, 3])), [[-4, -4], [-8, -8], [0, 0]])
        strategy.close()


def test_unavailable_worker_closures_are_requeued_to_another() -> None:
    token = "t"
    ps, ps_port = create_ps_server(token=token)
    alive, alive_port = create_worker_server(token=token)
    dead, dead_port = create_worker_server(token=token)
    dead.stop(None).wait()  # its address now refuses connections: UNAVAILABLE
    resolver = ClusterResolver(
        [f"127.0.0.1:{ps_port}"], [f"127.0.0.1:{dead_port}", f"127.0.0.1:{alive_port}"], token
    )
    strategy = ParameterServerStrategy(resolver)
    try:
        with ClusterCoordinator(strategy) as coordinator:
            values = [coordinator.schedule(closure_fns.add, (i, 1)) for i in range(12)]
            coordinator.join(timeout=30)
            assert [v.fetch() for v in values] == list(range(1, 13))
    finally:
        strategy.close()
        alive.stop(None)
        ps.stop(None)


def test_cluster_resolver_from_env(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TRAINHUB_CLUSTER", '{"ps": ["h:1"], "worker": ["h:2", "h:3"]}')
    monkeypatch.setenv("TRAINHUB_JOB_TOKEN", "tok")
    r = ClusterResolver()
    assert r.ps == ("h:1",) and r.workers == ("h:2", "h:3") and r.token == "tok"
    monkeypatch.delenv("TRAINHUB_CLUSTER")
    with pytest.raises(RuntimeError, match="TRAINHUB_CLUSTER is not set"):
        ClusterResolver()


def test_wait_until_healthy_names_missing_tasks() -> None:
    with LocalCluster() as cluster:
        r = cluster.resolver
        r.wait_until_healthy(timeout=5)
        broken = ClusterResolver(r.ps, [*r.workers, "127.0.0.1:1"], r.token)
        with pytest.raises(TimeoutError, match=r"worker at 127\.0\.0\.1:1"):
            broken.wait_until_healthy(timeout=0.5)
