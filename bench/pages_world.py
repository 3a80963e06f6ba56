"""The world `bench/pages.py` measures: a realistic cluster written into the database.

`populate` fills an empty, migrated database (Django set up): teams with quotas and
members, nodes (a fifth with GPUs; a few cordoned, draining, lost), jobs — most finished
with their finished tasks, a few hundred running with tasks on the ready nodes, a few
hundred pending with pending reasons — several events per job, and, for the running job
the bench measures, a long history, metric points and log lines.
"""

from __future__ import annotations

import random
import secrets
from datetime import datetime, timedelta
from typing import Any

MEMBER_TEAMS = 3
PENDING_REASONS = [
    "team quota exhausted: cpu (wants 4.5, 0 left)",
    "no node has 2 free GPUs",
    "waiting for the next scheduling cycle",
    "priority cap of normal reached: cpu",
    "behind 12 jobs of higher priority",
    "",
]


def _resources(cpu: float, memory_mb: int, gpu: int = 0) -> dict[str, Any]:
    return {"cpu": cpu, "memory_mb": memory_mb, "gpu": gpu}


def _spec(rng: random.Random, name: str, team: str, priority: str, gpu: int) -> dict[str, Any]:
    low = rng.randint(1, 3)
    return {
        "name": name,
        "team": team,
        "priority": priority,
        "entrypoint": "ps_runtime.examples.movielens:train",
        "args": {"epochs": rng.randint(1, 20), "dim": rng.choice([16, 32, 64])},
        "parameter_servers": {
            "replicas": rng.randint(1, 2),
            "resources": {"cpu": 1.0, "memory_mb": 2048},
        },
        "workers": {
            "min": low,
            "max": low + rng.randint(0, 4),
            "resources": _resources(rng.choice([0.5, 1.0, 2.0]), 2048, gpu),
        },
        "coordinator": {"resources": {"cpu": 0.5, "memory_mb": 1024}},
        "freeze_seconds": 120,
        "checkpoint_every_seconds": 300,
        "max_restarts": 3,
    }


class World:
    """What `populate` made and the bench asks about."""

    def __init__(self) -> None:
        self.admin: Any = None
        self.member: Any = None
        self.people: list[Any] = []
        self.running_job = 0
        self.pending_job = 0
        self.counts: dict[str, int] = {}


def _people_and_teams(world: World, n_teams: int) -> list[Any]:
    """A platform admin, the measured member (in MEMBER_TEAMS teams), 4 more people per
    team (the first of each its admin); every team with a quota (every 4th with GPUs)."""
    from django.contrib.auth.models import User
    from trainhub.tenancy.choices import Role
    from trainhub.tenancy.models import Membership, Quota, Team

    world.admin = User.objects.create_superuser("admin", "", None)
    world.member = User.objects.create_user("member", "", None)
    world.people = User.objects.bulk_create(
        User(username=f"user{i}", password="!") for i in range(4 * n_teams)
    )
    teams = Team.objects.bulk_create(
        Team(slug=f"team-{i:02d}", name=f"Team {i:02d}") for i in range(n_teams)
    )
    Quota.objects.bulk_create(
        Quota(team=t, cpu=96, memory_mb=393216, gpu=8 if i % 4 == 0 else 0)
        for i, t in enumerate(teams)
    )
    Membership.objects.bulk_create(
        [
            Membership(team=teams[i], user=world.member, role=Role.MEMBER)
            for i in range(MEMBER_TEAMS)
        ]
        + [
            Membership(
                team=teams[i % n_teams], user=user, role=Role.ADMIN if i < n_teams else Role.MEMBER
            )
            for i, user in enumerate(world.people)
        ]
    )
    return teams


