"""Small factories for control-plane tests."""

from __future__ import annotations

from typing import Any

from django.contrib.auth import get_user_model
from django.contrib.auth.models import User
from django.utils import timezone
from trainhub.jobs.choices import JobState, TaskRole, TaskState
from trainhub.jobs.models import Job
from trainhub.jobs.services import Placement, place_job, record_task_status, submit_job
from trainhub.jobs.spec import parse_job_spec
from trainhub.nodes.models import Node
from trainhub.nodes.services import create_enrollment_token, enroll_node
from trainhub.tenancy.choices import Role
from trainhub.tenancy.models import Team
from trainhub.tenancy.services import add_member, create_team


def make_user(username: str = "alice", *, superuser: bool = False) -> User:
    model = get_user_model()
    if superuser:
        return model.objects.create_superuser(username, "", "pw-" + username)
    return model.objects.create_user(username, "", "pw-" + username)


def make_team(
    slug: str = "recsys",
    *,
    members: dict[Any, Role] | None = None,
    cpu: float = 64,
    memory_mb: int = 262144,
    gpu: int = 0,
) -> Team:
    team = create_team(slug=slug, name=slug.title(), cpu=cpu, memory_mb=memory_mb, gpu=gpu)
    for user, role in (members or {}).items():
        add_member(team=team, user=user, role=role)
    return team


def make_node(
    hostname: str = "node-1",
    *,
    cpus: float = 8,
    memory_mb: int = 32768,
    gpus: int = 0,
    address: str = "127.0.0.1",
) -> tuple[Node, str]:
    """An enrolled, live node and its credential."""
    token = create_enrollment_token(description="test")
    facts = {
        "hostname": hostname,
        "address": address,
        "cpus": cpus,
        "memory_mb": memory_mb,
        "gpus": [{"index": i, "model": "NVIDIA A100", "memory_mb": 40960} for i in range(gpus)],
    }
    issued = enroll_node(token=token.secret, facts=facts, now=timezone.now())
    return Node.objects.get(pk=issued.id), issued.secret


def spec(**overrides: Any) -> dict[str, Any]:
    base: dict[str, Any] = {
        "name": "movielens-mf",
        "team": "recsys",
        "entrypoint": "ps_runtime.examples.movielens:train",
        "args": {"epochs": 1},
        "parameter_servers": {"replicas": 1, "resources": {"cpu": 0.5, "memory_mb": 512}},
        "workers": {"min": 1, "max": 2, "resources": {"cpu": 0.5, "memory_mb": 512, "gpu": 0}},
        "coordinator": {"resources": {"cpu": 0.5, "memory_mb": 512}},
        # Restarts in tests start at once (the default waits 10 s, doubling).
        "retry": {"backoff_seconds": 0},
    }
    base.update(overrides)
    return base


def make_job(user: User, **overrides: Any) -> Job:
    """A pending job submitted by `user`, from `spec(**overrides)` validated as the API does."""
    return submit_job(
        user=user, spec=parse_job_spec(spec(**overrides), user=user), now=timezone.now()
    )


def gang_placements(
    job: Job, node: Node, *, workers: int | None = None, borrowed: bool = False
) -> list[Placement]:
    """Everything a job's gang start places, all on `node`: coordinator, every PS shard
    and `workers` workers (default: the spec's minimum), sized as the spec asks."""
    spec = job.job_spec
    placements = [
        Placement(
            TaskRole.COORDINATOR,
            0,
            node.pk,
            None,
            spec.coordinator.resources.cpu,
            spec.coordinator.resources.memory_mb,
            borrowed=borrowed,
        )
    ]
    port = 41000
    for index in range(spec.parameter_servers.replicas):
        resources = spec.parameter_servers.resources
        placements.append(
            Placement(
                TaskRole.PS,
                index,
                node.pk,
                port,
                resources.cpu,
                resources.memory_mb,
                borrowed=borrowed,
            )
        )
        port += 1
    for index in range(spec.workers.min if workers is None else workers):
        resources = spec.workers.resources
        placements.append(
            Placement(
                TaskRole.WORKER,
                index,
                node.pk,
                port,
                resources.cpu,
                resources.memory_mb,
                borrowed=borrowed,
            )
        )
        port += 1
    return placements


def running_job(job: Job, node: Node) -> Job:
    """`job` placed whole on `node` (`gang_placements`), every task reported running."""
    place_job(job=job, placements=gang_placements(job, node), now=timezone.now())
    for task in job.tasks.all():
        assert task.node_id is not None
        record_task_status(
            node_id=task.node_id,
            task_id=task.pk,
            attempt=task.attempt,
            state=TaskState.RUNNING,
            exit_code=None,
            message="",
            now=timezone.now(),
        )
    job.refresh_from_db()
    assert job.state == JobState.RUNNING
    return job
