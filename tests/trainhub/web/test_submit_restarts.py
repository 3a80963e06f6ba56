"""The submit form's "Restarts and stalls" section: `retry.on`, `retry.max`,
`retry.backoff_seconds`, `stall.on_stall` and `stall.grace_seconds` typed in the form
reach the job's spec as the API would take them, and come back when a job is cloned."""

from __future__ import annotations

from typing import Any

import pytest
import yaml
from trainhub.jobs.jobspec import DEFAULT_RETRY_ON
from trainhub.jobs.models import Job

from ..factories import make_job
from .test_submit import _client, _field_error, _form, _small_spec, world

pytestmark = pytest.mark.django_db
__all__ = ["world"]  # the fixture, used by name below

TYPED = {
    "retry.on": "node_lost,  stalled preempted",
    "retry.max": "3",
    "retry.backoff_seconds": "0",
    "stall.on_stall": "notify",
    "stall.grace_seconds": "30",
}


def test_the_form_sets_the_restart_and_stall_policy(world: dict[str, Any]) -> None:
    response = _client(world["alice"]).post("/jobs/new/", _form(**TYPED))
    assert response.status_code == 302, response.content.decode()[:2000]
    spec = Job.objects.get().job_spec
    assert spec.retry.on == ("node_lost", "stalled", "preempted")
    assert (spec.retry.max, spec.retry.backoff_seconds) == (3, 0)
    assert (spec.stall.on_stall, spec.stall.grace_seconds) == ("notify", 30)


def test_blank_fields_keep_the_defaults(world: dict[str, Any]) -> None:
    blank = dict.fromkeys(TYPED, "")
    assert _client(world["alice"]).post("/jobs/new/", _form(**blank)).status_code == 302
    spec = Job.objects.get().job_spec
    assert spec.retry.on == tuple(DEFAULT_RETRY_ON)
    assert spec.stall.on_stall == "restart"


def test_an_unknown_cause_is_named_beside_the_field_and_nothing_is_created(
    world: dict[str, Any],
) -> None:
    response = _client(world["alice"]).post(
        "/jobs/new/", _form(**{**TYPED, "retry.on": "node_lost, cosmic_ray"})
    )
    assert response.status_code == 200
    assert Job.objects.count() == 0
    assert "cosmic_ray" in _field_error(response.content.decode(), "retry.on")


def test_the_page_offers_the_choices_and_a_clone_shows_the_policy(world: dict[str, Any]) -> None:
    retry = {"on": ["node_lost"], "max": 2, "backoff_seconds": 5, "max_backoff_seconds": 60}
    job = make_job(world["alice"], **_small_spec(name="kept", retry=retry))
    page = _client(world["alice"]).get(f"/jobs/new/?clone={job.pk}").content.decode()
    assert "<legend>Restarts and stalls</legend>" in page
    assert 'name="retry.on" value="node_lost"' in page
    assert 'name="retry.max" value="2"' in page
    for choice in ("restart", "stop", "notify"):
        assert f'<option value="{choice}"' in page


def test_switching_tabs_keeps_the_policy(world: dict[str, Any]) -> None:
    client = _client(world["alice"])
    as_yaml = client.post("/jobs/new/convert/", {**_form(**TYPED), "to": "yaml"}).json()["yaml"]
    document = yaml.safe_load(as_yaml)
    assert document["retry"] == {
        "on": ["node_lost", "stalled", "preempted"],
        "max": 3,
        "backoff_seconds": 0.0,
    }
    back = client.post("/jobs/new/convert/", {"to": "form", "spec": as_yaml}).json()["fields"]
    assert back["retry.on"] == "node_lost, stalled, preempted"
    assert (back["stall.on_stall"], back["retry.max"]) == ("notify", "3")
