"""Deliveries end to end on the database, to a real HTTP receiver on loopback (issue 30,
done-means 5): one signed delivery per subscribed event, retried after a 500, e-mail in
Django's test outbox; nothing for an event nobody subscribed to."""

from __future__ import annotations

import hashlib
import hmac
import json
import logging
from datetime import timedelta
from typing import Any

import pytest
from django.core import mail
from django.utils import timezone
from trainhub.events import JobStalled, JobStateChanged, publish
from trainhub.jobs.choices import JobState
from trainhub.jobs.services import preempt_job, release_lost_nodes
from trainhub.notifications.choices import DeliveryStatus, NotifyEvent, WebhookFormat
from trainhub.notifications.handlers import on_event
from trainhub.notifications.models import Delivery
from trainhub.notifications.selectors import due_delivery_ids
from trainhub.notifications.services import (
    attempt_delivery,
    backoff,
    create_webhook,
    set_choices,
)
from trainhub.tenancy.services import remove_member

from ..factories import make_job, make_node, running_job
from .conftest import Committed, World, end_job, run_due
from .receiver import Received, webhook_receiver

FAILED, SUCCEEDED = NotifyEvent.JOB_FAILED, NotifyEvent.JOB_SUCCEEDED
PREEMPTED, STALLED = NotifyEvent.JOB_PREEMPTED, NotifyEvent.JOB_STALLED


def _verified(request: Received, secret: str) -> dict[str, Any]:
    """The body, once its signature checks out as a receiver would check it."""
    expected = "sha256=" + hmac.new(secret.encode(), request.body, hashlib.sha256).hexdigest()
    assert hmac.compare_digest(request.headers["x-trainhub-signature"], expected)
    document: dict[str, Any] = json.loads(request.body)
    return document


def test_one_signed_delivery_per_subscribed_event_retried_after_a_500(
    world: World, committed: Committed
) -> None:
    set_choices(user=world.alice, events=[FAILED, PREEMPTED, STALLED], email=True)
    node, _ = make_node(cpus=16, memory_mb=65536)
    failing, succeeding = make_job(world.alice), make_job(world.alice)
    preempted = running_job(make_job(world.alice), node)
    with webhook_receiver(500) as receiver:
        secret = create_webhook(url=receiver.url, user=world.alice, actor=world.alice).secret
        with committed():
            end_job(
                failing,
                JobState.FAILED,
                message="worker 0 exited with code 1",
                end_cause="user_exception",
                end_hint="ValueError: bad at train.py:3 — fix the code",
            )
            end_job(succeeding, JobState.STARTING)
            end_job(succeeding, JobState.SUCCEEDED, end_cause="succeeded")  # not subscribed
            assert preempt_job(
                job=preempted, grace_seconds=60, reason="making room", now=timezone.now()
            )
            publish(JobStalled(job_id=preempted.pk, reason="no progress for 310 s (limit 300 s)"))

        now = timezone.now()
        assert run_due(now).count(str(DeliveryStatus.DELIVERED)) == 5  # one webhook got 500
        assert due_delivery_ids(now=now) == []  # the 500 waits for its backoff
        assert run_due(now + backoff(1)) == [str(DeliveryStatus.DELIVERED)]
        assert run_due(now + timedelta(days=1)) == []
        requests = list(receiver.requests)

    assert [r.answered for r in requests] == [500, 200, 200, 200]
    bodies = [_verified(r, secret) for r in requests]
    delivered = [b for b, r in zip(bodies, requests, strict=True) if r.answered == 200]
    assert sorted(b["event"] for b in delivered) == sorted([FAILED, PREEMPTED, STALLED])
    assert len({b["delivery"] for b in delivered}) == 3
    # The retry is the same delivery, signed again.
    assert bodies[0]["delivery"] in {b["delivery"] for b in delivered}
    for request, body in zip(requests, bodies, strict=True):
        assert request.headers["x-trainhub-timestamp"] == str(body["timestamp"])
        assert request.headers["x-trainhub-event"] == body["event"]
        assert request.headers["x-trainhub-delivery"] == str(body["delivery"])
    failure = next(b for b in delivered if b["event"] == FAILED)
    assert failure["job"] | {"url": ""} == {
        "id": failing.pk,
        "name": "movielens-mf",
        "team": "recsys",
        "state": "failed",
        "url": "",
        "cause": "user_exception",
        "hint": "ValueError: bad at train.py:3 — fix the code",
        "message": "worker 0 exited with code 1",
    }
    assert failure["job"]["url"].endswith(f"/jobs/{failing.pk}/")
    assert next(b for b in delivered if b["event"] == STALLED)["reason"].startswith(
        "no progress for 310 s"
    )
    retried = Delivery.objects.get(pk=bodies[0]["delivery"])
    assert (retried.attempts, retried.last_status_code, retried.status) == (
        2,
        200,
        DeliveryStatus.DELIVERED,
    )
    # The same three by e-mail, in Django's test outbox.
    assert sorted(m.subject.split(" of recsys ")[1].split(":")[0] for m in mail.outbox) == [
        "failed",
        "stalled",
        "was preempted",
    ]
    assert {tuple(m.to) for m in mail.outbox} == {("alice@example.com",)}
    failed_mail = next(m for m in mail.outbox if " failed" in m.subject)
    assert "Cause: user_exception" in failed_mail.body
    assert "What to do: ValueError: bad at train.py:3 — fix the code" in failed_mail.body


