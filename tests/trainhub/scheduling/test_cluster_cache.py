"""The scheduler's cluster cache (`scheduling/cache.py`): after every kind of change it
equals a fresh read of the database, whether the change's event reached it or not.

These tests commit for real (`transactional_db`): a row's version is the transaction that
wrote it, and what the cache trusts is what committed.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from django.conf import settings
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone
from trainhub.jobs.choices import JobState, TaskState
from trainhub.jobs.models import Job
from trainhub.jobs.services import cancel_job, record_task_status
from trainhub.nodes.choices import NodeState
from trainhub.nodes.heartbeats import record_heartbeat
from trainhub.nodes.models import Node
from trainhub.nodes.services import set_node_state
from trainhub.scheduling import cache
from trainhub.scheduling.models import VruntimeAccrual
from trainhub.scheduling.queue import queue_positions
from trainhub.scheduling.snapshot import ClusterView, read_cluster
from trainhub.tenancy.choices import Role
from trainhub.tenancy.models import Team
from trainhub.tenancy.resources import Resources
from trainhub.tenancy.services import QuotaValues, set_quota

from ..factories import make_job, make_node, make_team, make_user, running_job

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def warm(settings: Any, monkeypatch: pytest.MonkeyPatch) -> cache.ClusterCache:
    """A fresh cache for this process, fed by the real event wiring (the scheduler's
    trigger is the only handler), on a small cluster with a running and a pending job."""
    settings.EVENT_HANDLERS = ["trainhub.scheduling.triggers.on_event"]
    fresh = cache.ClusterCache()
    monkeypatch.setattr(cache, "_cache", fresh)
    alice = make_user("alice")
    make_team("recsys", members={alice: Role.MEMBER}, cpu=16, memory_mb=65536)
    node, _ = make_node("node-1", cpus=4, memory_mb=16384, gpus=2)
    make_node("node-2", cpus=4, memory_mb=16384)
    running_job(make_job(alice, name="first"), node)
    make_job(alice, name="second")
    fresh.view(timezone.now())
    return fresh


def _same(view: ClusterView, fresh: ClusterView) -> None:
    assert view.snapshot == fresh.snapshot
    assert view.nodes.keys() == fresh.nodes.keys()
    assert dict(view.used_ports) == dict(fresh.used_ports)
    assert dict(view.used_gpus) == dict(fresh.used_gpus)


def _check(warm: cache.ClusterCache, now: Any = None) -> None:
    at = now or timezone.now()
    _same(warm.view(at), read_cluster(at))


def _alice() -> Any:
    return Team.objects.get(slug="recsys").memberships.get().user


def _job(name: str) -> Job:
    return Job.objects.get(name=name)


def _report_all(job: Job, state: TaskState) -> None:
    for task in job.tasks.all():
        assert task.node_id is not None
        record_task_status(
            node_id=task.node_id,
            task_id=task.pk,
            attempt=task.attempt,
            state=state,
            exit_code=0,
            message="",
            now=timezone.now(),
        )


def test_a_warm_cache_equals_a_fresh_read(warm: cache.ClusterCache) -> None:
    _check(warm)


def test_job_submitted(warm: cache.ClusterCache) -> None:
    make_job(_alice(), name="third", workers={"min": 2, "max": 2, "resources": {"cpu": 1}})
    _check(warm)


def test_job_cancelled(warm: cache.ClusterCache) -> None:
    cancel_job(job=_job("first"), actor="alice", now=timezone.now())
    _check(warm)
    cancel_job(job=_job("second"), actor="alice", now=timezone.now())
    _check(warm)


def test_job_finished(warm: cache.ClusterCache) -> None:
    _report_all(_job("first"), TaskState.SUCCEEDED)
    assert _job("first").state == JobState.SUCCEEDED
    _check(warm)


def test_job_started_by_a_cycle(warm: cache.ClusterCache) -> None:
    from trainhub.scheduling.services import run_cycle

    assert run_cycle(now=timezone.now()).started == 1
    _check(warm)


def test_node_joined_drained_and_lost(warm: cache.ClusterCache) -> None:
    node, _ = make_node("node-3", cpus=8, memory_mb=32768, gpus=1)
    _check(warm)
    set_node_state(node=node, state=NodeState.DRAINING)
    _check(warm)
    # Lost: no row changes, time passes.
    _check(warm, timezone.now() + timedelta(seconds=2 * settings.NODE_LOST_AFTER_SECONDS))


def test_quota_changed(warm: cache.ClusterCache) -> None:
    team = Team.objects.get(slug="recsys")
    set_quota(team=team, values=QuotaValues(nominal=Resources(cpu=2, memory_mb=1024, gpu=0)))
    _check(warm)


def test_heartbeat_ports_are_seen_without_an_event(warm: cache.ClusterCache) -> None:
    node = Node.objects.get(hostname="node-2")
    record_heartbeat(node_id=node.pk, usage={"ports_in_use": [31000]}, now=timezone.now())
    view = warm.view(timezone.now())
    assert 31000 in view.used_ports[node.pk]
    _check(warm)


def test_a_lost_event_is_caught_by_the_version_check(
    warm: cache.ClusterCache, settings: Any
) -> None:
    settings.EVENT_HANDLERS = []  # every event below is lost
    make_job(_alice(), name="third")
    cancel_job(job=_job("second"), actor="alice", now=timezone.now())
    Job.objects.filter(name="first").update(priority="production", vruntime=7.5)
    _check(warm)


def test_an_event_names_the_rows_to_read_again(warm: cache.ClusterCache) -> None:
    """With the event, the cache reads the submitted job alone; without it, the ids and
    versions of every job first."""
    # The listing: the ids and versions of every job the snapshot reads, nothing else.
    listing = 'SELECT "jobs_job"."id" AS "id", ("jobs_job".xmin::text::bigint) AS "rv" FROM'
    make_job(_alice(), name="third")
    with CaptureQueriesContext(connection) as seen:
        warm.view(timezone.now())
    sql = [q["sql"] for q in seen.captured_queries]
    assert not [q for q in sql if q.startswith(listing)], sql
    assert any("IN (" in q and '"jobs_job"' in q for q in sql[1:])  # the job, by its id
    _check(warm)


def test_a_dry_run_on_a_warm_cache_reads_only_the_version(warm: cache.ClusterCache) -> None:
    from trainhub.jobs.jobspec import JobSpec
    from trainhub.scheduling.preview import preview_submission

    from ..factories import spec

    asked = JobSpec.from_dict(spec(name="what-if"))
    with CaptureQueriesContext(connection) as seen:
        warm.view(timezone.now())
    assert len(seen.captured_queries) == 1  # the version check
    with CaptureQueriesContext(connection) as seen:
        preview_submission(asked, now=timezone.now())
    cluster_tables = ('"jobs_task"', '"nodes_node"', '"scheduling_reservation"')
    reads = [
        q["sql"]
        for q in seen.captured_queries
        if any(t in q["sql"] for t in cluster_tables) and "txid_current_if_assigned" not in q["sql"]
    ]
    assert reads == []


def _decisions(now: Any) -> Any:
    """The decisions of a cycle at `now`, rolled back."""
    from django.db import transaction
    from trainhub.scheduling.services import run_cycle

    class Rollback(Exception):
        pass

    found = None
    try:
        with transaction.atomic():
            found = run_cycle(now=now).decisions
            raise Rollback
    except Rollback:
        pass
    return found


def test_a_cycle_decides_the_same_on_a_warm_cache_as_on_a_cold_one(
    warm: cache.ClusterCache, monkeypatch: pytest.MonkeyPatch
) -> None:
    alice = _alice()
    for i in range(3):
        make_job(alice, name=f"more-{i}", workers={"min": 1, "max": 3, "resources": {"cpu": 1}})
    Job.objects.filter(name="first").update(vruntime=3.0)  # no event
    now = timezone.now()
    on_warm = _decisions(now)
    assert on_warm is not None and on_warm.starts
    monkeypatch.setattr(cache, "_cache", cache.ClusterCache())
    assert _decisions(now) == on_warm
    # The warm cache read rows inside the rolled-back transaction: it reads them again.
    monkeypatch.setattr(cache, "_cache", warm)
    assert _decisions(now) == on_warm
    _check(warm, now)


def test_rows_written_twice_by_one_transaction_are_read_again(
    warm: cache.ClusterCache,
) -> None:
    """Both writes carry the transaction's id: what was read between them is not trusted."""
    from django.db import transaction

    with transaction.atomic():
        Job.objects.filter(name="second").update(priority="offline")
        _check(warm)
        Job.objects.filter(name="second").update(priority="production")
        _check(warm)
    _check(warm)


