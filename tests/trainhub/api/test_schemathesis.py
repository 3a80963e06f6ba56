"""Schemathesis with every check (`--checks all`) against a live server's /api/schema/, as a
signed-in platform admin: no 5xx, every answer documented and matching the schema, every
schema-violating request refused and every schema-valid one accepted (within
`schemathesis.toml`'s documented exceptions)."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import httpx
from django.core.cache import cache
from django.utils import timezone
from trainhub.experiments.services import create_experiment
from trainhub.experiments.spec import parse_experiment
from trainhub.nodes.services import create_enrollment_token
from trainhub.notifications.services import create_webhook
from trainhub.tenancy.choices import Role
from trainhub.tenancy.tokens import issue_token

from ..factories import make_job, make_node, make_team, make_user, spec

PARAMS = {"lr": {"type": "log_uniform", "low": 0.001, "high": 0.1}}

BIN = Path(sys.executable).parent
HERE = Path(__file__).parent
ROOT = HERE.parents[2]


def test_the_api_keeps_its_schema_under_fuzzing(web_server: str, tmp_path: Path) -> None:
    cache.clear()
    root = make_user("root", superuser=True)
    make_team("recsys", members={root: Role.ADMIN}, cpu=8, memory_mb=16384)
    node, _ = make_node(cpus=8, memory_mb=16384)
    job = make_job(root)
    job_spec, search = parse_experiment(
        {
            **spec(name="fuzz-search"),
            "search": {"method": "random", "metric": "loss", "max_trials": 2, "params": PARAMS},
        },
        user=root,
    )
    experiment = create_experiment(user=root, spec=job_spec, search=search, now=timezone.now())
    enrollment = create_enrollment_token(created_by=root)
    spare = issue_token(user=root, expires_at=None)  # the one DELETE tokens/{id} may revoke
    hook = create_webhook(url="https://hooks.example.com/x", user=root).webhook
    token = httpx.post(
        f"{web_server}/api/v1/auth/token/", json={"username": "root", "password": "pw-root"}
    ).json()["token"]
    real_ids = {
        "jobs": {"id": job.pk},
        "experiments": {"id": experiment.pk},
        "nodes": {"id": node.pk},
        "teams": {"slug": "recsys", "username": "root"},
        "users": {"username": "root"},
        "enrollment-tokens": {"id": enrollment.id},
        "tokens": {"id": spare.key},
        "webhooks": {"id": hook.pk},
    }
    done = subprocess.run(
        [
            str(BIN / "schemathesis"),
            "--config-file",
            str(HERE / "schemathesis.toml"),
            "run",
            f"{web_server}/api/schema/",
            "--url",
            web_server,
            "--header",
            f"Authorization: Token {token}",
            "--checks",
            "all",
            "--max-examples",
            "25",
            "--workers",  # one at a time: the same cases in the same order on every run
            "1",
            "--request-timeout",
            "20",
            "--generation-deterministic",
            # Signing in and enrolling with random secrets only meets the rate limit.
            "--exclude-path-regex",
            "auth/token|nodes/enroll",
            "--report",
            "junit",
            "--report-dir",
            str(tmp_path),
        ],
        env={
            **os.environ,
            "SCHEMATHESIS_HOOKS": "tests.trainhub.api.schemathesis_hooks",
            "PYTHONPATH": str(ROOT),
            "TRAINHUB_FUZZ_IDS": json.dumps(real_ids),
            "SCHEMATHESIS_TELEMETRY": "false",
            "NO_COLOR": "1",
        },
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=480,
        check=False,
    )
    (tmp_path / "schemathesis.out").write_text(done.stdout + done.stderr)
    cases = re.search(r"(\d+) generated", done.stdout)
    print(f"schemathesis: {cases.group(1) if cases else '?'} cases, exit {done.returncode}")
    assert done.returncode == 0, done.stdout[-8000:] + done.stderr[-2000:]
