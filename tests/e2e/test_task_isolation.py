"""Issue 13, Done means 3: as root, a job's task cannot read the node credential, another
job's directories or the agent's secrets, nor signal another job's process.

Two tasks of different jobs run through the real `Supervisor` with the agent's isolation
(own uid per job, 0700 directories, a cgroup each); the second one probes the first from
inside (`isolation_probe.py`) and reports what it could do.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from ps_runtime.agent.isolation import MODE_NONE, Isolation, IsolationError
from ps_runtime.agent.outbox import Outbox
from ps_runtime.agent.protocol import DesiredTask, TaskKey
from ps_runtime.agent.supervisor import Supervisor
from ps_runtime.taskenv import Role

from ..ps_runtime.agent.helpers import pid_alive, statuses, wait_for

PROBE = Path(__file__).with_name("isolation_probe.py")
AGENT_SECRETS = {
    "TRAINHUB_ADMIN_PASSWORD": "admin-password",
    "TRAINHUB_SECRET_KEY": "django-secret-key",
    "REDIS_URL": "redis://:redis-password@127.0.0.1:6379/0",
    "DATABASE_URL": "postgres://trainhub:db-password@127.0.0.1/trainhub",
    "DJANGO_SUPERUSER_PASSWORD": "superuser-password",
}

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="task isolation needs a root agent")


@pytest.fixture
def work_dir() -> Iterator[Path]:
    # Not pytest's tmp_path: /tmp/pytest-of-root is 0700, so no task uid could reach it.
    path = Path(tempfile.mkdtemp(prefix="trainhub-isolation-", dir="/tmp"))
    path.chmod(0o711)
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


class Tasks:
    def __init__(self, outbox: Outbox) -> None:
        self.outbox = outbox
        self.messages: list[dict[str, Any]] = []

    def lines(self, key: TaskKey) -> list[str]:
        self.messages.extend(m.to_wire() for m in self.outbox.drain())
        return [
            line
            for m in self.messages
            if m["type"] == "logs" and (m["id"], m["attempt"]) == (key.id, key.attempt)
            for line in m["lines"]
        ]

    def states(self) -> list[tuple[int, int, str]]:
        self.messages.extend(m.to_wire() for m in self.outbox.drain())
        return statuses(self.messages)


def test_tasks_of_two_jobs_cannot_reach_each_other(
    work_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    for name, value in AGENT_SECRETS.items():
        monkeypatch.setenv(name, value)
    try:
        isolation = Isolation.from_settings(
            work_dir / "agent", {"TRAINHUB_TASK_ISOLATION": "required"}
        )
    except IsolationError as exc:
        pytest.skip(f"this host cannot isolate tasks: {exc}")
    assert isolation.mode != MODE_NONE
    credential = work_dir / "agent.json"
    credential.write_text('{"credential": "node-secret"}')
    credential.chmod(0o600)
    probe = work_dir / "probe.py"
    shutil.copy(PROBE, probe)
    probe.chmod(0o644)
    checkpoints = work_dir / "checkpoints"
    checkpoints.mkdir(mode=0o711)
    checkpoints.chmod(0o711)

    outbox = Outbox()
    tasks = Tasks(outbox)
    supervisor = Supervisor(
        outbox, work_dir / "agent", command=[isolation.python, str(probe)], isolation=isolation
    )
    victim = DesiredTask(
        id=1,
        attempt=0,
        job_id=101,
        role=Role.PS,
        index=0,
        cpu=0.5,
        memory_mb=256,
        env={
            "TRAINHUB_PROBE_MODE": "victim",
            "TRAINHUB_JOB_TOKEN": "victim-job-token",
            "TRAINHUB_CHECKPOINT_DIR": str(checkpoints / "job-101"),
        },
    )
    try:
        victim_process = supervisor.start(victim)
        assert victim_process is not None, tasks.states()
        wait_for(lambda: "ready" in tasks.lines(victim.key), 20, "the victim task")
        victim_dir = work_dir / "agent" / "tasks" / "1-0"
        attacker = DesiredTask(
            id=2,
            attempt=0,
            job_id=202,
            role=Role.PS,
            index=0,
            cpu=0.5,
            memory_mb=256,
            env={
                "TRAINHUB_JOB_TOKEN": "attacker-job-token",
                "TRAINHUB_CHECKPOINT_DIR": str(checkpoints / "job-202"),
                "TRAINHUB_PROBE_OTHER_DIR": str(victim_dir),
                "TRAINHUB_PROBE_OTHER_CHECKPOINTS": str(checkpoints / "job-101"),
                "TRAINHUB_PROBE_OTHER_PID": str(victim_process.pid),
                "TRAINHUB_PROBE_CREDENTIAL": str(credential),
            },
        )
        assert supervisor.start(attacker) is not None, tasks.states()
        line = wait_for(
            lambda: next((x for x in tasks.lines(attacker.key) if x.startswith("{")), None),
            30,
            f"the probe's report; output so far: {tasks.lines(attacker.key)}",
        )
        report = json.loads(line)

        assert report["read_other_dir"] is False
        assert report["read_other_file"] is False
        assert report["read_other_checkpoints"] is False
        assert report["read_credential"] is False
        assert report["signal_other"] is False
        assert report["signal_other_group"] is False
        assert pid_alive(victim_process.pid)
        # Its own places are its own.
        assert report["write_own_dir"] is True
        assert report["write_own_checkpoints"] is True
        assert report["import_ps_runtime"] is True
        identity, victim_identity = isolation.identity(202), isolation.identity(101)
        assert identity is not None and victim_identity is not None
        assert (report["uid"], report["gid"], report["groups"]) == (*identity, [])
        assert victim_identity != identity
        # No secret of the agent's reached the task, nor another job's token.
        leaked = set(AGENT_SECRETS) & set(report["env"])
        assert not leaked
        assert "TRAINHUB_JOB_TOKEN" in report["env"]
        if isolation.hierarchy is not None:
            assert "/trainhub/task-2-0" in report["cgroup"]
        for path in (victim_dir, checkpoints / "job-101"):
            st = path.stat()
            assert (st.st_uid, st.st_mode & 0o777) == (victim_identity[0], 0o700)
    finally:
        assert supervisor.stop_all(grace=2.0)
    if isolation.hierarchy is not None:
        leftovers = list(isolation.hierarchy.root.glob("**/trainhub/task-[12]-0"))
        assert not leftovers


def test_the_cgroup_bounds_resident_memory(work_dir: Path) -> None:
    try:
        isolation = Isolation.from_settings(
            work_dir / "agent", {"TRAINHUB_TASK_ISOLATION": "required"}
        )
    except IsolationError as exc:
        pytest.skip(f"this host cannot isolate tasks: {exc}")
    if isolation.hierarchy is None:
        pytest.skip("no cgroup hierarchy: memory is bounded by RLIMIT_AS only")
    probe = work_dir / "probe.py"
    shutil.copy(PROBE, probe)
    probe.chmod(0o644)
    outbox = Outbox()
    tasks = Tasks(outbox)
    supervisor = Supervisor(
        outbox, work_dir / "agent", command=[isolation.python, str(probe)], isolation=isolation
    )
    hog = DesiredTask(
        id=3,
        attempt=0,
        job_id=303,
        role=Role.PS,
        index=0,
        memory_mb=100,
        env={"TRAINHUB_PROBE_MODE": "hog", "TRAINHUB_PROBE_HOG_MB": "400"},
    )
    assert supervisor.start(hog) is not None
    wait_for(lambda: any(s[:2] == (3, 0) and s[2] != "running" for s in tasks.states()), 30)
    assert (3, 0, "failed") in tasks.states()
    assert "survived" not in tasks.lines(hog.key)
    ended = [m for m in tasks.messages if m["type"] == "task_status" and m["state"] == "failed"]
    assert ended[-1]["exit_code"] == 137, ended  # SIGKILL from the OOM killer


def test_a_process_that_leaves_the_task_group_ends_with_its_cgroup(work_dir: Path) -> None:
    try:
        isolation = Isolation.from_settings(
            work_dir / "agent", {"TRAINHUB_TASK_ISOLATION": "required"}
        )
    except IsolationError as exc:
        pytest.skip(f"this host cannot isolate tasks: {exc}")
    if isolation.hierarchy is None:
        pytest.skip("no cgroup hierarchy")
    probe = work_dir / "probe.py"
    shutil.copy(PROBE, probe)
    probe.chmod(0o644)
    outbox = Outbox()
    tasks = Tasks(outbox)
    supervisor = Supervisor(
        outbox, work_dir / "agent", command=[isolation.python, str(probe)], isolation=isolation
    )
    task = DesiredTask(
        id=5, attempt=0, job_id=505, role=Role.PS, index=0, env={"TRAINHUB_PROBE_MODE": "escape"}
    )
    started = supervisor.start(task)
    assert started is not None
    line = wait_for(
        lambda: next((x for x in tasks.lines(task.key) if x.startswith("ESCAPED ")), None), 20
    )
    escaped = int(line.split()[1])
    assert supervisor.wait_gone(task.key, 20)
    wait_for(lambda: not pid_alive(escaped), 5, "the escaped process to be killed")
    assert started.cgroup is not None
    assert not any(d.exists() for d in started.cgroup.dirs)
