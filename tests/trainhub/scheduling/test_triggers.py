"""Which domain events queue a scheduling cycle, debounced through Redis."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any

import pytest
import redis
from django.db import transaction
from trainhub import events
from trainhub.nodes.choices import NodeState
from trainhub.nodes.services import set_node_owner, set_node_state
from trainhub.scheduling import triggers
from trainhub.scheduling.tasks import run_scheduling_cycle
from trainhub.tenancy.resources import LimitResources, Resources
from trainhub.tenancy.services import QuotaValues, set_priority_caps, set_quota

from ...conftest import require_services
from ..factories import make_node, make_team

WINDOW_SECONDS = 30  # long enough that no test outlives it

CYCLE_EVENTS: list[events.Event] = [
    events.JobSubmitted(job_id=1, team_id=1),
    events.JobScaled(job_id=1, workers=3),
    events.JobStateChanged(job_id=1, state="succeeded"),
    events.JobStateChanged(job_id=1, state="cancelled"),
    events.JobStateChanged(job_id=1, state="pending", pending_reason="requeued"),
    events.TaskStateChanged(
        job_id=1, task_id=2, role="worker", index=0, state="failed", ended=True
    ),
    events.NodeChanged(node_id=1, reason="node.enroll"),
    events.NodeChanged(node_id=1, reason="node.cordon"),
    events.QuotaChanged(team_id=1),
]
QUIET_EVENTS: list[events.Event] = [
    events.TaskStateChanged(
        job_id=1, task_id=2, role="worker", index=0, state="running", ended=False
    ),
    events.JobEventRecorded(
        job_id=1, time="2026-01-01T00:00:00+00:00", kind="scale", reason="", actor="alice"
    ),
    events.NodeTasksChanged(node_ids=(1, 2)),
    # The cycle placed the job itself, or its tasks came up: nothing new to decide.
    events.JobStateChanged(job_id=1, state="starting"),
    events.JobStateChanged(job_id=1, state="running"),
    events.JobPendingReasonChanged(job_id=1, pending_reason="team quota exhausted: cpu 2/2"),
    events.MetricPointsIngested(job_id=1, points=({"name": "loss", "step": 1},)),
    events.LogLinesIngested(job_id=1, lines=({"id": 1, "line": "hello"},)),
]


@pytest.fixture
def broker(settings: Any) -> Iterator[redis.Redis]:
    """A Redis broker (as in services mode) under a key prefix of this test's own."""
    _, url = require_services()
    settings.CELERY_BROKER_URL = url
    settings.REDIS_URL = url
    settings.REDIS_KEY_PREFIX = f"test-triggers-{uuid.uuid4().hex}"
    settings.SCHEDULING_DEBOUNCE_SECONDS = WINDOW_SECONDS
    client = redis.Redis.from_url(url)
    yield client
    client.delete(f"{settings.REDIS_KEY_PREFIX}:scheduling:requested")
    client.close()


@pytest.fixture
def sent(monkeypatch: pytest.MonkeyPatch) -> list[dict[str, Any]]:
    """The cycles handed to Celery (the send is the one thing replaced)."""
    calls: list[dict[str, Any]] = []
    monkeypatch.setattr(run_scheduling_cycle, "apply_async", lambda **kw: calls.append(kw))
    return calls


def _key(settings: Any) -> str:
    return f"{settings.REDIS_KEY_PREFIX}:scheduling:requested"


@pytest.mark.parametrize("event", CYCLE_EVENTS, ids=repr)
def test_a_change_the_scheduler_sees_queues_one_cycle(
    event: events.Event, broker: redis.Redis, sent: list[dict[str, Any]], settings: Any
) -> None:
    triggers.on_event(event)
    assert sent == [{"countdown": WINDOW_SECONDS}]
    ttl_ms = broker.pttl(_key(settings))
    # Claimed until the queued cycle starts; a lost one's claim expires by itself.
    assert 0 < ttl_ms <= max(WINDOW_SECONDS, triggers.CLAIM_TTL_SECONDS) * 1000


@pytest.mark.parametrize("event", QUIET_EVENTS, ids=repr)
def test_events_that_change_nothing_for_the_scheduler_queue_no_cycle(
    event: events.Event, broker: redis.Redis, sent: list[dict[str, Any]], settings: Any
) -> None:
    triggers.on_event(event)
    assert sent == []
    assert not broker.exists(_key(settings))


