"""One fault per case, mid-training, on a real services-mode cluster (`make faults`).

The suite plays systemd for the platform's own processes: what it kills it starts again
a second later, with the same command. Everything else must recover by itself. A task
killed from outside is labelled `killed` (the fault suite's cause (c), beside
test_causes.py) while the job runs on after it."""

from __future__ import annotations

import os
import shutil
import signal
import time
from collections.abc import Callable
from datetime import UTC, datetime

import httpx
import pytest

from tests.e2e.cluster import LiveCluster, free_port, sandbox_base, task_pid, task_port_range
from tests.e2e.test_standalone import left_behind, standalone

from .conftest import FaultCluster
from .harness import (
    RESULTS,
    RMSE_TOLERANCE,
    check_resumed,
    final_rmse,
    movielens,
    restart_count,
    run_case,
    trained_on,
    wait_epoch_after,
    wait_epochs,
)
from .labels import record_labelled, wait_labelled

pytestmark = [pytest.mark.faults, pytest.mark.slow]

RESTART_AFTER_S = 1.0


def _kill_task(cluster: LiveCluster, role: str) -> Callable[[int], None]:
    def inject(job_id: int) -> None:
        pid = task_pid(job_id, role, checkpoint_root=cluster.base / "checkpoints")
        assert pid is not None, f"no live {role} of job {job_id}"
        os.kill(pid, signal.SIGKILL)

    return inject


# A worker is relaunched alone (the coordinator re-runs its closures); a lost PS or
# coordinator restarts the job, which resumes from its last checkpoint. A killed PS is
# `killed` when its own end restarts the job, `ps_lost` when the coordinator's (exit 75:
# it lost the PS) reaches the platform first.
@pytest.mark.parametrize(
    ("role", "resumed", "causes"),
    [
        ("worker", False, ("killed",)),
        ("ps", True, ("killed", "ps_lost")),
        ("coordinator", True, ("killed",)),
    ],
)
def test_a_killed_task(
    faults: FaultCluster, web: httpx.Client, role: str, resumed: bool, causes: tuple[str, ...]
) -> None:
    cluster, t0 = faults.cluster, time.monotonic()
    row = run_case(
        cluster,
        f"kill -9 {role}",
        faults.clean_rmse,
        _kill_task(cluster, role),
        restarts=1,
        resumed=resumed,
        labelled=lambda job_id: wait_labelled(cluster, web, job_id, causes),
    )
    job = cluster.job(row["job_id"])
    cause = "/".join(causes)
    record_labelled(f"kill -9 {role}", cause, job, resumed_at=row["resumed_at"], since=t0)


@pytest.mark.parametrize("process", ["agent", "worker", "beat", "web"])
def test_a_killed_platform_process(faults: FaultCluster, process: str) -> None:
    group = faults.cluster.group

    def inject(_: int) -> None:
        proc = group.procs[process]
        command = [str(a) for a in proc.args]  # type: ignore[union-attr]
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
        time.sleep(RESTART_AFTER_S)
        group.start(process, command)

    label = "celery worker" if process == "worker" else process
    run_case(
        faults.cluster, f"kill -9 {label}", faults.clean_rmse, inject, restarts=0, resumed=False
    )


def test_redis_restarted(faults: FaultCluster) -> None:
    def inject(_: int) -> None:
        faults.redis.stop()
        time.sleep(RESTART_AFTER_S)
        faults.redis.start()

    run_case(faults.cluster, "restart Redis", faults.clean_rmse, inject, restarts=0, resumed=False)


def test_postgres_stopped_for_15_s(faults: FaultCluster) -> None:
    def inject(_: int) -> None:
        faults.postgres.stop()
        time.sleep(15)
        faults.postgres.start()

    run_case(
        faults.cluster, "stop PostgreSQL 15 s", faults.clean_rmse, inject, restarts=0, resumed=False
    )


def test_standalone_stopped_and_started(faults: FaultCluster) -> None:
    """Ctrl-C mid-job: the job checkpoints and is requeued; started again, it resumes and
    ends as the clean run did, and nothing of the first run is left."""
    port, ports = free_port(), task_port_range()
    base = sandbox_base("trainhub-fault-standalone-")  # its task uids traverse to their dirs
    data_dir = base / "var"
    spec = {**movielens("fault-standalone", team="default")}
    with standalone(data_dir, port, ports) as first:
        job_id = first.submit(spec)
        wait_epochs(first.api, job_id, 3)
        t0, fault_at = time.monotonic(), datetime.now(UTC)
        assert first.stop() == 0, first.output
    assert left_behind(data_dir, [job_id]) == []
    with standalone(data_dir, port, ports) as second:
        recovery = wait_epoch_after(second.api, job_id, fault_at) - t0
        done = second.wait_state(job_id, {"succeeded", "failed", "cancelled"})
        assert done["state"] == "succeeded", second.api.get(f"/jobs/{job_id}/logs/").text
        rmse = final_rmse(second.api, job_id)
        assert abs(rmse - faults.clean_rmse) <= RMSE_TOLERANCE, (rmse, faults.clean_rmse)
        trained_on(second.api, job_id, fault_at)
        restarts = restart_count(second.api, job_id)
        assert restarts == 0, restarts  # requeued, not restarted
        step = check_resumed(second.api, job_id, resumed=True)
        assert second.stop() == 0
    assert left_behind(data_dir, [job_id]) == []
    shutil.rmtree(base, ignore_errors=True)
    RESULTS.append(
        {
            "case": "stop/start standalone",
            "recovery_s": round(recovery, 1),
            "rmse": round(rmse, 4),
            "clean_rmse": round(faults.clean_rmse, 4),
            "restarts": restarts,
            "resumed_at": step,
            "dead_running_s": 0.0,
        }
    )
