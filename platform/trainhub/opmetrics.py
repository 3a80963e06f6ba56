"""Operator metrics: what TrainHub's processes count, scraped at `/metrics` (Prometheus).

The metrics a process records as things happen live here, one definition each, so the
gateway, the live feed, telemetry and the scheduler record into the same names; what is
read from the database at scrape time (jobs by state, pending reasons, node heartbeats)
is `trainhub.api.prometheus`'s business.

Several processes (web workers, the Celery worker) write into one directory that they
share, `PROMETHEUS_MULTIPROC_DIR`, prometheus-client's multiprocess mode; `/metrics` in
any web process then sums them. The variable must be set before the process starts
(`trainhub web --workers N` and `trainhub standalone` set one; see
docs/reference/metrics.md). Without it each process reports only its own counts.
"""

from __future__ import annotations

from prometheus_client import Counter, Gauge, Histogram

CYCLE_SECONDS = Histogram(
    "trainhub_scheduling_cycle_seconds",
    "Wall time of one scheduling cycle (read, decide, write), as the Celery worker ran it.",
    buckets=(0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.0, 5.0, 10.0, 30.0),
)
CYCLE_REQUESTS = Counter(
    "trainhub_scheduling_cycle_requests",
    "Requests for a scheduling cycle: queued a cycle, or merged into one already queued.",
    ["outcome"],
)
AGENTS_CONNECTED = Gauge(
    "trainhub_agents_connected",
    "Node agents with an open /ws/agent/ socket.",
    multiprocess_mode="livesum",
)
WEBSOCKET_CLIENTS = Gauge(
    "trainhub_websocket_clients",
    "Open WebSockets by kind: agent (/ws/agent/) or browser (a job's live feed).",
    ["kind"],
    multiprocess_mode="livesum",
)
HEARTBEAT_WRITE_LAG = Histogram(
    "trainhub_heartbeat_write_lag_seconds",
    "From a heartbeat's arrival to its write to the database (the node's 'seen at').",
    buckets=(0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0),
)
INGESTED = Counter(
    "trainhub_ingested",
    "Telemetry items stored, by kind: metric_points or log_lines.",
    ["kind"],
)
OVER_BUDGET = Counter(
    "trainhub_over_budget",
    "Telemetry items dropped because their job's budget was spent, by kind.",
    ["kind"],
)
REFUSED = Counter(
    "trainhub_agent_items_refused",
    "Agent messages or items refused with an error frame, by the field named.",
    ["field"],
)
