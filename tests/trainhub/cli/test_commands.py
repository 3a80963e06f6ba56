"""Every client command of `trainhub`, run as a process against a live server."""

from __future__ import annotations

import json
import stat
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from django.core.cache import cache
from django.utils import timezone
from trainhub.agents.services import handle_message
from trainhub.jobs.choices import TaskRole
from trainhub.jobs.models import Job
from trainhub.jobs.services import Placement, place_job, set_pending_reasons
from trainhub.tenancy.choices import Role

from ..factories import make_node, make_team, make_user
from .helpers import cli_env, login, trainhub

pytestmark = pytest.mark.django_db(transaction=True)

JOB_YAML = """\
name: movielens-mf
team: recsys
priority: normal
entrypoint: ps_runtime.examples.movielens:train
args: {epochs: 1}
parameter_servers: {replicas: 1, resources: {cpu: 0.5, memory_mb: 512}}
workers: {min: 1, max: 3, resources: {cpu: 0.5, memory_mb: 512}}
coordinator: {resources: {cpu: 0.5, memory_mb: 512}}
"""


@pytest.fixture
def user(live_server: Any, tmp_path: Path) -> dict[str, Any]:
    cache.clear()
    alice = make_user("alice")
    make_team("recsys", members={alice: Role.MEMBER}, cpu=4, memory_mb=8192, gpu=0)
    node, _ = make_node("gpu-box-1", cpus=8, memory_mb=32768, gpus=2)
    config = tmp_path / "cli.json"
    login(config, live_server.url, "alice", "pw-alice")
    spec = tmp_path / "job.yaml"
    spec.write_text(JOB_YAML)
    return {"config": config, "spec": spec, "node": node, "url": live_server.url}


def _submit(user: dict[str, Any]) -> int:
    done = trainhub(user["config"], "submit", str(user["spec"]), "--json")
    assert done.returncode == 0, done.stderr
    return int(json.loads(done.stdout)["id"])


def test_login_stores_the_token_privately_and_errors_exit_non_zero(
    user: dict[str, Any], tmp_path: Path
) -> None:
    config = user["config"]
    assert stat.S_IMODE(config.stat().st_mode) == 0o600
    assert json.loads(config.read_text())["username"] == "alice"

    other = tmp_path / "other.json"
    bad = trainhub(other, "login", user["url"], "-u", "alice", "--password-stdin", input="nope")
    assert bad.returncode == 1 and "400" in bad.stderr and not other.exists()
    missing = trainhub(other, "jobs")
    assert missing.returncode == 3 and "trainhub login" in missing.stderr
    gone = trainhub(other, "login", "http://127.0.0.1:9", "-u", "a", "--password-stdin", input="x")
    assert gone.returncode == 4 and "cannot reach" in gone.stderr
    usage = trainhub(config, "scale", "abc", "2")
    assert usage.returncode == 2

    # A script can store an existing token instead of a password.
    token = json.loads(config.read_text())["token"]
    by_token = trainhub(other, "login", user["url"], "--token", token)
    assert by_token.returncode == 0 and "as alice" in by_token.stdout
    assert trainhub(other, "jobs").returncode == 0
    revoked = trainhub(other, "login", user["url"], "--token", "not-a-token")
    assert revoked.returncode == 3


def test_submit_jobs_describe_scale_cancel(user: dict[str, Any]) -> None:
    config = user["config"]
    submitted = trainhub(config, "submit", str(user["spec"]))
    assert submitted.returncode == 0, submitted.stderr
    assert "submitted job" in submitted.stdout and "pending" in submitted.stdout
    job_id = Job.objects.get().pk
    assert f"{user['url']}/jobs/{job_id}/" in submitted.stdout  # the job's page

    table = trainhub(config, "jobs", "--team", "recsys", "--state", "pending")
    assert table.returncode == 0
    header, row = table.stdout.splitlines()[:2]
    assert header.split()[:5] == ["ID", "NAME", "TEAM", "PRIORITY", "STATE"]
    assert row.split()[:5] == [str(job_id), "movielens-mf", "recsys", "normal", "pending"]
    none = trainhub(config, "jobs", "--state", "running", "--json")
    assert json.loads(none.stdout)["count"] == 0

    # What the scheduler writes when the job cannot start.
    set_pending_reasons({job_id: "team quota exhausted: gpu 8/8"})
    described = trainhub(config, "describe", str(job_id))
    assert described.returncode == 0, described.stderr
    assert "pending:    team quota exhausted: gpu 8/8" in described.stdout
    assert "submitted" in described.stdout  # the events

    scaled = trainhub(config, "scale", str(job_id), "3")
    assert scaled.returncode == 0, scaled.stderr
    assert "3 workers requested" in scaled.stdout
    too_many = trainhub(config, "scale", str(job_id), "4")
    assert too_many.returncode == 1 and "between 1 and 3" in too_many.stderr

    cancelled = trainhub(config, "cancel", str(job_id))
    assert cancelled.returncode == 0 and "cancelled" in cancelled.stdout
    again = trainhub(config, "cancel", str(job_id))
    assert again.returncode == 1 and "409" in again.stderr
    unknown = trainhub(config, "describe", "999999")
    assert unknown.returncode == 1 and "404" in unknown.stderr

    bad_spec = user["spec"].with_name("bad.yaml")
    bad_spec.write_text("name: x\nteam: recsys\nentrypoint: nope\nbogus: 1\n")
    refused = trainhub(config, "submit", str(bad_spec))
    assert refused.returncode == 1
    assert "bogus: Unknown field 'bogus'" in refused.stderr