def test_an_event_nobody_subscribed_to_delivers_nothing(world: World, committed: Committed) -> None:
    set_choices(user=world.alice, events=[SUCCEEDED], email=True)
    job = make_job(world.alice)
    with webhook_receiver() as receiver:
        create_webhook(url=receiver.url, user=world.alice, actor=world.alice)
        create_webhook(url=receiver.url, team=world.recsys, events=[SUCCEEDED], actor=world.bob)
        with committed():
            end_job(job, JobState.FAILED, end_cause="exit_code")
        run_due(timezone.now())
        assert receiver.requests == []
    assert not Delivery.objects.exists()
    assert mail.outbox == []


def test_handling_an_event_twice_delivers_it_once_and_a_new_preemption_again(
    world: World, committed: Committed
) -> None:
    set_choices(user=world.alice, events=[FAILED, PREEMPTED], email=True)
    job = make_job(world.alice)
    with webhook_receiver() as receiver:
        create_webhook(url=receiver.url, user=world.alice, actor=world.alice)
        with committed():
            end_job(job, JobState.FAILED)
        on_event(JobStateChanged(job_id=job.pk, state=JobState.FAILED))  # the same event again
        assert Delivery.objects.count() == 2  # the webhook and the e-mail, once each
        node, _ = make_node(cpus=16, memory_mb=65536)
        again = running_job(make_job(world.alice), node)
        for _ in range(2):
            with committed():
                preempt_job(job=again, grace_seconds=60, reason="room", now=timezone.now())
            on_event(JobStateChanged(job_id=again.pk, state=JobState.PREEMPTED))
            again.refresh_from_db()
            again.state = JobState.RUNNING  # back to running for the second preemption
            again.save(update_fields=["state"])
        keys = Delivery.objects.filter(event=PREEMPTED, channel="webhook")
        assert sorted(keys.values_list("key", flat=True)) == [
            f"job.preempted:{again.pk}:1",
            f"job.preempted:{again.pk}:2",
        ]
        # A requeue after a lost node passes through `preempted` too: it is no preemption.
        lost = running_job(make_job(world.alice), node)
        with committed():
            release_lost_nodes(lost_node_ids=[node.pk], lost_after_s=30, now=timezone.now())
        lost.refresh_from_db()
        assert (lost.end_cause, lost.infra_restarts) == ("node_lost", 1)
        assert not Delivery.objects.filter(event=PREEMPTED, key__contains=f":{lost.pk}:")


def test_a_team_webhook_hears_every_job_of_its_team_for_its_own_events(
    world: World, committed: Committed
) -> None:
    set_choices(user=world.alice, events=[], email=False)  # alice wants nothing herself
    with webhook_receiver() as receiver:
        team_hook = create_webhook(
            url=receiver.url, team=world.recsys, events=[FAILED], fmt=WebhookFormat.SLACK
        )
        with committed():
            end_job(make_job(world.alice), JobState.FAILED, end_cause="out_of_memory")
            end_job(make_job(world.carol, team="vision"), JobState.FAILED)  # another team
        run_due(timezone.now())
        (request,) = receiver.requests
    # Slack-compatible: only "text", signed all the same.
    text = _verified(request, team_hook.secret)["text"]
    assert text.startswith("Job movielens-mf (#") and " of recsys failed: out_of_memory" in text
    assert mail.outbox == []


def test_a_user_who_left_the_team_hears_nothing_of_its_jobs(
    world: World, committed: Committed
) -> None:
    set_choices(user=world.alice, events=[FAILED], email=True)
    job = make_job(world.alice)
    remove_member(membership=world.recsys.memberships.get(user=world.alice))
    with committed():
        end_job(job, JobState.FAILED)
    assert not Delivery.objects.exists()


def test_no_email_without_an_address_or_with_email_off(
    world: World, committed: Committed, settings: Any
) -> None:
    set_choices(user=world.alice, events=[FAILED], email=False)
    set_choices(user=world.bob, events=[FAILED], email=True)  # bob has no address
    with committed():
        end_job(make_job(world.alice), JobState.FAILED)
        end_job(make_job(world.bob), JobState.FAILED)
    assert not Delivery.objects.exists()
    settings.EMAIL_BACKEND = "django.core.mail.backends.dummy.EmailBackend"  # no e-mail here
    set_choices(user=world.alice, events=[FAILED], email=True)
    with committed():
        end_job(make_job(world.alice), JobState.FAILED)
    assert not Delivery.objects.exists()


