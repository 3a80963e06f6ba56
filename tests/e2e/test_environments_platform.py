"""Jobs with their own Python environment through the whole platform (services mode: web,
Celery worker, beat, a root agent): the job shows `preparing` while its node builds,
with uv's lines in its logs; a second job with the same requirements starts without a
build; a bad requirement fails the job with uv's message and no restart spent; a code
archive's requirements.txt counts as the spec's requirements."""

from __future__ import annotations

import io
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from ..archive_builders import tar_gz
from ..conftest import require_services
from ..ps_runtime.agent.wheels import make_wheel, offline_index
from .cluster import LiveCluster, fresh_database, services_cluster

pytestmark = [pytest.mark.services, pytest.mark.slow]

SMALL = {"cpu": 0.5, "memory_mb": 1024}
PACKAGE = "trainhub_e2e_envpkg"
JOB_CODE = f"""
import ps_runtime
import {PACKAGE}


def train(steps: int = 2) -> dict:
    for step in range(steps):
        ps_runtime.report(step=step, env_value=float({PACKAGE}.VALUE))
    return {{"value": {PACKAGE}.VALUE}}
"""


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveCluster]:
    database_url, redis_url = require_services()
    tmp: Path = tmp_path_factory.mktemp("envs")
    wheels = tmp / "wheels"
    make_wheel(wheels, PACKAGE, "3", code="VALUE = 3\n")
    # The node's package index settings: this wheelhouse and nothing else.
    agent_env = offline_index(wheels)
    redis_e2e = redis_url.rsplit("/", 1)[0] + "/13"
    with (
        fresh_database(database_url) as db_url,
        services_cluster(db_url, redis_e2e, tmp, agent_env=agent_env) as live,
    ):
        yield live


def spec(name: str, code: str | None = None, **extra: Any) -> dict[str, Any]:
    return {
        "name": name,
        "team": "recsys",
        "entrypoint": "ps_runtime.examples.movielens:train",
        "parameter_servers": {"replicas": 1, "resources": SMALL},
        "workers": {"min": 1, "max": 1, "resources": SMALL},
        "coordinator": {"resources": SMALL},
        "max_restarts": 2,
        **({"code": code} if code else {}),
        **extra,
    }


def upload(cluster: LiveCluster, files: dict[str, str]) -> str:
    data = tar_gz({name: text.encode() for name, text in files.items()})
    response = cluster.api.post("/code/", files={"file": ("src.tar.gz", io.BytesIO(data))})
    assert response.status_code == 201, response.text
    return str(response.json()["digest"])


def env_dirs(cluster: LiveCluster) -> list[str]:
    root = cluster.base / "agent" / "envs"
    return (
        sorted(p.name for p in root.iterdir() if not p.name.startswith("."))
        if root.exists()
        else []
    )


def states_of(cluster: LiveCluster, job_id: int) -> list[str]:
    events = cluster.api.get(f"/jobs/{job_id}/events/").json()
    return [e["to_state"] for e in events if e["kind"] == "state"]


def test_two_jobs_with_the_same_requirements_build_once(cluster: LiveCluster) -> None:
    # The requirements come from the archive's requirements.txt.
    code = upload(cluster, {"envjob.py": JOB_CODE, "requirements.txt": f"{PACKAGE}==3\n"})
    first = cluster.submit(**spec("env-first", code, entrypoint="envjob:train"))
    assert first["spec"]["environment"]["requirements"] == [f"{PACKAGE}==3"]
    done = cluster.wait_state(first["id"], {"succeeded", "failed"}, timeout=180)
    assert done["state"] == "succeeded", cluster.logs(first["id"])
    assert "preparing" in states_of(cluster, first["id"])
    logs = cluster.logs(first["id"])
    assert "[environment] Installed 1 package" in logs and "Creating virtual environment" in logs
    assert '{"result": {"value": 3}}' in logs  # the job imported its package
    built = env_dirs(cluster)
    assert len(built) == 1

    # The same packages in the spec itself: the node reuses what it built.
    second = cluster.submit(
        **spec(
            "env-second",
            code,
            entrypoint="envjob:train",
            environment={"requirements": [f"{PACKAGE}==3"]},
        )
    )
    done = cluster.wait_state(second["id"], {"succeeded", "failed"}, timeout=180)
    assert done["state"] == "succeeded", cluster.logs(second["id"])
    assert "Creating virtual environment" not in cluster.logs(second["id"])
    assert "preparing" not in states_of(cluster, second["id"])
    assert env_dirs(cluster) == built


def test_a_bad_requirement_fails_the_job_with_uvs_message_and_no_restart(
    cluster: LiveCluster,
) -> None:
    job = cluster.submit(
        **spec("env-bad", environment={"requirements": [f"{PACKAGE}==99", "numpy"]})
    )
    done = cluster.wait_state(job["id"], {"succeeded", "failed"}, timeout=180)
    assert done["state"] == "failed"
    assert done["restarts"] == 0
    assert f"requirement '{PACKAGE}==99'" in done["message"], done["message"]
    assert "could not start" in done["message"]
    logs = cluster.logs(job["id"])
    assert f"{PACKAGE}==99" in logs  # uv's own lines are in the job's log


def test_a_spec_with_an_option_for_a_requirement_is_refused_naming_the_field(
    cluster: LiveCluster,
) -> None:
    before = cluster.api.get("/jobs/").json()["count"]
    response = cluster.api.post(
        "/jobs/",
        json=spec("env-evil", environment={"requirements": ["--index-url https://evil/simple"]}),
    )
    assert response.status_code == 400
    assert "is an option" in str(response.json()["environment"]["requirements"])
    assert cluster.api.get("/jobs/").json()["count"] == before
