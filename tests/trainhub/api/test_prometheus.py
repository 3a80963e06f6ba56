"""`/metrics`: who may scrape it, and what it says (parsed with prometheus-client's own
parser), in one process; tests/trainhub/api/test_prometheus_scrape.py scrapes it with a
real Prometheus across processes."""

from __future__ import annotations

import json
import os
import re
from pathlib import Path
from typing import Any

import pytest
from django.test import Client, override_settings
from django.utils import timezone
from prometheus_client.parser import text_string_to_metric_families
from trainhub.agents.services import ingest_batch
from trainhub.jobs.models import Task
from trainhub.scheduling.reasons import kind_of
from trainhub.scheduling.services import run_cycle
from trainhub.standalone.processes import metrics_dir
from trainhub.tenancy.choices import Role

from ps_runtime.agent.protocol import parse_from_agent

from ..factories import make_job, make_node, make_team, make_user

TOKEN = "scrape-token-0123456789"
REPO = Path(__file__).resolve().parents[3]


def samples(text: str) -> dict[str, list[tuple[dict[str, str], float]]]:
    """Every sample of the exposition, by sample name (counters end in _total)."""
    found: dict[str, list[tuple[dict[str, str], float]]] = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            found.setdefault(s.name, []).append((dict(s.labels), s.value))
    return found


def value(
    found: dict[str, Any], name: str, *, missing: float | None = None, **labels: str
) -> float:
    matching = [v for lab, v in found.get(name, []) if labels.items() <= lab.items()]
    if not matching and missing is not None:
        return missing
    assert matching, f"{name}{labels} not in {sorted(found)}"
    return float(sum(matching))


@pytest.fixture
def cluster(db: Any) -> dict[str, Any]:
    alice = make_user("alice")
    make_team("recsys", members={alice: Role.MEMBER}, cpu=4, memory_mb=8192)
    node, _ = make_node(cpus=4, memory_mb=8192)
    running = make_job(alice)
    run_cycle(now=timezone.now())  # places the first job
    # 3 CPUs: fits the node, not beside the first job's 1.5.
    waiting = make_job(alice, workers={"min": 2, "max": 2, "resources": {"cpu": 1}})
    run_cycle(now=timezone.now())
    return {"node": node, "running": running, "waiting": waiting, "alice": alice}


@override_settings(METRICS_TOKEN=TOKEN)
def test_refused_without_the_token_and_to_members(cluster: dict[str, Any]) -> None:
    client = Client()
    anonymous = client.get("/metrics")
    assert anonymous.status_code == 401
    assert "TRAINHUB_METRICS_TOKEN" in anonymous.content.decode()
    assert anonymous["WWW-Authenticate"].startswith("Bearer")
    assert client.get("/metrics", HTTP_AUTHORIZATION="Bearer wrong-token").status_code == 401
    assert client.get("/metrics", HTTP_AUTHORIZATION=f"Token {TOKEN}").status_code == 401
    client.force_login(cluster["alice"])  # a team member, not a platform admin
    assert client.get("/metrics").status_code == 401


@override_settings(METRICS_TOKEN="")
def test_an_unset_token_lets_no_bearer_in(cluster: dict[str, Any]) -> None:
    assert Client().get("/metrics", HTTP_AUTHORIZATION="Bearer ").status_code == 401


def test_platform_admins_and_allowed_addresses_may_read(cluster: dict[str, Any]) -> None:
    client = Client()
    client.force_login(make_user("root", superuser=True))
    assert client.get("/metrics").status_code == 200
    with override_settings(METRICS_ALLOW=[__import__("ipaddress").ip_network("10.0.0.0/8")]):
        assert Client(REMOTE_ADDR="10.1.2.3").get("/metrics").status_code == 200
        assert Client(REMOTE_ADDR="192.168.0.9").get("/metrics").status_code == 401
        # A forged X-Forwarded-For does not pass with no trusted proxy in front.
        forged = Client(REMOTE_ADDR="192.168.0.9", HTTP_X_FORWARDED_FOR="10.1.2.3")
        assert forged.get("/metrics").status_code == 401