def test_a_burst_of_events_shares_one_cycle(
    broker: redis.Redis, sent: list[dict[str, Any]], settings: Any
) -> None:
    for event in CYCLE_EVENTS:
        triggers.on_event(event)
    assert len(sent) == 1
    triggers.cycle_started()  # the queued cycle starts: the next change queues a new one
    triggers.on_event(events.QuotaChanged(team_id=2))
    assert len(sent) == 2


def test_requests_merge_until_the_queued_cycle_starts_then_queue_one_more(
    broker: redis.Redis, sent: list[dict[str, Any]], settings: Any
) -> None:
    """A slow cycle: a burst of 1,000 requests while one is queued or running leaves at
    most one cycle waiting behind the running one."""
    triggers.on_event(events.QuotaChanged(team_id=1))
    for _ in range(1000):  # the queued cycle has not started: all merge into it
        triggers.on_event(events.QuotaChanged(team_id=1))
    assert len(sent) == 1
    triggers.cycle_started()  # it starts (and runs for a while)
    for _ in range(1000):
        triggers.on_event(events.QuotaChanged(team_id=1))
    assert len(sent) == 2  # one more, behind the running one
    triggers.cycle_started()
    assert not broker.exists(_key(settings))


def test_without_a_debounce_window_every_change_queues_a_cycle(
    broker: redis.Redis, sent: list[dict[str, Any]], settings: Any
) -> None:
    settings.SCHEDULING_DEBOUNCE_SECONDS = 0
    triggers.on_event(events.QuotaChanged(team_id=1))
    triggers.on_event(events.QuotaChanged(team_id=1))
    assert sent == [{"countdown": 0}, {"countdown": 0}]
    assert not broker.exists(_key(settings))


@pytest.mark.django_db
def test_no_cycle_is_queued_without_a_redis_broker(
    sent: list[dict[str, Any]], settings: Any, django_capture_on_commit_callbacks: Any
) -> None:
    settings.CELERY_BROKER_URL = "memory://"  # unit tests: cycles are run explicitly
    with django_capture_on_commit_callbacks(execute=True) as callbacks:
        triggers.on_event(events.QuotaChanged(team_id=1))
        triggers.request_cycle()
    assert len(callbacks) == 1 and sent == []


@pytest.mark.django_db(transaction=True)
def test_request_cycle_sends_after_the_commit_and_not_on_rollback(
    broker: redis.Redis, sent: list[dict[str, Any]], settings: Any
) -> None:
    with transaction.atomic():
        triggers.request_cycle()
        assert sent == []  # nothing leaves an open transaction
    assert sent == [{"countdown": WINDOW_SECONDS}]

    broker.delete(_key(settings))
    with pytest.raises(RuntimeError), transaction.atomic():
        triggers.request_cycle()
        raise RuntimeError("rolled back")
    assert len(sent) == 1


def _cordon() -> None:
    node, _ = make_node("cordoned")
    set_node_state(node=node, state=NodeState.CORDONED)


def _new_owner() -> None:
    node, _ = make_node("owned")
    set_node_owner(node=node, owner=make_team("owner"))


def _quota() -> None:
    team = make_team("quota")
    set_quota(team=team, values=QuotaValues(nominal=Resources(cpu=2, memory_mb=1024)))


def _caps() -> None:
    set_priority_caps(team=make_team("caps"), caps={"production": LimitResources(gpu=1)})


@pytest.mark.django_db
@pytest.mark.parametrize(
    "change",
    [lambda: make_node("enrolled"), _cordon, _new_owner, lambda: make_team("new"), _quota, _caps],
    ids=["enroll", "cordon", "owner", "team", "quota", "priority-caps"],
)
def test_node_and_quota_services_queue_a_cycle_through_their_events(
    change: Any,
    broker: redis.Redis,
    sent: list[dict[str, Any]],
    settings: Any,
    django_capture_on_commit_callbacks: Any,
) -> None:
    with django_capture_on_commit_callbacks(execute=True):
        change()
    assert sent == [{"countdown": WINDOW_SECONDS}]
