"""What a notification says: the event as stored when it happened, the body each webhook
attempt posts (signed), the Slack-compatible text, and the e-mail.

A JSON webhook's body is `{"event", "delivery", "timestamp", "job": {...}, "reason"}`;
`X-TrainHub-Signature: sha256=<hex>` is HMAC-SHA256 of the exact body bytes with the
webhook's secret, and `X-TrainHub-Timestamp` repeats the body's `timestamp` (inside
what is signed), so a receiver can refuse an old replay. `delivery` is the same on every
attempt of one delivery: a receiver that saw it already ignores the repeat.
"""

from __future__ import annotations

import hashlib
import hmac
import json
from datetime import datetime
from typing import Any

from django.conf import settings

from trainhub.jobs.models import Job

from .choices import NotifyEvent, WebhookFormat

SIGNATURE_HEADER = "X-TrainHub-Signature"
TIMESTAMP_HEADER = "X-TrainHub-Timestamp"
EVENT_HEADER = "X-TrainHub-Event"
DELIVERY_HEADER = "X-TrainHub-Delivery"

_WHAT = {
    NotifyEvent.JOB_SUCCEEDED: "succeeded",
    NotifyEvent.JOB_FAILED: "failed",
    NotifyEvent.JOB_PREEMPTED: "was preempted",
    NotifyEvent.JOB_STALLED: "stalled",
}


def job_url(job_id: int) -> str:
    """The job's page: absolute when `TRAINHUB_EXTERNAL_URL` is set, else its path."""
    return f"{settings.EXTERNAL_URL}/jobs/{job_id}/"


def event_payload(event: NotifyEvent, job: Job, *, reason: str, now: datetime) -> dict[str, Any]:
    """The event as it is now, stored with each of its deliveries."""
    return {
        "event": str(event),
        "time": now.isoformat(),
        "job": {
            "id": job.pk,
            "name": job.name,
            "team": job.team.slug,
            "state": job.state,
            "url": job_url(job.pk),
            "cause": job.end_cause,
            "hint": job.end_hint,
            "message": job.message,
        },
        "reason": reason,
    }


def summary(payload: dict[str, Any]) -> str:
    """One line: "Job movielens-mf (#12) of recsys failed: user_exception — hint"."""
    job = payload["job"]
    what = _WHAT.get(NotifyEvent(payload["event"]), payload["event"])
    line = f"Job {job['name']} (#{job['id']}) of {job['team']} {what}"
    if payload["event"] == NotifyEvent.JOB_FAILED and job.get("cause"):
        line += f": {job['cause']}"
        if job.get("hint"):
            line += f" — {job['hint']}"
    elif payload.get("reason"):
        line += f": {payload['reason']}"
    return line


def webhook_body(payload: dict[str, Any], *, fmt: str, delivery_id: int, timestamp: int) -> bytes:
    """The bytes one attempt posts (and signs)."""
    if fmt == WebhookFormat.SLACK:
        document: dict[str, Any] = {"text": f"{summary(payload)} <{payload['job']['url']}>"}
    else:
        document = {**payload, "delivery": delivery_id, "timestamp": timestamp}
    return json.dumps(document, separators=(",", ":"), sort_keys=True).encode()


def signature(secret: str, body: bytes) -> str:
    """The X-TrainHub-Signature value: `sha256=` and the HMAC's hex digest."""
    return "sha256=" + hmac.new(secret.encode(), body, hashlib.sha256).hexdigest()


def webhook_headers(
    *, secret: str, body: bytes, event: str, delivery_id: int, timestamp: int
) -> dict[str, str]:
    return {
        "Content-Type": "application/json",
        "User-Agent": "TrainHub-Webhooks/1",
        SIGNATURE_HEADER: signature(secret, body),
        TIMESTAMP_HEADER: str(timestamp),
        EVENT_HEADER: event,
        DELIVERY_HEADER: str(delivery_id),
    }


def email_message(payload: dict[str, Any]) -> tuple[str, str]:
    """The subject and the plain-text body of the e-mail."""
    job = payload["job"]
    subject = f"[TrainHub] {summary(payload)}"[:200]
    lines = [summary(payload), "", f"Job: {job['url']}", f"State: {job['state']}"]
    if job.get("cause"):
        lines.append(f"Cause: {job['cause']}")
    if job.get("hint"):
        lines.append(f"What to do: {job['hint']}")
    if job.get("message"):
        lines.append(f"Message: {job['message']}")
    if payload.get("reason"):
        lines.append(f"Reason: {payload['reason']}")
    lines += ["", "Choose what you are told about on your account page (/account/)."]
    return subject.replace("\n", " "), "\n".join(lines) + "\n"
