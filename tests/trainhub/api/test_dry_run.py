"""`POST /api/v1/jobs/?dry_run=true`: the submit path's validation, then the live policy's
answer for a hypothetical job — and nothing created (no job, no event, no cycle)."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from datetime import datetime, timedelta
from typing import Any

import pytest
from django.test import override_settings
from django.utils import timezone
from rest_framework.test import APIClient
from trainhub.jobs.models import Job, JobEvent, Task
from trainhub.jobs.services import place_job
from trainhub.scheduling.models import CycleRecord
from trainhub.tenancy.choices import Role
from trainhub.tenancy.models import PriorityCap, Team
from trainhub.tenancy.resources import LimitResources
from trainhub.tenancy.services import set_priority_caps

from ..event_capture import HANDLER, Capture, capturer
from ..factories import gang_placements, make_job, make_node, make_team, make_user, spec

pytestmark = pytest.mark.django_db

SMALL = {"cpu": 0.5, "memory_mb": 512}
URL = "/api/v1/jobs/?dry_run=true"


@pytest.fixture
def capture(django_capture_on_commit_callbacks: Any) -> Iterator[Capture]:
    with override_settings(EVENT_HANDLERS=[HANDLER]):
        yield capturer(django_capture_on_commit_callbacks)


@pytest.fixture
def world() -> dict[str, Any]:
    """alice (member) and vic (viewer) of recsys, which has 2 CPUs; one 2-CPU node
    (as in the services-mode tests: recsys can borrow nothing)."""
    alice, vic = make_user("alice"), make_user("vic")
    make_team("recsys", members={alice: Role.MEMBER, vic: Role.VIEWER}, cpu=2, memory_mb=8192)
    node, _ = make_node(cpus=2, memory_mb=32768)
    client = APIClient()
    client.force_authenticate(alice)
    return {"alice": alice, "vic": vic, "node": node, "client": client}


def _small(**overrides: Any) -> dict[str, Any]:
    """1.5 CPUs: a coordinator, one PS shard and one worker of half a CPU each."""
    base = spec(
        parameter_servers={"replicas": 1, "resources": SMALL},
        workers={"min": 1, "max": 1, "resources": SMALL},
        coordinator={"resources": SMALL},
    )
    return {**base, **overrides}


def _counts() -> tuple[int, int, int, int]:
    return (
        Job.objects.count(),
        JobEvent.objects.count(),
        Task.objects.count(),
        CycleRecord.objects.count(),
    )


@contextmanager
def _creates_nothing(capture: Capture) -> Iterator[None]:
    before = _counts()
    with capture() as events:
        yield
    assert _counts() == before
    assert events == []


def _run(alice: Any, node: Any, **overrides: Any) -> Job:
    job = make_job(alice, **_small(**overrides))
    place_job(job=job, placements=gang_placements(job, node), now=timezone.now())
    return job


def test_an_idle_cluster_fits_the_job_now(world: dict[str, Any], capture: Capture) -> None:
    with _creates_nothing(capture):
        response = world["client"].post(URL, _small(), format="json")
    assert response.status_code == 200, response.content
    body = response.json()
    assert body["fits_now"] is True
    assert body["position"] == 1
    assert body["reason"] == ""
    assert datetime.fromisoformat(body["estimated_start"]) <= timezone.now()


def test_a_used_quota_makes_it_wait_with_the_team_quota_reason(
    world: dict[str, Any], capture: Capture
) -> None:
    _run(world["alice"], world["node"], name="holder")  # 1.5 of recsys's 2 CPUs
    make_job(world["alice"], **_small(name="first-in-line"))  # pending, ahead of ours
    with _creates_nothing(capture):
        response = world["client"].post(URL, _small(), format="json")
    assert response.status_code == 200, response.content
    body = response.json()
    assert body["fits_now"] is False
    assert body["reason"].startswith("team quota exhausted: cpu"), body
    assert body["position"] == 2
    assert body["estimated_start"] is None


def test_dry_run_validates_as_a_submission_does(world: dict[str, Any], capture: Capture) -> None:
    bad = _small(workers={"min": 3, "max": 2})
    with _creates_nothing(capture):
        dry = world["client"].post(URL, bad, format="json")
        real = world["client"].post("/api/v1/jobs/", bad, format="json")
    assert dry.status_code == real.status_code == 400
    assert dry.json() == real.json()
    assert "workers" in dry.json()


def test_a_priority_cap_refusal_stays_a_409_or_400(world: dict[str, Any], capture: Capture) -> None:
    team = Team.objects.get(slug="recsys")
    # A cap below the 2-CPU quota: a job the quota holds can still be beyond the cap.
    set_priority_caps(team=team, caps={"production": LimitResources(cpu=1.5)})
    assert PriorityCap.objects.filter(team=team).exists()
    make_job(world["alice"], **_small(name="prod-1", priority="production"))
    with _creates_nothing(capture):
        no_room = world["client"].post(URL, _small(priority="production"), format="json")
        too_big = world["client"].post(
            URL,
            _small(priority="production", workers={"min": 2, "resources": SMALL}),
            format="json",
        )
    assert no_room.status_code == 409, no_room.content
    assert "at most cpu 1.5 at production" in no_room.json()["detail"]
    assert too_big.status_code == 400 and "priority" in too_big.json()


def test_viewers_and_strangers_are_refused(world: dict[str, Any], capture: Capture) -> None:
    viewer, stranger = APIClient(), APIClient()
    viewer.force_authenticate(world["vic"])
    stranger.force_authenticate(make_user("eve"))
    with _creates_nothing(capture):
        assert viewer.post(URL, _small(), format="json").status_code == 403
        refused = stranger.post(URL, _small(), format="json")
    assert refused.status_code == 400
    assert "team" in refused.json()


def test_a_bad_dry_run_value_is_named(world: dict[str, Any], capture: Capture) -> None:
    with _creates_nothing(capture):
        response = world["client"].post("/api/v1/jobs/?dry_run=maybe", _small(), format="json")
    assert response.status_code == 400
    assert "dry_run" in response.json()


def test_dry_run_false_submits(world: dict[str, Any]) -> None:
    response = world["client"].post("/api/v1/jobs/?dry_run=false", _small(), format="json")
    assert response.status_code == 201
    assert Job.objects.count() == 1


def test_the_estimated_start_comes_from_expected_runtimes(
    world: dict[str, Any], capture: Capture
) -> None:
    # History: a 'holder' that succeeded after 10 minutes.
    past = make_job(world["alice"], **_small(name="holder"))
    ended = timezone.now() - timedelta(hours=1)
    Job.objects.filter(pk=past.pk).update(
        state="succeeded", started_at=ended - timedelta(minutes=10), finished_at=ended
    )
    before = timezone.now()
    _run(world["alice"], world["node"], name="holder")  # runs now, expected for 10 min
    make_job(world["alice"], **_small(name="first-in-line"))  # starts when holder ends
    with _creates_nothing(capture):
        response = world["client"].post(URL, _small(), format="json")
    body = response.json()
    assert body["fits_now"] is False and body["position"] == 2, body
    # Holder ends in 10 min; first-in-line then runs the team's median, 10 min more.
    estimate = datetime.fromisoformat(body["estimated_start"])
    assert before + timedelta(minutes=20) <= estimate <= timezone.now() + timedelta(minutes=20)


def test_the_dry_run_answers_what_the_next_cycle_does(world: dict[str, Any]) -> None:
    """Ask, submit the same spec, run a cycle: the job starts when the dry run said it
    would, and otherwise waits with the reason the dry run gave."""
    from trainhub.nodes.models import Node as NodeModel
    from trainhub.scheduling.services import run_cycle

    NodeModel.objects.filter(pk=world["node"].pk).update(isolation="uid+cgroup")
    answers = []
    for name in ("first", "second"):  # 1.5 CPUs each on 2: the first fits, the second waits
        preview = world["client"].post(URL, _small(name=name), format="json").json()
        submitted = world["client"].post("/api/v1/jobs/", _small(name=name), format="json")
        assert submitted.status_code == 201, submitted.content
        run_cycle(now=timezone.now())
        job = Job.objects.get(pk=submitted.json()["id"])
        assert (job.state == "starting") == preview["fits_now"], (name, preview)
        assert job.pending_reason == preview["reason"], (name, preview)
        answers.append(preview["fits_now"])
    assert answers == [True, False]