def test_rows_that_left_without_an_event_are_dropped(
    warm: cache.ClusterCache, settings: Any
) -> None:
    """Few rows changed among many: the cache reads the listing and drops what left."""
    alice = _alice()
    for i in range(4):
        make_job(alice, name=f"more-{i}")
    _check(warm)
    settings.EVENT_HANDLERS = []
    cancel_job(job=_job("more-2"), actor="alice", now=timezone.now())
    _check(warm)


def test_a_dry_runs_forecast_takes_the_job_names_from_the_cache(
    warm: cache.ClusterCache,
) -> None:
    from trainhub.jobs.jobspec import JobSpec
    from trainhub.scheduling.preview import preview_submission

    from ..factories import spec

    _report_all(_job("first"), TaskState.SUCCEEDED)  # a runtime to forecast with
    node = Node.objects.get(hostname="node-1")
    running_job(
        make_job(_alice(), name="big", workers={"min": 1, "max": 1, "resources": {"cpu": 3}}), node
    )
    wide = {"min": 1, "max": 1, "resources": {"cpu": 4, "memory_mb": 512}}
    asked = JobSpec.from_dict(spec(name="wide", workers=wide))
    warm.view(timezone.now())
    with CaptureQueriesContext(connection) as seen:
        answer = preview_submission(asked, now=timezone.now())
    assert not answer.fits_now
    names = [
        q["sql"]
        for q in seen.captured_queries
        if '"jobs_job"."name"' in q["sql"] and '"jobs_job"."state" IN' in q["sql"]
    ]
    assert names == []
    assert any('"jobs_job"."finished_at"' in q["sql"] for q in seen.captured_queries)


