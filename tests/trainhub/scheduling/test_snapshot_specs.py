"""The snapshot read fetches a job's spec only when its digest is new."""

from __future__ import annotations

import pytest
from django.db import connection
from django.db.models import TextField
from django.db.models.functions import MD5, Cast
from django.test.utils import CaptureQueriesContext
from django.utils import timezone
from trainhub.jobs.models import Job
from trainhub.scheduling.snapshot import _AskedCache, read_cluster
from trainhub.tenancy.choices import Role

from ..factories import make_job, make_node, make_team, make_user

pytestmark = pytest.mark.django_db
RES = {"cpu": 0.5, "memory_mb": 512, "gpu": 0}


def _job_rows() -> list[dict[str, object]]:
    return list(
        Job.objects.annotate(spec_md5=MD5(Cast("spec", TextField()))).values("id", "spec_md5")
    )


def test_specs_are_fetched_once_and_again_when_they_change() -> None:
    user = make_user("alice")
    make_team("recsys", members={user: Role.MEMBER})
    make_node("n1")
    first = make_job(user, name="a")
    second = make_job(user, name="b", workers={"min": 2, "max": 2, "resources": RES})
    cache = _AskedCache()
    asked = cache.read(_job_rows())
    assert asked[second.pk].workers_min == 2
    rows = _job_rows()
    with CaptureQueriesContext(connection) as queries:
        assert cache.read(rows) == asked
    assert queries.captured_queries == []  # every digest known: no spec fetched
    changed = {**first.spec, "workers": {"min": 3, "max": 3, "resources": RES}}
    Job.objects.filter(pk=first.pk).update(spec=changed)
    assert cache.read(_job_rows())[first.pk].workers_min == 3
    # A job gone between the digest query and the spec query is left out.
    rows = [*_job_rows(), {"id": 10**9, "spec_md5": "0" * 32}]
    assert 10**9 not in cache.read(rows)
    assert {j.id for j in read_cluster(timezone.now()).snapshot.jobs} == {first.pk, second.pk}
