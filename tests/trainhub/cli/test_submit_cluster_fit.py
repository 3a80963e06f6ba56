"""`trainhub submit` of a job the whole cluster could never hold: refused, with the field
and the numbers, and nothing created (run as a process against a live server)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from django.core.cache import cache
from trainhub.jobs.models import Job
from trainhub.tenancy.choices import Role

from ..factories import make_node, make_team, make_user
from .helpers import login, trainhub

pytestmark = pytest.mark.django_db(transaction=True)

# The spec's defaults: 1 CPU each for the coordinator, the PS and the worker.
DEFAULT_SIZED = """\
name: first-job
team: default
entrypoint: ps_runtime.examples.movielens:train
"""


def test_submit_of_a_job_larger_than_the_cluster_is_refused_naming_the_field(
    live_server: Any, tmp_path: Path
) -> None:
    cache.clear()
    admin = make_user("admin")
    make_team("default", members={admin: Role.ADMIN}, cpu=2, memory_mb=8192)
    make_node(cpus=2, memory_mb=8192)  # `make demo` on a 2-CPU machine
    config = tmp_path / "cli.json"
    login(config, live_server.url, "admin", "pw-admin")
    spec = tmp_path / "job.yaml"
    spec.write_text(DEFAULT_SIZED)
    for extra in ((), ("--dry-run",)):
        done = trainhub(config, "submit", str(spec), *extra)
        assert done.returncode == 1, done.stdout
        assert "400" in done.stderr
        assert "workers.resources.cpu: This job needs 3 CPUs in all" in done.stderr
        assert "the whole cluster has 2 (1 node)" in done.stderr
    assert not Job.objects.exists()
