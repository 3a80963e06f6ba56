"""The forecast behind a dry run starts no policy run it expects to end past its budget:
a whole run is expected to take what the last cycle's policy run took
(`preview._last_policy_seconds`), not only the dry run's own run, which stops early."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from django.utils import timezone
from trainhub.jobs.jobspec import JobSpec
from trainhub.jobs.models import Job
from trainhub.jobs.services import place_job
from trainhub.scheduling.models import CycleRecord
from trainhub.scheduling.preview import preview_submission
from trainhub.tenancy.choices import Role

from ..factories import gang_placements, make_job, make_node, make_team, make_user, spec

pytestmark = pytest.mark.django_db

SMALL = {"cpu": 0.5, "memory_mb": 512}


def _small(**overrides: Any) -> dict[str, Any]:
    base = spec(
        parameter_servers={"replicas": 1, "resources": SMALL},
        workers={"min": 1, "max": 1, "resources": SMALL},
        coordinator={"resources": SMALL},
    )
    return {**base, **overrides}


def test_no_forecast_run_when_the_last_cycles_run_took_past_the_budget() -> None:
    alice = make_user("alice")
    make_team("recsys", members={alice: Role.MEMBER}, cpu=2, memory_mb=8192)
    node, _ = make_node(cpus=2, memory_mb=32768)
    past = make_job(alice, **_small(name="holder"))  # history: 10 minutes
    ended = timezone.now() - timedelta(hours=1)
    Job.objects.filter(pk=past.pk).update(
        state="succeeded", started_at=ended - timedelta(minutes=10), finished_at=ended
    )
    holder = make_job(alice, **_small(name="holder"))
    place_job(job=holder, placements=gang_placements(holder, node), now=timezone.now())
    asked = JobSpec.from_dict(_small())
    record = CycleRecord.objects.create(
        ran_at=timezone.now(), policy="cfs", summary={"policy_seconds": 0.001}
    )
    first = preview_submission(asked, now=timezone.now())
    assert not first.fits_now and first.estimated_start is not None
    record.summary = {"policy_seconds": 0.2}  # past the forecast's 0.15 s
    record.save()
    assert preview_submission(asked, now=timezone.now()).estimated_start is None
