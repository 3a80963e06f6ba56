"""The API says why a task and a job ended: `end_cause` and `end_hint`, documented in the
schema (docs/design.md §"Failure causes")."""

from __future__ import annotations

import pytest
from django.utils import timezone
from rest_framework.test import APIClient
from trainhub.jobs.choices import TaskState
from trainhub.jobs.services import record_task_status
from trainhub.tenancy.choices import Role

from ..factories import make_job, make_node, make_team, make_user, running_job

pytestmark = pytest.mark.django_db


def test_a_killed_worker_and_its_restarted_job_say_their_cause_and_hint() -> None:
    alice = make_user("alice")
    make_team("recsys", members={alice: Role.MEMBER})
    node, _ = make_node()
    job = running_job(make_job(alice, max_restarts=2), node)
    worker = job.tasks.get(role="worker")
    record_task_status(
        node_id=node.pk,
        task_id=worker.pk,
        attempt=worker.attempt,
        state=TaskState.FAILED,
        exit_code=137,
        message="killed by SIGKILL",
        now=timezone.now(),
        oom_killed=True,
    )
    client = APIClient()
    client.force_authenticate(alice)
    body = client.get(f"/api/v1/jobs/{job.pk}/").json()
    memory = job.job_spec.workers.resources.memory_mb
    hint = f"the task used more than its {memory} MiB: raise workers.resources.memory_mb"
    assert (body["state"], body["end_cause"], body["end_hint"]) == (
        "running",
        "out_of_memory",
        hint,
    )
    tasks = {t["role"]: t for t in body["tasks"]}
    # Relaunched: the new attempt keeps the last one's cause until it runs.
    assert (tasks["worker"]["end_cause"], tasks["worker"]["end_hint"]) == ("out_of_memory", hint)
    assert (tasks["coordinator"]["end_cause"], tasks["coordinator"]["end_hint"]) == ("", "")
    events = client.get(f"/api/v1/jobs/{job.pk}/events/").json()
    restart = next(e for e in events if e["kind"] == "restart")
    assert restart["reason"].endswith(f"(restart 1 of 2) — out_of_memory: {hint}")

    record_task_status(
        node_id=node.pk,
        task_id=worker.pk,
        attempt=worker.attempt + 1,
        state=TaskState.RUNNING,
        exit_code=None,
        message="",
        now=timezone.now(),
    )
    again = client.get(f"/api/v1/jobs/{job.pk}/").json()
    worker_now = next(t for t in again["tasks"] if t["role"] == "worker")
    assert (worker_now["end_cause"], worker_now["end_hint"]) == ("", "")


def test_the_schema_documents_the_cause_fields() -> None:
    client = APIClient()
    client.force_authenticate(make_user("alice"))
    schemas = client.get("/api/schema/", HTTP_ACCEPT="application/json").json()["components"][
        "schemas"
    ]
    for name in ("Job", "Task"):
        fields = schemas[name]["properties"]
        assert "user_exception" in fields["end_cause"]["description"], name
        assert fields["end_hint"]["description"] == "What to do about `end_cause`, in one line."
