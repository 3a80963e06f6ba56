"""The gateway's storing of metric batches, in one process: CPU per point, round trips.

    .venv/bin/python bench/telemetry_ingest.py [--senders 20] [--batches 300] [--group 10]
        [--rounds 3]

On PostgreSQL and Redis instances of its own (`tests/instances.py`), `--senders` nodes
with a running task each (of jobs of their own, as bench/telemetry.py's senders); then
the same columnar batches as those senders send (1,000 points of `loss`, parsed as the
gateway parses them), round-robin over the tasks, stored in alternating rounds:
- `single`: each batch alone (`agents.services.ingest_batch`, as the data lane stored
  them before group commit);
- `group`: `--group` batches of different nodes at a time (`agents.groups.store_group`,
  the data lane's group commit), skipped in a tree without it.

Prints per mode the median over rounds of the CPU of this process per point (µs: the
storing, not the socket's JSON), the wall time per batch (ms), and the round trips to
PostgreSQL per batch: statements Django sends (savepoints included) plus each
transaction's BEGIN and COMMIT. Then `logs`: `--batches` log batches of `LOG_LINES`
training-like lines each, round-robin over the tasks, stored by `telemetry.services.
ingest_logs` (one chunk each), `--group` to a transaction as the data lane commits
them: lines stored per second and PostgreSQL bytes per stored line (the log table, its
TOAST and its indexes).
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT / "platform"), str(ROOT), str(ROOT / "bench")]

from telemetry_agents import BATCH_POINTS, _batch  # noqa: E402

from tests.instances import instances  # noqa: E402


class Trips:
    """Round trips of the default connection: statements, and BEGIN + COMMIT (or
    ROLLBACK) of each transaction."""

    def __init__(self) -> None:
        self.count = 0

    def __call__(self, execute: Any, sql: str, params: Any, many: bool, context: Any) -> Any:
        self.count += 1
        return execute(sql, params, many, context)

    def install(self) -> None:
        from django.db import connection

        connection.ensure_connection()
        for name in ("_commit", "_rollback"):
            original = getattr(connection, name)

            def ended(original: Any = original) -> Any:
                if connection.connection.info.transaction_status:  # not idle: BEGIN was sent
                    self.count += 2
                return original()

            setattr(connection, name, ended)
        connection.execute_wrappers.append(self)


def _messages(tasks: list[dict[str, int]], batches: int, round_: int) -> list[Any]:
    from ps_runtime.agent.delivery import receive

    out = []
    for i in range(batches):
        task = tasks[i % len(tasks)]
        step = (round_ * batches + i) // len(tasks) * BATCH_POINTS
        out.append(receive(json.loads(_batch(step, i + 1, task))).message)
    return out


def run(senders: int, batches: int, group: int, rounds: int) -> dict[str, Any]:
    with instances() as inst:
        os.environ.update(
            DATABASE_URL=inst.database_url,
            REDIS_URL=inst.redis_url,
            DJANGO_SETTINGS_MODULE="trainhub.settings",
        )
        import django
        from django.core.management import call_command

        django.setup()
        call_command("migrate", verbosity=0)
        from django.utils import timezone
        from telemetry import simulated_nodes
        from trainhub.agents import services
        from trainhub.jobs.models import Task

        # None in the tree before group commit.
        grouped = importlib.util.find_spec("trainhub.agents.groups") is not None
        _, _, tasks = simulated_nodes("alice", "recsys", senders, senders)
        node_of = dict(Task.objects.values_list("pk", "node_id"))
        trips = Trips()
        trips.install()
        found: dict[str, list[tuple[float, float, float]]] = {"single": [], "group": []}
        for round_ in range(rounds * 2):
            mode = ("single", "group")[round_ % 2]
            if mode == "group" and not grouped:
                continue
            messages = _messages(tasks, batches, round_)
            trips.count = 0
            cpu, wall = time.process_time(), time.perf_counter()
            if mode == "single":
                for m in messages:
                    now = timezone.now()
                    services.ingest_batch(node_id=node_of[m.task.id], messages=[m], now=now)
            else:
                from trainhub.agents.groups import store_group

                for i in range(0, batches, group):
                    part = [
                        services.DataBatch(node_of[m.task.id], [m], timezone.now())
                        for m in messages[i : i + group]
                    ]
                    assert all(isinstance(o, list) for o in store_group(part))
            cpu, wall = time.process_time() - cpu, time.perf_counter() - wall
            found[mode].append(
                (cpu / (batches * BATCH_POINTS) * 1e6, wall / batches * 1e3, trips.count / batches)
            )
        logs = _logs(tasks, batches, group)
        from django.db import connection

        connection.close()
    return {
        "logs": logs,
        **{
            mode: {
                "cpu_us_per_point": round(statistics.median(r[0] for r in runs), 2),
                "ms_per_batch": round(statistics.median(r[1] for r in runs), 2),
                "round_trips_per_batch": round(statistics.median(r[2] for r in runs), 2),
            }
            for mode, runs in found.items()
            if runs
        },
    }


LOG_LINES = 100


def _logs(tasks: list[dict[str, int]], batches: int, group: int) -> dict[str, float]:
    """Store `batches` log batches, `group` to a transaction (the data lane's group
    commit); lines per second and bytes per stored line."""
    from django.db import connection, transaction
    from django.utils import timezone
    from trainhub.jobs.models import Task
    from trainhub.telemetry.models import LogChunk
    from trainhub.telemetry.services import ingest_logs

    found = Task.objects.in_bulk([t["id"] for t in tasks])
    wall = time.perf_counter()
    for start in range(0, batches, group):
        with transaction.atomic():
            for i in range(start, min(batches, start + group)):
                task = found[tasks[i % len(tasks)]["id"]]
                lines = [
                    f"epoch {i} step {i * LOG_LINES + k} loss {1.0 / (k + i + 1):.6f} lr 0.001"
                    for k in range(LOG_LINES)
                ]
                ingest_logs(task=task, stream="stdout", lines=lines, now=timezone.now())
    wall = time.perf_counter() - wall
    with connection.cursor() as cursor:
        cursor.execute("VACUUM ANALYZE " + LogChunk._meta.db_table)
        cursor.execute("SELECT pg_total_relation_size(%s)", [LogChunk._meta.db_table])
        size = cursor.fetchone()[0]
    return {
        "lines_per_s": round(batches * LOG_LINES / wall),
        "bytes_per_line": round(size / (batches * LOG_LINES), 1),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--senders", type=int, default=20)
    parser.add_argument("--batches", type=int, default=300)
    parser.add_argument("--group", type=int, default=10)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    result = run(args.senders, args.batches, args.group, args.rounds)
    print(json.dumps({"args": vars(args), **result}))


if __name__ == "__main__":
    main()
