"""`/api/v1/users/me/notifications/` and `/api/v1/webhooks/`: choices, webhooks of one's
own and of the teams one administers, their delivery logs; another user's webhook is
not found, a team member who is no admin is refused."""

from __future__ import annotations

from typing import Any

import pytest
from django.contrib.auth.models import User
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone
from rest_framework.test import APIClient
from trainhub.audit.models import AuditEntry
from trainhub.notifications.choices import NotifyEvent
from trainhub.notifications.models import Delivery, Webhook
from trainhub.notifications.services import Occurrence, create_webhook, record_occurrence
from trainhub.tenancy.choices import Role

from ..factories import make_job, make_team, make_user

pytestmark = pytest.mark.django_db

HOOK = "https://hooks.example.com/trainhub"


@pytest.fixture(autouse=True)
def _offline_names(monkeypatch: pytest.MonkeyPatch) -> None:
    """hooks.example.com is a public address here, whatever this machine's DNS says."""
    monkeypatch.setattr(
        "trainhub.notifications.destinations.resolve", lambda host, port: ["93.184.215.14"]
    )


def _client(user: User) -> APIClient:
    client = APIClient()
    client.force_authenticate(user)
    return client


@pytest.fixture
def people() -> dict[str, User]:
    alice, bob, carol = make_user("alice"), make_user("bob"), make_user("carol")
    make_team("recsys", members={alice: Role.MEMBER, bob: Role.ADMIN})
    make_team("vision", members={carol: Role.ADMIN})
    return {"alice": alice, "bob": bob, "carol": carol}


def test_a_user_reads_and_sets_what_they_are_told_about(people: dict[str, User]) -> None:
    alice = _client(people["alice"])
    assert alice.get("/api/v1/users/me/notifications/").json() == {
        "events": ["job.failed", "job.stalled"],
        "email": True,
        "email_address": "",
        "email_available": True,  # the tests' outbox
    }
    answer = alice.put(
        "/api/v1/users/me/notifications/",
        {"events": ["job.succeeded", "job.preempted", "job.succeeded"], "email": False},
    )
    assert answer.status_code == 200
    assert answer.json()["events"] == ["job.preempted", "job.succeeded"]
    assert alice.get("/api/v1/users/me/notifications/").json()["email"] is False
    assert AuditEntry.objects.filter(action="notifications.update").count() == 1


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"events": ["experiment.finished"], "email": True}, "events"),
        ({"events": ["job.failed"]}, "email"),
        ({"events": "job.failed", "email": True}, "events"),
        ({"events": [], "email": "yes"}, "email"),
        ({"events": [], "email": True, "sms": True}, "sms"),
    ],
)
def test_choices_refused_name_the_field(
    people: dict[str, User], body: dict[str, Any], field: str
) -> None:
    answer = _client(people["alice"]).put("/api/v1/users/me/notifications/", body)
    assert answer.status_code == 400
    assert field in answer.json()


def test_signed_out_callers_get_401() -> None:
    assert APIClient().get("/api/v1/users/me/notifications/").status_code == 401
    assert APIClient().get("/api/v1/webhooks/").status_code == 401


def test_a_user_makes_lists_changes_and_deletes_their_own_webhook(
    people: dict[str, User],
) -> None:
    alice = _client(people["alice"])
    made = alice.post("/api/v1/webhooks/", {"url": HOOK, "format": "slack"})
    assert made.status_code == 201, made.json()
    body = made.json()
    assert len(body["secret"]) == 64
    assert Webhook.objects.get(pk=body["id"]).secret == body["secret"]
    assert {k: body[k] for k in ("url", "format", "events", "team")} == {
        "url": HOOK,
        "format": "slack",
        "events": None,
        "team": None,
    }
    (listed,) = alice.get("/api/v1/webhooks/").json()["results"]
    assert "secret" not in listed  # shown once
    assert "secret" not in alice.get(f"/api/v1/webhooks/{body['id']}/").json()
    changed = alice.patch(f"/api/v1/webhooks/{body['id']}/", {"events": ["job.succeeded"]})
    assert changed.json()["events"] == ["job.succeeded"]
    assert changed.json()["format"] == "slack"
    assert alice.delete(f"/api/v1/webhooks/{body['id']}/").status_code == 204
    assert not Webhook.objects.exists()
    actions = AuditEntry.objects.values_list("action", flat=True)
    assert {"webhook.create", "webhook.update", "webhook.delete"} <= set(actions)
    assert HOOK not in str(list(AuditEntry.objects.values_list("after", flat=True)))


def test_another_users_webhook_is_not_found(people: dict[str, User]) -> None:
    mine = create_webhook(url=HOOK, user=people["alice"]).webhook
    bob = _client(people["bob"])  # alice's team admin: still not his
    assert bob.get("/api/v1/webhooks/").json()["results"] == []
    for method in ("get", "patch", "delete"):
        assert getattr(bob, method)(f"/api/v1/webhooks/{mine.pk}/").status_code == 404
    assert bob.get(f"/api/v1/webhooks/{mine.pk}/deliveries/").status_code == 404
    assert Webhook.objects.filter(pk=mine.pk).exists()


