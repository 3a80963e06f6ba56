"""Users' own code in services mode: a job runs a module that exists only in its uploaded
archive (the coordinator's entrypoint and the workers' closures both come from it); a
traversal archive is refused with 400 and leaves nothing behind."""

from __future__ import annotations

import hashlib
import io
import time
from pathlib import Path

import pytest

from ..archive_builders import MYMODEL, tar_gz, traversal_tar
from .cluster import LiveCluster

pytestmark = [pytest.mark.services, pytest.mark.slow]

SMALL = {"cpu": 0.5, "memory_mb": 1024}


def upload(cluster: LiveCluster, data: bytes) -> tuple[int, dict[str, object]]:
    response = cluster.api.post("/code/", files={"file": ("src.tar.gz", io.BytesIO(data))})
    return response.status_code, response.json()


def spec(code: str) -> dict[str, object]:
    return {
        "name": "user-code",
        "team": "recsys",
        "entrypoint": "mymodel:train",
        "args": {"steps": 4},
        "code": code,
        "parameter_servers": {"replicas": 1, "resources": SMALL},
        "workers": {"min": 1, "max": 1, "resources": SMALL},
        "coordinator": {"resources": SMALL},
    }


def stored(cluster: LiveCluster) -> list[Path]:
    code_dir = cluster.data_dir / "data" / "code"
    return sorted(p for p in code_dir.rglob("*") if p.is_file()) if code_dir.exists() else []


def test_a_job_runs_a_module_that_exists_only_in_its_archive(live_cluster: LiveCluster) -> None:
    status, answer = upload(live_cluster, tar_gz({"mymodel.py": MYMODEL}))
    assert status == 201, answer
    digest = str(answer["digest"])
    job = live_cluster.submit(**spec(digest))
    done = live_cluster.wait_state(job["id"], {"succeeded", "failed", "cancelled"}, timeout=180)
    assert done["state"] == "succeeded", live_cluster.logs(job["id"])
    # The coordinator reports the squares just before it exits: under load its exit can
    # be recorded before those points are stored; they arrive, so wait for them a while.
    deadline = time.monotonic() + 30
    series = live_cluster.api.get(f"/jobs/{job['id']}/metrics/").json()["series"]
    while len(series.get("user_code_square", [])) < 4 and time.monotonic() < deadline:
        time.sleep(0.5)
        series = live_cluster.api.get(f"/jobs/{job['id']}/metrics/").json()["series"]
    # Squares computed by the worker, which imported `square` from the same archive.
    assert [p["value"] for p in series.get("user_code_square", [])] == [0.0, 1.0, 4.0, 9.0]
    assert '{"result": {"steps": 4}}' in live_cluster.logs(job["id"])


def test_a_traversal_archive_gets_400_and_leaves_nothing(live_cluster: LiveCluster) -> None:
    before = stored(live_cluster)
    evil = traversal_tar()
    status, answer = upload(live_cluster, evil)
    assert status == 400
    assert answer == {"file": ["Refused: '../evil.py' contains '..'."]}
    assert stored(live_cluster) == before
    # No row either: a spec naming the archive's digest is refused, naming `code`.
    response = live_cluster.api.post(
        "/jobs/", json=spec("sha256:" + hashlib.sha256(evil).hexdigest())
    )
    assert response.status_code == 400
    assert list(response.json()) == ["code"]
