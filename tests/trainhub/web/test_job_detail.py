"""The job page `/jobs/<id>/`: what it shows, its fragments, and its actions (cancel, scale).

Actions go through the same services and policies as the API: a member acts, a viewer is
refused with 403 and nothing changes, another team's job is 404; a refused scale shows the
service's message beside the field and leaves the target as it was.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.test import Client, override_settings
from django.utils import timezone
from trainhub.jobs.choices import JobState, TaskState
from trainhub.jobs.models import Job
from trainhub.jobs.services import record_task_status
from trainhub.nodes.models import Node
from trainhub.telemetry.logchunks import store_lines
from trainhub.telemetry.retention import purge_expired
from trainhub.telemetry.services import ingest_logs, ingest_metrics
from trainhub.tenancy.choices import Role

from ..factories import make_job, make_node, make_team, make_user, running_job

pytestmark = pytest.mark.django_db

HTMX = {"HX-Request": "true"}
NOW = datetime(2026, 1, 2, tzinfo=UTC)


@dataclass
class World:
    alice: User  # member of recsys
    vic: User  # viewer of recsys
    bob: User  # member of ads only
    root: User  # platform admin
    node: Node
    job: Job  # alice's, pending, 1..3 workers


@pytest.fixture
def world() -> World:
    alice, vic, bob = make_user("alice"), make_user("vic"), make_user("bob")
    make_team("recsys", members={alice: Role.MEMBER, vic: Role.VIEWER})
    make_team("ads", members={bob: Role.MEMBER})
    node, _ = make_node()
    job = make_job(
        alice,
        name="mf",
        workers={"min": 1, "max": 3, "resources": {"cpu": 0.5, "memory_mb": 512, "gpu": 0}},
    )
    return World(alice, vic, bob, make_user("root", superuser=True), node, job)


def _client(user: User) -> Client:
    client = Client()
    client.force_login(user)
    return client


def _page(client: Client, job: Job) -> str:
    response = client.get(f"/jobs/{job.pk}/")
    assert response.status_code == 200
    return response.content.decode()


# What the page shows


def test_a_pending_job_shows_why_it_waits_and_its_queue_position(world: World) -> None:
    make_job(world.alice, name="earlier")  # pending too
    Job.objects.filter(pk=world.job.pk).update(pending_reason="team quota exhausted: cpu 2/2")
    client = _client(world.alice)
    page = _page(client, world.job)
    assert "team quota exhausted: cpu 2/2" in page
    # The position comes with the queue fragment, which the page loads at once.
    assert f'hx-get="/jobs/{world.job.pk}/queue/"' in page and "load, every 10s" in page
    fragment = client.get(f"/jobs/{world.job.pk}/queue/", headers=HTMX).content.decode()
    assert 'id="queue-position"' in fragment and "of 2 pending" in fragment
    assert "team quota exhausted: cpu 2/2" in fragment
    assert "load" not in fragment.split("hx-trigger=")[1].split(">")[0]


def test_a_waiting_job_shows_its_expected_start(world: World) -> None:
    from datetime import timedelta

    from django.core.cache import cache

    cache.clear()
    # History: a 'holder' of recsys succeeded after 10 minutes; another one fills the node.
    past = make_job(world.alice, name="holder")
    ended = timezone.now() - timedelta(hours=1)
    Job.objects.filter(pk=past.pk).update(
        state=JobState.SUCCEEDED, started_at=ended - timedelta(minutes=10), finished_at=ended
    )
    before = timezone.now()
    running_job(make_job(world.alice, name="holder", workers={"min": 6, "max": 6}), world.node)
    fragment = (
        _client(world.alice).get(f"/jobs/{world.job.pk}/queue/", headers=HTMX).content.decode()
    )
    assert 'id="estimated-start"' in fragment, fragment
    when = datetime.fromisoformat(fragment.split('datetime="')[1].split('"')[0])
    assert before + timedelta(minutes=10) - timedelta(seconds=1) <= when
    assert when <= timezone.now() + timedelta(minutes=10)


def test_a_running_job_shows_its_tasks_spec_and_actions(world: World) -> None:
    job = running_job(world.job, world.node)
    page = _page(_client(world.alice), job)
    assert page.count("data-task-id=") == 3  # coordinator, one PS shard, one worker
    assert "node-1" in page
    assert 'id="queue-position"' not in page
    assert "entrypoint: ps_runtime.examples.movielens:train" in page  # the spec as YAML
    assert 'id="cancel-dialog"' in page
    assert 'name="workers"' in page and 'min="1"' in page and 'max="3"' in page
    assert f'href="/jobs/new/?clone={job.pk}"' in page
    assert f"/api/v1/jobs/{job.pk}/logs/download/" in page
    assert "worker-0" in page  # the log filter offers each task


def test_a_viewer_sees_the_job_but_no_actions(world: World) -> None:
    page = _page(_client(world.vic), world.job)
    assert "mf" in page
    assert 'id="cancel-dialog"' not in page
    assert 'name="workers"' not in page
    assert "?clone=" not in page


def test_a_finished_job_offers_only_clone_and_shows_the_coordinators_result(
    world: World,
) -> None:
    job = running_job(world.job, world.node)
    coordinator = job.tasks.get(role="coordinator")
    result = {"test_rmse": 0.9123456789, "epochs": 3, "history": [1.0, 0.95]}
    store_lines(
        job_id=job.pk,
        task_id=coordinator.pk,
        source="coordinator-0",
        stream="stdout",
        texts=[json.dumps({"result": result})],
        time=timezone.now(),
    )
    Job.objects.filter(pk=job.pk).update(state=JobState.SUCCEEDED, finished_at=timezone.now())
    page = _page(_client(world.alice), job)
    assert 'id="cancel-dialog"' not in page
    assert 'name="workers"' not in page
    assert f"?clone={job.pk}" in page
    assert 'id="job-result"' in page
    assert "0.912346" in page and "[1.0, 0.95]" in page


def test_the_page_says_when_budgets_dropped_telemetry_and_not_otherwise(world: World) -> None:
    job = running_job(world.job, world.node)
    worker = job.tasks.get(role="worker", index=0)
    ingest_metrics(task=worker, points=[{"step": 1, "values": {"loss": 1.0}}], now=NOW)
    ingest_logs(task=worker, stream="stdout", lines=["fits"], now=NOW)
    client = _client(world.alice)
    assert 'id="telemetry-notice"' not in _page(client, job)
    with override_settings(TELEMETRY_METRIC_POINTS_PER_JOB=2, TELEMETRY_LOG_BYTES_PER_JOB=10):
        ingest_metrics(
            task=worker, points=[{"step": s, "values": {"loss": 1.0}} for s in range(2, 6)], now=NOW
        )
        ingest_logs(task=worker, stream="stdout", lines=["a" * 9, "b" * 99], now=NOW)
        page = _page(client, job)
    assert 'id="telemetry-notice"' in page
    assert "3 metric points were not stored: the job reached its budget of 2 points." in page
    assert "2 log lines (110\xa0bytes) were not stored" in page
    purge_expired(now=NOW, days=0.001)  # running: retention leaves it alone
    assert "Raw metric points" not in _page(client, job)
    Job.objects.filter(pk=job.pk).update(state=JobState.SUCCEEDED, finished_at=NOW)
    purge_expired(now=NOW + timedelta(days=2), days=1)
    assert "were deleted on 2026-01-04 (retention)" in _page(client, job)


def test_checkpoint_events_and_directory_show(world: World) -> None:
    job = world.job
    job.events.create(
        time=timezone.now(),
        kind="checkpoint",
        reason="the coordinator saved a checkpoint",
        actor="scheduler",
    )
    page = _page(_client(world.alice), job)
    assert 'id="checkpoint-events"' in page
    assert "the coordinator saved a checkpoint" in page
    assert f"job-{job.pk}</code>" in page


def test_another_teams_job_and_its_fragments_are_not_found(world: World) -> None:
    client = _client(world.bob)
    for path in ("", "tasks/", "queue/"):
        assert client.get(f"/jobs/{world.job.pk}/{path}").status_code == 404, path
    for path in ("cancel/", "scale/"):
        assert client.post(f"/jobs/{world.job.pk}/{path}", {"workers": 2}).status_code == 404
    world.job.refresh_from_db()
    assert world.job.state == JobState.PENDING and world.job.target_workers is None


# Fragments


def test_the_task_fragment_is_the_table_alone(world: World) -> None:
    job = running_job(world.job, world.node)
    response = _client(world.alice).get(f"/jobs/{job.pk}/tasks/", headers=HTMX)
    body = response.content.decode()
    assert response.status_code == 200
    assert '<table class="grid" id="tasks">' in body
    assert body.count("data-task-id=") == 3
    assert "<html" not in body and "nav" not in body


def test_the_queue_fragment_follows_the_job(world: World) -> None:
    client = _client(world.alice)
    pending = client.get(f"/jobs/{world.job.pk}/queue/", headers=HTMX).content.decode()
    assert 'id="queue-position"' in pending and "every 10s" in pending
    running_job(world.job, world.node)
    running = client.get(f"/jobs/{world.job.pk}/queue/", headers=HTMX).content.decode()
    assert 'id="job-queue"' in running
    assert "queue-position" not in running and "every 10s" not in running


# Cancel


def test_a_member_cancels_a_job(world: World) -> None:
    response = _client(world.alice).post(f"/jobs/{world.job.pk}/cancel/")
    assert (response.status_code, response["Location"]) == (303, f"/jobs/{world.job.pk}/")
    world.job.refresh_from_db()
    assert world.job.state == JobState.CANCELLED
    assert world.job.events.filter(to_state=JobState.CANCELLED, actor="alice").exists()


def test_an_htmx_cancel_answers_with_the_actions_partial(world: World) -> None:
    response = _client(world.alice).post(f"/jobs/{world.job.pk}/cancel/", headers=HTMX)
    body = response.content.decode()
    assert response.status_code == 200
    assert body.lstrip().startswith('<div id="job-actions"')
    assert "Cancelled" in body
    assert 'id="cancel-dialog"' not in body  # nothing left to cancel


def test_a_viewer_cannot_cancel_and_nothing_changes(world: World) -> None:
    response = _client(world.vic).post(f"/jobs/{world.job.pk}/cancel/")
    assert response.status_code == 403
    world.job.refresh_from_db()
    assert world.job.state == JobState.PENDING
    assert world.job.cancel_requested_at is None


def test_cancelling_a_finished_job_says_so(world: World) -> None:
    Job.objects.filter(pk=world.job.pk).update(state=JobState.SUCCEEDED)
    response = _client(world.alice).post(f"/jobs/{world.job.pk}/cancel/")
    assert response.status_code == 409
    assert "already succeeded; there is nothing to cancel" in response.content.decode()


def test_cancel_only_by_post(world: World) -> None:
    assert _client(world.alice).get(f"/jobs/{world.job.pk}/cancel/").status_code == 405


# Scale


def test_a_member_scales_within_min_and_max(world: World) -> None:
    response = _client(world.alice).post(
        f"/jobs/{world.job.pk}/scale/", {"workers": 3}, headers=HTMX
    )
    assert response.status_code == 200
    notice = response.content.decode()
    assert "Target set to 3 workers" in notice
    # The scheduler carries a target out at its next cycle (snapshot: a target lifts the
    # freeze), so the notice must not promise a wait for the freeze window.
    assert "next cycle" in notice and "outside its freeze window" not in notice
    world.job.refresh_from_db()
    assert world.job.target_workers == 3


@pytest.mark.parametrize(
    ("typed", "message"),
    [
        ("4", "runs between 1 and 3 workers"),
        ("0", "runs between 1 and 3 workers"),
        ("many", "Enter a whole number."),
    ],
)
def test_a_scale_out_of_range_shows_the_error_and_keeps_the_target(
    world: World, typed: str, message: str
) -> None:
    client = _client(world.alice)
    for headers in ({}, HTMX):
        response = client.post(f"/jobs/{world.job.pk}/scale/", {"workers": typed}, headers=headers)
        body = response.content.decode()
        assert response.status_code == (200 if headers else 400)
        assert message in body
        assert 'id="scale-error"' in body and 'aria-invalid="true"' in body
        assert f'value="{typed}"' in body  # what was typed survives
    world.job.refresh_from_db()
    assert world.job.target_workers is None
    assert not world.job.events.filter(kind="scale").exists()


def test_a_viewer_cannot_scale_and_nothing_changes(world: World) -> None:
    response = _client(world.vic).post(f"/jobs/{world.job.pk}/scale/", {"workers": 2})
    assert response.status_code == 403
    world.job.refresh_from_db()
    assert world.job.target_workers is None


# Query counts (NetBox style): fixed, however many tasks and events the job has


def _queries(
    django_assert_num_queries: Any,
    client: Client,
    url: str,
    count: int,
    headers: dict[str, str] | None = None,
) -> None:
    with django_assert_num_queries(count):
        assert client.get(url, headers=headers).status_code == 200


def test_query_counts_of_the_page_and_its_fragments(
    world: World, django_assert_num_queries: Any
) -> None:
    from django.core.cache import cache

    # A forecast is kept 30 s by job id, and on SQLite an earlier test's job can have had
    # this job's id (ids roll back with the test's transaction there).
    cache.clear()
    client = _client(world.alice)
    url = f"/jobs/{world.job.pk}/"
    # session, user, navigation, job, 3 policies, tasks, events, checkpoint events, trial
    _queries(django_assert_num_queries, client, url, 11)
    # session, user, job, the pending jobs to rank, and runtimes for the forecast (none
    # yet: no cluster read)
    _queries(django_assert_num_queries, client, f"{url}queue/", 5, headers=HTMX)
    running_job(world.job, world.node)
    for i in range(30):
        world.job.events.create(time=timezone.now(), kind="scale", reason=f"n{i}", actor="x")
    _queries(django_assert_num_queries, client, url, 11)
    _queries(django_assert_num_queries, client, f"{url}tasks/", 4, headers=HTMX)
    _queries(django_assert_num_queries, client, f"{url}queue/", 3, headers=HTMX)
    Job.objects.filter(pk=world.job.pk).update(state=JobState.SUCCEEDED)
    # finished: clone policy only, plus the coordinator's result
    _queries(django_assert_num_queries, client, url, 10)


def test_query_count_for_a_platform_admin(world: World, django_assert_num_queries: Any) -> None:
    # A superuser's policies and navigation ask nothing of the database.
    _queries(django_assert_num_queries, _client(world.root), f"/jobs/{world.job.pk}/", 7)


def test_a_failed_job_shows_each_tasks_cause_and_hint_and_why_it_failed(world: World) -> None:
    job = running_job(world.job, world.node)
    Job.objects.filter(pk=job.pk).update(spec={**job.spec, "max_restarts": 0})
    worker = job.tasks.get(role="worker")
    assert worker.node_id is not None
    record_task_status(
        node_id=worker.node_id,
        task_id=worker.pk,
        attempt=worker.attempt,
        state=TaskState.FAILED,
        exit_code=1,
        message="",
        now=timezone.now(),
        stderr=[
            "Traceback (most recent call last):",
            '  File "/srv/task/code/mf.py", line 40, in train',
            "    raise ValueError('lr must be > 0')",
            "ValueError: lr must be > 0",
        ],
    )
    page = _page(_client(world.alice), job)
    hint = "ValueError: lr must be &gt; 0 at mf.py:40 — fix the code there and submit the job again"
    row = page.split(f'data-task-id="{worker.pk}"', 1)[1].split("</tr>", 1)[0]
    assert '<td class="task-cause"><code>user_exception</code>' in row and hint in row
    reason = page.split('id="job-reason">', 1)[1].split("</span>", 1)[0]
    assert reason == f"worker 0 exited with code 1 — user_exception: {hint}"
    assert page.count("<code>user_exception</code>") == 1  # the others did not end


def test_a_restarted_job_shows_its_last_restarts_cause_above_its_tasks(world: World) -> None:
    job = running_job(world.job, world.node)
    Job.objects.filter(pk=job.pk).update(spec={**job.spec, "max_restarts": 2})
    worker = job.tasks.get(role="worker")
    assert worker.node_id is not None
    client = _client(world.alice)
    assert 'id="job-last-cause"' not in _page(client, job)
    record_task_status(
        node_id=worker.node_id,
        task_id=worker.pk,
        attempt=worker.attempt,
        state=TaskState.FAILED,
        exit_code=137,
        message="killed by SIGKILL",
        now=timezone.now(),
    )
    job.refresh_from_db()
    assert (job.state, job.restarts) == (JobState.RUNNING, 1)
    note = (
        '<p class="task-note" id="job-last-cause">Last restart: <code>killed</code> — the task '
        "was killed by SIGKILL from outside it; if it was near its 512 MiB of memory, raise "
        "workers.resources.memory_mb</p>"
    )
    page = _page(client, job)
    assert note in page
    budgets = (
        '<span id="job-restarts">1</span> of at most 2 after the job\'s own errors; '
        '<span id="job-infra-restarts">0</span> of at most 10 after node_lost, preempted, '
        "transient_network, ps_lost, stalled"
    )
    assert budgets in page
    fragment = client.get(f"/jobs/{job.pk}/tasks/", headers=HTMX).content.decode()
    assert note in fragment  # refreshed with the table when a task changes
