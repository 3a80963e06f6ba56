"""Deliveries sent by a real Celery worker and beat (services mode, PostgreSQL and Redis;
no eager Celery): events that happened while no worker ran are sent once one starts, each
subscribed event reaches the receiver once with a 2xx, the one answered 500 is sent again
after its backoff, and nothing is sent for an event nobody subscribed to."""

from __future__ import annotations

import hashlib
import hmac
import json
import secrets
import time
from pathlib import Path
from typing import Any

import pytest
import redis
from django.contrib.auth.models import User
from django.db import connection
from trainhub.jobs.choices import JobState
from trainhub.notifications.choices import NotifyEvent
from trainhub.notifications.models import Delivery
from trainhub.notifications.services import create_webhook, set_choices
from trainhub.standalone.processes import ProcessGroup, beat_command, child_env, worker_command
from trainhub.tenancy.choices import Role

from ...conftest import require_services
from ..factories import make_job, make_team
from .conftest import HANDLER, end_job
from .receiver import webhook_receiver

pytestmark = [pytest.mark.services, pytest.mark.slow]


def _database_url() -> str:
    db = connection.settings_dict
    auth = db["USER"] + (f":{db['PASSWORD']}" if db["PASSWORD"] else "")
    return f"postgres://{auth}@{db['HOST'] or '127.0.0.1'}:{db['PORT'] or 5432}/{db['NAME']}"


def test_a_worker_sends_each_subscribed_event_once_and_retries_a_500(
    transactional_db: Any, settings: Any, tmp_path: Path
) -> None:
    _, redis_url = require_services()
    if connection.vendor != "postgresql":
        pytest.skip("needs PostgreSQL")  # require_services fails instead under CI=true
    settings.EVENT_HANDLERS = [HANDLER]
    settings.WEBHOOK_ALLOW_PRIVATE = True
    alice = User.objects.create_user("alice", "alice@example.com", "pw")
    make_team("recsys", members={alice: Role.MEMBER})
    set_choices(user=alice, events=[NotifyEvent.JOB_FAILED, NotifyEvent.JOB_SUCCEEDED], email=False)
    broker = redis_url.rsplit("/", 1)[0] + "/13"
    redis.Redis.from_url(broker).flushdb()
    env = child_env(
        {
            "DATABASE_URL": _database_url(),
            "REDIS_URL": broker,
            "TRAINHUB_CHANNEL_PREFIX": f"notify{secrets.token_hex(3)}",
            "TRAINHUB_DATA_DIR": str(tmp_path / "data"),
            "TRAINHUB_WEBHOOK_ALLOW_PRIVATE": "1",
            "TRAINHUB_NOTIFY_SWEEP_SECONDS": "1",
            "TRAINHUB_NOTIFY_RETRY_SECONDS": "1",
        }
    )
    with webhook_receiver(500) as receiver:
        secret = create_webhook(url=receiver.url, user=alice).secret
        # While no worker runs: two subscribed events and one that is not.
        end_job(make_job(alice), JobState.FAILED, end_cause="killed")
        job = make_job(alice)
        end_job(job, JobState.STARTING)
        end_job(job, JobState.SUCCEEDED)
        end_job(make_job(alice), JobState.CANCELLED)
        assert Delivery.objects.count() == 2
        group = ProcessGroup(env=env, log_dir=tmp_path / "logs")
        try:
            group.start("worker", worker_command())
            group.start("beat", beat_command(tmp_path / "celerybeat-schedule"))
            deadline = time.monotonic() + 90
            while sum(r.answered == 200 for r in receiver.requests) < 2:
                assert time.monotonic() < deadline, (tmp_path / "logs" / "worker.log").read_text()
                assert not group.exited(), group.exited()
                time.sleep(0.2)
            time.sleep(3)  # anything more would have come by now (sweeps every second)
        finally:
            group.stop()
        requests = list(receiver.requests)
    assert [r.answered for r in requests].count(500) == 1
    for r in requests:
        expected = hmac.new(secret.encode(), r.body, hashlib.sha256).hexdigest()
        assert r.headers["x-trainhub-signature"] == f"sha256={expected}"
    delivered = [json.loads(r.body) for r in requests if r.answered == 200]
    assert sorted(d["event"] for d in delivered) == ["job.failed", "job.succeeded"]
    first = json.loads(requests[0].body)["delivery"]
    assert [json.loads(r.body)["delivery"] for r in requests].count(first) == 2  # the retry
    assert len(requests) == 3
    assert set(Delivery.objects.values_list("status", flat=True)) == {"delivered"}