def test_a_cycles_virtual_runtime_changes_no_cached_job(warm: cache.ClusterCache) -> None:
    """Each committed cycle adds to every running job's virtual runtime (a row apart from
    the job's): the cache reads no job again for it."""
    from trainhub.scheduling.services import run_cycle

    start = timezone.now()
    run_cycle(now=start)
    warm.view(start)
    later = start + timedelta(seconds=10)
    run_cycle(now=later)
    assert VruntimeAccrual.objects.get(job=_job("first")).vruntime > 0
    with CaptureQueriesContext(connection) as seen:
        warm.view(later)
    assert len(seen.captured_queries) == 1  # the version check
    _check(warm, later)


def test_a_pending_jobs_accrual_orders_it_and_is_seen_without_an_event(
    warm: cache.ClusterCache, settings: Any
) -> None:
    """Once a job waits again (requeued), what it accrued while running counts: in the
    snapshot, in the cache (no event says so), in the queue."""
    settings.EVENT_HANDLERS = []
    third = make_job(_alice(), name="third")  # submitted after "second", same priority
    second = _job("second")
    assert list(queue_positions()) == [second.pk, third.pk]
    VruntimeAccrual.objects.create(job=second, vruntime=2.5)
    view = warm.view(timezone.now())
    assert next(j for j in view.snapshot.jobs if j.id == second.pk).vruntime == 2.5
    _check(warm)
    assert list(queue_positions()) == [third.pk, second.pk]
    VruntimeAccrual.objects.filter(job=second).update(vruntime=4.0)
    _check(warm)