@override_settings(METRICS_TOKEN=TOKEN)
def test_what_it_says_of_jobs_nodes_cycles_and_ingest(
    cluster: dict[str, Any], django_capture_on_commit_callbacks: Any
) -> None:
    client = Client(HTTP_AUTHORIZATION=f"Bearer {TOKEN}")
    before = samples(client.get("/metrics").content.decode())
    task = Task.objects.filter(job=cluster["running"], role="worker").first()
    assert task is not None
    key = {"id": task.pk, "attempt": task.attempt}
    now = timezone.now().isoformat()
    messages = [
        parse_from_agent(
            {
                "type": "metrics",
                **key,
                "points": [{"step": s, "time": now, "values": {"loss": 1.0}} for s in range(5)],
            }
        ),
        parse_from_agent({"type": "logs", **key, "stream": "stdout", "lines": ["a", "b"]}),
    ]
    # Ingest counts what its transaction committed (on commit; the test's transaction stays).
    with django_capture_on_commit_callbacks(execute=True):
        ingest_batch(node_id=cluster["node"].pk, messages=messages, now=timezone.now())  # type: ignore[arg-type]

    response = client.get("/metrics")
    assert response.status_code == 200
    assert response["Content-Type"].startswith("text/plain; version=0.0.4")
    found = samples(response.content.decode())
    assert value(found, "trainhub_jobs", state="starting", team="recsys") == 1
    assert value(found, "trainhub_jobs", state="pending", team="recsys") == 1
    reason = cluster["waiting"].__class__.objects.get(pk=cluster["waiting"].pk).pending_reason
    assert kind_of(reason) != "other", reason
    assert value(found, "trainhub_jobs_pending", team="recsys", reason=kind_of(reason)) == 1
    assert value(found, "trainhub_queue_length") == 1
    assert value(found, "trainhub_nodes", state="active") == 1
    age = value(found, "trainhub_node_heartbeat_age_seconds", node=f"node-1#{cluster['node'].pk}")
    assert 0 <= age < 60
    assert value(found, "trainhub_scheduling_last_cycle_age_seconds") >= 0
    assert value(found, "trainhub_scheduling_cycle_seconds_count") >= 2
    for kind, n in (("metric_points", 5), ("log_lines", 2)):
        grown = value(found, "trainhub_ingested_total", kind=kind) - value(
            before, "trainhub_ingested_total", kind=kind, missing=0
        )
        assert grown == n


def test_each_policy_reason_has_a_kind() -> None:
    for reason in (
        "team quota exhausted: cpu 0/2; no idle quota to borrow (cpu 0)",
        "no node has 4 free CPUs",
        "waiting behind job 3 (first in, first out)",
        "capacity reclaimed for it: waiting for 2 task(s) of other jobs to stop",
        "not enough free cpu in the cluster: needs 8, 2 free",
        "waiting for the scheduler",
    ):
        assert kind_of(reason) != "other", reason
    assert kind_of("something new") == "other"


@override_settings(METRICS_TOKEN=TOKEN)
def test_the_grafana_dashboard_reads_only_metrics_that_exist(cluster: dict[str, Any]) -> None:
    text = Client(HTTP_AUTHORIZATION=f"Bearer {TOKEN}").get("/metrics").content.decode()
    exposed = set()
    for family in text_string_to_metric_families(text):
        exposed |= {family.name + suffix for suffix in ("", "_total", "_bucket", "_count", "_sum")}
    dashboard = json.loads((REPO / "deploy" / "grafana" / "trainhub.json").read_text())
    exprs = [t["expr"] for panel in dashboard["panels"] for t in panel["targets"]]
    used = {name for expr in exprs for name in re.findall(r"\btrainhub_\w+", expr)}
    assert len(used) >= 12
    assert used <= exposed, used - exposed


def test_the_shared_directory_starts_clean(tmp_path: Path, monkeypatch: Any) -> None:
    monkeypatch.delenv("PROMETHEUS_MULTIPROC_DIR", raising=False)
    for name in ("counter_10.db", "histogram_11.db", "gauge_livesum_12.db"):
        (tmp_path / name).write_bytes(b"x")
    metrics_dir(tmp_path, fresh=False)  # web restarting: its own live gauges go
    assert sorted(p.name for p in tmp_path.iterdir()) == ["counter_10.db", "histogram_11.db"]
    assert os.environ["PROMETHEUS_MULTIPROC_DIR"] == str(tmp_path)
    metrics_dir(tmp_path, fresh=True)  # a cluster starting: nothing earlier counts
    assert not list(tmp_path.iterdir())
    made = metrics_dir(None, fresh=True)
    assert made.is_dir() and os.environ["PROMETHEUS_MULTIPROC_DIR"] == str(made)
    made.rmdir()
