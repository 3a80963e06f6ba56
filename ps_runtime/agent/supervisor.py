"""Start, watch and stop task processes; their output and metrics go to the outbox.

Each task attempt runs as `[python, "-m", "ps_runtime.task"]` inside its sandbox
(`sandbox`, bubblewrap), under a small wrapper (`taskwrap`, which records the exit status
to a file and starts the task as the job's leased uid under a root agent) in a new
session (hence its own process group) with the allow-listed env from docs/protocol.md §2,
in its own cgroup (`tasklaunch` lays it all out). Tasks get no parent-death signal: they
outlive the agent. Their stdout, stderr and metrics go to files in the agent-owned task
directory that the agent tails (one thread each), and every live task is in the task
table on disk (`tasktable`), with how far each file was delivered, so a restarted agent
adopts it (`adopt`) and resumes from there. A waiter thread per task waits for the
wrapper (a child, or for an adopted task by polling its pid and start time), cleans up
the rest of its group and reports the outcome; the task's directory is removed once all
it wrote was delivered.
"""

from __future__ import annotations

import logging
import os
import shutil
import subprocess
import sys
import threading
import time
from collections import Counter
from collections.abc import Callable, Collection, Iterable, Sequence
from pathlib import Path
from typing import Any

from ps_runtime import taskenv
from ps_runtime.agent import cgroups, limits, protocol, taskdirs, tasklaunch, tasktable
from ps_runtime.agent.codecache import CodeCache
from ps_runtime.agent.environments import EnvironmentCache
from ps_runtime.agent.fields import ProtocolError
from ps_runtime.agent.identities import NoFreeIdentity
from ps_runtime.agent.isolation import Isolation, IsolationError
from ps_runtime.agent.outbox import Outbox
from ps_runtime.agent.preparing import Preparations
from ps_runtime.agent.protocol import (
    DesiredTask,
    ReportedState,
    TaskKey,
    TaskStatus,
    parse_desired_task,
)
from ps_runtime.agent.taskfiles import (
    STOP_FILE,
    STREAMS,
    TABLE_FILE,
    TaskProcess,
    outcome,
    tail_output,
    touch_stop_file,
    update_cluster_file,
)

logger = logging.getLogger(__name__)

TASK_MODULE: tuple[str, ...] = ("-m", "ps_runtime.task")
TASK_COMMAND: tuple[str, ...] = (sys.executable, *TASK_MODULE)
ADOPTED_POLL_SECONDS = 0.2
KEEP_DIRS_ENV = (
    "TRAINHUB_TASK_KEEP_DIRS"  # how often the waiter of an adopted task checks it is alive
)


