"""One scheduling cycle: snapshot the cluster, run the policy, apply its decisions."""

from __future__ import annotations

import logging
from collections import defaultdict
from dataclasses import dataclass
from datetime import datetime

from django.conf import settings
from django.db import transaction

from trainhub.jobs.choices import TASK_ACTIVE, DesiredState, JobState, TaskRole
from trainhub.jobs.models import Job, Task
from trainhub.jobs.services import (
    Placement,
    place_job,
    release_lost_nodes,
    rescale_workers,
    set_pending_reasons,
)
from trainhub.nodes.choices import SCHEDULABLE
from trainhub.nodes.models import Node

from .locks import try_advisory_xact_lock
from .policy import first_fit as policy

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class CycleResult:
    ran: bool
    started: int = 0
    pending: int = 0


def _task_requests(job: Job) -> tuple[policy.TaskRequest, ...]:
    spec = job.spec
    requests = [
        policy.TaskRequest(
            TaskRole.COORDINATOR,
            0,
            spec["coordinator"]["resources"]["cpu"],
            spec["coordinator"]["resources"]["memory_mb"],
        )
    ]
    ps = spec["parameter_servers"]
    requests += [
        policy.TaskRequest(TaskRole.PS, i, ps["resources"]["cpu"], ps["resources"]["memory_mb"])
        for i in range(ps["replicas"])
    ]
    workers = spec["workers"]
    requests += [
        policy.TaskRequest(
            TaskRole.WORKER,
            i,
            workers["resources"]["cpu"],
            workers["resources"]["memory_mb"],
            workers["resources"].get("gpu", 0),
        )
        for i in range(workers["min"])
    ]
    return tuple(requests)


def _snapshot(now: datetime) -> tuple[policy.Snapshot, dict[int, Job], dict[int, set[int]]]:
    nodes = list(Node.objects.alive(now).filter(state__in=SCHEDULABLE))
    held = Task.objects.filter(state__in=TASK_ACTIVE, node__in=nodes)
    used_cpu: dict[int, float] = defaultdict(float)
    used_mem: dict[int, int] = defaultdict(int)
    used_gpus: dict[int, set[int]] = defaultdict(set)
    used_ports: dict[int, set[int]] = defaultdict(set)
    for node_id, cpu, mem, gpus, port in held.values_list(
        "node_id", "cpu", "memory_mb", "gpu_indices", "port"
    ):
        used_cpu[node_id] += cpu
        used_mem[node_id] += mem
        used_gpus[node_id].update(gpus)
        if port is not None:
            used_ports[node_id].add(port)
    capacities = tuple(
        policy.NodeCapacity(
            id=n.pk,
            cpu_free=n.cpus - used_cpu[n.pk],
            memory_free_mb=n.memory_mb - used_mem[n.pk],
            gpus_free=[g["index"] for g in n.gpus if g["index"] not in used_gpus[n.pk]],
            has_gpus=bool(n.gpus),
        )
        for n in nodes
    )
    pending = list(Job.objects.filter(state=JobState.PENDING).order_by("created_at", "id"))
    snapshot = policy.Snapshot(
        nodes=capacities, pending=tuple(policy.JobRequest(j.pk, _task_requests(j)) for j in pending)
    )
    return snapshot, {j.pk: j for j in pending}, used_ports


def _assign_ports(
    placements: list[policy.TaskPlacement], used_ports: dict[int, set[int]]
) -> list[int | None]:
    low, high = settings.TASK_PORT_RANGE
    ports: list[int | None] = []
    for p in placements:
        if p.role == TaskRole.COORDINATOR:
            ports.append(None)
            continue
        taken = used_ports[p.node_id]
        port = next((x for x in range(low, high + 1) if x not in taken), None)
        if port is None:
            raise RuntimeError(f"node {p.node_id} has no free task port in {low}-{high}")
        taken.add(port)
        ports.append(port)
    return ports


def _apply_worker_targets(now: datetime) -> None:
    """Grow or shrink running jobs to the worker count their owners asked for (`scale`).

    Shrinking stops the highest-indexed workers; growing places one worker at a time on
    the first node with room, and stops when none has (the next cycle tries again).
    """
    jobs = Job.objects.filter(state=JobState.RUNNING, target_workers__isnull=False)
    if not jobs.exists():
        return
    snapshot, _, used_ports = _snapshot(now)
    nodes = list(snapshot.nodes)
    for job in jobs:
        workers = list(
            job.tasks.filter(
                role=TaskRole.WORKER, desired=DesiredState.RUN, state__in=TASK_ACTIVE
            ).order_by("index")
        )
        target = job.target_workers or 0
        if target < len(workers):
            rescale_workers(job=job, add=[], stop=workers[target:], now=now)
            continue
        res = job.spec["workers"]["resources"]
        add: list[Placement] = []
        for i in range(target - len(workers)):
            request = policy.TaskRequest(
                TaskRole.WORKER, i, res["cpu"], res["memory_mb"], res.get("gpu", 0)
            )
            node = next((n for n in nodes if n.fits(request)), None)
            if node is None:
                break
            gpus = node.take(request)
            [port] = _assign_ports(
                [policy.TaskPlacement(TaskRole.WORKER, i, node.id, tuple(gpus))], used_ports
            )
            add.append(
                Placement(
                    role=TaskRole.WORKER,
                    index=i,
                    node_id=node.id,
                    port=port,
                    cpu=request.cpu,
                    memory_mb=request.memory_mb,
                    gpu_indices=gpus,
                )
            )
        if add:
            rescale_workers(job=job, add=add, stop=[], now=now)


def run_cycle(*, now: datetime) -> CycleResult:
    """Run one cycle unless another is running (single-flight across the cluster)."""
    with transaction.atomic():
        if not try_advisory_xact_lock("scheduling_cycle"):
            return CycleResult(ran=False)
        lost = list(Node.objects.lost(now).values_list("pk", flat=True))
        if lost:
            release_lost_nodes(
                lost_node_ids=lost, now=now, lost_after_s=settings.NODE_LOST_AFTER_SECONDS
            )
        snapshot, jobs, used_ports = _snapshot(now)
        decisions = policy.schedule(snapshot)
        requests = {r.id: {(t.role, t.index): t for t in r.tasks} for r in snapshot.pending}
        for job_id, placements in decisions.starts.items():
            ports = _assign_ports(placements, used_ports)
            place_job(
                job=jobs[job_id],
                now=now,
                placements=[
                    Placement(
                        role=TaskRole(p.role),
                        index=p.index,
                        node_id=p.node_id,
                        port=port,
                        cpu=requests[job_id][(p.role, p.index)].cpu,
                        memory_mb=requests[job_id][(p.role, p.index)].memory_mb,
                        gpu_indices=list(p.gpu_indices),
                    )
                    for p, port in zip(placements, ports, strict=True)
                ],
            )
        set_pending_reasons(decisions.pending_reasons)
        _apply_worker_targets(now)
    if decisions.starts:
        logger.info("scheduling cycle started jobs %s", sorted(decisions.starts))
    return CycleResult(
        ran=True, started=len(decisions.starts), pending=len(decisions.pending_reasons)
    )


__all__ = ["CycleResult", "run_cycle"]
