"""`workers.resources.gpu_model`: the policy places model-bound workers only where GPUs of
that model are free, says so when none are, and the platform hands out indices of that
model."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest
from django.utils import timezone
from trainhub.jobs.models import Job, Task
from trainhub.nodes.models import Node as NodeModel
from trainhub.scheduling.models import Reservation
from trainhub.scheduling.policy import (
    PENDING,
    WORKER,
    ModelResources,
    Node,
    Resources,
    Snapshot,
    Team,
    schedule,
)
from trainhub.scheduling.policy import (
    Job as PolicyJob,
)
from trainhub.scheduling.preview import preview_submission
from trainhub.scheduling.services import run_cycle
from trainhub.scheduling.snapshot import read_cluster
from trainhub.tenancy.choices import Role

from ..factories import make_job, make_node, make_team, make_user, spec
from .driver import apply

A100 = "NVIDIA A100-SXM4-80GB"
H100 = "NVIDIA H100 80GB HBM3"
V100 = "Tesla V100-PCIE-16GB"
TEAM = (Team("a", Resources(64, 256000, 16)),)


def _nodes() -> tuple[Node, ...]:
    """Node 1: 4 H100s. Node 2: 2 A100s and 2 V100s. Node 3: 4 V100s."""
    return (
        Node(1, Resources(16, 64000, 4), gpu_models={H100: 4}),
        Node(2, Resources(16, 64000, 4), gpu_models={A100: 2, V100: 2}),
        Node(3, Resources(16, 64000, 4), gpu_models={V100: 4}),
    )


def _job(job_id: int, gpus: int, model: str | None, workers: int = 1) -> PolicyJob:
    worker = ModelResources(2, 1000, gpus, model) if model is not None else Resources(2, 1000, gpus)
    return PolicyJob(job_id, "a", "normal", PENDING, float(job_id), worker, workers_min=workers)


def _worker_nodes(snap: Snapshot, job_id: int) -> list[int]:
    j = next(j for j in snap.jobs if j.id == job_id)
    return sorted(t.node_id for t in j.tasks if t.role == WORKER)


def test_a_model_bound_worker_lands_on_the_node_with_that_model() -> None:
    snap = Snapshot(0.0, _nodes(), TEAM, (_job(1, 2, A100),))
    snap = apply(snap, schedule(snap), 0.0)
    assert _worker_nodes(snap, 1) == [2]


def test_two_models_share_a_mixed_node() -> None:
    # Node 2 holds the A100 worker and one V100 worker; the other V100 workers go to node 3.
    snap = Snapshot(0.0, _nodes(), TEAM, (_job(1, 2, A100), _job(2, 2, V100, workers=3)))
    snap = apply(snap, schedule(snap), 0.0)
    assert _worker_nodes(snap, 1) == [2]
    assert _worker_nodes(snap, 2) == [2, 3, 3]


def test_the_pending_reason_names_the_model() -> None:
    snap = Snapshot(0.0, _nodes(), TEAM, (_job(1, 2, A100),))
    snap = apply(snap, schedule(snap), 0.0)
    late = _job(2, 1, A100)
    d = schedule(replace(snap, jobs=(*snap.jobs, late)))
    assert d.pending_reasons[2] == f"no node has 1 free {A100} GPUs (at most 0 free on any node)"
    d = schedule(replace(snap, jobs=(*snap.jobs, _job(3, 3, A100))))
    assert d.pending_reasons[3] == f"no node has 3 {A100} GPUs"


def test_running_tasks_hold_their_model_so_later_jobs_wait() -> None:
    """Three 1-GPU H100 workers run; a 2-GPU H100 job waits although node 2 has 4 GPUs."""
    snap = Snapshot(0.0, _nodes(), TEAM, (_job(1, 1, H100, workers=3),))
    snap = apply(snap, schedule(snap), 0.0)
    assert _worker_nodes(snap, 1) == [1, 1, 1]
    d = schedule(replace(snap, jobs=(*snap.jobs, _job(2, 2, H100))))
    assert not d.starts
    assert d.pending_reasons[2] == f"no node has 2 free {H100} GPUs (at most 1 free on any node)"


# -- through the database: snapshot, apply ----------------------------------------------


def _with_models(node: NodeModel, *models: str) -> None:
    node.gpus = [
        {"index": i, "model": m, "memory_mb": 40960, "uuid": f"GPU-{node.pk}-{i}"}
        for i, m in enumerate(models)
    ]
    node.save(update_fields=["gpus"])


@pytest.fixture
def mixed(db: Any) -> dict[str, Any]:
    alice = make_user("alice")
    make_team("vision", members={alice: Role.MEMBER}, cpu=64, memory_mb=262144, gpu=16)
    h100, _ = make_node("h100s", cpus=16, memory_mb=65536, gpus=2)
    mix, _ = make_node("mixed", cpus=16, memory_mb=65536, gpus=4)
    _with_models(h100, H100, H100)
    _with_models(mix, V100, A100, V100, A100)
    return {"alice": alice, "h100": h100, "mixed": mix}


def _gpu_job(user: Any, name: str, gpus: int, model: str | None, workers: int = 1) -> Job:
    resources: dict[str, Any] = {"cpu": 1, "memory_mb": 512, "gpu": gpus}
    if model is not None:
        resources["gpu_model"] = model
    small = {"cpu": 1, "memory_mb": 512}
    return make_job(
        user,
        team="vision",
        name=name,
        parameter_servers={"replicas": 1, "resources": small},
        coordinator={"resources": small},
        workers={"min": workers, "max": workers, "resources": resources},
    )


def _workers(job: Job) -> list[tuple[int | None, list[int]]]:
    return [
        (t.node_id, list(t.gpu_indices))
        for t in Task.objects.filter(job=job, role="worker").order_by("index")
    ]


def test_placement_gets_indices_of_the_asked_model(mixed: dict[str, Any]) -> None:
    # Submitted first, the unbound job is placed first; the A100 job still gets the A100s.
    anything = _gpu_job(mixed["alice"], "anything", 2, None, workers=2)
    a100 = _gpu_job(mixed["alice"], "a100", 2, A100)
    run_cycle(now=timezone.now())
    assert _workers(a100) == [(mixed["mixed"].pk, [1, 3])]
    held = [i for node, indices in _workers(anything) if node == mixed["mixed"].pk for i in indices]
    assert not set(held) & {1, 3}


def test_a_waiting_model_job_says_which_model(mixed: dict[str, Any]) -> None:
    first = _gpu_job(mixed["alice"], "first", 2, H100)
    second = _gpu_job(mixed["alice"], "second", 1, H100)
    run_cycle(now=timezone.now())
    assert _workers(first) == [(mixed["h100"].pk, [0, 1])]
    second.refresh_from_db()
    assert second.state == "pending"
    assert f"no node has 1 free {H100} GPUs" in second.pending_reason


def test_capacity_reclaimed_for_a_model_job_is_reserved_as_that_model() -> None:
    nodes = (Node(1, Resources(16, 64000, 2), gpu_models={A100: 2}),)
    teams = (Team("a", Resources(16, 64000, 0)), Team("b", Resources(16, 64000, 2)))
    first = Snapshot(0.0, nodes, teams, (replace(_job(1, 2, None), team="a"),))
    snap = apply(first, schedule(first), 0.0)
    owner = replace(_job(2, 2, A100), team="b", submit_time=1.0)
    d = schedule(replace(snap, now=1.0, jobs=(*snap.jobs, owner)))
    assert [p.job_id for p in d.preemptions] == [1]
    [reserved] = d.reservations
    assert reserved.job_id == 2 and reserved.resources == ModelResources(2, 1000, 2, A100)


def test_a_stored_reservation_keeps_its_model(mixed: dict[str, Any]) -> None:
    job = _gpu_job(mixed["alice"], "a100", 2, A100)
    Reservation.objects.create(
        job=job,
        node=mixed["mixed"],
        cpu=1,
        memory_mb=512,
        gpu=2,
        gpu_model=A100,
        created_at=timezone.now(),
    )
    [reserved] = read_cluster(timezone.now()).snapshot.reservations
    assert reserved.resources == ModelResources(1, 512, 2, A100)


def test_a_dry_run_of_a_model_job_answers_for_that_model(mixed: dict[str, Any]) -> None:
    """The preview reads the spec as the cycle does: two free V100s do not make a job that
    asks for two A100s fit, once the A100s are taken."""
    from trainhub.jobs.spec import parse_job_spec  # after trainhub.jobs.services (import cycle)

    _gpu_job(mixed["alice"], "first", 2, A100)
    run_cycle(now=timezone.now())
    small = {"cpu": 1, "memory_mb": 512}

    def asking_for(model: str) -> Any:
        document = spec(
            team="vision",
            name="next",
            parameter_servers={"replicas": 1, "resources": small},
            coordinator={"resources": small},
            workers={"min": 1, "max": 1, "resources": {**small, "gpu": 2, "gpu_model": model}},
        )
        return preview_submission(parse_job_spec(document, user=mixed["alice"]), now=timezone.now())

    a100 = asking_for(A100)
    assert not a100.fits_now
    assert A100 in a100.reason
    assert asking_for(V100).fits_now
