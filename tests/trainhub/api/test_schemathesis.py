"""Schemathesis against a live server's /api/schema/ as a signed-in platform admin: no 5xx,
and every response matches the schema."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import httpx
from django.core.cache import cache
from trainhub.tenancy.choices import Role

from ..factories import make_job, make_node, make_team, make_user

BIN = Path(sys.executable).parent


def test_the_api_keeps_its_schema_under_fuzzing(web_server: str, tmp_path: Path) -> None:
    cache.clear()
    root = make_user("root", superuser=True)
    make_team("recsys", members={root: Role.ADMIN}, cpu=8, memory_mb=16384)
    make_node(cpus=8, memory_mb=16384)
    make_job(root)
    token = httpx.post(
        f"{web_server}/api/v1/auth/token/", json={"username": "root", "password": "pw-root"}
    ).json()["token"]
    done = subprocess.run(
        [
            str(BIN / "schemathesis"),
            "run",
            f"{web_server}/api/schema/",
            "--url",
            web_server,
            "--header",
            f"Authorization: Token {token}",
            "--checks",
            "not_a_server_error,response_schema_conformance,content_type_conformance",
            "--phases",
            "examples,coverage,fuzzing",
            "--max-examples",
            "5",
            "--workers",
            "1",
            "--request-timeout",
            "20",
            "--generation-deterministic",
            # Logging in with random credentials only meets the rate limit.
            "--exclude-path-regex",
            "auth/token|nodes/enroll",
            "--report",
            "junit",
            "--report-dir",
            str(tmp_path),
        ],
        env={**os.environ, "SCHEMATHESIS_TELEMETRY": "false", "NO_COLOR": "1"},
        capture_output=True,
        text=True,
        timeout=240,
        check=False,
    )
    assert done.returncode == 0, done.stdout[-8000:] + done.stderr[-2000:]
