"""Start, watch and stop task processes; their output and metrics go to the outbox.

Each task attempt runs as `[python, "-m", "ps_runtime.task"]` in a new session (hence its
own process group) with the allow-listed env from docs/protocol.md §2; as root, as the
job's own uid in its own cgroup (`ps_runtime.agent.isolation`). Per process there
are three reader threads (stdout, stderr, metrics pipe) and a waiter thread that reaps
the leader, cleans up the rest of its group and reports the outcome.
"""

from __future__ import annotations

import json
import logging
import os
import signal
import subprocess
import sys
import threading
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import IO, Any

from ps_runtime import taskenv
from ps_runtime.agent import cgroups, limits, protocol
from ps_runtime.agent.codecache import CodeCache
from ps_runtime.agent.fields import ProtocolError, as_number, as_str, as_time
from ps_runtime.agent.isolation import (
    Isolation,
    IsolationError,
    prepare_private_dir,
    task_environment,
)
from ps_runtime.agent.outbox import Outbox
from ps_runtime.agent.protocol import (
    DesiredTask,
    LogStream,
    MetricPoint,
    ReportedState,
    TaskKey,
    TaskStatus,
)

logger = logging.getLogger(__name__)

TASK_MODULE: tuple[str, ...] = ("-m", "ps_runtime.task")
TASK_COMMAND: tuple[str, ...] = (sys.executable, *TASK_MODULE)
MAX_LINE_BYTES = 64 * 1024  # longer lines are split; keeps memory per reader bounded
READER_JOIN_SECONDS = 2.0  # a grandchild may keep the pipes open after the leader exits


@dataclass
class TaskProcess:
    task: DesiredTask
    proc: subprocess.Popen[bytes]
    cpus: list[int]
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

    @property
    def key(self) -> TaskKey:
        return self.task.key

    @property
    def pid(self) -> int:
        return self.proc.pid


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