def test_team_admins_set_their_teams_webhooks_and_members_may_not(
    people: dict[str, User],
) -> None:
    bob, alice, carol = (_client(people[n]) for n in ("bob", "alice", "carol"))
    body = {"url": HOOK, "team": "recsys", "events": ["job.failed"]}
    assert alice.post("/api/v1/webhooks/", body).status_code == 403  # a member
    assert carol.post("/api/v1/webhooks/", body).status_code == 404  # not her team
    made = bob.post("/api/v1/webhooks/", body)
    assert made.status_code == 201
    assert made.json()["team"] == "recsys"
    team_hook = made.json()["id"]
    assert alice.get(f"/api/v1/webhooks/{team_hook}/").status_code == 404
    assert alice.delete(f"/api/v1/webhooks/{team_hook}/").status_code == 404
    root = _client(make_user("root", superuser=True))
    assert [w["id"] for w in root.get("/api/v1/webhooks/").json()["results"]] == [team_hook]
    # A team's webhook names its events.
    refused = bob.post("/api/v1/webhooks/", {"url": HOOK, "team": "recsys"})
    assert refused.status_code == 400 and "events" in refused.json()
    assert bob.patch(f"/api/v1/webhooks/{team_hook}/", {"events": []}).status_code == 400


@pytest.mark.parametrize(
    "url",
    [
        "http://127.0.0.1:8080/hook",
        "http://localhost/hook",
        "http://10.1.2.3/hook",
        "http://[::1]/hook",
        "http://169.254.169.254/latest/meta-data/",
        "http://[::ffff:192.168.0.1]/hook",
        "ftp://hooks.example.com/",
        "https://user:pw@hooks.example.com/",
        "hooks.example.com/hook",
    ],
)
def test_private_and_malformed_urls_are_refused_naming_url(
    people: dict[str, User], url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    real = {"localhost": ["127.0.0.1", "::1"]}
    monkeypatch.setattr(
        "trainhub.notifications.destinations.resolve",
        lambda host, port: real.get(host, ["93.184.215.14"]),
    )
    answer = _client(people["alice"]).post("/api/v1/webhooks/", {"url": url})
    assert answer.status_code == 400
    assert list(answer.json()) == ["url"]
    assert not Webhook.objects.exists()


def test_private_urls_are_taken_when_the_operator_allows_them(
    people: dict[str, User], settings: Any
) -> None:
    settings.WEBHOOK_ALLOW_PRIVATE = True
    answer = _client(people["alice"]).post("/api/v1/webhooks/", {"url": "http://10.0.0.5/x"})
    assert answer.status_code == 201


def test_the_delivery_log_lists_status_attempts_and_the_next_attempt(
    people: dict[str, User],
) -> None:
    alice = people["alice"]
    hook = create_webhook(url=HOOK, user=alice, events=["job.failed"]).webhook
    for _ in range(3):
        job = make_job(alice)
        record_occurrence(Occurrence(NotifyEvent.JOB_FAILED, job.pk), now=timezone.now())
    Delivery.objects.filter(webhook=hook).update(attempts=2, last_status_code=500)
    client = _client(alice)
    with CaptureQueriesContext(connection) as captured:
        answer = client.get(f"/api/v1/webhooks/{hook.pk}/deliveries/")
    assert answer.status_code == 200
    rows = answer.json()["results"]
    assert len(rows) == 3
    assert {k: rows[0][k] for k in ("event", "status", "attempts", "last_status_code")} == {
        "event": "job.failed",
        "status": "pending",
        "attempts": 2,
        "last_status_code": 500,
    }
    assert rows[0]["next_attempt_at"] is not None
    few = len(captured)
    record_occurrence(Occurrence(NotifyEvent.JOB_FAILED, make_job(alice).pk), now=timezone.now())
    with CaptureQueriesContext(connection) as captured:
        client.get(f"/api/v1/webhooks/{hook.pk}/deliveries/")
    assert len(captured) == few


def test_the_schema_documents_the_new_paths() -> None:
    client = _client(make_user("alice"))
    schema = client.get("/api/schema/", HTTP_ACCEPT="application/json").json()
    paths = schema["paths"]
    assert {"get", "put"} <= set(paths["/api/v1/users/me/notifications/"])
    assert {"get", "post"} <= set(paths["/api/v1/webhooks/"])
    assert {"get", "patch", "delete"} <= set(paths["/api/v1/webhooks/{id}/"])
    assert "get" in paths["/api/v1/webhooks/{id}/deliveries/"]
    created = paths["/api/v1/webhooks/"]["post"]["responses"]
    assert {"201", "400", "403", "404"} <= set(created)
    names = set(schema["components"]["schemas"])
    assert {"WebhookRequest", "PatchedWebhookChangeRequest", "Delivery"} <= names
    assert schema["components"]["schemas"]["WebhookRequest"]["additionalProperties"] is False
