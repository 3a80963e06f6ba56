"""A task process as the agent knows it, and the files it leaves in its task directory.

Tasks write stdout, stderr and metrics to files (they outlive the agent); `tail_output`
delivers each file to the outbox line by line from the offset already delivered, so an
agent that adopts a task after a restart resumes where its predecessor stopped.
"""

from __future__ import annotations

import json
import logging
import os
import signal
import subprocess
import threading
import time
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from ps_runtime import taskenv
from ps_runtime.agent import cgroups, protocol, sandbox, taskdirs, tasktable, taskwrap
from ps_runtime.agent.fields import ProtocolError, as_number, as_str, as_time
from ps_runtime.agent.outbox import Outbox
from ps_runtime.agent.protocol import (
    DesiredTask,
    LogStream,
    MetricPoint,
    ReportedState,
    TaskKey,
    TaskStatus,
    TaskTLS,
)
from ps_runtime.agent.stallmessages import read_progress_line

logger = logging.getLogger(__name__)

MAX_LINE_BYTES = 64 * 1024  # longer lines are split; keeps memory per reader bounded
TAIL_POLL_SECONDS = 0.1  # how often a tailer looks for new output
TABLE_FILE = "tasks.json"
STREAMS = ("stdout", "stderr", "metrics")
FILES = {"stdout": "stdout.log", "stderr": "stderr.log", "metrics": "metrics.jsonl"}
STATUS_FILE = "exit-status"
STOP_FILE = "stop-requested"  # a stop the agent asked for outlives it too
CLUSTER_FILE = "cluster.json"
LOST_MESSAGE = "lost while the agent was down"
# The task's TLS material from the control plane, and the variable naming each file.
TLS_FILES = (
    (taskenv.TLS_CERT, "tls-cert.pem"),
    (taskenv.TLS_KEY, "tls-key.pem"),
    (taskenv.TLS_CA, "tls-ca.pem"),
)


@dataclass
class TaskProcess:
    task: DesiredTask
    proc: subprocess.Popen[bytes] | None  # None: adopted from a previous agent
    cpus: list[int]
    record: tasktable.TaskRecord
    grace: float = protocol.DEFAULT_STOP_GRACE_SECONDS
    stop_requested: threading.Event = field(default_factory=threading.Event)
    done: threading.Event = field(default_factory=threading.Event)
    readers: list[threading.Thread] = field(default_factory=list)
    stopper: threading.Thread | None = None
    cluster_file: Path | None = None
    cluster: str = ""
    # The task's own stop grace from the latest desired list that named it (None: unset).
    stop_grace: float | None = None
    cgroup: cgroups.TaskCgroup | None = None
    # How far each file has been read into the outbox (tailers advance it).
    offsets: dict[str, int] = field(default_factory=dict)
    exited: threading.Event = field(default_factory=threading.Event)

    @property
    def key(self) -> TaskKey:
        return self.task.key

    @property
    def pid(self) -> int:
        return self.record.pid

    @property
    def task_dir(self) -> Path:
        return Path(self.record.task_dir)

    @classmethod
    def started(
        cls,
        task: DesiredTask,
        proc: subprocess.Popen[bytes],
        start_time: int,
        cpus: list[int],
        task_dir: Path,
        cgroup: cgroups.TaskCgroup | None,
    ) -> TaskProcess:
        """A task just started in `task_dir`, with its table record."""
        record = tasktable.TaskRecord(
            id=task.id,
            attempt=task.attempt,
            job_id=task.job_id,
            pid=proc.pid,
            start_time=start_time,
            task_dir=str(task_dir),
            cpus=list(cpus),
            cgroup_dirs=[str(d) for d in cgroup.dirs] if cgroup is not None else [],
            offsets=dict.fromkeys(STREAMS, 0),
            # Without its TLS key: the files in the task directory hold that.
            task=replace(task, tls=None).to_wire(),
        )
        return cls._of(task, proc, record, cgroup)

    @classmethod
    def adopted(
        cls, task: DesiredTask, record: tasktable.TaskRecord, hierarchy: cgroups.Hierarchy | None
    ) -> TaskProcess:
        """A task a previous agent left in the table, from its saved offsets."""
        cgroup = None
        if record.cgroup_dirs and hierarchy is not None:
            cgroup = cgroups.TaskCgroup(hierarchy, tuple(Path(d) for d in record.cgroup_dirs))
        return cls._of(task, None, record, cgroup)

    @classmethod
    def _of(
        cls,
        task: DesiredTask,
        proc: subprocess.Popen[bytes] | None,
        record: tasktable.TaskRecord,
        cgroup: cgroups.TaskCgroup | None,
    ) -> TaskProcess:
        return cls(
            task=task,
            proc=proc,
            cpus=list(record.cpus),
            record=record,
            cluster_file=Path(record.task_dir) / taskdirs.RUN_DIR / CLUSTER_FILE,
            cluster=task.env.get(taskenv.CLUSTER.name, ""),
            stop_grace=task.stop_grace_seconds,
            cgroup=cgroup,
            offsets={s: record.offsets.get(s, 0) for s in STREAMS},
        )


