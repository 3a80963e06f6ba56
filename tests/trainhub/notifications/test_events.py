"""Which domain events notify, the payload and signature a receiver reads, and the
settings read from the environment."""

from __future__ import annotations

import hashlib
import hmac
import json
import subprocess
import sys

from trainhub.events import JobStalled, JobStateChanged, NodeChanged
from trainhub.jobs.choices import JobState
from trainhub.notifications.choices import NotifyEvent
from trainhub.notifications.handlers import occurrence_of
from trainhub.notifications.payloads import email_message, signature, summary, webhook_body
from trainhub.notifications.services import Occurrence

PAYLOAD = {
    "event": "job.failed",
    "time": "2026-11-29T00:00:00+00:00",
    "job": {
        "id": 7,
        "name": "mf",
        "team": "recsys",
        "state": "failed",
        "url": "https://th.example/jobs/7/",
        "cause": "out_of_memory",
        "hint": "raise workers.resources.memory_mb",
        "message": "worker 0 was killed",
    },
    "reason": "",
}


def test_job_endings_preemptions_and_stalls_notify_and_nothing_else_does() -> None:
    assert occurrence_of(JobStateChanged(job_id=1, state=JobState.FAILED, message="m")) == (
        Occurrence(NotifyEvent.JOB_FAILED, 1, reason="m")
    )
    assert occurrence_of(JobStateChanged(job_id=1, state=JobState.SUCCEEDED)) == Occurrence(
        NotifyEvent.JOB_SUCCEEDED, 1
    )
    assert occurrence_of(JobStateChanged(job_id=1, state=JobState.PREEMPTED)) == Occurrence(
        NotifyEvent.JOB_PREEMPTED, 1
    )
    assert occurrence_of(JobStalled(job_id=2, reason="no progress")) == Occurrence(
        NotifyEvent.JOB_STALLED, 2, reason="no progress"
    )
    for state in (JobState.RUNNING, JobState.PENDING, JobState.CANCELLED, JobState.RESTARTING):
        assert occurrence_of(JobStateChanged(job_id=1, state=state)) is None
    assert occurrence_of(NodeChanged(node_id=1, reason="x")) is None


def test_the_body_is_signed_as_sent_and_carries_its_delivery_and_time() -> None:
    body = webhook_body(PAYLOAD, fmt="json", delivery_id=42, timestamp=1_790_000_000)
    document = json.loads(body)
    assert document["delivery"] == 42 and document["timestamp"] == 1_790_000_000
    assert document["job"]["cause"] == "out_of_memory"
    expected = hmac.new(b"s3cret", body, hashlib.sha256).hexdigest()
    assert signature("s3cret", body) == f"sha256={expected}"
    assert signature("other", body) != signature("s3cret", body)


def test_slack_gets_one_line_of_text_with_the_cause_and_the_link() -> None:
    document = json.loads(webhook_body(PAYLOAD, fmt="slack", delivery_id=1, timestamp=0))
    assert document == {
        "text": "Job mf (#7) of recsys failed: out_of_memory — raise "
        "workers.resources.memory_mb <https://th.example/jobs/7/>"
    }


def test_the_email_says_what_happened_and_what_to_do() -> None:
    subject, body = email_message(PAYLOAD)
    assert subject == "[TrainHub] " + summary(PAYLOAD)
    assert "What to do: raise workers.resources.memory_mb" in body
    assert "https://th.example/jobs/7/" in body


def _settings(**env: str) -> subprocess.CompletedProcess[str]:
    code = (
        "from trainhub.notifications import conf as c; "
        "print(c.EMAIL_BACKEND, c.EMAIL_HOST, c.EMAIL_USE_TLS, c.WEBHOOK_ALLOW_PRIVATE)"
    )
    return subprocess.run(
        [sys.executable, "-c", code],
        env={"PATH": "/usr/bin:/bin", "PYTHONPATH": "platform", **env},
        capture_output=True,
        text=True,
        check=False,
    )


def test_email_is_off_until_a_host_is_set_and_bad_values_name_their_variable() -> None:
    assert _settings().stdout.split() == [
        "django.core.mail.backends.dummy.EmailBackend",
        "True",
        "False",
    ]
    on = _settings(TRAINHUB_EMAIL_HOST="smtp.example.com", TRAINHUB_WEBHOOK_ALLOW_PRIVATE="1")
    assert on.stdout.split() == [
        "django.core.mail.backends.smtp.EmailBackend",
        "smtp.example.com",
        "True",
        "True",
    ]
    bad = _settings(TRAINHUB_NOTIFY_ATTEMPTS="0")
    assert bad.returncode != 0 and "TRAINHUB_NOTIFY_ATTEMPTS" in bad.stderr
    bad = _settings(TRAINHUB_WEBHOOK_ALLOW_PRIVATE="maybe")
    assert bad.returncode != 0 and "TRAINHUB_WEBHOOK_ALLOW_PRIVATE" in bad.stderr
