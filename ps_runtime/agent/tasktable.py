"""The agent's task table on disk: what a restarted agent needs to adopt its tasks.

One JSON file (`<work dir>/tasks.json`, written atomically) with one entry per live task
attempt: its key, job, pid and process start time (from `/proc/<pid>/stat`, so a reused
pid is never mistaken for the task), CPUs, cgroup directories, task directory and how far
its stdout, stderr and metrics files have been delivered.
"""

from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from ps_runtime.agent.fields import ProtocolError, as_int, as_str

TABLE_VERSION = 1


@dataclass(frozen=True)
class TaskRecord:
    id: int
    attempt: int
    job_id: int
    pid: int
    start_time: int
    task_dir: str
    cpus: list[int] = field(default_factory=list)
    cgroup_dirs: list[str] = field(default_factory=list)
    offsets: dict[str, int] = field(default_factory=dict)  # stdout, stderr, metrics
    task: dict[str, Any] = field(default_factory=dict)  # the DesiredTask on the wire


def process_start_time(pid: int) -> int | None:
    """Field 22 of /proc/<pid>/stat (clock ticks after boot), None when no such process
    or it is a zombie."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = stat[stat.rfind(")") + 2 :].split()  # fields from 3 (state) on
    if not fields or fields[0] in ("Z", "X"):
        return None
    return int(fields[19])


def alive(record: TaskRecord) -> bool:
    """Whether the recorded process still runs (same pid and the same start time)."""
    return process_start_time(record.pid) == record.start_time


def _record(obj: Any, where: str) -> TaskRecord:
    if not isinstance(obj, dict):
        raise ProtocolError(f"{where} must be an object")
    offsets = obj.get("offsets", {})
    task = obj.get("task", {})
    if not isinstance(offsets, dict) or not isinstance(task, dict):
        raise ProtocolError(f"{where}: offsets and task must be objects")
    return TaskRecord(
        id=as_int(obj.get("id"), f"{where}.id"),
        attempt=as_int(obj.get("attempt"), f"{where}.attempt"),
        job_id=as_int(obj.get("job_id"), f"{where}.job_id"),
        pid=as_int(obj.get("pid"), f"{where}.pid"),
        start_time=as_int(obj.get("start_time"), f"{where}.start_time"),
        task_dir=as_str(obj.get("task_dir"), f"{where}.task_dir"),
        cpus=[as_int(c, f"{where}.cpus") for c in obj.get("cpus", [])],
        cgroup_dirs=[as_str(d, f"{where}.cgroup_dirs") for d in obj.get("cgroup_dirs", [])],
        offsets={
            as_str(k, f"{where}.offsets"): as_int(v, f"{where}.offsets.{k}")
            for k, v in offsets.items()
        },
        task=task,
    )


def load(path: Path) -> list[TaskRecord]:
    """The saved records; an absent file is an empty table.

    Raises:
        ProtocolError: the file is not a table this agent wrote.
    """
    try:
        text = path.read_text()
    except FileNotFoundError:
        return []
    try:
        obj = json.loads(text)
    except ValueError as exc:
        raise ProtocolError(f"{path}: not JSON: {exc}") from None
    if not isinstance(obj, dict) or obj.get("version") != TABLE_VERSION:
        raise ProtocolError(f"{path}: version must be {TABLE_VERSION}")
    tasks = obj.get("tasks")
    if not isinstance(tasks, list):
        raise ProtocolError(f"{path}: tasks must be a list")
    return [_record(t, f"tasks[{i}]") for i, t in enumerate(tasks)]


def save(path: Path, records: list[TaskRecord]) -> None:
    """Write the table atomically (0600: it names processes and directories)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    data = json.dumps({"version": TABLE_VERSION, "tasks": [asdict(r) for r in records]})
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as out:
        out.write(data)
        out.flush()
        os.fsync(out.fileno())
    os.replace(tmp, path)
