"""`/metrics`: operator metrics in Prometheus' text format.

Two sources, one answer: what the processes counted as things happened
(`trainhub.opmetrics`, summed over every process that shares `PROMETHEUS_MULTIPROC_DIR`),
and what the database says now (jobs by state and team, pending jobs by reason, nodes by
state, each node's heartbeat age, when the last scheduling cycle ran), read at scrape
time by `DatabaseCollector`.

Who may scrape: a caller with `Authorization: Bearer $TRAINHUB_METRICS_TOKEN`, one from
an address in `TRAINHUB_METRICS_ALLOW`, or a signed-in platform admin.
"""

from __future__ import annotations

import hmac
import ipaddress
import os
import re
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path

from django.conf import settings
from django.db.models import Count
from django.http import HttpRequest, HttpResponse
from django.utils import timezone
from prometheus_client import REGISTRY, CollectorRegistry, generate_latest, multiprocess
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector
from rest_framework.exceptions import AuthenticationFailed
from rest_framework.throttling import BaseThrottle

from trainhub.jobs.choices import JobState
from trainhub.jobs.models import Job
from trainhub.nodes.models import Node
from trainhub.scheduling.models import CycleRecord
from trainhub.scheduling.reasons import kind_of
from trainhub.tenancy.policies import is_platform_admin

from .token_auth import BoundedTokenAuthentication

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
_LIVE_GAUGE = re.compile(r"gauge_live\w*_(\d+)\.db$")


class DatabaseCollector(Collector):
    """Gauges read from the database at each scrape (a few grouped queries)."""

    def collect(self) -> Iterator[Metric]:
        now = timezone.now()
        jobs = GaugeMetricFamily(
            "trainhub_jobs", "Jobs by state and team.", labels=["state", "team"]
        )
        for row in Job.objects.values("state", "team__slug").annotate(n=Count("id")):
            jobs.add_metric([row["state"], row["team__slug"]], row["n"])
        yield jobs
        pending = GaugeMetricFamily(
            "trainhub_jobs_pending",
            "Pending jobs by team and kind of reason (trainhub.scheduling.reasons).",
            labels=["team", "reason"],
        )
        counts: dict[tuple[str, str], int] = {}
        waiting = Job.objects.filter(state=JobState.PENDING)
        for row in waiting.values("team__slug", "pending_reason").annotate(n=Count("id")):
            key = (row["team__slug"], kind_of(row["pending_reason"]))
            counts[key] = counts.get(key, 0) + row["n"]
        for (team, reason), n in sorted(counts.items()):
            pending.add_metric([team, reason], n)
        yield pending
        yield GaugeMetricFamily(
            "trainhub_queue_length",
            "Jobs waiting to be placed (pending).",
            value=sum(counts.values()),
        )
        yield from _nodes(now)
        last = CycleRecord.objects.first()
        if last is not None:
            yield GaugeMetricFamily(
                "trainhub_scheduling_last_cycle_age_seconds",
                "Seconds since the last scheduling cycle ran.",
                value=(now - last.ran_at).total_seconds(),
            )


def _nodes(now: datetime) -> Iterator[Metric]:
    lost = set(Node.objects.lost(now).values_list("pk", flat=True))
    by_state = GaugeMetricFamily(
        "trainhub_nodes", "Nodes by state (lost: not heard from in time).", labels=["state"]
    )
    age = GaugeMetricFamily(
        "trainhub_node_heartbeat_age_seconds",
        "Seconds since each node's last heartbeat was recorded (the heartbeat lag).",
        labels=["node"],
    )
    states: dict[str, int] = {}
    for pk, hostname, state, seen in Node.objects.values_list(
        "pk", "hostname", "state", "last_seen"
    ):
        shown = "lost" if pk in lost and state == "active" else state
        states[shown] = states.get(shown, 0) + 1
        if seen is not None:
            age.add_metric([f"{hostname}#{pk}"], (now - seen).total_seconds())
    for state, n in sorted(states.items()):
        by_state.add_metric([state], n)
    yield by_state
    yield age


def _process_metrics() -> bytes:
    """What the processes counted: all of them in multiprocess mode, else this one."""
    directory = os.environ.get("PROMETHEUS_MULTIPROC_DIR")
    if not directory:
        return generate_latest(REGISTRY)
    for path in Path(directory).glob("gauge_live*.db"):
        match = _LIVE_GAUGE.search(path.name)
        if match and not _alive(int(match.group(1))):
            multiprocess.mark_process_dead(int(match.group(1)), directory)
    registry = CollectorRegistry()
    multiprocess.MultiProcessCollector(registry, directory)
    return generate_latest(registry)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _may_scrape(request: HttpRequest) -> bool:
    header = request.headers.get("Authorization", "")
    if settings.METRICS_TOKEN and header.startswith("Bearer "):
        if hmac.compare_digest(header[7:].strip().encode(), settings.METRICS_TOKEN.encode()):
            return True
    if settings.METRICS_ALLOW:
        try:
            address = ipaddress.ip_address(BaseThrottle().get_ident(request))  # type: ignore[arg-type]
        except ValueError:
            address = None
        if address is not None and any(address in net for net in settings.METRICS_ALLOW):
            return True
    user = request.user
    if not user.is_authenticated and header.startswith("Token "):
        try:
            found = BoundedTokenAuthentication().authenticate(request)
        except AuthenticationFailed:
            return False
        user = found[0] if found else user
    return bool(user.is_authenticated and is_platform_admin(user))


def metrics(request: HttpRequest) -> HttpResponse:
    if request.method not in ("GET", "HEAD"):
        return HttpResponse("Only GET.\n", status=405, headers={"Allow": "GET, HEAD"})
    if not _may_scrape(request):
        return HttpResponse(
            "Scraping /metrics needs 'Authorization: Bearer <TRAINHUB_METRICS_TOKEN>', an "
            "address in TRAINHUB_METRICS_ALLOW, or a platform admin's sign-in.\n",
            status=401,
            content_type="text/plain; charset=utf-8",
            headers={"WWW-Authenticate": 'Bearer realm="metrics"'},
        )
    database = CollectorRegistry(auto_describe=False)
    database.register(DatabaseCollector())
    body = _process_metrics() + generate_latest(database)
    return HttpResponse(body, content_type=CONTENT_TYPE)
