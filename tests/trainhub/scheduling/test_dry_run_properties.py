"""The dry run over random clusters on the real database: it changes nothing, queues no
cycle, and the job submitted stands where it said in the queue and the next cycle does
with it what it said (`preview.preview_submission`).

Each example builds a `lent_clusters()` cluster (nodes, teams with quotas, borrowers placed
by a first cycle, the owner's jobs waiting), then for up to three more of the owner's jobs
in turn: asks the dry run, submits that very spec and runs a cycle at the same instant.
Everything is rolled back before the next example.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from datetime import datetime, timedelta
from typing import Any

import pytest
from django.db import transaction
from django.db.models import Model
from django.test import override_settings
from django.utils import timezone
from hypothesis import HealthCheck, Phase, event, given, settings
from rest_framework.exceptions import ValidationError
from trainhub.audit.models import AuditEntry
from trainhub.jobs.choices import JobState
from trainhub.jobs.jobspec import JobSpec
from trainhub.jobs.models import Job, JobEvent, Task
from trainhub.jobs.services import submit_job
from trainhub.jobs.spec import parse_job_spec
from trainhub.nodes.choices import NodeState
from trainhub.nodes.models import Node
from trainhub.nodes.services import set_node_state
from trainhub.scheduling import policy
from trainhub.scheduling.models import CycleRecord, Reservation
from trainhub.scheduling.preview import Preview, preview_submission
from trainhub.scheduling.queue import queue_positions
from trainhub.scheduling.services import run_cycle
from trainhub.scheduling.tasks import run_scheduling_cycle
from trainhub.tenancy.choices import Role
from trainhub.tenancy.models import Quota
from trainhub.tenancy.resources import LimitResources, Resources
from trainhub.tenancy.services import QuotaValues, set_quota

from ..event_capture import HANDLER, Capture, capturer
from ..factories import make_node, make_team, make_user, spec
from .strategies import lent_clusters

pytestmark = pytest.mark.django_db

RECLAIMED = "capacity reclaimed for it"


class _Rollback(Exception):
    """Raised at the end of an example to undo everything it wrote."""


@pytest.fixture
def capture(django_capture_on_commit_callbacks: Any) -> Iterator[Capture]:
    """Events go to the recorder only; a queued cycle would reach Celery's send (below)."""
    with override_settings(EVENT_HANDLERS=[HANDLER]):
        yield capturer(django_capture_on_commit_callbacks)


@pytest.fixture
def sent(settings: Any, monkeypatch: pytest.MonkeyPatch) -> list[dict[str, Any]]:
    """The cycles handed to Celery. The broker is Redis as in services mode, with no
    debounce (so no Redis is asked): any cycle requested is sent at commit, here."""
    settings.CELERY_BROKER_URL = "redis://127.0.0.1:9/0"
    settings.SCHEDULING_DEBOUNCE_SECONDS = 0
    calls: list[dict[str, Any]] = []
    monkeypatch.setattr(run_scheduling_cycle, "apply_async", lambda **kw: calls.append(kw))
    return calls


def _limit(limit: policy.Resources) -> LimitResources:
    def one(value: float) -> Any:
        return None if math.isinf(value) else value

    return LimitResources(one(limit.cpu), one(limit.memory_mb), one(limit.gpu))


def _build(snap: policy.Snapshot) -> Any:
    """The snapshot's nodes and teams in the database; a user member of every team."""
    user = make_user("alice")
    for n in snap.nodes:
        node, _ = make_node(
            f"node-{n.id}",
            cpus=n.capacity.cpu,
            memory_mb=int(n.capacity.memory_mb),
            gpus=int(n.capacity.gpu),
        )
        Node.objects.filter(pk=node.pk).update(isolation="uid+cgroup")
        if n.state == policy.CORDONED:
            set_node_state(node=node, state=NodeState.CORDONED)
        elif n.state == policy.LOST:  # not heard from for an hour
            Node.objects.filter(pk=node.pk).update(last_seen=timezone.now() - timedelta(hours=1))
    for t in snap.teams:
        team = make_team(t.name, members={user: Role.MEMBER}, cpu=0, memory_mb=0)
        nominal = Resources(t.nominal.cpu, int(t.nominal.memory_mb), int(t.nominal.gpu))
        values = QuotaValues(nominal, _limit(t.borrowing_limit), _limit(t.lending_limit))
        set_quota(team=team, values=values)
    return user