def test_defaults_tell_a_user_who_never_chose_of_failures_by_email(
    world: World, committed: Committed
) -> None:
    with committed():
        end_job(make_job(world.alice), JobState.FAILED, end_cause="killed")
        end_job(make_job(world.alice), JobState.CANCELLED)
    run_due(timezone.now())
    (message,) = mail.outbox
    assert (
        message.subject.startswith("[TrainHub] Job movielens-mf (#") and "failed" in message.subject
    )


def test_backoff_doubles_and_a_delivery_gives_up_after_its_attempts(
    world: World, committed: Committed, settings: Any
) -> None:
    settings.NOTIFY_ATTEMPTS = 3
    set_choices(user=world.alice, events=[FAILED], email=False)
    with webhook_receiver(500, 502, 503, 500) as receiver:
        create_webhook(url=receiver.url, user=world.alice)
        with committed():
            end_job(make_job(world.alice), JobState.FAILED)
        (delivery,) = Delivery.objects.all()
        start = timezone.now()
        assert run_due(start) == ["pending"]
        delivery.refresh_from_db()
        assert delivery.next_attempt_at == start + timedelta(seconds=30)
        assert run_due(start + timedelta(seconds=29)) == []
        second = start + timedelta(seconds=30)
        assert run_due(second) == ["pending"]
        delivery.refresh_from_db()
        assert delivery.next_attempt_at == second + timedelta(seconds=60)
        assert run_due(second + timedelta(seconds=60)) == ["failed"]
        assert run_due(second + timedelta(days=1)) == []
        assert [r.answered for r in receiver.requests] == [500, 502, 503]
    delivery.refresh_from_db()
    assert (delivery.status, delivery.attempts, delivery.next_attempt_at) == ("failed", 3, None)
    assert (delivery.last_status_code, delivery.last_error) == (503, "answered HTTP 503")
    assert backoff(20) == timedelta(hours=1)  # capped


def test_an_attempt_a_dead_worker_left_is_sent_again_after_its_lease(
    world: World, committed: Committed, monkeypatch: pytest.MonkeyPatch
) -> None:
    set_choices(user=world.alice, events=[FAILED], email=False)
    with webhook_receiver() as receiver:
        create_webhook(url=receiver.url, user=world.alice)
        with committed():
            end_job(make_job(world.alice), JobState.FAILED)
        (delivery,) = Delivery.objects.all()
        now = timezone.now()

        def killed(_: Delivery) -> None:
            raise SystemExit("worker killed mid-send")

        monkeypatch.setattr("trainhub.notifications.services._send", killed)
        with pytest.raises(SystemExit):
            attempt_delivery(delivery.pk, now=now)
        monkeypatch.undo()
        assert attempt_delivery(delivery.pk, now=now) is None  # claimed: nobody sends it twice
        assert run_due(now + timedelta(seconds=60)) == []
        assert run_due(now + timedelta(seconds=101)) == ["delivered"]  # 4 x 10 s + 60 s
        assert len(receiver.requests) == 1
    delivery.refresh_from_db()
    assert (delivery.attempts, delivery.status) == (2, "delivered")


def test_an_attempt_refuses_a_private_address_when_they_are_not_allowed(
    world: World, committed: Committed, settings: Any
) -> None:
    set_choices(user=world.alice, events=[FAILED], email=False)
    with webhook_receiver() as receiver:
        create_webhook(url=receiver.url.replace("127.0.0.1", "localhost"), user=world.alice)
        settings.WEBHOOK_ALLOW_PRIVATE = False  # as if the name now resolved to loopback
        with committed():
            end_job(make_job(world.alice), JobState.FAILED)
        assert run_due(timezone.now()) == ["pending"]
        assert receiver.requests == []
    delivery = Delivery.objects.get()
    assert delivery.last_error == "localhost resolves to a non-public address; refused"
    assert delivery.last_status_code is None


def test_a_name_is_posted_to_with_its_host_header_and_logs_hold_no_url_or_secret(
    world: World, committed: Committed, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    set_choices(user=world.alice, events=[FAILED], email=False)
    with webhook_receiver(500) as receiver:
        url = receiver.url.replace("127.0.0.1", "localhost") + "?token=T0KEN"
        secret = create_webhook(url=url, user=world.alice).secret
        with committed():
            end_job(make_job(world.alice), JobState.FAILED)
        now = timezone.now()
        assert run_due(now) == ["pending"]
        assert run_due(now + backoff(1)) == ["delivered"]
        request = receiver.requests[-1]
    assert request.headers["host"] == url.split("/")[2]
    assert request.path == "/hook?token=T0KEN"
    assert "notification delivery" in caplog.text
    assert secret not in caplog.text and "T0KEN" not in caplog.text and "/hook" not in caplog.text
