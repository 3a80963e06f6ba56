"""Carrying out the policy's decisions through the job services (or only describing them)."""

from __future__ import annotations

from collections import defaultdict
from datetime import datetime

from django.conf import settings
from django.utils import timezone

from trainhub.jobs.choices import TASK_ACTIVE, DesiredState, TaskRole
from trainhub.jobs.models import Task
from trainhub.jobs.services import (
    Placement,
    Start,
    move_server,
    place_jobs,
    preempt_job,
    rescale_workers,
    set_pending_reasons,
)

from . import policy
from .models import Reservation
from .snapshot import ClusterView


class NodeSlots:
    """Hands out the concrete ports and GPU indices that the policy only counts.

    GPUs of a given model go first (`claim_model_gpus`), so that tasks that take any GPU
    cannot use up the model-bound tasks' GPUs: the policy counts both kinds, not indices.
    """

    def __init__(self, view: ClusterView) -> None:
        self.view = view
        self.ports = view.used_ports
        self.gpus = view.used_gpus
        self._claimed: dict[tuple[int, str, int], list[int]] = {}

    def claim_model_gpus(self, job_id: int, t: policy.TaskPlacement) -> None:
        """Choose now the GPUs of a task bound to a GPU model (others: no-op)."""
        model = policy.gpu_model_of(t.resources)
        if model is not None:
            self._claimed[(job_id, t.role, t.index)] = self.gpu_indices(
                t.node_id, int(t.resources.gpu), model
            )

    def port(self, node_id: int) -> int:
        low, high = settings.TASK_PORT_RANGE
        taken = self.ports[node_id]
        port = next((x for x in range(low, high + 1) if x not in taken), None)
        if port is None:
            raise RuntimeError(
                f"node {node_id} has no free task port in {low}-{high}; widen "
                "TRAINHUB_TASK_PORT_MIN..MAX"
            )
        taken.add(port)
        return port

    def gpu_indices(self, node_id: int, count: int, model: str | None = None) -> list[int]:
        """`count` free GPU indices of the node, all of `model` when given."""
        if count <= 0:
            return []
        taken = self.gpus[node_id]
        free = [
            g["index"]
            for g in self.view.nodes[node_id].gpus
            if g["index"] not in taken and (model is None or g.get("model") == model)
        ]
        if len(free) < count:
            kind = "" if model is None else f" {model}"
            raise RuntimeError(
                f"node {node_id} has {len(free)} free{kind} GPUs, the policy placed {count}"
            )
        chosen = sorted(free)[:count]
        taken.update(chosen)
        return chosen

    def placement(self, job_id: int, t: policy.TaskPlacement) -> Placement:
        gpus = self._claimed.pop((job_id, t.role, t.index), None)
        if gpus is None:
            gpus = self.gpu_indices(t.node_id, int(t.resources.gpu))
        return Placement(
            role=TaskRole(t.role),
            index=t.index,
            node_id=t.node_id,
            port=None if t.role == policy.COORDINATOR else self.port(t.node_id),
            cpu=t.resources.cpu,
            memory_mb=int(t.resources.memory_mb),
            gpu_indices=gpus,
            borrowed=t.borrowed,
        )


def apply_decisions(view: ClusterView, d: policy.Decisions, now: datetime) -> None:
    """Apply one cycle's decisions; the caller holds the cycle lock and the transaction.

    Order: preemptions and removals first (they free capacity the starts may be reserved
    on), then starts and growth.
    """
    view.load_jobs(
        [p.job_id for p in d.preemptions]
        + [r.job_id for r in d.remove_workers]
        + [s.job_id for s in d.starts]
        + [a.job_id for a in d.add_workers]
        + [m.job_id for m in d.move_servers]
    )
    for p in d.preemptions:
        preempt_job(job=view.job(p.job_id), grace_seconds=p.grace_seconds, reason=p.reason, now=now)
    removals: dict[int, list[policy.RemoveWorker]] = defaultdict(list)
    for r in d.remove_workers:
        removals[r.job_id].append(r)
    for job_id, items in removals.items():
        indices = {r.index for r in items}
        stop = list(
            Task.objects.filter(
                job_id=job_id,
                role=TaskRole.WORKER,
                index__in=indices,
                state__in=TASK_ACTIVE,
                desired=DesiredState.RUN,
            )
        )
        rescale_workers(job=view.job(job_id), add=[], stop=stop, now=now, why=items[0].reason)
    slots = NodeSlots(view)
    for m in d.move_servers:
        port = slots.port(m.to_node_id)
        move_server(
            job=view.job(m.job_id),
            index=m.index,
            node_id=m.to_node_id,
            port=port,
            why=m.reason,
            now=now,
        )
    for s in d.starts:
        for t in s.tasks:
            slots.claim_model_gpus(s.job_id, t)
    for a in d.add_workers:
        slots.claim_model_gpus(a.job_id, a.task)
    place_jobs(
        [
            Start(
                view.job(s.job_id),
                [slots.placement(s.job_id, t) for t in s.tasks],
                sorted({view.nodes[t.node_id].address for t in s.tasks}),
            )
            for s in d.starts
        ],
        now=now,
        tls_mode=settings.RUNTIME_TLS,
    )
    growth: dict[int, list[Placement]] = defaultdict(list)
    for a in d.add_workers:
        growth[a.job_id].append(slots.placement(a.job_id, a.task))
    for job_id, add in growth.items():
        job = view.job(job_id)
        why = "" if job.target_workers is not None else "growing into idle capacity"
        rescale_workers(job=job, add=add, stop=[], now=now, why=why)
    set_pending_reasons(d.pending_reasons)
    Reservation.objects.all().delete()
    Reservation.objects.bulk_create(
        Reservation(
            job_id=r.job_id,
            node_id=r.node_id,
            cpu=r.resources.cpu,
            memory_mb=r.resources.memory_mb,
            gpu=r.resources.gpu,
            gpu_model=policy.gpu_model_of(r.resources) or "",
            created_at=datetime.fromtimestamp(r.created_at, tz=timezone.get_current_timezone()),
        )
        for r in d.reservations
    )


def describe_decisions(d: policy.Decisions) -> list[str]:
    """One line per decision, as observe-only mode logs them."""
    lines = []
    for p in d.preemptions:
        lines.append(f"preempt job {p.job_id} (grace {p.grace_seconds:g} s): {p.reason}")
    for m in d.move_servers:
        lines.append(
            f"move ps {m.index} of job {m.job_id} from node {m.from_node_id} to node "
            f"{m.to_node_id}: {m.reason}"
        )
    for r in d.remove_workers:
        lines.append(f"remove worker {r.index} of job {r.job_id} on node {r.node_id}: {r.reason}")
    for s in d.starts:
        where = ", ".join(
            f"{t.role} {t.index} on node {t.node_id}" + (" (borrowed)" if t.borrowed else "")
            for t in s.tasks
        )
        lines.append(f"start job {s.job_id}: {where}")
    for a in d.add_workers:
        lines.append(
            f"add worker {a.task.index} to job {a.job_id} on node {a.task.node_id}"
            + (" (borrowed)" if a.task.borrowed else "")
        )
    for job_id, reason in sorted(d.pending_reasons.items()):
        lines.append(f"job {job_id} waits: {reason}")
    return lines


def summary(d: policy.Decisions) -> dict[str, int]:
    return {
        "starts": len(d.starts),
        "add_workers": len(d.add_workers),
        "remove_workers": len(d.remove_workers),
        "preemptions": len(d.preemptions),
        "move_servers": len(d.move_servers),
        "pending": len(d.pending_reasons),
        "reservations": len(d.reservations),
    }