def _spec(job: policy.Job, user: Any) -> JobSpec | None:
    """`job` as a validated spec; None when submission refuses it (too large a task)."""
    coordinator = job.coordinator if not job.coordinator.is_zero else Resources(0.5, 1024)
    document = spec(
        name=f"job-{job.id}",
        team=job.team,
        priority=job.priority,
        freeze_seconds=int(job.freeze_seconds),
        workers={
            "min": job.workers_min,
            "max": job.workers_max,
            "resources": {
                "cpu": job.worker.cpu,
                "memory_mb": int(job.worker.memory_mb),
                "gpu": int(job.worker.gpu),
            },
        },
        parameter_servers={
            "replicas": max(1, job.ps_count),
            "resources": {"cpu": job.ps.cpu, "memory_mb": int(job.ps.memory_mb)},
        },
        coordinator={
            "resources": {"cpu": coordinator.cpu, "memory_mb": int(coordinator.memory_mb)}
        },
    )
    try:
        return parse_job_spec(document, user=user)
    except ValidationError:
        return None


def _submit(user: Any, jobs: list[policy.Job]) -> None:
    for job in jobs:
        parsed = _spec(job, user)
        if parsed is not None:
            submit_job(user=user, spec=parsed, now=timezone.now())


def _state_of_everything() -> list[list[dict[str, Any]]]:
    """Every row a dry run could touch, as plain values."""
    models: tuple[type[Model], ...] = (
        Job,
        Task,
        JobEvent,
        Reservation,
        CycleRecord,
        Node,
        Quota,
        AuditEntry,
    )
    return [[dict(row) for row in m._default_manager.order_by("pk").values()] for m in models]


def _answer(p: Preview) -> tuple[bool, int, str]:
    """What a dry run answers, but the estimate (the forecast may run out of its time
    budget on one asking and not on the next)."""
    return (p.fits_now, p.position, p.reason)


def _check(preview: Preview, job: Job, now: datetime) -> None:
    """The cycle started the job exactly when the dry run said it fits now; when it said
    capacity is being reclaimed for it, the cycle reserved capacity for it."""
    started = job.state == JobState.STARTING
    assert started == preview.fits_now, (preview, job.state, job.pending_reason)
    if started:
        assert preview.estimated_start == now
        return
    reserved = Reservation.objects.filter(job=job).exists()
    assert preview.reason.startswith(RECLAIMED) == reserved, (preview, job.pending_reason)
    assert job.pending_reason.startswith(RECLAIMED) == reserved, job.pending_reason


# An example takes a quarter to half a second of database work: no shrinking (minutes), the
# failing cluster is reported as drawn.
@settings(
    max_examples=30,
    deadline=None,
    phases=(Phase.explicit, Phase.reuse, Phase.generate),
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(lent_clusters())
def test_a_dry_run_changes_nothing_and_the_next_cycle_agrees(
    capture: Capture,
    sent: list[dict[str, Any]],
    drawn: tuple[policy.Snapshot, tuple[policy.Job, ...]],
) -> None:
    snap, later = drawn
    # The owner's jobs: the first wait ahead, the last (up to 3) are asked about in turn.
    split = max(0, len(later) - 3)
    ahead, asked_about = list(later[:split]), list(later[split:]) or list(snap.jobs[-1:])
    sent.clear()
    try:
        with transaction.atomic():
            user = _build(snap)
            _submit(user, list(snap.jobs))
            run_cycle(now=timezone.now())  # the borrowers start on the owner's idle quota
            _submit(user, ahead)
            for subject in asked_about:
                asked = _spec(subject, user)
                if asked is not None:  # else submission refuses it, and the dry run alike
                    _ask_submit_and_cycle(capture, sent, user, asked)
            raise _Rollback
    except _Rollback:
        pass


def _ask_submit_and_cycle(
    capture: Capture, sent: list[dict[str, Any]], user: Any, asked: JobSpec
) -> None:
    now = timezone.now()
    before = _state_of_everything()
    with capture() as events:
        preview = preview_submission(asked, now=now)
        again = preview_submission(asked, now=now)
    assert events == [] and sent == [], (events, sent)
    assert _state_of_everything() == before, "a dry run changed the database"
    assert _answer(again) == _answer(preview), "asked twice, a dry run answered twice"
    event("fits now" if preview.fits_now else preview.reason.split(":")[0])
    job = submit_job(user=user, spec=asked, now=now)
    assert queue_positions([job.pk], now=now) == {job.pk: preview.position}
    run_cycle(now=now)
    job.refresh_from_db()
    _check(preview, job, now)
