"""Tasks outlive their agent: kill -9 the agent mid-job, start it again, stop it cleanly
(SIGTERM) and start it again, and the job goes on with the same task attempts, no metric
point and no log line lost or repeated (services mode, real processes)."""

from __future__ import annotations

import itertools
import time
from collections import Counter
from pathlib import Path

import pytest
from trainhub.standalone.processes import agent_command

from .cluster import LiveCluster, task_pid, with_env
from .test_recovery import _wait_metric
from .test_services_mode import movielens_spec

pytestmark = [pytest.mark.services, pytest.mark.slow]

EPOCHS = 30
KEEP_DIRS = {"TRAINHUB_TASK_KEEP_DIRS": "1"}


def _file_lines(task_dir: Path) -> list[str]:
    lines: list[str] = []
    for name in ("stdout.log", "stderr.log"):
        path = task_dir / name
        if path.exists():
            lines += path.read_text(errors="replace").splitlines()
    return lines


def test_killed_agent_restarts_and_the_job_loses_nothing(live_cluster: LiveCluster) -> None:
    job = live_cluster.submit(**movielens_spec("agent-restart", {"epochs": EPOCHS}))
    job_id = job["id"]
    _wait_metric(live_cluster, job_id, "test_rmse", 2)
    before = {t["id"]: t["attempt"] for t in live_cluster.job(job_id)["tasks"]}
    pids = {role: task_pid(job_id, role) for role in ("coordinator", "ps", "worker")}

    state = live_cluster.data_dir / "agent.json"
    work = live_cluster.base / "agent"
    agent = live_cluster.group.procs["agent"]
    agent.kill()  # SIGKILL: no chance to do anything about its tasks
    agent.wait()
    try:
        time.sleep(3)  # the tasks keep training and writing while no agent is there
        alive = {role: task_pid(job_id, role) for role in pids}
        assert alive == pids, "a task died with the agent"
        # Started again as a node's agent runs (leaving its tasks when stopped), then
        # stopped cleanly as `systemctl restart` or an upgrade would: SIGTERM.
        agent = live_cluster.group.start(
            "agent", agent_command(state, work, stop_tasks_on_exit=False)
        )
        points = len(live_cluster.api.get(f"/jobs/{job_id}/metrics/").json()["series"]["epoch"])
        _wait_metric(live_cluster, job_id, "epoch", points + 1)  # the new agent streams
        agent.terminate()
        assert agent.wait(timeout=20) == 0
        time.sleep(2)
        alive = {role: task_pid(job_id, role) for role in pids}
        assert alive == pids, "a task died when its agent was stopped cleanly"
    finally:  # restarted whatever happens: the cluster's teardown stops tasks through it
        # Keeping the directories of ended tasks, whose files this test compares with
        # what reached the server (an agent removes them once delivered).
        live_cluster.group.start("agent", with_env(agent_command(state, work), KEEP_DIRS))

    done = live_cluster.wait_state(job_id, {"succeeded", "failed"}, timeout=300)
    assert done["state"] == "succeeded", live_cluster.logs(job_id)
    assert {t["id"]: t["attempt"] for t in done["tasks"]} == before  # nothing restarted
    events = live_cluster.api.get(f"/jobs/{job_id}/events/").json()
    assert not [e for e in events if e["kind"] == "restart"]

    series = live_cluster.api.get(f"/jobs/{job_id}/metrics/").json()["series"]
    epochs = [p["value"] for p in series["epoch"]]
    assert epochs == list(range(1, EPOCHS + 1)), epochs
    steps = [p["step"] for p in series["train_loss"]]
    assert len(steps) == len(set(steps)) and steps == sorted(steps)
    gaps = {b - a for a, b in itertools.pairwise(steps)}
    assert len(gaps) == 1, f"train_loss steps have a gap: {steps}"

    # Every line each task wrote reached the server exactly once (the PS and worker are
    # stopped after the job succeeded: their last lines may still be on their way).
    for task in done["tasks"]:
        source = f"{task['role']}-{task['index']}"
        task_dir = work / "tasks" / f"{task['id']}-{task['attempt']}"
        deadline = time.monotonic() + 20
        while True:
            stored = live_cluster.api.get(
                f"/jobs/{job_id}/logs/", params={"source": source, "tail": 10000}
            ).json()["lines"]
            written = _file_lines(task_dir)
            got, want = Counter(line["line"] for line in stored), Counter(written)
            if (got == want and want) or time.monotonic() > deadline:
                break
            time.sleep(0.5)
        assert written, f"{source} wrote nothing to {task_dir}"
        assert got == want, source
    # The agent as every other test has it (removing the directories of ended tasks).
    agent = live_cluster.group.procs["agent"]
    agent.terminate()
    assert agent.wait(timeout=30) == 0
    live_cluster.group.start("agent", agent_command(state, work))
