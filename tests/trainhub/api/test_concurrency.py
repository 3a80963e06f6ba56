"""50 concurrent submissions from one team, against a live server on PostgreSQL, never leave
quota accounting wrong: a production cap admits exactly what fits."""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import httpx
from django.core.cache import cache
from trainhub.jobs.models import Job
from trainhub.tenancy.choices import Role
from trainhub.tenancy.resources import LimitResources, Resources
from trainhub.tenancy.services import set_priority_caps

from ..factories import make_node, make_team, make_user, spec

SUBMISSIONS = 50
CAP_CPU = 15.0


def _job(i: int) -> tuple[dict[str, Any], float]:
    """Two sizes, so which ones fit depends on the order the server sees them in."""
    worker_cpu = 0.5 if i % 2 else 1.0
    body = spec(
        name=f"prod-{i}",
        priority="production",
        workers={"min": 1, "max": 1, "resources": {"cpu": worker_cpu, "memory_mb": 256}},
    )
    return body, 0.5 + 0.5 + worker_cpu  # coordinator + one PS + one worker


def test_concurrent_submissions_never_exceed_the_priority_cap(web_server: str) -> None:
    cache.clear()
    alice = make_user("alice")
    team = make_team("recsys", members={alice: Role.MEMBER}, cpu=8, memory_mb=65536)
    set_priority_caps(team=team, caps={"production": LimitResources(cpu=CAP_CPU)})
    make_node(cpus=64, memory_mb=262144)

    token = httpx.post(
        f"{web_server}/api/v1/auth/token/", json={"username": "alice", "password": "pw-alice"}
    ).json()["token"]
    headers = {"Authorization": f"Token {token}"}
    start = threading.Barrier(SUBMISSIONS)

    def submit(i: int) -> tuple[int, int, float, str]:
        body, size = _job(i)
        with httpx.Client(base_url=web_server, headers=headers, timeout=60) as client:
            start.wait()
            response = client.post("/api/v1/jobs/", json=body)
        return i, response.status_code, size, response.text

    with ThreadPoolExecutor(SUBMISSIONS) as pool:
        results = list(pool.map(submit, range(SUBMISSIONS)))

    accepted = [r for r in results if r[1] == 201]
    refused = [r for r in results if r[1] != 201]
    assert {r[1] for r in refused} <= {409}, [r[3] for r in refused if r[1] != 409][:3]
    assert all("may run at most cpu 15 at production" in r[3] for r in refused)
    total = sum(r[2] for r in accepted)
    # Never over the cap, and nothing refused that would have fitted at the end.
    assert total <= CAP_CPU
    assert all(CAP_CPU - total < r[2] for r in refused), (total, len(accepted))
    assert len(accepted) >= 7  # 15 / 2 CPUs at worst

    # What the database holds and what the quota endpoint shows agree with what was accepted.
    assert Job.objects.filter(priority="production").count() == len(accepted)
    quota = httpx.get(f"{web_server}/api/v1/teams/recsys/quota/", headers=headers).json()
    production = next(p for p in quota["usage"]["by_priority"] if p["priority"] == "production")
    assert production["requested"] == Resources(total, 1280 * len(accepted), 0).as_dict()