class Supervisor:
    """Owns every task process on the node, and the task table that outlives it."""

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
        environments: EnvironmentCache | None = None,
    ) -> None:
        self._outbox = outbox
        self._work_dir = work_dir
        self._cpus = list(cpus) if cpus is not None else sorted(os.sched_getaffinity(0))
        self.isolation = isolation if isolation is not None else Isolation()
        if command is None:
            command = (self.isolation.python, *TASK_MODULE)
        self._command = list(command)
        self._on_exit = on_exit
        self._pids_max = limits.pids_max(os.environ)
        self._keep_dirs = os.environ.get(KEEP_DIRS_ENV, "") == "1"
        self._code = code
        self._lock = threading.Lock()
        self._live: dict[TaskKey, TaskProcess] = {}  # guarded by _lock
        self._finished: set[TaskKey] = set()  # guarded by _lock
        self._table = work_dir / TABLE_FILE
        self._records: dict[TaskKey, tasktable.TaskRecord] = {}  # guarded by _lock
        self._ended: set[TaskKey] = set()  # status queued; record dropped on next commit
        self.preparations = (
            None
            if environments is None
            else Preparations(
                environments,
                outbox,
                start=self.start,
                failed=self._finish_unstarted,
                in_use=self.environments_in_use,
            )
        )

    # -- queries -----------------------------------------------------------------------

    def live_pids(self) -> dict[TaskKey, int]:
        with self._lock:
            return {key: tp.pid for key, tp in self._live.items()}

    def live_keys(self) -> set[TaskKey]:
        """Task attempts with a process, and those waiting for their environment."""
        preparing = self.preparations.keys() if self.preparations is not None else set()
        with self._lock:
            return set(self._live) | preparing

    def environments_in_use(self) -> set[str]:
        """Digests of the environments live tasks run in (never evicted)."""
        if self.preparations is None:
            return set()
        with self._lock:
            specs = [tp.task.environment for tp in self._live.values()]
        return {self.preparations.cache.digest(s) for s in specs if s is not None}

    def _finish_unstarted(self, key: TaskKey) -> None:
        with self._lock:
            self._finished.add(key)

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

    def start(self, task: DesiredTask, env_dir: Path | None = None) -> TaskProcess | None:
        """Start one task attempt; a failure to start is reported as a failed status. A
        task whose job has an environment not built yet waits for it (`preparing`)."""
        key = task.key
        if task.environment is not None and env_dir is None and self.preparations is not None:
            env_dir = self.preparations.cache.ready(task.environment)
            if env_dir is None:
                self.preparations.begin(task)
                return None
        with self._lock:
            if key in self._live:
                return self._live[key]
            in_use: Counter[int] = Counter()
            for other in self._live.values():
                in_use.update(other.cpus)
            live_jobs = {other.task.job_id for other in self._live.values()}
        cpus = limits.choose_cpus(self._cpus, task.cpu, in_use)
        task_dir = self._work_dir / "tasks" / f"{task.id}-{task.attempt}"
        command = list(self._command)
        try:
            if task.environment is not None:
                if env_dir is None:
                    raise OSError("this agent builds no job environments")
                command[0] = str(env_dir / "bin" / "python")
            if shutil.which(command[0]) is None:
                raise OSError(f"no executable {command[0]}")
            prepared = tasklaunch.prepare(
                task,
                self.isolation,
                task_dir,
                code=self._code,
                live_jobs=live_jobs,
                env_dir=env_dir,
            )
            identity = prepared.identity
            proc, cgroup = tasklaunch.spawn(
                task, self.isolation, prepared, task_dir, command, cpus, self._pids_max
            )
            start_time = tasktable.process_start_time(proc.pid) or 0
        except (OSError, subprocess.SubprocessError, IsolationError, NoFreeIdentity) as exc:
            taskdirs.remove_task_dir(task_dir)
            logger.error("task %s attempt %s failed to start: %s", task.id, task.attempt, exc)
            self._outbox.add_status(
                TaskStatus(key, ReportedState.FAILED, None, f"failed to start: {exc}")
            )
            with self._lock:
                self._finished.add(key)
            return None
        tp = TaskProcess.started(task, proc, start_time, cpus, task_dir, cgroup)
        with self._lock:
            self._live[key] = tp
            self._records[key] = tp.record
        self._save_table()
        logger.info(
            "started task %s attempt %s (%s) pid %d cpus %s%s",
            task.id,
            task.attempt,
            task.role,
            proc.pid,
            cpus or "all",
            f" uid {identity[0]}" if identity is not None else "",
        )
        self._outbox.add_status(TaskStatus(key, ReportedState.RUNNING))
        self._watch(tp)
        return tp

    def _watch(self, tp: TaskProcess) -> None:
        tp.readers = [
            self._thread(tail_output, tp, stream, self._outbox, self._lock) for stream in STREAMS
        ]
        self._thread(self._wait, tp)

    # -- adoption ----------------------------------------------------------------------

    def adopt(self) -> list[TaskKey]:
        """Take over the tasks in the table a previous agent left: a live one (same pid and
        start time) is watched again from its saved offsets with nothing new reported;
        one that ended meanwhile is reported with its recorded exit status, or as lost.
        Returns the keys of the tasks found alive."""
        try:
            records = tasktable.load(self._table)
        except (ProtocolError, OSError) as exc:
            logger.error("ignoring the task table %s: %s", self._table, exc)
            return []
        adopted: list[TaskKey] = []
        for record in records:
            try:
                task = parse_desired_task(record.task)
            except ProtocolError as exc:
                logger.error("ignoring task %s in the task table: %s", record.id, exc)
                continue
            tp = TaskProcess.adopted(task, record, self.isolation.hierarchy)
            live = tasktable.alive(record)
            with self._lock:
                self._live[tp.key] = tp
                self._records[tp.key] = record
            if live:
                adopted.append(tp.key)
            logger.info(
                "task %s attempt %s pid %d: %s",
                task.id,
                task.attempt,
                record.pid,
                "adopted" if live else "ended while the agent was down",
            )
            self._watch(tp)
        return adopted

    # -- the task table ----------------------------------------------------------------

    def offsets_snapshot(self) -> tuple[dict[TaskKey, dict[str, int]], set[TaskKey]]:
        """Offsets read into the outbox so far, and the tasks whose status is queued; once
        the outbox has been sent, `commit` saves them (so a restart neither loses nor
        repeats what was delivered)."""
        with self._lock:
            offsets = {key: dict(tp.offsets) for key, tp in self._live.items()}
            return offsets, set(self._ended)

    def commit(self, snapshot: tuple[dict[TaskKey, dict[str, int]], set[TaskKey]]) -> None:
        offsets, ended = snapshot
        gone: list[Path] = []
        with self._lock:
            for key in ended:
                record = self._records.pop(key, None)
                if record is not None:
                    gone.append(Path(record.task_dir))
            self._ended -= ended
            for key, saved in offsets.items():
                record = self._records.get(key)
                if record is not None:
                    record.offsets.update(saved)
        self._save_table()
        # Everything the ended tasks wrote has been delivered: their directories go
        # (TRAINHUB_TASK_KEEP_DIRS=1 keeps them, to debug the agent).
        for task_dir in gone if not self._keep_dirs else ():
            taskdirs.remove_task_dir(task_dir)

    def _save_table(self) -> None:
        with self._lock:
            records = list(self._records.values())
        try:
            tasktable.save(self._table, records)
        except OSError as exc:
            logger.error("cannot save the task table %s: %s", self._table, exc)

    def update_cluster(self, task: DesiredTask) -> bool:
        """Rewrite a live task's cluster file if the job's cluster changed (workers added
        or removed); the coordinator watches it. True if it was rewritten."""
        with self._lock:
            tp = self._live.get(task.key)
        if tp is None:
            return False
        return update_cluster_file(tp, task.env.get(taskenv.CLUSTER.name, ""))

    def update_stop_grace(self, task: DesiredTask) -> None:
        """Remember the stop grace of a live task's latest desired entry: when the task is
        later stopped for being no longer desired, that entry is the last word on it."""
        with self._lock:
            tp = self._live.get(task.key)
            if tp is not None:
                tp.stop_grace = task.stop_grace_seconds

    def stop_grace(
        self, key: TaskKey, default: float, ended_jobs: Collection[int] = frozenset()
    ) -> float:
        """The live task's remembered stop grace; `default` when it has none or its job
        ended (no checkpoint can be saved once the job's servers stop with it)."""
        with self._lock:
            tp = self._live.get(key)
            grace = tp.stop_grace if tp is not None and tp.task.job_id not in ended_jobs else None
        return default if grace is None else grace

    @staticmethod
    def _thread(target: Callable[..., None], *args: Any) -> threading.Thread:
        thread = threading.Thread(target=target, args=args, daemon=True)
        thread.start()
        return thread

    # -- stop --------------------------------------------------------------------------

    def stop(self, key: TaskKey, grace: float = protocol.DEFAULT_STOP_GRACE_SECONDS) -> None:
        """Ask a task to stop: SIGTERM its group now, SIGKILL after `grace`. Non-blocking."""
        if self.preparations is not None and self.preparations.stop(key):
            with self._lock:
                self._finished.add(key)
            return
        tp = self.get(key)
        if tp is None or tp.stop_requested.is_set():
            return
        tp.grace = grace
        tp.stop_requested.set()
        try:
            touch_stop_file(tp.task_dir)
        except OSError as exc:
            logger.warning("task %s: cannot record its stop: %s", key.id, exc)
        logger.info("stopping task %s attempt %s (grace %.1fs)", key.id, key.attempt, grace)
        tp.stopper = self._thread(limits.terminate_group_quietly, tp.pid, grace)

    def wait_gone(self, key: TaskKey, timeout: float) -> bool:
        tp = self.get(key)
        return tp is None or tp.done.wait(timeout)

    def stop_all(self, grace: float = protocol.DEFAULT_STOP_GRACE_SECONDS) -> bool:
        """Stop every task and wait until all are gone (at most grace + 2 s)."""
        if self.preparations is not None:
            self.preparations.stop_all()
        with self._lock:
            processes = list(self._live.values())
        for tp in processes:
            self.stop(tp.key, grace)
        return all(tp.done.wait(grace + 2.0) for tp in processes)

    # -- threads -----------------------------------------------------------------------

    def _wait(self, tp: TaskProcess) -> None:
        if tp.proc is not None:
            wrapper_code: int | None = tp.proc.wait()
        else:
            while tasktable.alive(tp.record):
                time.sleep(ADOPTED_POLL_SECONDS)
            wrapper_code = None
        stopped = tp.stop_requested.is_set() or (tp.task_dir / STOP_FILE).exists()
        if tp.stopper is not None:
            tp.stopper.join()
        # Whatever the leader left behind in its group goes with it.
        limits.terminate_group(tp.pid, tp.grace)
        if tp.cgroup is not None:
            # And whatever left the group (a new session) but not the cgroup.
            cgroups.kill_all(tp.cgroup)
        tp.exited.set()
        # The status goes after all of the task's output; a reader waiting for room in
        # the outbox (the socket is down) delays it, and the heartbeat still lists the
        # task as live meanwhile.
        for reader in tp.readers:
            reader.join()
        oom = False
        if tp.cgroup is not None:
            oom = cgroups.oom_killed(tp.cgroup)  # the count goes with the cgroup
            cgroups.remove(tp.cgroup)
        status = outcome(tp, wrapper_code, stopped=stopped, box=self.isolation.box, oom=oom)
        key = tp.key
        logger.info("task %s attempt %s %s: %s", key.id, key.attempt, status.state, status.message)
        self._outbox.add_status(status)
        with self._lock:
            self._live.pop(key, None)
            self._finished.add(key)
            self._ended.add(key)
        tp.done.set()
        if self._on_exit is not None:
            self._on_exit(key)
