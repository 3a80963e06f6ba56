"""Node credentials end to end (issue 13, Done 5): the agent renews its credential while a
MovieLens job trains and the job loses nothing; a revoked node is refused and gets no
new work (services mode, real processes, a credential lifetime of seconds)."""

from __future__ import annotations

import stat
import time
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path
from typing import Any

import httpx
import pytest

from ps_runtime.agent.protocol import DESIRED_TASKS_PATH, api_url
from ps_runtime.agent.state import load_state

from ..conftest import require_services
from .cluster import LiveCluster, fresh_database, movielens_file, services_cluster
from .test_services_mode import movielens_spec

pytestmark = [pytest.mark.services, pytest.mark.slow]

LIFETIME_SECONDS = 9  # renewed every 6 s
# Long enough that two renewals (at most about 12 s after the job starts running) fall
# inside the training: each task may use half a core, so an epoch takes about 1 s here
# (0.25 s at the very least), 100 epochs about 100 s; 300 took 562 s in a loaded CI run,
# past the test's 600 s limit.
EPOCHS = 100


@pytest.fixture(scope="module")
def short_lived(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveCluster]:
    """A TrainHub of its own whose node credentials last `LIFETIME_SECONDS`."""
    database_url, redis_url = require_services()
    tmp = tmp_path_factory.mktemp("credential-cluster")
    own_redis = redis_url.rsplit("/", 1)[0] + "/11"  # 12-14 belong to other modules
    with pytest.MonkeyPatch.context() as patch:
        # Read by the web process (enrollment, renewal) through the inherited environment.
        patch.setenv("TRAINHUB_NODE_CREDENTIAL_DAYS", str(LIFETIME_SECONDS / 86400))
        with fresh_database(database_url) as db_url, services_cluster(db_url, own_redis, tmp) as c:
            yield c


def _node(cluster: LiveCluster) -> dict[str, Any]:
    [node] = cluster.api.get("/nodes/").json()["results"]
    return dict(node)


def _expiry(cluster: LiveCluster) -> datetime:
    return datetime.fromisoformat(_node(cluster)["credential_expires_at"])


def test_renewal_during_a_job_loses_nothing_and_a_revoked_node_is_refused(
    short_lived: LiveCluster, tmp_path: Path
) -> None:
    cluster = short_lived
    state_file = cluster.data_dir / "agent.json"
    enrolled = load_state(state_file)
    job = cluster.submit(
        **movielens_spec("renewal", {"data": str(movielens_file(tmp_path)), "epochs": EPOCHS})
    )
    cluster.wait_state(job["id"], {"running"}, timeout=120)

    # Two renewals while the job trains: the server's expiry moves on, the state file
    # holds the new credential (0600) and the agent stays connected.
    seen = {_expiry(cluster)}
    deadline = time.monotonic() + 4 * LIFETIME_SECONDS
    while len(seen) < 3:
        assert time.monotonic() < deadline, f"the agent renewed only {len(seen) - 1} times"
        assert cluster.job(job["id"])["state"] == "running", "the job ended before renewals"
        time.sleep(0.5)
        seen.add(_expiry(cluster))
    renewed = load_state(state_file)
    assert renewed.credential != enrolled.credential
    assert stat.S_IMODE(state_file.stat().st_mode) == 0o600
    assert "agent" not in cluster.group.exited()

    done = cluster.wait_state(job["id"], {"succeeded", "failed", "cancelled"}, timeout=480)
    assert done["state"] == "succeeded", cluster.logs(job["id"])
    assert {t["attempt"] for t in done["tasks"]} == {1}  # no task restarted
    events = cluster.api.get(f"/jobs/{job['id']}/events/").json()
    assert [e["to_state"] for e in events if e["kind"] == "state"] == [
        "starting",
        "running",
        "succeeded",
    ]
    series = cluster.api.get(f"/jobs/{job['id']}/metrics/").json()["series"]
    steps = [p["step"] for p in series["test_rmse"]]
    assert steps == sorted(set(steps)) and len(steps) == EPOCHS  # no gap, no repeat

    # Revoked: the agent is disconnected (4401) and exits, its REST calls get 401, and
    # the node counts as lost, so a new job waits.
    node_id = _node(cluster)["id"]
    answer = cluster.api.post(f"/nodes/{node_id}/revoke-credential/")
    assert answer.status_code == 200, answer.text
    assert answer.json()["alive"] is False
    deadline = time.monotonic() + 15
    while "agent" not in cluster.group.exited():
        assert time.monotonic() < deadline, "the agent kept running with a revoked credential"
        time.sleep(0.2)
    assert cluster.group.exited()["agent"] == 1
    log = (cluster.data_dir / "logs" / "agent.log").read_text(errors="replace")
    assert "revoked" in log and "trainhub-agent enroll" in log
    current = load_state(state_file).credential
    refused = httpx.get(
        api_url(cluster.url, DESIRED_TASKS_PATH), headers={"Authorization": f"Node {current}"}
    )
    assert refused.status_code == 401
    waiting = cluster.submit(**movielens_spec("after-revoke", {"epochs": 1}))
    time.sleep(3)
    pending = cluster.job(waiting["id"])
    assert pending["state"] == "pending" and pending["tasks"] == []