def _nodes(n_nodes: int, now: datetime, rng: random.Random) -> list[Any]:
    """A fifth with 8 GPUs; a few cordoned, draining or lost."""
    from trainhub.nodes.choices import NodeState
    from trainhub.nodes.models import Node

    nodes = []
    for i in range(n_nodes):
        gpus = 8 if i % 5 == 0 else 0
        state = NodeState.ACTIVE
        if i % 33 == 7:
            state = NodeState.CORDONED
        elif i % 41 == 9:
            state = NodeState.DRAINING
        nodes.append(
            Node(
                hostname=f"node-{i:03d}",
                address=f"10.0.{i // 250}.{i % 250}",
                cpus=64 if gpus else 32,
                memory_mb=524288 if gpus else 131072,
                gpus=[
                    {"index": g, "model": "NVIDIA A100", "memory_mb": 40960, "uuid": f"GPU-{i}-{g}"}
                    for g in range(gpus)
                ],
                state=state,
                credential_hash="-",
                last_seen=now - (timedelta(hours=1) if i % 47 == 11 else timedelta(seconds=3)),
                usage={"agent_version": "0.1.0", "cpu_percent": rng.randint(0, 100)},
            )
        )
    return Node.objects.bulk_create(nodes)


def _states(n_jobs: int, rng: random.Random) -> list[str]:
    """Oldest first: finished jobs, then (shuffled) the active ones."""
    from trainhub.jobs.choices import JobState

    n_running = n_pending = min(300, n_jobs // 30)
    n_preempted = min(5, n_jobs // 1000)
    states: list[str] = []
    for _ in range(n_jobs - n_running - n_pending - n_preempted):
        r = rng.random()
        states.append(
            JobState.SUCCEEDED if r < 0.8 else JobState.FAILED if r < 0.92 else JobState.CANCELLED
        )
    active = (
        [JobState.RUNNING] * (n_running - 10)
        + [JobState.STARTING] * 5
        + [JobState.RESTARTING] * 5
        + [JobState.PENDING] * n_pending
        + [JobState.PREEMPTED] * n_preempted
    )
    rng.shuffle(active)
    return states + active


def _jobs(world: World, teams: list[Any], n_jobs: int, now: datetime, rng: random.Random) -> Any:
    from django.db import connection
    from trainhub.jobs.choices import JOB_TERMINAL, JobState
    from trainhub.jobs.models import Job

    priorities = ["experiment", "offline", "normal", "normal", "normal", "production"]
    span = timedelta(days=60)
    jobs = []
    states = _states(n_jobs, rng)
    for i, state in enumerate(states):
        team = teams[rng.randrange(len(teams))] if i != len(states) - 1 else teams[0]
        gpu = 1 if teams.index(team) % 4 == 0 and rng.random() < 0.3 else 0
        priority = rng.choice(priorities)
        name = f"exp-{i}-{rng.choice(['mf', 'wide', 'deep', 'bert'])}"
        created = now - span + span * (i / len(states))
        started = None
        if state != JobState.PENDING:
            started = created + timedelta(minutes=rng.randint(1, 30))
        finished = None
        if state in JOB_TERMINAL and started:
            finished = started + timedelta(hours=rng.randint(1, 20))
        jobs.append(
            Job(
                team=team,
                name=name,
                submitted_by=world.member if rng.random() < 0.05 else rng.choice(world.people),
                priority=priority,
                spec=_spec(rng, name, team.slug, priority, gpu),
                state=state,
                pending_reason=rng.choice(PENDING_REASONS) if state == JobState.PENDING else "",
                message="worker-0 exited with 1" if state == JobState.FAILED else "",
                runtime_token=secrets.token_hex(16),
                started_at=started,
                finished_at=finished,
                vruntime=rng.random() * 1000,
                pending_since=created if state == JobState.PENDING else None,
                last_rescale_at=started,
                restarts=1 if state == JobState.RESTARTING else 0,
            )
        )
    jobs = Job.objects.bulk_create(jobs, batch_size=2000)
    # created_at is auto_now_add: spread the submissions over the span afterwards.
    with connection.cursor() as cursor:
        cursor.execute(
            "UPDATE jobs_job SET created_at = %s + (id - %s) * %s::interval",
            [now - span, jobs[0].pk, f"{span.total_seconds() / len(jobs)} seconds"],
        )
    return jobs


def _task_state(job_state: str, role: str) -> str:
    from trainhub.jobs.choices import JOB_PLACED, JobState, TaskRole, TaskState

    if job_state in JOB_PLACED:
        return TaskState.RUNNING if job_state == JobState.RUNNING else TaskState.ASSIGNED
    if job_state == JobState.FAILED and role == TaskRole.WORKER:
        return TaskState.FAILED
    return TaskState.SUCCEEDED if job_state == JobState.SUCCEEDED else TaskState.STOPPED


def _tasks(jobs: Any, nodes: list[Any], now: datetime, rng: random.Random) -> list[Any]:
    """Every job that ran has its slots; the placed jobs' tasks hold room on ready nodes."""
    from trainhub.jobs.choices import JOB_PLACED, TASK_ACTIVE, JobState, TaskRole, TaskState
    from trainhub.jobs.models import Task
    from trainhub.nodes.choices import NodeState

    ready = [n for n in nodes if n.state == NodeState.ACTIVE and n.is_alive(now)]
    free_cpu = {n.pk: n.cpus for n in ready}
    free_gpu = {n.pk: list(range(len(n.gpus))) for n in ready}
    tasks: list[Any] = []
    for job in jobs:
        if job.state == JobState.PENDING:
            continue
        ps, workers = job.spec["parameter_servers"], job.spec["workers"]
        slots = [(TaskRole.COORDINATOR, 0, 0.5, 1024, 0)]
        slots += [(TaskRole.PS, k, 1.0, 2048, 0) for k in range(ps["replicas"])]
        res = workers["resources"]
        slots += [(TaskRole.WORKER, k, res["cpu"], 2048, res["gpu"]) for k in range(workers["min"])]
        placed = job.state in JOB_PLACED
        for role, index, cpu, memory, gpu in slots:
            gpus: list[int] = []
            if placed:
                node = rng.choice(
                    [n for n in ready if free_cpu[n.pk] >= cpu and len(free_gpu[n.pk]) >= gpu]
                )
                free_cpu[node.pk] -= cpu
                gpus = [free_gpu[node.pk].pop() for _ in range(gpu)]
            else:
                node = rng.choice(nodes)
            state = _task_state(job.state, role)
            done = state not in TASK_ACTIVE
            tasks.append(
                Task(
                    job=job,
                    role=role,
                    index=index,
                    state=state,
                    node=node,
                    port=None if role == TaskRole.COORDINATOR else 24000 + len(tasks) % 1000,
                    cpu=cpu,
                    memory_mb=memory,
                    gpu_indices=gpus,
                    borrowed=placed and rng.random() < 0.1,
                    exit_code=(1 if state == TaskState.FAILED else 0) if done else None,
                    started_at=job.started_at,
                    finished_at=job.finished_at,
                )
            )
    return Task.objects.bulk_create(tasks, batch_size=5000)


def _events(jobs: Any, measured: Any, now: datetime, rng: random.Random) -> int:
    """Submitted, then each state change, maybe a checkpoint; the measured job 300 more."""
    from trainhub.jobs.choices import JobState
    from trainhub.jobs.models import JobEvent

    events = []

    def add(job: Any, time: datetime, kind: str, **fields: str) -> None:
        events.append(JobEvent(job=job, time=time, kind=kind, actor="bench", **fields))

    for job in jobs:
        t = job.started_at or now
        add(job, t - timedelta(minutes=5), "submitted", to_state=JobState.PENDING)
        if job.state == JobState.PENDING:
            continue
        add(job, t, "state", from_state=JobState.PENDING, to_state=JobState.STARTING)
        t += timedelta(seconds=20)
        add(job, t, "state", from_state=JobState.STARTING, to_state=JobState.RUNNING)
        for k in range(rng.choice([0, 0, 0, 1, 2])):
            add(job, t + timedelta(minutes=5 * (k + 1)), "checkpoint", reason=f"saved {k + 1}")
        if job.finished_at:
            add(job, job.finished_at, "state", from_state=JobState.RUNNING, to_state=job.state)
    # 20 hours of growing, shrinking, restarts and preemption checkpoints.
    start = now - timedelta(hours=20)
    for k in range(300):
        kind = "checkpoint" if k % 50 == 0 else ("rescale", "scale", "restart")[k % 3]
        add(measured, start + timedelta(minutes=4 * k), kind, reason=f"{kind} {k}")
    JobEvent.objects.bulk_create(events, batch_size=5000)
    return len(events)


def _telemetry(measured: Any, now: datetime) -> tuple[int, int]:
    """The measured job's metrics (3 x 10k points) and log (20k lines)."""
    from trainhub.telemetry.chunks import columns_of
    from trainhub.telemetry.logchunks import store_lines
    from trainhub.telemetry.services import store_series

    start = now - timedelta(hours=20)
    rows = [
        (name, step, 1.0 / (step + 1), start + timedelta(seconds=step))
        for name in ("loss", "rmse", "throughput")
        for step in range(10_000)
    ]
    store_series(measured.pk, None, columns_of(rows))
    points = rows
    # As ingest stores them: a batch of 100 lines at a time, the two workers in turn.
    offsets = {"worker-0": 0, "worker-1": 0}
    lines = 0
    for first in range(0, 20_000, 100):
        source = f"worker-{first // 100 % 2}"
        stored = store_lines(
            job_id=measured.pk,
            task_id=None,
            source=source,
            stream="stdout",
            texts=[f"step {k} loss {1.0 / (k + 1):.5f}" for k in range(first, first + 100)],
            time=start + timedelta(seconds=first),
            offset=offsets[source],
        )
        offsets[source] = stored[-1].offset + len(stored[-1].line.encode()) + 1
        lines += len(stored)
    return len(points), lines


def populate(n_jobs: int, n_nodes: int, n_teams: int, now: datetime) -> World:
    from django.db import connection
    from trainhub.jobs.choices import TASK_ACTIVE, JobState
    from trainhub.jobs.models import Job

    rng = random.Random(12)
    world = World()
    teams = _people_and_teams(world, n_teams)
    nodes = _nodes(n_nodes, now, rng)
    jobs = _jobs(world, teams, n_jobs, now, rng)
    tasks = _tasks(jobs, nodes, now, rng)
    # The measured jobs: the newest running and pending ones of the member's teams.
    mine = {t.pk for t in teams[:MEMBER_TEAMS]}
    measured = next(
        j for j in reversed(jobs) if j.state == JobState.RUNNING and j.team_id == teams[0].pk
    )
    world.running_job = measured.pk
    world.pending_job = next(
        j.pk for j in reversed(jobs) if j.state == JobState.PENDING and j.team_id in mine
    )
    events = _events(jobs, measured, now, rng)
    points, lines = _telemetry(measured, now)
    with connection.cursor() as cursor:
        cursor.execute("ANALYZE")
    by_state: dict[str, int] = {}
    for job in jobs:
        by_state[job.state] = by_state.get(job.state, 0) + 1
    world.counts = {
        "jobs": len(jobs),
        "nodes": len(nodes),
        "teams": len(teams),
        "users": len(world.people) + 2,
        "tasks": len(tasks),
        "active_tasks": sum(1 for t in tasks if t.state in TASK_ACTIVE),
        "events": events,
        "metric_points": points,
        "log_lines": lines,
        "member_teams": MEMBER_TEAMS,
        "member_visible_jobs": Job.objects.visible_to(world.member).count(),
        **{f"jobs_{state}": n for state, n in sorted(by_state.items())},
    }
    return world
