"""A job's own code against the node, through the whole platform (issue 26): the job is
submitted with a code archive, placed by the scheduler and started by the real agent
daemon (root, services mode). Its coordinator looks for the node's credential and the
agent's files, and plants links to a root-only file wherever it can write; then the job
is scaled, its agent is killed and started again (which adopts the task and reopens its
files), and the job is cancelled. The root-only file is never touched and the credential
never shows up in the job's logs."""

from __future__ import annotations

import io
import json
import time
from pathlib import Path
from typing import Any

import pytest
from trainhub.standalone.processes import agent_command

from ..archive_builders import tar_gz
from .cluster import LiveCluster

pytestmark = [pytest.mark.services, pytest.mark.slow]

SMALL = {"cpu": 0.25, "memory_mb": 512}
ATTACK = b"""
import json, os, time
from pathlib import Path

def _can(action):
    try:
        action()
        return True
    except OSError:
        return False

def _listing(path):
    try:
        return sorted(os.listdir(path))
    except OSError:
        return None

def train(credential, agent_dir, target, checkpoint_root, seconds=600):
    found = {
        "read_credential": _can(lambda: Path(credential).read_bytes()),
        "list_credential_dir": _can(lambda: os.listdir(Path(credential).parent)),
        "agent_dir": _listing(agent_dir),
        "read_task_table": _can(lambda: Path(agent_dir, "tasks.json").read_bytes()),
        "checkpoint_root": _listing(checkpoint_root),
        "pids": sorted(int(p) for p in os.listdir("/proc") if p.isdigit()),
        "uid": os.getuid(),
        "env": sorted(os.environ),
    }
    cluster = os.environ["TRAINHUB_CLUSTER_FILE"]
    places = {os.getcwd(), os.environ["HOME"], os.environ["TRAINHUB_CHECKPOINT_DIR"],
              os.path.dirname(cluster), os.path.dirname(os.path.dirname(cluster))}
    names = ("stdout.log", "stderr.log", "metrics.jsonl", "exit-status", "exit-status.tmp",
             "stop-requested", "cluster.json", ".cluster.json.tmp", "code", "tls-key.pem")
    planted = []
    for place in places:
        for name in names:
            path = os.path.join(place, name)
            try:
                if os.path.lexists(path):
                    os.rename(path, path + ".moved")
                os.symlink(target, path)
                planted.append(path)
            except OSError:
                pass
    found["planted"] = planted
    print("ATTACK " + json.dumps(found), flush=True)
    deadline = time.time() + seconds
    while time.time() < deadline:
        time.sleep(0.2)
    return {"done": True}
"""


def _attack_report(cluster: LiveCluster, job_id: int, timeout: float = 120) -> dict[str, Any]:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for line in cluster.api.get(f"/jobs/{job_id}/logs/").json()["lines"]:
            if line["line"].startswith("ATTACK "):
                return dict(json.loads(line["line"][len("ATTACK ") :]))
        time.sleep(0.5)
    raise AssertionError(f"no attack report:\n{cluster.logs(job_id)}")


def test_a_jobs_code_cannot_reach_the_node_through_the_platform(
    live_cluster: LiveCluster,
) -> None:
    credential = live_cluster.data_dir / "agent.json"  # the real one, as enroll wrote it
    secret = json.loads(credential.read_text())["credential"]
    agent_dir = live_cluster.base / "agent"
    target = live_cluster.base / "root-only"
    target.write_text("root's crontab\n")
    target.chmod(0o600)
    upload = live_cluster.api.post(
        "/code/", files={"file": ("src.tar.gz", io.BytesIO(tar_gz({"attack.py": ATTACK})))}
    )
    assert upload.status_code == 201, upload.text
    job = live_cluster.submit(
        name="attack",
        team="recsys",
        entrypoint="attack:train",
        args={
            "credential": str(credential),
            "agent_dir": str(agent_dir),
            "target": str(target),
            "checkpoint_root": str(live_cluster.base / "checkpoints"),
        },
        code=upload.json()["digest"],
        parameter_servers={"replicas": 1, "resources": SMALL},
        workers={"min": 1, "max": 2, "resources": SMALL},
        coordinator={"resources": SMALL},
        max_restarts=0,
    )
    job_id = job["id"]
    report = _attack_report(live_cluster, job_id)
    assert report["read_credential"] is False, report
    assert report["list_credential_dir"] is False
    # Of the agent's directory and the checkpoint root the sandbox holds only the mount
    # points of the task's own run/ directory and checkpoint directory (when they lie
    # below them on the node): no table, no lease, no other task or job.
    assert report["agent_dir"] in (None, ["tasks"]), report
    assert report["read_task_table"] is False
    assert report["checkpoint_root"] in (None, [f"job-{job_id}"]), report
    assert report["uid"] != 0 and len(report["pids"]) <= 4, report
    assert not {"DATABASE_URL", "REDIS_URL", "TRAINHUB_SECRET_KEY"} & set(report["env"])

    # A scale rewrites the coordinator's cluster file.
    assert live_cluster.api.post(f"/jobs/{job_id}/scale/", json={"workers": 2}).is_success
    deadline = time.monotonic() + 60
    while (
        len(
            [
                t
                for t in live_cluster.job(job_id)["tasks"]
                if t["role"] == "worker" and t["state"] == "running"
            ]
        )
        < 2
    ):
        assert time.monotonic() < deadline, live_cluster.job(job_id)
        time.sleep(0.5)
    # An agent restart: the new agent adopts the tasks and reopens their files by path.
    state = live_cluster.data_dir / "agent.json"
    agent = live_cluster.group.procs["agent"]
    agent.kill()
    agent.wait()
    live_cluster.group.start("agent", agent_command(state, agent_dir))
    time.sleep(3)
    # A stop: the agent records it in the task's directory.
    assert live_cluster.api.post(f"/jobs/{job_id}/cancel/").status_code == 200
    live_cluster.wait_state(job_id, {"cancelled"}, timeout=60)
    deadline = time.monotonic() + 30
    while any(t["state"] in ("running", "starting") for t in live_cluster.job(job_id)["tasks"]):
        assert time.monotonic() < deadline, live_cluster.job(job_id)
        time.sleep(0.5)

    assert target.read_text() == "root's crontab\n"
    st = target.stat()
    assert (st.st_uid, st.st_mode & 0o777) == (0, 0o600)
    logs = live_cluster.logs(job_id) + json.dumps(
        live_cluster.api.get(f"/jobs/{job_id}/logs/").json()
    )
    assert secret not in logs and "root's crontab" not in logs
    for path in report["planted"]:  # whatever it planted stayed in its own sandbox
        assert not Path(path).is_symlink() or Path(path).is_relative_to(
            live_cluster.base / "checkpoints"
        ), path
