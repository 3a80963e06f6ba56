"""Notifications on the account page (choices, own webhooks, the delivery log) and the
team page (team webhooks, for team admins only), through the same services as the API."""

from __future__ import annotations

import re
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.test import Client
from django.utils import timezone
from trainhub.notifications.choices import NotifyEvent
from trainhub.notifications.models import Delivery, Subscription, Webhook
from trainhub.notifications.services import Occurrence, create_webhook, record_occurrence
from trainhub.tenancy.choices import Role

from ..factories import make_job, make_team, make_user

pytestmark = pytest.mark.django_db

HOOK = "https://hooks.example.com/trainhub"
HTMX = {"HX-Request": "true"}


@pytest.fixture(autouse=True)
def _offline_names(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(
        "trainhub.notifications.destinations.resolve", lambda host, port: ["93.184.215.14"]
    )


@pytest.fixture
def people() -> dict[str, User]:
    alice, bob, carol = make_user("alice"), make_user("bob"), make_user("carol")
    alice.email = "alice@example.com"
    alice.save(update_fields=["email"])
    make_team("recsys", members={alice: Role.MEMBER, bob: Role.ADMIN})
    make_team("vision", members={carol: Role.ADMIN})
    return {"alice": alice, "bob": bob, "carol": carol}


def _client(user: User) -> Client:
    client = Client()
    client.force_login(user)
    return client


def _checked(html: str) -> set[str]:
    return set(re.findall(r'name="events" value="([a-z.]+)" checked', html))


def test_the_account_page_shows_the_choices_and_saves_them(people: dict[str, User]) -> None:
    client = _client(people["alice"])
    page = client.get("/account/").content.decode()
    assert 'id="notifications"' in page
    assert _checked(page) == {"job.failed", "job.stalled"}  # the defaults
    assert 'id="id_notify_email" checked' in page and "By e-mail to alice@example.com" in page
    assert 'value="experiment' not in page  # no event choices of experiments
    answer = client.post(
        "/account/notifications/", {"events": ["job.succeeded", "job.preempted"]}, headers=HTMX
    )
    assert answer.status_code == 200
    part = answer.content.decode()
    assert part.startswith('<section id="notifications"')
    assert "Notifications saved." in part
    assert _checked(part) == {"job.succeeded", "job.preempted"}
    assert 'id="id_notify_email" checked' not in part  # unchecked: off
    row = Subscription.objects.get(user=people["alice"])
    assert (row.events, row.email) == (["job.preempted", "job.succeeded"], False)
    # Without JavaScript: back to the page, which says so.
    done = client.post("/account/notifications/", {"events": ["job.failed"], "email": "on"})
    assert (done.status_code, done["Location"]) == (302, "/account/")
    assert "Notifications saved." in client.get("/account/").content.decode()


def test_an_unknown_event_is_refused_beside_the_field(people: dict[str, User]) -> None:
    answer = _client(people["alice"]).post(
        "/account/notifications/", {"events": ["experiment.finished"]}, headers=HTMX
    )
    assert answer.status_code == 400
    assert 'id="id_events_error"' in answer.content.decode()
    assert not Subscription.objects.exists()


def test_a_webhook_is_added_with_its_secret_shown_once_and_deleted(
    people: dict[str, User],
) -> None:
    client = _client(people["alice"])
    answer = client.post("/account/webhooks/", {"url": HOOK, "format": "json"}, headers=HTMX)
    assert answer.status_code == 201
    webhook = Webhook.objects.get(user=people["alice"])
    assert webhook.secret in answer.content.decode()
    assert webhook.events is None  # follows her choices
    page = client.get("/account/").content.decode()
    assert HOOK in page and webhook.secret not in page
    gone = client.post(f"/account/webhooks/{webhook.pk}/delete/", headers=HTMX)
    assert gone.status_code == 200
    assert "Webhook deleted with its delivery log." in gone.content.decode()
    assert not Webhook.objects.exists()


def test_a_refused_url_is_named_beside_the_field_and_keeps_what_was_typed(
    people: dict[str, User],
) -> None:
    client = _client(people["alice"])
    answer = client.post("/account/webhooks/", {"url": "http://10.0.0.1/x", "format": "json"})
    assert answer.status_code == 400  # the whole page, without JavaScript
    page = answer.content.decode()
    assert 'id="id_url_error"' in page and "private, loopback or link-local" in page
    assert 'value="http://10.0.0.1/x"' in page
    assert not Webhook.objects.exists()


def test_another_users_webhook_cannot_be_deleted(people: dict[str, User]) -> None:
    theirs = create_webhook(url=HOOK, user=people["bob"]).webhook
    answer = _client(people["alice"]).post(f"/account/webhooks/{theirs.pk}/delete/")
    assert answer.status_code == 404
    team_hook = create_webhook(
        url=HOOK, team=people["bob"].memberships.get().team, events=["job.failed"]
    ).webhook
    assert (
        _client(people["alice"]).post(f"/account/webhooks/{team_hook.pk}/delete/").status_code
        == 404
    )
    assert Webhook.objects.count() == 2


def test_the_delivery_log_shows_status_attempts_and_the_last_answer(
    people: dict[str, User],
) -> None:
    alice = people["alice"]
    create_webhook(url=HOOK, user=alice, events=["job.failed"])
    job = make_job(alice)
    record_occurrence(Occurrence(NotifyEvent.JOB_FAILED, job.pk), now=timezone.now())
    Delivery.objects.filter(channel="webhook").update(
        attempts=3, last_status_code=502, status="failed", next_attempt_at=None
    )
    page = _client(alice).get("/account/").content.decode()
    log = page.split('id="notifications-log-title"')[1]
    assert "Job failed (with its cause)" in log and f"#{job.pk}" in log
    assert "Gave up" in log and "HTTP 502" in log and "e-mail" in log


def test_the_account_page_makes_as_many_queries_for_many_webhooks_as_for_one(
    people: dict[str, User], django_assert_num_queries: Any
) -> None:
    alice = people["alice"]
    create_webhook(url=HOOK, user=alice)
    client = _client(alice)
    # session, user, tokens count (none to read), navigation; choices, webhooks, deliveries
    with django_assert_num_queries(7):
        assert client.get("/account/").status_code == 200
    for _ in range(4):
        create_webhook(url=HOOK, user=alice)
        job = make_job(alice)
        record_occurrence(Occurrence(NotifyEvent.JOB_FAILED, job.pk), now=timezone.now())
    with django_assert_num_queries(7):
        assert client.get("/account/").status_code == 200


def test_team_admins_add_and_delete_team_webhooks(
    people: dict[str, User], django_assert_num_queries: Any
) -> None:
    bob = _client(people["bob"])
    page = bob.get("/teams/recsys/").content.decode()
    assert 'id="webhooks"' in page
    refused = bob.post("/teams/recsys/webhooks/", {"url": HOOK, "format": "slack"}, headers=HTMX)
    assert refused.status_code == 400
    assert "Choose at least one event for a team&#x27;s webhook." in refused.content.decode()
    answer = bob.post(
        "/teams/recsys/webhooks/",
        {"url": HOOK, "format": "slack", "events": ["job.failed", "job.stalled"]},
        headers=HTMX,
    )
    assert answer.status_code == 201
    hook = Webhook.objects.get(team__slug="recsys")
    assert hook.secret in answer.content.decode()
    assert (hook.format, hook.events) == ("slack", ["job.failed", "job.stalled"])
    assert hook.secret not in bob.get("/teams/recsys/").content.decode()
    with django_assert_num_queries(14):  # the page's 12, and the webhooks and deliveries
        bob.get("/teams/recsys/")
    done = bob.post(f"/teams/recsys/webhooks/{hook.pk}/delete/")
    assert (done.status_code, done["Location"]) == (302, "/teams/recsys/")
    assert not Webhook.objects.exists()


def test_members_see_no_team_webhooks_and_may_not_set_them(people: dict[str, User]) -> None:
    hook = create_webhook(
        url=HOOK, team=people["bob"].memberships.get().team, events=["job.failed"]
    ).webhook
    alice, carol = _client(people["alice"]), _client(people["carol"])
    page = alice.get("/teams/recsys/").content.decode()
    assert 'id="webhooks"' not in page and HOOK not in page
    body = {"url": HOOK, "format": "json", "events": ["job.failed"]}
    assert alice.post("/teams/recsys/webhooks/", body).status_code == 403
    assert alice.post(f"/teams/recsys/webhooks/{hook.pk}/delete/").status_code == 403
    assert carol.post("/teams/recsys/webhooks/", body).status_code == 404
    assert (
        _client(people["carol"]).post(f"/teams/vision/webhooks/{hook.pk}/delete/").status_code
        == 404
    )
    assert Webhook.objects.count() == 1
