"""What a PS shard counts about its traffic, and its `Stats` RPC answer."""

from __future__ import annotations

import threading
import time

from ps_runtime.proto import ps_pb2
from ps_runtime.server.store import ParameterStore
from ps_runtime.server.tables import StoredTable


class ServerStats:
    """Traffic and latency counters of one shard."""

    def __init__(self) -> None:
        self._lock = threading.Lock()  # guards every counter
        self.started = time.monotonic()
        self.bytes_in = 0
        self.bytes_out = 0
        self.requests = 0
        self.updates = 0
        self.update_seconds = 0.0
        self.update_max = 0.0
        self._last = (self.started, 0)

    def request(self, bytes_in: int = 0, bytes_out: int = 0) -> None:
        """Count one request and its tensor payload."""
        with self._lock:
            self.requests += 1
            self.bytes_in += bytes_in
            self.bytes_out += bytes_out

    def update(self, seconds: float) -> None:
        """Count one applied push and how long it took."""
        with self._lock:
            self.updates += 1
            self.update_seconds += seconds
            self.update_max = max(self.update_max, seconds)

    def rate(self) -> float:
        """Requests per second since the previous call."""
        now = time.monotonic()
        with self._lock:
            then, count = self._last
            self._last = (now, self.requests)
            return (self.requests - count) / max(now - then, 1e-9)


def stats_response(
    store: ParameterStore, stats: ServerStats, shard_index: int
) -> ps_pb2.StatsResponse:
    """Every variable and table of the shard with its counters, and the traffic totals."""
    out = ps_pb2.StatsResponse(shard_index=shard_index)
    parameters = 0
    for e in store.entries():
        if isinstance(e, StoredTable):
            parameters += e.size * e.dim
            c = e.counters
            out.variables.add(
                name=e.name,
                kind="table",
                shape=[e.size, e.dim],
                bytes=e.nbytes(),
                pulls=c.pulls,
                pushes=c.pushes,
                optimizer=e.optimizer.name,
                rows_evicted=c.evicted,
                rows_pending_admission=e.pending_admission,
                grads_dropped=c.dropped,
            )
        else:
            parameters += e.values.size
            out.variables.add(
                name=e.name,
                kind="dense",
                shape=list(e.spec.shape),
                bytes=e.nbytes(),
                pulls=e.pulls,
                pushes=e.pushes,
                optimizer=e.optimizer.name,
            )
    out.parameters = parameters
    out.bytes_in, out.bytes_out, out.requests = stats.bytes_in, stats.bytes_out, stats.requests
    out.requests_per_sec = stats.rate()
    out.update_latency_ms_mean = 1e3 * stats.update_seconds / max(stats.updates, 1)
    out.update_latency_ms_max = 1e3 * stats.update_max
    out.uptime_s = time.monotonic() - stats.started
    return out