def test_submit_dry_run_answers_and_creates_nothing(user: dict[str, Any]) -> None:
    from trainhub.tenancy.models import Quota

    config, spec = user["config"], str(user["spec"])
    # 4 CPUs and no borrowing: the spec's 1.5 CPUs fit; 5.5 never can.
    Quota.objects.filter(team__slug="recsys").update(borrowing_limit_cpu=0)
    fits = trainhub(config, "submit", spec, "--dry-run")
    assert fits.returncode == 0, fits.stderr
    assert "would start now (queue position 1)" in fits.stdout
    assert "nothing was submitted" in fits.stdout
    assert not Job.objects.exists()
    answer = json.loads(trainhub(config, "submit", spec, "--dry-run", "--json").stdout)
    assert answer["fits_now"] is True and answer["position"] == 1

    _submit(user)  # pending: no cycle has run, so the dry run queues behind it
    behind = trainhub(config, "submit", spec, "--dry-run")
    assert behind.returncode == 0, behind.stderr
    assert "queue position 2" in behind.stdout
    assert Job.objects.count() == 1

    huge = user["spec"].with_name("huge.yaml")
    huge.write_text(
        JOB_YAML.replace("workers: {min: 1", "workers: {min: 9").replace("max: 3", "max: 9")
    )
    refused = trainhub(config, "submit", str(huge), "--dry-run")
    assert refused.returncode == 1 and "team:" in refused.stderr
    assert Job.objects.count() == 1


def test_logs_follow_prints_until_the_job_ends(user: dict[str, Any]) -> None:
    job_id = _submit(user)
    node = user["node"]
    place_job(
        job=Job.objects.get(pk=job_id),
        now=timezone.now(),
        placements=[
            Placement(TaskRole.COORDINATOR, 0, node.pk, None, 0.5, 512),
            Placement(TaskRole.PS, 0, node.pk, 41000, 0.5, 512),
            Placement(TaskRole.WORKER, 0, node.pk, 41001, 0.5, 512),
        ],
    )
    coordinator = Job.objects.get(pk=job_id).tasks.get(role=TaskRole.COORDINATOR)

    def agent_says(message: dict[str, Any]) -> None:
        base = {"id": coordinator.pk, "attempt": 1}
        handle_message(node_id=node.pk, message={**base, **message}, now=timezone.now())

    agent_says({"type": "logs", "stream": "stdout", "lines": ["epoch 1 loss 0.9"]})
    follower = subprocess.Popen(
        [sys.executable, "-m", "trainhub.cli", "logs", "-f", str(job_id), "--interval", "0.2"],
        env=cli_env(user["config"]),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        time.sleep(1.5)
        assert follower.poll() is None, "logs -f must keep following a running job"
        agent_says({"type": "logs", "stream": "stdout", "lines": ["epoch 2 loss 0.7"]})
        time.sleep(0.5)
        agent_says({"type": "task_status", "state": "succeeded", "exit_code": 0, "message": ""})
        out, err = follower.communicate(timeout=20)
    finally:
        if follower.poll() is None:
            follower.kill()
    assert follower.returncode == 0, err
    assert out.splitlines() == [
        "[coordinator-0] epoch 1 loss 0.9",
        "[coordinator-0] epoch 2 loss 0.7",
    ]
    plain = trainhub(user["config"], "logs", str(job_id))
    assert plain.returncode == 0 and plain.stdout == out


def test_describe_says_why_a_job_failed_and_what_to_do(user: dict[str, Any]) -> None:
    job_id = _submit(user)
    node = user["node"]
    place_job(
        job=Job.objects.get(pk=job_id),
        now=timezone.now(),
        placements=[
            Placement(TaskRole.COORDINATOR, 0, node.pk, None, 0.5, 512),
            Placement(TaskRole.PS, 0, node.pk, 41000, 0.5, 512),
            Placement(TaskRole.WORKER, 0, node.pk, 41001, 0.5, 512),
        ],
    )
    coordinator = Job.objects.get(pk=job_id).tasks.get(role=TaskRole.COORDINATOR)
    key = {"id": coordinator.pk, "attempt": 1}
    traceback = [
        "Traceback (most recent call last):",
        '  File "/srv/task/code/train.py", line 12, in main',
        "ModuleNotFoundError: No module named 'foo'",
    ]
    for message in (
        {"type": "task_status", "state": "running", "exit_code": None, "message": ""},
        {"type": "logs", "stream": "stderr", "lines": traceback},
        {"type": "task_status", "state": "failed", "exit_code": 1, "message": ""},
    ):
        handle_message(node_id=node.pk, message={**key, **message}, now=timezone.now())
    described = trainhub(user["config"], "describe", str(job_id))
    assert described.returncode == 0, described.stderr
    hint = "ModuleNotFoundError: No module named 'foo' at train.py:12 — add foo to "
    lines = described.stdout.splitlines()
    assert "  cause:      user_exception" in lines
    assert f"  hint:       {hint}environment.requirements" in lines
    assert f"  coordinator-0 ended: user_exception — {hint}environment.requirements" in lines
    # A first exception restarts the job (from max_restarts), a second one like it would not.
    assert (
        "  restarts:   1 of 3 after the job's own errors, 0 of 10 after node_lost, preempted, "
        "transient_network, ps_lost, stalled"
    ) in lines
    header = next(line for line in lines if line.startswith("ROLE"))
    assert header.split()[-1] == "CAUSE"


def test_nodes(user: dict[str, Any]) -> None:
    table = trainhub(user["config"], "nodes")
    assert table.returncode == 0, table.stderr
    header, row = table.stdout.splitlines()
    assert header.split()[:3] == ["ID", "HOSTNAME", "STATUS"]
    assert row.split()[1:4] == ["gpu-box-1", "ready", "yes"]  # the web's word for it
    data = json.loads(trainhub(user["config"], "nodes", "--json").stdout)
    assert [len(n["gpus"]) for n in data["results"]] == [2]
