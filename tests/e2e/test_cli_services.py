"""The `trainhub` client against services mode: a real job submitted, followed and listed."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from ..trainhub.cli.helpers import cli_env, trainhub
from .cluster import ADMIN, LiveCluster

pytestmark = [pytest.mark.services, pytest.mark.slow]

JOB = """\
name: cli-e2e
team: recsys
entrypoint: ps_runtime.examples.movielens:train
args: {epochs: 2}
parameter_servers: {replicas: 1, resources: {cpu: 0.5, memory_mb: 1024}}
workers: {min: 1, max: 1, resources: {cpu: 0.5, memory_mb: 1024}}
coordinator: {resources: {cpu: 0.5, memory_mb: 1024}}
"""


def test_cli_submits_follows_and_lists_a_real_job(
    live_cluster: LiveCluster, tmp_path: Path
) -> None:
    config = tmp_path / "cli.json"
    done = trainhub(
        config, "login", live_cluster.url, "-u", ADMIN[0], "--password-stdin", input=ADMIN[1]
    )
    assert done.returncode == 0, done.stderr
    spec = tmp_path / "job.yaml"
    spec.write_text(JOB)
    submitted = trainhub(config, "submit", str(spec), "--json")
    assert submitted.returncode == 0, submitted.stderr
    job_id = json.loads(submitted.stdout)["id"]

    follow = subprocess.run(
        [sys.executable, "-m", "trainhub.cli", "logs", "-f", str(job_id)],
        env=cli_env(config),
        capture_output=True,
        text=True,
        timeout=240,
        check=False,
    )
    assert follow.returncode == 0, follow.stderr
    assert "[coordinator-0]" in follow.stdout
    assert live_cluster.job(job_id)["state"] == "succeeded", live_cluster.logs(job_id)

    described = trainhub(config, "describe", str(job_id))
    assert "state:      succeeded" in described.stdout
    assert "starting" in described.stdout and "running" in described.stdout
    listed = trainhub(config, "jobs", "--state", "succeeded", "--json")
    assert job_id in [j["id"] for j in json.loads(listed.stdout)["results"]]
    nodes = trainhub(config, "nodes")
    assert nodes.returncode == 0 and " yes " in nodes.stdout
    quota = trainhub(config, "quota", "recsys")
    assert quota.returncode == 0 and quota.stdout.startswith("Team recsys")