def write_tls(run_dir: Path, tls: TaskTLS) -> dict[str, str]:
    """Write the task's certificate, key and CA into its agent-owned `run/` directory and
    return the `TRAINHUB_TLS_*` variables naming them (`taskdirs.share_run_dir` then lets
    the job's gid read them)."""
    pems = {taskenv.TLS_CERT: tls.cert, taskenv.TLS_KEY: tls.key, taskenv.TLS_CA: tls.ca}
    env: dict[str, str] = {}
    for variable, name in TLS_FILES:
        variable.put(env, str(taskdirs.write_run_file(run_dir, name, pems[variable])))
    return env


def open_outputs(task_dir: Path) -> dict[str, int]:
    """Append-only descriptors of the task's output files, for the child to inherit. The
    directory is the agent's; `O_NOFOLLOW` all the same."""
    flags = os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_NOFOLLOW
    fds: dict[str, int] = {}
    try:
        for stream in STREAMS:
            fds[stream] = os.open(task_dir / FILES[stream], flags, 0o600)
    except OSError:
        for fd in fds.values():
            os.close(fd)
        raise
    return fds


def outcome(
    tp: TaskProcess,
    wrapper_code: int | None,
    *,
    stopped: bool,
    box: sandbox.Sandbox | None = None,
    oom: bool = False,
) -> TaskStatus:
    """The final status of an ended task: the exit status its wrapper recorded, else the
    wrapper's own, else "lost"; STOPPED when the agent had asked it to stop. A failure of a
    sandboxed task whose scratch was full says so; a failed one whose cgroup saw the OOM
    killer (`oom`, read by `cgroups.oom_killed`) has `oom_killed`."""
    returncode = taskwrap.read_status(str(tp.task_dir / STATUS_FILE))
    if returncode is None:
        returncode = wrapper_code
    exit_code: int | None
    if returncode is None:
        exit_code, message = None, LOST_MESSAGE
    else:
        exit_code, message = describe_exit(returncode)
    if stopped:
        state = ReportedState.STOPPED
    elif returncode == 0:
        state = ReportedState.SUCCEEDED
    else:
        state = ReportedState.FAILED
    if state == ReportedState.FAILED and box is not None and scratch_full(tp.task_dir):
        message += (
            f"; its scratch space ({box.scratch // sandbox.MIB} MiB: HOME, /tmp and the "
            f"working directory) was full (agent setting {sandbox.SCRATCH_MB_ENV})"
        )
    return TaskStatus(tp.key, state, exit_code, message, oom and state == ReportedState.FAILED)


def update_cluster_file(tp: TaskProcess, cluster: str) -> bool:
    """Rewrite a live task's cluster file if the job's cluster changed (workers added or
    removed); the coordinator watches it. True if it was rewritten."""
    if tp.cluster_file is None or cluster == tp.cluster:
        return False
    try:
        taskdirs.write_run_file(tp.cluster_file.parent, tp.cluster_file.name, cluster)
    except OSError as exc:
        # A task an agent before the sandbox started (adopted after an upgrade) has no
        # agent-owned run/ directory; its own directory is not written by name.
        logger.warning("task %s: cannot update its cluster file: %s", tp.task.id, exc)
        tp.cluster = cluster
        return False
    tp.cluster = cluster
    logger.info("task %s: cluster changed to %s", tp.task.id, cluster)
    return True


def parse_metric_line(line: str) -> tuple[MetricPoint | None, list[str]]:
    """A `ps_runtime.report()` line as a protocol point (None when it is not one), and the
    names of values dropped because they are not finite numbers (the protocol refuses
    NaN and infinity; one bad value does not cost the others)."""
    try:
        obj = json.loads(line)
    except ValueError:
        return None, []
    if not isinstance(obj, dict) or not isinstance(obj.get("values"), dict):
        return None, []
    step = obj.get("step")
    if step is not None and (isinstance(step, bool) or not isinstance(step, int)):
        return None, []
    values: dict[str, float] = {}
    dropped: list[str] = []
    for name, value in obj["values"].items():
        try:
            values[as_str(name, "name", non_empty=True)] = as_number(value, name)
        except ProtocolError:
            dropped.append(name)
    if not values:
        return None, dropped
    return MetricPoint(values=values, step=step, time=_report_time(obj.get("time"))), dropped


