"""Replicated PS shards: PS processes killed with SIGKILL while a client pushes.

The table and the dense variable use SGD with learning rate 1 from zeros, and the
gradients are small integers, so after any set of pushes each value is exactly minus the
sum of the gradients pushed to it: the state must equal a replay of every push whose
call returned (acknowledged), no more and no less.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import grpc
import numpy as np
import pytest

from ps_runtime.client.client import PSClient
from ps_runtime.launch.local import free_ports
from ps_runtime.shards.replicas import Replicas
from ps_runtime.wire import rpc
from tests.ps_runtime.launch.test_fault_tolerance import run_movielens

REPO = Path(__file__).resolve().parents[3]
TOKEN = "replication-test-token"
IDS = 400  # table rows, spread over every shard
DIM = 4


class Servers:
    """PS processes of one job, started the way the launcher starts them."""

    def __init__(self, count: int, replication: int) -> None:
        self.addresses = [f"127.0.0.1:{p}" for p in free_ports(count)]
        self.cluster = {"ps": self.addresses, "worker": [], "replication": replication}
        self.procs: dict[int, subprocess.Popen[bytes]] = {}
        for i in range(count):
            self.start(i)
        for i in range(count):
            self.wait_serving(i)

    def start(self, index: int, rejoin: bool = False) -> None:
        env = dict(
            os.environ,
            PYTHONPATH=str(REPO),
            TRAINHUB_JOB_ID="r",
            TRAINHUB_TASK_ID=f"ps{index}",
            TRAINHUB_ROLE="ps",
            TRAINHUB_TASK_INDEX=str(index),
            TRAINHUB_CLUSTER=json.dumps(self.cluster),
            TRAINHUB_JOB_TOKEN=TOKEN,
            TRAINHUB_BIND=self.addresses[index],
        )
        if rejoin:
            env["TRAINHUB_PS_REJOIN"] = "1"
        self.procs[index] = subprocess.Popen(
            [sys.executable, "-m", "ps_runtime.task"], env=env, cwd=REPO
        )

    def wait_serving(self, index: int, timeout: float = 60.0) -> None:
        deadline = time.monotonic() + timeout
        while not rpc.check_health(self.addresses[index], TOKEN):
            assert self.procs[index].poll() is None, f"ps {index} exited"
            assert time.monotonic() < deadline, f"ps {index} not serving after {timeout}s"
            time.sleep(0.1)

    def move(self, index: int) -> subprocess.Popen[bytes]:
        """Start server `index` afresh on a new port (a replacement on another node, as
        the platform moves a server); return the old process, still running."""
        old = self.procs[index]
        self.addresses[index] = f"127.0.0.1:{free_ports(1)[0]}"
        self.start(index, rejoin=True)
        return old

    def kill(self, index: int) -> None:
        self.procs[index].send_signal(signal.SIGKILL)
        self.procs[index].wait()

    def stop(self) -> None:
        for p in self.procs.values():
            if p.poll() is None:
                p.kill()
                p.wait()


@pytest.fixture
def servers_r1() -> Iterator[Servers]:
    s = Servers(3, 1)
    yield s
    s.stop()


@pytest.fixture
def servers_r2() -> Iterator[Servers]:
    s = Servers(3, 2)
    yield s
    s.stop()


class Pusher:
    """Pushes integer gradients from a thread and keeps every acknowledged one."""

    def __init__(self, client: PSClient) -> None:
        self.client = client
        self.table_sum = np.zeros((IDS, DIM))
        self.dense_sum = np.zeros(8)
        self.acknowledged = 0
        self.errors: list[BaseException] = []
        self._rng = np.random.default_rng(0)
        self._stop = threading.Event()
        self._go = threading.Event()  # cleared: no new push starts
        self._go.set()
        self._idle = threading.Event()  # set while paused between pushes
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.is_set():
            if not self._go.is_set():
                self._idle.set()
                self._go.wait()
                self._idle.clear()
            ids = self._rng.choice(IDS, size=64, replace=False)
            grads = self._rng.integers(-3, 4, size=(64, DIM)).astype(np.float32)
            dense = self._rng.integers(-3, 4, size=8).astype(np.float32)
            try:
                self.client.push_rows("emb", ids, grads)
                self.table_sum[ids] += grads
                self.client.push_dense(self.client_shard, "w", dense)
                self.dense_sum += dense
                self.acknowledged += 1
            except BaseException as e:  # the test fails on any
                self.errors.append(e)
                return

    client_shard = 1

    def __enter__(self) -> Pusher:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(timeout=60)

    @contextlib.contextmanager
    def paused(self) -> Iterator[None]:
        """No push in flight inside the block."""
        self._go.clear()
        assert self._idle.wait(timeout=30), "the pusher did not pause"
        try:
            yield
        finally:
            self._go.set()

    def pushes_after(self, count: int, timeout: float = 30.0) -> None:
        """Wait until `count` more pushes were acknowledged."""
        target = self.acknowledged + count
        deadline = time.monotonic() + timeout
        while self.acknowledged < target:
            assert not self.errors, f"a push failed: {self.errors[0]!r}"
            assert time.monotonic() < deadline, "pushes stalled"
            time.sleep(0.02)


def _client(servers: Servers, replication: int) -> PSClient:
    client = PSClient(servers.addresses, TOKEN, timeout=30, replication=replication)
    sgd = ("sgd", {"learning_rate": 1.0})
    client.create_table("emb", DIM, np.float32, ("zeros", {}), sgd)
    client.create_variable(1, "w", (8,), np.float32, ("zeros", {}), sgd)
    return client


def _assert_state_is_the_replay(client: PSClient, pusher: Pusher) -> None:
    assert not pusher.errors, f"a push failed: {pusher.errors[0]!r}"
    rows = client.pull_rows("emb", np.arange(IDS), DIM, np.float32)
    np.testing.assert_array_equal(rows, -pusher.table_sum)
    np.testing.assert_array_equal(client.pull_dense(1, "w"), -pusher.dense_sum)


def test_a_killed_primary_loses_no_acknowledged_update_and_its_replacement_serves(
    servers_r1: Servers,
) -> None:
    servers = servers_r1
    client = _client(servers, 1)
    with Pusher(client) as pusher:
        pusher.pushes_after(20)
        servers.kill(1)  # primary of shard 1 (the dense variable and a third of the rows)
        killed = time.monotonic()
        pusher.pushes_after(1)
        failover_s = time.monotonic() - killed
        pusher.pushes_after(20)
        servers.start(1, rejoin=True)  # copies shards 1 and 0 from live replicas
        servers.wait_serving(1)
        pusher.pushes_after(20)
        # The replacement is a backup now: kill the server that took over shard 1.
        servers.kill(2)
        pusher.pushes_after(20)
    assert failover_s < 2.0, f"the first push after the kill took {failover_s:.2f}s"
    assert client._routes.server(1) == 1  # shard 1 is answered by the replacement again
    _assert_state_is_the_replay(client, pusher)
    client.close()


def test_a_server_moved_to_another_address_keeps_every_update(servers_r1: Servers) -> None:
    servers = servers_r1
    client = _client(servers, 1)
    with Pusher(client) as pusher:
        pusher.pushes_after(20)
        old = servers.move(1)  # the replacement copies shards 1 and 0 from servers 2 and 0
        old.send_signal(signal.SIGTERM)  # the platform stops the old one meanwhile
        assert old.wait(timeout=30) == 0
        pusher.pushes_after(20)
        servers.wait_serving(1)
        client.move(servers.addresses)  # the coordinator reads the new cluster file
        pusher.pushes_after(20)
        # Server 0 learnt the new address when the replacement joined it: with server 0
        # gone, shard 0 lives on the moved server alone, with every update.
        servers.kill(0)
        pusher.pushes_after(20)
    assert client.addresses[1] == servers.addresses[1]
    _assert_state_is_the_replay(client, pusher)
    client.close()


class _Cancelling(grpc.GenericRpcHandler):
    """A server that cancels every call, as a stopping gRPC server cancels the calls it
    had received but not started (a moved server's old process, stopped by SIGTERM)."""

    def service(self, details: grpc.HandlerCallDetails) -> grpc.RpcMethodHandler:
        def cancel(request: Any, context: grpc.ServicerContext) -> Any:
            context.abort(grpc.StatusCode.CANCELLED, "CANCELLED")

        method = str(details.method)
        if method.endswith("Stream") and "Pull" in method:
            return grpc.unary_stream_rpc_method_handler(cancel)
        if method.endswith("Stream"):
            return grpc.stream_unary_rpc_method_handler(cancel)
        return grpc.unary_unary_rpc_method_handler(cancel)


def _fails_over_from(servers: Servers, impostor: grpc.Server) -> None:
    """Point server 1 (primary of shard 1) at `impostor` while pushes go on: its calls go
    on to server 2, the shard's backup, with no error for the caller and no update lost."""
    client = _client(servers, 1)
    port = impostor.add_insecure_port("127.0.0.1:0")
    impostor.start()
    try:
        with Pusher(client) as pusher:
            pusher.pushes_after(5)
            client.move([*servers.addresses[:1], f"127.0.0.1:{port}", servers.addresses[2]])
            pusher.pushes_after(20)
        assert client._routes.server(1) == 2
        _assert_state_is_the_replay(client, pusher)
    finally:
        impostor.stop(0)
        client.close()


def test_calls_cancelled_by_a_stopping_server_fail_over(servers_r1: Servers) -> None:
    _fails_over_from(servers_r1, grpc.server(ThreadPoolExecutor(2), handlers=[_Cancelling()]))


def test_with_replication_two_two_servers_die_one_after_the_other(servers_r2: Servers) -> None:
    servers = servers_r2
    client = _client(servers, 2)
    with Pusher(client) as pusher:
        pusher.pushes_after(20)
        servers.kill(0)
        pusher.pushes_after(20)
        servers.kill(1)  # server 2 holds every shard alone now
        pusher.pushes_after(20)
        with pusher.paused():
            _assert_state_is_the_replay(client, pusher)
        servers.start(0, rejoin=True)
        servers.start(1, rejoin=True)
        servers.wait_serving(0)
        servers.wait_serving(1)
        pusher.pushes_after(20)
        servers.kill(2)  # only the two replacements are left
        pusher.pushes_after(20)
    _assert_state_is_the_replay(client, pusher)
    client.close()


def test_a_replacement_with_no_live_replica_refuses_to_start_empty(servers_r1: Servers) -> None:
    servers = servers_r1
    client = _client(servers, 1)
    client.push_dense(1, "w", np.ones(8, np.float32))
    servers.kill(1)
    servers.kill(2)  # shard 1 lived on servers 1 and 2: both gone
    env_timeout = time.monotonic()
    servers.start(1, rejoin=True)
    code = servers.procs[1].wait(timeout=90)
    assert code == 75, "a replacement started with none of its shard's updates"  # EXIT_PS_LOST
    assert time.monotonic() - env_timeout < 90
    client.close()


def test_chains_put_each_shard_on_its_primary_and_the_next_servers() -> None:
    r = Replicas(3, 2)
    assert r.chain(0) == (0, 1, 2) and r.chain(2) == (2, 0, 1)
    assert r.hosted(0) == (0, 2, 1)
    assert Replicas(4, 1).hosted(0) == (0, 3)
    for bad in ((2, 2), (3, 3), (1, 1)):
        with pytest.raises(ValueError, match="replication"):
            Replicas(*bad)


def test_launch_with_replication_survives_a_killed_ps_without_a_restart() -> None:
    clean = run_movielens(ps=3, workers=2, launch_args=("--replication", "1"))
    disturbed = run_movielens(
        ps=3, workers=2, launch_args=("--replication", "1"), kill=("ps", 0, 3)
    )
    for run in (clean, disturbed):
        assert run.code == 0 and run.result is not None, run.output[-4000:]
        assert run.result["completed_steps"] == run.result["steps"]
    assert "starting a replacement" in disturbed.output
    assert "copied" in disturbed.output, disturbed.output[-4000:]
    assert "resumed from checkpoint" not in disturbed.output
    assert clean.result is not None and disturbed.result is not None
    assert abs(disturbed.result["test_rmse"] - clean.result["test_rmse"]) <= 0.01


def test_another_jobs_server_at_a_moved_servers_old_address_is_failed_over(
    servers_r1: Servers,
) -> None:
    """After a move the old port may be bound by a server of another job (the platform
    reuses ports): it refuses this job's token, and the calls go on to the shard's backup."""
    other_job = grpc.server(
        ThreadPoolExecutor(2),
        handlers=[_Cancelling()],
        interceptors=[rpc.BearerAuthInterceptor("another-jobs-token")],
    )
    _fails_over_from(servers_r1, other_job)


def test_a_token_every_replica_refuses_fails_the_call_at_once(servers_r1: Servers) -> None:
    client = PSClient(servers_r1.addresses, "not-this-jobs-token", timeout=30, replication=1)
    started = time.monotonic()
    with pytest.raises(grpc.RpcError) as refused:
        client.pull_dense(1, "w")
    assert refused.value.code() == grpc.StatusCode.UNAUTHENTICATED
    assert time.monotonic() - started < 5  # not after the whole failover window
    client.close()
