"""Where the cluster's tasks are: ClusterResolver, health waits and in-process clusters."""

from __future__ import annotations

import secrets
import time
from collections.abc import Sequence
from typing import Any

from ps_runtime import taskenv
from ps_runtime.shards.replicas import Replicas
from ps_runtime.wire import rpc


class ClusterResolver:
    """PS and worker addresses plus the job token.

    With no arguments it reads TRAINHUB_CLUSTER (`{"ps": [...], "worker": [...],
    "replication": R}`) and TRAINHUB_JOB_TOKEN, as set by the agent or
    `python -m ps_runtime.launch`. `replication` is how many backups each PS shard has.
    """

    def __init__(
        self,
        ps: Sequence[str] | None = None,
        workers: Sequence[str] | None = None,
        token: str | None = None,
        replication: int = 0,
    ) -> None:
        if ps is None and workers is None:
            spec = _cluster_from_env()
            ps, workers, replication = spec.ps, spec.worker, spec.replication
        self.replication = replication
        self.ps = tuple(ps or ())
        self.workers = tuple(workers or ())
        self.token = token if token is not None else rpc.token_from_env()
        if not self.ps:
            raise ValueError("the cluster has no 'ps' addresses; a job needs at least one PS")
        if not self.workers:
            raise ValueError("the cluster has no 'worker' addresses; a job needs a worker")

    def __repr__(self) -> str:
        return f"ClusterResolver(ps={list(self.ps)}, workers={list(self.workers)})"

    def wait_until_healthy(self, timeout: float = 60.0, poll: float = 0.2) -> None:
        """Block until every PS and worker answers its health check.

        Raises:
            TimeoutError: naming each task still not serving after `timeout` seconds.
        """
        pending = {
            a: role for role, addrs in (("ps", self.ps), ("worker", self.workers)) for a in addrs
        }
        deadline = time.monotonic() + timeout
        while pending:
            for address in list(pending):
                if rpc.check_health(address, self.token, timeout=min(1.0, timeout)):
                    del pending[address]
            if not pending:
                return
            if time.monotonic() >= deadline:
                missing = ", ".join(f"{role} at {a}" for a, role in pending.items())
                raise TimeoutError(
                    f"not serving after {timeout:.0f}s: {missing}; check that those tasks "
                    "started, listen on that address and share TRAINHUB_JOB_TOKEN"
                )
            time.sleep(poll)

    def unavailable_ps(self, timeout: float = 1.0) -> list[tuple[int, str]]:
        """(shard index, address) of every PS that does not answer its health check.

        With replication, a shard counts only when none of its replicas answers.
        """
        down = {
            i for i, a in enumerate(self.ps) if not rpc.check_health(a, self.token, timeout=timeout)
        }
        chains = Replicas(len(self.ps), self.replication)
        return [(s, self.ps[s]) for s in range(len(self.ps)) if set(chains.chain(s)) <= down]


def _cluster_from_env() -> taskenv.ClusterSpec:
    return taskenv.CLUSTER.require(
        why="pass addresses to ClusterResolver(ps=[...], workers=[...], token=...) or run "
        "under the agent or `python -m ps_runtime.launch`"
    )


class LocalCluster:
    """PS shards and workers as gRPC servers inside this process, on free loopback ports.

    For tests and notebooks; `python -m ps_runtime.launch` runs real processes.
    """

    def __init__(
        self,
        num_ps: int = 1,
        num_workers: int = 1,
        token: str | None = None,
        checkpoint_dir: str | None = None,
    ) -> None:
        from ps_runtime.coordinator.worker_server import create_worker_server
        from ps_runtime.server.servicer import create_ps_server

        self.token = token or secrets.token_urlsafe(24)
        self._servers: list[Any] = []
        ps, workers = [], []
        for i in range(num_ps):
            server, port = create_ps_server(
                token=self.token, shard_index=i, checkpoint_dir=checkpoint_dir
            )
            self._servers.append(server)
            ps.append(f"127.0.0.1:{port}")
        for _ in range(num_workers):
            server, port = create_worker_server(token=self.token)
            self._servers.append(server)
            workers.append(f"127.0.0.1:{port}")
        self.resolver = ClusterResolver(ps, workers, self.token)

    def stop(self, grace: float | None = None) -> None:
        """Stop every server."""
        for s in self._servers:
            s.stop(grace)

    def __enter__(self) -> LocalCluster:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()
