"""What bench/telemetry.py measures besides round trips: CPU and memory of processes (from
/proc) and the PostgreSQL bytes a stored metric point takes."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path
from typing import Any


def _peak_rss_mb(pids: list[int]) -> float:
    total = 0.0
    for pid in pids:
        try:
            for line in Path(f"/proc/{pid}/status").read_text().splitlines():
                if line.startswith("VmHWM:"):
                    total = max(total, int(line.split()[1]) / 1024)
        except OSError:
            continue
    return round(total, 1)


def _web_pids(parent: int) -> list[int]:
    out = subprocess.run(["pgrep", "-P", str(parent)], capture_output=True, text=True).stdout
    return [parent, *map(int, out.split())]


def _postgres_pids() -> list[int]:
    """The private PostgreSQL's server and backends (children of its postmaster)."""
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_backend_pid()")
        backend = cursor.fetchone()[0]
        # Read while the backend lives: once the connection closes, it exits.
        stat = Path(f"/proc/{backend}/stat").read_text()
    connection.close()
    return _web_pids(int(stat.rsplit(")", 1)[1].split()[1]))


def _cpu_s(pids: list[int]) -> float:
    ticks = os.sysconf("SC_CLK_TCK")
    total = 0
    for pid in pids:
        try:
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        total += int(fields[11]) + int(fields[12])  # utime, stime
    return total / ticks


def chunk_storage(jobs: dict[str, list[int]]) -> dict[str, Any]:
    """The chunk table's size on disk (table, indexes and TOAST) per point stored, and
    per group of `jobs` the encoded bytes per point (what the codec makes of its series,
    before row and index overhead)."""
    from django.db import connection
    from trainhub.telemetry.models import MetricChunk

    table = MetricChunk._meta.db_table
    with connection.cursor() as cursor:
        cursor.execute(
            f"SELECT pg_total_relation_size(%s), pg_relation_size(%s),"
            f" COALESCE(SUM(count), 0), COUNT(*) FROM {table}",
            [table, table],
        )
        total, heap, points, chunks = cursor.fetchone()
        groups = {}
        for name, ids in jobs.items():
            cursor.execute(
                f"SELECT COALESCE(SUM(octet_length(data)), 0), COALESCE(SUM(count), 0)"
                f" FROM {table} WHERE job_id = ANY(%s)",
                [ids],
            )
            data, count = cursor.fetchone()
            groups[name] = {
                "points": count,
                "data_bytes_per_point": round(data / count, 3) if count else None,
            }
    connection.close()
    return {
        "points": points,
        "chunks": chunks,
        "total_bytes": total,
        "heap_bytes": heap,
        "bytes_per_point": round(total / points, 3) if points else None,
        "by_series": groups,
    }