class Supervisor:
    """Owns every task process on the node.

    `start` must be called from a long-lived thread (the daemon's loop thread): tasks get
    PR_SET_PDEATHSIG, which fires when the *thread* that forked them exits.
    """

    def __init__(
        self,
        outbox: Outbox,
        work_dir: Path,
        *,
        cpus: Sequence[int] | None = None,
        command: Sequence[str] | None = None,
        on_exit: Callable[[TaskKey], None] | None = None,
        isolation: Isolation | None = None,
        code: CodeCache | None = None,
    ) -> None:
        self._outbox = outbox
        self._work_dir = work_dir
        self._cpus = list(cpus) if cpus is not None else sorted(os.sched_getaffinity(0))
        self.isolation = isolation if isolation is not None else Isolation()
        if command is None:
            command = (self.isolation.python, *TASK_MODULE)
        self._command = list(command)
        self._on_exit = on_exit
        self._code = code
        self._lock = threading.Lock()
        self._live: dict[TaskKey, TaskProcess] = {}  # guarded by _lock
        self._finished: set[TaskKey] = set()  # guarded by _lock

    # -- queries -----------------------------------------------------------------------

    def live_pids(self) -> dict[TaskKey, int]:
        with self._lock:
            return {key: tp.pid for key, tp in self._live.items()}

    def live_keys(self) -> set[TaskKey]:
        with self._lock:
            return set(self._live)

    def finished_keys(self) -> set[TaskKey]:
        with self._lock:
            return set(self._finished)

    def forget(self, keys: Iterable[TaskKey]) -> None:
        with self._lock:
            self._finished.difference_update(keys)

    def get(self, key: TaskKey) -> TaskProcess | None:
        with self._lock:
            return self._live.get(key)

    # -- start -------------------------------------------------------------------------

    def start(self, task: DesiredTask) -> TaskProcess | None:
        """Start one task attempt; a failure to start is reported as a failed status."""
        key = task.key
        with self._lock:
            if key in self._live:
                return self._live[key]
            in_use: Counter[int] = Counter()
            for other in self._live.values():
                in_use.update(other.cpus)
        cpus = limits.choose_cpus(self._cpus, task.cpu, in_use)
        identity = self.isolation.identity(task.job_id)
        cwd = self._work_dir / "tasks" / f"{task.id}-{task.attempt}"
        env = task_environment(
            os.environ,
            task.env,
            home=str(cwd) if identity is not None else os.environ.get("HOME", str(cwd)),
            pythonpath=self.isolation.pythonpath,
            gpu_indices=task.gpu_indices,
        )
        read_fd, write_fd = os.pipe()
        taskenv.METRICS_FD.put(env, write_fd)
        cgroup: cgroups.TaskCgroup | None = None
        cgroup_fds: list[int] = []
        try:
            cwd.mkdir(parents=True, exist_ok=True)
            if identity is not None:
                prepare_private_dir(cwd, *identity)
                checkpoint_dir = taskenv.CHECKPOINT_DIR.read(env)
                if checkpoint_dir:
                    prepare_private_dir(Path(checkpoint_dir), *identity)
            cluster = task.env.get(taskenv.CLUSTER.name, "")
            cluster_file = cwd / "cluster.json"
            _write_atomically(cluster_file, cluster)
            taskenv.CLUSTER_FILE.put(env, str(cluster_file))
            # The job's own code, unpacked read-only (a CodeError is a failure to start).
            taskenv.CODE_DIR.put(env, self._code.prepare(task, cwd) if self._code else None)
            if self.isolation.hierarchy is not None:
                # GPU device files are numbered like nvidia-smi's indices (PCI order).
                cgroup = cgroups.create(
                    self.isolation.hierarchy,
                    f"task-{task.id}-{task.attempt}",
                    task.memory_mb,
                    task.cpu,
                    deny_gpus=[
                        g for g in cgroups.nvidia_devices() if g not in set(task.gpu_indices)
                    ],
                )
                cgroup_fds = cgroup.open_procs()
            # RLIMIT_AS only where no cgroup bounds memory: it limits address space, not
            # resident memory, and breaks CUDA start-up.
            as_limit = None if cgroup is not None else limits.address_space_limit(task.memory_mb)
            proc = subprocess.Popen(
                self._command,
                env=env,
                cwd=cwd,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                pass_fds=(write_fd,),
                start_new_session=True,
                preexec_fn=limits.make_preexec(
                    cpus, as_limit, cgroup_fds=cgroup_fds, identity=identity
                ),
            )
        except (OSError, subprocess.SubprocessError, IsolationError) as exc:
            os.close(read_fd)
            if cgroup is not None:
                cgroups.remove(cgroup)
            logger.error("task %s attempt %s failed to start: %s", task.id, task.attempt, exc)
            self._outbox.add_status(
                TaskStatus(key, ReportedState.FAILED, None, f"failed to start: {exc}")
            )
            with self._lock:
                self._finished.add(key)
            return None
        finally:
            os.close(write_fd)  # the child holds its own copy; EOF follows its exit
            for fd in cgroup_fds:
                os.close(fd)
        tp = TaskProcess(
            task=task,
            proc=proc,
            cpus=cpus,
            cluster_file=cluster_file,
            cluster=cluster,
            stop_grace=task.stop_grace_seconds,
            cgroup=cgroup,
        )
        with self._lock:
            self._live[key] = tp
        logger.info(
            "started task %s attempt %s (%s) pid %d cpus %s",
            task.id,
            task.attempt,
            task.role,
            proc.pid,
            cpus or "all",
        )
        self._outbox.add_status(TaskStatus(key, ReportedState.RUNNING))
        assert proc.stdout is not None and proc.stderr is not None
        tp.readers = [
            self._thread(self._read_logs, tp, proc.stdout, LogStream.STDOUT),
            self._thread(self._read_logs, tp, proc.stderr, LogStream.STDERR),
            self._thread(self._read_metrics, tp, os.fdopen(read_fd, "rb")),
        ]
        self._thread(self._wait, tp)
        return tp

    def update_cluster(self, task: DesiredTask) -> bool:
        """Rewrite a live task's cluster file if the job's cluster changed (workers added
        or removed); the coordinator watches it. True if it was rewritten."""
        with self._lock:
            tp = self._live.get(task.key)
        cluster = task.env.get(taskenv.CLUSTER.name, "")
        if tp is None or tp.cluster_file is None or cluster == tp.cluster:
            return False
        _write_atomically(tp.cluster_file, cluster)
        tp.cluster = cluster
        logger.info("task %s: cluster changed to %s", task.id, cluster)
        return True

    def update_stop_grace(self, task: DesiredTask) -> None:
        """Remember the stop grace of a live task's latest desired entry: when the task is
        later stopped for being no longer desired, that entry is the last word on it."""
        with self._lock:
            tp = self._live.get(task.key)
            if tp is not None:
                tp.stop_grace = task.stop_grace_seconds

    def stop_grace(self, key: TaskKey, default: float) -> float:
        """The live task's remembered stop grace, or `default` when it has none."""
        with self._lock:
            tp = self._live.get(key)
            grace = tp.stop_grace if tp is not None else None
        return default if grace is None else grace

    @staticmethod
    def _thread(target: Callable[..., None], *args: Any) -> threading.Thread:
        thread = threading.Thread(target=target, args=args, daemon=True)
        thread.start()
        return thread

    # -- stop --------------------------------------------------------------------------

    def stop(self, key: TaskKey, grace: float = protocol.DEFAULT_STOP_GRACE_SECONDS) -> None:
        """Ask a task to stop: SIGTERM its group now, SIGKILL after `grace`. Non-blocking."""
        tp = self.get(key)
        if tp is None or tp.stop_requested.is_set():
            return
        tp.grace = grace
        tp.stop_requested.set()
        logger.info("stopping task %s attempt %s (grace %.1fs)", key.id, key.attempt, grace)
        tp.stopper = self._thread(limits.terminate_group_quietly, tp.pid, grace)

    def wait_gone(self, key: TaskKey, timeout: float) -> bool:
        tp = self.get(key)
        return tp is None or tp.done.wait(timeout)

    def stop_all(self, grace: float = protocol.DEFAULT_STOP_GRACE_SECONDS) -> bool:
        """Stop every task and wait until all are gone (at most grace + 2 s)."""
        with self._lock:
            processes = list(self._live.values())
        for tp in processes:
            self.stop(tp.key, grace)
        return all(tp.done.wait(grace + 2.0) for tp in processes)

    # -- threads -----------------------------------------------------------------------

    def _read_logs(self, tp: TaskProcess, pipe: IO[bytes], stream: LogStream) -> None:
        with pipe:
            for raw in iter(lambda: pipe.readline(MAX_LINE_BYTES), b""):
                self._outbox.add_log(tp.key, stream, _decode(raw))

    def _read_metrics(self, tp: TaskProcess, pipe: IO[bytes]) -> None:
        with pipe:
            for raw in iter(lambda: pipe.readline(MAX_LINE_BYTES), b""):
                line = _decode(raw)
                if not line.strip():
                    continue
                point, dropped = parse_metric_line(line)
                # Bad metrics never crash the task or the agent; they surface as a log.
                if point is None:
                    self._outbox.add_log(tp.key, LogStream.STDERR, f"[unparsable metrics] {line}")
                    continue
                if dropped:
                    note = f"[metrics] dropped values that are not finite numbers: {line}"
                    self._outbox.add_log(tp.key, LogStream.STDERR, note)
                self._outbox.add_metric(tp.key, point, len(raw))

    def _wait(self, tp: TaskProcess) -> None:
        returncode = tp.proc.wait()
        stopped = tp.stop_requested.is_set()
        if tp.stopper is not None:
            tp.stopper.join()
        # Whatever the leader left behind in its group goes with it.
        limits.terminate_group(tp.pid, tp.grace)
        if tp.cgroup is not None:
            # And whatever left the group (a new session) but not the cgroup.
            cgroups.kill_all(tp.cgroup)
        for reader in tp.readers:
            reader.join(READER_JOIN_SECONDS)
        if tp.cgroup is not None:
            cgroups.remove(tp.cgroup)
        exit_code, message = describe_exit(returncode)
        if stopped:
            state = ReportedState.STOPPED
        elif returncode == 0:
            state = ReportedState.SUCCEEDED
        else:
            state = ReportedState.FAILED
        key = tp.key
        logger.info("task %s attempt %s %s: %s", key.id, key.attempt, state, message)
        self._outbox.add_status(TaskStatus(key, state, exit_code, message))
        with self._lock:
            self._live.pop(key, None)
            self._finished.add(key)
        tp.done.set()
        if self._on_exit is not None:
            self._on_exit(key)


def _decode(raw: bytes) -> str:
    return raw.decode("utf-8", errors="replace").rstrip("\r\n")


def _write_atomically(path: Path, text: str) -> None:
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(text)
    os.replace(tmp, path)
