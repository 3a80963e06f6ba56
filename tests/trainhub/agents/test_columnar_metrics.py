"""Metrics as the agent sends them, columns per series, through the real gateway: stored
as chunks with their steps, values and times; a bad batch refused whole, by field."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest
from django.utils import timezone
from trainhub.agents.services import ProtocolError, handle_message, ingest_batch
from trainhub.jobs.models import Task
from trainhub.telemetry.chunks import stored_points
from trainhub.telemetry.models import MetricChunk, MetricSeries
from trainhub.tenancy.choices import Role

from ps_runtime.agent.delivery import receive
from ps_runtime.agent.protocol import MetricPoint, Metrics

from ..agent_sim import report_metrics
from ..factories import make_job, make_node, make_team, make_user

pytestmark = pytest.mark.django_db
WHEN = datetime(2026, 3, 1, 12, 0, 0, 123456, tzinfo=UTC)


@pytest.fixture
def running(db: Any) -> tuple[int, dict[str, Any], Task]:
    alice = make_user("alice")
    make_team("recsys", members={alice: Role.MEMBER})
    node, _ = make_node(cpus=4, memory_mb=8192)
    job = make_job(alice)
    task = Task.objects.create(
        job=job, role="worker", index=0, cpu=1, memory_mb=512, node=node, state="running"
    )
    return node.pk, {"id": task.pk, "attempt": task.attempt}, task


def test_the_agents_columns_are_stored_as_one_chunk_per_series(running: Any) -> None:
    node_id, key, task = running
    points = [
        MetricPoint({"loss": 1 / (s + 1), "acc": s / 10}, step=s, time=WHEN) for s in range(5)
    ]
    sent = report_metrics(node_id, key, *points, MetricPoint({"loss": 9.0}))  # no step: dropped
    assert sent["series"]["loss"]["steps"] == [0, 1, 2, 3, 4]
    stored = [(n, s, v, t) for _, _, n, s, v, t in stored_points([task.job_id])]
    assert stored == [("acc", s, s / 10, WHEN) for s in range(5)] + [
        ("loss", s, 1 / (s + 1), WHEN) for s in range(5)
    ]
    assert MetricChunk.objects.count() == 2
    assert dict(MetricSeries.objects.values_list("name", "count")) == {"loss": 5, "acc": 5}


def test_a_batch_without_times_is_stamped_with_the_time_it_arrived(running: Any) -> None:
    node_id, key, _ = running
    now = timezone.now()
    message = {"type": "metrics", **key, "series": {"x": {"steps": [3, 1], "values": [1, 2.5]}}}
    parsed = receive(message).message
    assert isinstance(parsed, Metrics)
    assert ingest_batch(node_id=node_id, messages=[parsed], now=now) == []
    assert [(s, v, t) for *_, s, v, t in stored_points()] == [(1, 2.5, now), (3, 1.0, now)]


@pytest.mark.parametrize(
    ("series", "field"),
    [
        ({"loss": {"steps": [1, 2], "values": [0.5]}}, "series.loss.values"),
        ({"loss": {"steps": [1, 2], "values": [0.5, float("nan")]}}, "series.loss.values[1]"),
        (
            {"ok": {"steps": [1], "values": [1]}, "loss": {"steps": [-1], "values": [0]}},
            "series.loss.steps[0]",
        ),
        ({"loss": {"steps": [1], "values": [1], "times": [1, 2]}}, "series.loss.times"),
    ],
)
def test_a_bad_batch_is_refused_whole_naming_the_field(
    running: Any, series: dict[str, Any], field: str
) -> None:
    node_id, key, _ = running
    message = {"type": "metrics", **key, "seq": 4, "series": series}
    received = receive(message)
    assert received.message is None and received.seq == 4
    assert [r.field for r in received.refusals] == [field]
    assert received.refusals[0].reason.startswith(field + " ")
    with pytest.raises(ProtocolError, match="^" + field.replace("[", r"\[").replace("]", r"\]")):
        handle_message(node_id=node_id, now=timezone.now(), message=message)
    assert not MetricChunk.objects.exists() and not MetricSeries.objects.exists()


def test_the_per_point_form_of_older_agents_is_still_stored(running: Any) -> None:
    node_id, key, _ = running
    points = [{"step": 2, "time": WHEN.isoformat(), "values": {"loss": 0.5}}, {"values": {"x": 1}}]
    handle_message(
        node_id=node_id, now=timezone.now(), message={"type": "metrics", **key, "points": points}
    )
    assert [(n, s, v, t) for _, _, n, s, v, t in stored_points()] == [("loss", 2, 0.5, WHEN)]