def _report_time(value: Any) -> datetime:
    """The time the task reported, or now when it gave none we can use."""
    try:
        return as_time(value, "time")
    except ProtocolError:
        return datetime.now(UTC)


def describe_exit(returncode: int) -> tuple[int, str]:
    """(exit_code, message); death by signal N is reported as 128 + N like a shell."""
    if returncode < 0:
        try:
            name = signal.Signals(-returncode).name
        except ValueError:
            name = f"signal {-returncode}"
        return 128 - returncode, f"killed by {name}"
    return returncode, f"exited with code {returncode}"


def tail_output(tp: TaskProcess, stream: str, outbox: Outbox, lock: threading.Lock) -> None:
    """Deliver one output file line by line from its offset until the task has ended
    and the file is read to the end (a partial last line waits until then). While the
    outbox has no room the reader waits: output is never dropped, only delayed."""
    try:
        fd = os.open(tp.task_dir / FILES[stream], os.O_RDONLY | os.O_NOFOLLOW)
        f = os.fdopen(fd, "rb")
    except OSError as exc:
        logger.warning("task %s: cannot read its %s: %s", tp.key.id, stream, exc)
        return
    with f:
        pos = tp.offsets.get(stream, 0)
        f.seek(pos)
        final = False
        while True:
            if not outbox.has_room():
                # Backpressure: the socket is down or slow; the output waits in its file.
                time.sleep(TAIL_POLL_SECONDS)
                continue
            raw = f.readline(MAX_LINE_BYTES)
            if raw and (raw.endswith(b"\n") or len(raw) >= MAX_LINE_BYTES or final):
                _deliver(tp, stream, raw, outbox)
                pos += len(raw)
                with lock:
                    tp.offsets[stream] = pos
                continue
            if final:
                return
            f.seek(pos)
            if tp.exited.is_set():
                final = True
            else:
                time.sleep(TAIL_POLL_SECONDS)


def _deliver(tp: TaskProcess, stream: str, raw: bytes, outbox: Outbox) -> None:
    if stream == "stdout":
        outbox.add_log(tp.key, LogStream.STDOUT, decode(raw))
    elif stream == "stderr":
        outbox.add_log(tp.key, LogStream.STDERR, decode(raw))
    else:
        _read_metric(tp, raw, outbox)


def _read_metric(tp: TaskProcess, raw: bytes, outbox: Outbox) -> None:
    line = decode(raw)
    if not line.strip():
        return
    progress = read_progress_line(line)  # a closures count or a phase, for stall detection
    if progress is not None:
        outbox.add_progress(tp.key, progress)
        return
    point, dropped = parse_metric_line(line)
    # Bad metrics never crash the task or the agent; they surface as a log.
    if point is None:
        outbox.add_log(tp.key, LogStream.STDERR, f"[unparsable metrics] {line}")
        return
    if dropped:
        note = f"[metrics] dropped values that are not finite numbers: {line}"
        outbox.add_log(tp.key, LogStream.STDERR, note)
    outbox.add_metric(tp.key, point, len(raw))


def decode(raw: bytes) -> str:
    return raw.decode("utf-8", errors="replace").rstrip("\r\n")


def scratch_full(task_dir: Path) -> bool:
    """Whether the end of the task's stderr says a write found no space (ENOSPC): the
    scratch tmpfs is the only place in its sandbox that can fill up that way."""
    try:
        fd = os.open(task_dir / FILES["stderr"], os.O_RDONLY | os.O_NOFOLLOW)
    except OSError:
        return False
    with os.fdopen(fd, "rb") as f:
        size = os.fstat(fd).st_size
        f.seek(max(0, size - 64 * 1024))
        tail = f.read(64 * 1024)
    return b"No space left on device" in tail


def touch_stop_file(task_dir: Path) -> None:
    """Record that the agent asked the task to stop (it outlives the agent)."""
    flags = os.O_WRONLY | os.O_CREAT | os.O_NOFOLLOW
    os.close(os.open(task_dir / STOP_FILE, flags, 0o600))
