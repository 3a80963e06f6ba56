"""A history recorded by the real platform on a simulated clock: jobs submitted at their
time, scheduling cycles on the database at every submission and end, tasks reported through
the agent gateway (running as soon as placed, done when their time is up)."""

from __future__ import annotations

import heapq
from datetime import datetime, timedelta
from typing import Any

from trainhub.agents.services import handle_message
from trainhub.jobs.choices import JobState
from trainhub.jobs.models import Job
from trainhub.nodes.choices import NodeIsolation
from trainhub.nodes.models import Node
from trainhub.scheduling.services import run_cycle
from trainhub.tenancy.choices import Role
from trainhub.tenancy.models import Quota

from ps_runtime.agent.protocol import ReportedState, TaskKey, TaskStatus

from ..factories import make_job, make_node, make_team, make_user

SMALL = {"cpu": 0.5, "memory_mb": 256}
# (submitted at s, team, workers of 1 CPU, runs for s, priority)
PLAN = [
    (0, "alpha", 2, 1800, "normal"),
    (60, "alpha", 2, 1200, "normal"),
    (120, "beta", 1, 2400, "normal"),
    (180, "alpha", 1, 900, "experiment"),
    (300, "beta", 1, 600, "normal"),
    (420, "alpha", 2, 1500, "offline"),
    (600, "beta", 1, 1200, "experiment"),
    (900, "alpha", 1, 600, "normal"),
    (1000, "beta", 1, 1800, "normal"),
    (1300, "alpha", 2, 900, "normal"),
    (1500, "beta", 1, 300, "offline"),
    (1800, "alpha", 1, 1200, "experiment"),
    (2000, "beta", 1, 900, "normal"),
    (2400, "alpha", 2, 600, "normal"),
    (2600, "beta", 1, 1500, "normal"),
    (3000, "alpha", 1, 300, "normal"),
]


def report_all(
    node: Node, job: Job, role: str | None, state: str, code: int | None, at: Any
) -> None:
    for task in job.tasks.all():
        if role is None or task.role == role:
            status = TaskStatus(TaskKey(task.pk, task.attempt), ReportedState(state), code)
            handle_message(node_id=node.pk, now=at, message=status.to_wire())


def record_history(start: datetime) -> dict[str, list[float]]:
    """Run PLAN through the platform: jobs submitted at their time, cycles at every
    submission and end, tasks running as soon as placed. Returns each team's waits."""
    users = {"alpha": make_user("ann"), "beta": make_user("ben")}
    make_team("alpha", members={users["alpha"]: Role.ADMIN}, cpu=5, memory_mb=65536)
    make_team("beta", members={users["beta"]: Role.ADMIN}, cpu=3, memory_mb=65536)
    # No borrowing: what one team waits for is its own quota.
    Quota.objects.update(borrowing_limit_cpu=0)
    node, _ = make_node(cpus=8, memory_mb=65536)
    Node.objects.filter(pk=node.pk).update(isolation=NodeIsolation.UID_CGROUP)
    events: list[tuple[float, int, str, int]] = [
        (t, i, "submit", i) for i, (t, *_) in enumerate(PLAN)
    ]
    heapq.heapify(events)
    jobs: dict[int, Job] = {}
    waits: dict[str, list[float]] = {"alpha": [], "beta": []}
    while events:
        now_s = events[0][0]
        at = start + timedelta(seconds=now_s)
        while events and events[0][0] == now_s:
            _, _, kind, i = heapq.heappop(events)
            if kind == "submit":
                _, team, workers, _, priority = PLAN[i]
                job = make_job(
                    users[team],
                    team=team,
                    name=f"job-{i}",
                    priority=priority,
                    parameter_servers={"replicas": 1, "resources": SMALL},
                    coordinator={"resources": SMALL},
                    workers={
                        "min": workers,
                        "max": workers,
                        "resources": {"cpu": 1, "memory_mb": 512},
                    },
                )
                Job.objects.filter(pk=job.pk).update(created_at=at, pending_since=at)
                jobs[i] = job
            else:
                report_all(node, jobs[i], "coordinator", "succeeded", 0, at)
                report_all(node, jobs[i], "ps", "stopped", 143, at)
                report_all(node, jobs[i], "worker", "stopped", 143, at)
                assert Job.objects.get(pk=jobs[i].pk).state == JobState.SUCCEEDED
        Node.objects.filter(pk=node.pk).update(last_seen=at)
        run_cycle(now=at)
        for i, job in jobs.items():
            job.refresh_from_db()
            if job.state == JobState.STARTING:
                report_all(node, job, None, "running", None, at)
                waits[PLAN[i][1]].append(now_s - PLAN[i][0])
                heapq.heappush(events, (now_s + PLAN[i][3], i, "end", i))
            assert job.state != JobState.PREEMPTED
    return waits
