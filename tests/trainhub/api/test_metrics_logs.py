"""`GET /api/v1/jobs/{id}/metrics/`, `logs/` and `logs/download/`: shapes, refusals,
another team's job, and a fixed number of queries."""

from __future__ import annotations

import gzip
import json
import zlib
from datetime import UTC, datetime, timedelta
from typing import Any, cast

import httpx
import pytest
from django.core.cache import cache
from rest_framework.test import APIClient
from trainhub.jobs.models import Job, Task
from trainhub.telemetry import selectors
from trainhub.telemetry.logchunks import Line, stored_lines
from trainhub.telemetry.models import LogChunk
from trainhub.telemetry.retention import purge_expired
from trainhub.telemetry.services import ingest_logs, ingest_metrics
from trainhub.tenancy.choices import Role

from ..factories import make_job, make_team, make_user

pytestmark = pytest.mark.django_db

NOW = datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC)


@pytest.fixture
def job() -> Job:
    cache.clear()
    alice, bob = make_user("alice"), make_user("bob")
    make_team("recsys", members={alice: Role.MEMBER})
    make_team("vision", members={bob: Role.MEMBER})
    return make_job(alice)


def _task(job: Job, role: str = "worker", index: int = 0) -> Task:
    task, _ = Task.objects.get_or_create(
        job=job, role=role, index=index, defaults={"cpu": 0.5, "memory_mb": 512}
    )
    return task


def _as(username: str) -> APIClient:
    from django.contrib.auth.models import User

    client = APIClient()
    client.force_authenticate(User.objects.get(username=username))
    return client


def _get(client: APIClient, url: str, params: dict[str, Any]) -> Any:
    return client.get(url, params)


def _metrics(job: Job, steps: int) -> None:
    task = _task(job)
    for start in range(0, steps, 1000):
        points = [
            {"step": s, "values": {"loss": 1 / (s + 1), "acc": (s % 100) / 100}}
            for s in range(start, min(steps, start + 1000))
        ]
        ingest_metrics(task=task, points=points, now=NOW)


def test_without_max_points_every_raw_point_as_before(job: Job) -> None:
    _metrics(job, 30)
    body = _as("alice").get(f"/api/v1/jobs/{job.pk}/metrics/", {"name": "loss"}).json()
    assert list(body) == ["series", "points_dropped", "purged_at"]
    assert list(body["series"]) == ["loss"]
    assert body["points_dropped"] == 0 and body["purged_at"] is None
    assert len(body["series"]["loss"]) == 30
    assert set(body["series"]["loss"][0]) == {"step", "value", "time"}


def test_max_points_buckets_each_series(job: Job, django_assert_num_queries: Any) -> None:
    _metrics(job, 5000)
    client = _as("alice")
    with django_assert_num_queries(3):  # the job, the series, the rollup blocks
        body = _get(client, f"/api/v1/jobs/{job.pk}/metrics/", {"max_points": 100}).json()
    assert body["downsampled"] is True
    assert sorted(body["series"]) == ["acc", "loss"]
    loss = body["series"]["loss"]
    assert len(loss) <= 100 and sum(b["count"] for b in loss) == 5000
    assert loss[-1] == {
        "step": 4999,
        "value": 1 / 5000,
        "min": loss[-1]["min"],
        "max": loss[-1]["max"],
        "count": loss[-1]["count"],
    }
    assert all(b["min"] <= b["value"] <= b["max"] for b in loss)


def test_metrics_are_gzipped_for_a_client_that_accepts_it(job: Job) -> None:
    _metrics(job, 2000)
    url = f"/api/v1/jobs/{job.pk}/metrics/?max_points=500"
    response = _as("alice").get(url, HTTP_ACCEPT_ENCODING="gzip")
    assert response["Content-Encoding"] == "gzip"
    body = json.loads(gzip.decompress(response.content))
    assert len(body["series"]["loss"]) <= 500
    assert len(response.content) < len(json.dumps(body)) / 2
    assert "Content-Encoding" not in _as("alice").get(url)


def test_name_series_and_a_step_range(job: Job, django_assert_max_num_queries: Any) -> None:
    _metrics(job, 3000)
    client = _as("alice")
    url = f"/api/v1/jobs/{job.pk}/metrics/"
    assert list(_get(client, url, {"max_points": 10, "series": "acc"}).json()["series"]) == ["acc"]
    both = client.get(f"{url}?max_points=10&name=acc&series=loss").json()["series"]
    assert sorted(both) == ["acc", "loss"]
    with django_assert_max_num_queries(5):
        body = _get(client, url, {"max_points": 500, "from": 1000, "to": 1099}).json()
    assert body["downsampled"] is False  # 100 points: the raw points, one per step
    assert [b["step"] for b in body["series"]["loss"]] == list(range(1000, 1100))
    assert all(b["count"] == 1 for b in body["series"]["loss"])


def test_a_metric_name_over_the_limit_is_refused_as_the_schema_says(job: Job) -> None:
    client = _as("alice")
    url = f"/api/v1/jobs/{job.pk}/metrics/"
    refused = client.get(url, {"series": "loss," + "x" * 101})
    assert refused.status_code == 400
    assert refused.json() == {"series": ["Metric names have at most 100 characters."]}
    assert client.get(url, {"series": "loss," + "x" * 100}).status_code == 200
    schema = client.get("/api/schema/", HTTP_ACCEPT="application/json").json()
    params = schema["paths"]["/api/v1/jobs/{id}/metrics/"]["get"]["parameters"]
    series = next(p for p in params if p["name"] == "series")
    name = r"[^,\u0000]{0,100}"
    assert series["schema"] == {
        "oneOf": [
            {"type": "string", "pattern": rf"^(?:[^,\u0000]{{1,100}}|{name}(?:,{name})+)$"},
            {"type": "string", "maxLength": 0},  # blank: every metric
        ]
    }


def test_a_step_range_without_max_points_and_an_empty_range(job: Job) -> None:
    _metrics(job, 30)
    client = _as("alice")
    url = f"/api/v1/jobs/{job.pk}/metrics/"
    raw = _get(client, url, {"from": 10, "to": 12}).json()["series"]["loss"]
    assert [p["step"] for p in raw] == [10, 11, 12]
    empty = _get(client, url, {"max_points": 100, "from": 5, "to": 4}).json()
    assert empty["series"] == {} and empty["downsampled"] is False


@pytest.mark.parametrize(
    ("query", "field"),
    [
        ({"max_points": 9}, "max_points"),
        ({"max_points": 5001}, "max_points"),
        ({"max_points": "many"}, "max_points"),
        ({"max_points": 100, "from": "x"}, "from"),
        ({"max_points": 100, "to": 2**63}, "to"),
        ({"max_points": 100, "name": "n" * 101}, "name"),
        ({"max_points": 100, "name": "lo\x00ss"}, "name"),
        ({"series": "a," + "n" * 101}, "series"),
    ],
)
def test_a_bad_metrics_parameter_is_a_400_that_names_it(
    job: Job, query: dict[str, Any], field: str
) -> None:
    response = _as("alice").get(f"/api/v1/jobs/{job.pk}/metrics/", query)
    assert response.status_code == 400, response.content
    assert field in response.json()


def test_the_clock_says_when_each_range_of_steps_was_reached(
    job: Job, django_assert_num_queries: Any
) -> None:
    task = _task(job)
    points = [
        {"step": s, "time": NOW + timedelta(seconds=s / 10), "values": {"loss": 1.0, "acc": 0.5}}
        for s in range(3000)
    ]
    ingest_metrics(task=task, points=points, now=NOW)
    client = _as("alice")
    url = f"/api/v1/jobs/{job.pk}/metrics/clock/"
    with django_assert_num_queries(3):  # the job, the steps' span, the ranges
        body = _get(client, url, {"max_points": 10}).json()
    clock = body["clock"]
    assert 10 <= len(clock) <= 20 and body["purged_at"] is None
    assert clock[0] == {"step": 0, "time": NOW.isoformat()}
    assert clock[-1] == {"step": 2999, "time": (NOW + timedelta(seconds=299.9)).isoformat()}
    steps = [entry["step"] for entry in clock]
    assert steps == sorted(set(steps))
    for entry in clock:  # each pair is the step's own time
        at = datetime.fromisoformat(entry["time"])
        assert at == NOW + timedelta(seconds=entry["step"] / 10)
    default = _get(client, url, {}).json()["clock"]  # 1,000 ranges: 3 steps each here
    assert len(default) == 2000 and [e["step"] for e in default[:4]] == [0, 2, 3, 5]
    refused = _get(client, url, {"max_points": 5})
    assert refused.status_code == 400 and "max_points" in refused.json()
    assert _get(_as("bob"), url, {}).status_code == 404  # another team's job


def test_a_job_without_points_or_with_purged_points_has_no_clock(job: Job) -> None:
    client = _as("alice")
    url = f"/api/v1/jobs/{job.pk}/metrics/clock/"
    assert _get(client, url, {}).json() == {"clock": [], "purged_at": None}
    _metrics(job, 100)
    assert len(_get(client, url, {}).json()["clock"]) == 100
    Job.objects.filter(pk=job.pk).update(state="succeeded", finished_at=NOW)
    assert purge_expired(now=NOW + timedelta(days=30), days=7).jobs == 1
    body = _get(client, url, {}).json()
    assert body["clock"] == [] and body["purged_at"] is not None


def _lines(job: Job, count: int) -> list[Line]:
    worker, ps = _task(job), _task(job, "ps", 0)
    for start in range(0, count, 2):
        ingest_logs(task=worker, stream="stdout", lines=[f"step {start} Loss ok"], now=NOW)
        ingest_logs(task=ps, stream="stderr", lines=[f"ps line {start + 1}"], now=NOW)
    return stored_lines(LogChunk.objects.filter(job=job))


def test_logs_tail_search_source_and_after(job: Job, django_assert_num_queries: Any) -> None:
    stored = _lines(job, 40)
    client = _as("alice")
    url = f"/api/v1/jobs/{job.pk}/logs/"
    with django_assert_num_queries(2):  # the job, the lines
        tail = _get(client, url, {"tail": 5}).json()["lines"]
    assert [x["id"] for x in tail] == [r.id for r in stored[-5:]]
    assert set(tail[0]) == {"id", "task", "source", "stream", "offset", "line", "time"}
    found = _get(client, url, {"tail": 3, "q": "LOSS"}).json()["lines"]
    assert [x["line"] for x in found] == ["step 34 Loss ok", "step 36 Loss ok", "step 38 Loss ok"]
    ps = _get(client, url, {"tail": 2, "source": "ps-0"}).json()["lines"]
    assert [x["line"] for x in ps] == ["ps line 37", "ps line 39"]
    after = _get(client, url, {"after": stored[-4].id, "source": "worker-0"}).json()["lines"]
    assert [x["id"] for x in after] == [stored[-2].id]
    assert _get(client, url, {"q": "100%_"}).json()["lines"] == []
    assert len(client.get(url).json()["lines"]) == 40
    ps_task = _task(job, "ps", 0)
    by_task = _get(client, url, {"tail": 2, "task": ps_task.pk}).json()
    assert [x["line"] for x in by_task["lines"]] == ["ps line 37", "ps line 39"]
    assert {x["task"] for x in by_task["lines"]} == {ps_task.pk}
    assert by_task["log_lines_dropped"] == 0 and by_task["purged_at"] is None


@pytest.mark.parametrize(
    ("query", "field"),
    [
        ({"tail": 0}, "tail"),
        ({"tail": 10001}, "tail"),
        ({"tail": "x"}, "tail"),
        ({"after": -1}, "after"),
        ({"after": "1.5"}, "after"),
        ({"q": "a\x00b"}, "q"),
        ({"source": "s" * 41}, "source"),
        ({"task": 0}, "task"),
        ({"task": "ps-0"}, "task"),
    ],
)
def test_a_bad_logs_parameter_is_a_400_that_names_it(
    job: Job, query: dict[str, Any], field: str
) -> None:
    response = _as("alice").get(f"/api/v1/jobs/{job.pk}/logs/", query)
    assert response.status_code == 400, response.content
    assert field in response.json()


def test_download_streams_the_whole_log_in_chunks(
    job: Job, monkeypatch: pytest.MonkeyPatch, django_assert_num_queries: Any
) -> None:
    stored = _lines(job, 25)
    monkeypatch.setattr(selectors, "READ_CHUNKS", 10)  # a line per chunk here
    response = _as("alice").get(f"/api/v1/jobs/{job.pk}/logs/download/")
    assert response.status_code == 200 and response.streaming
    assert response["Content-Type"] == "text/plain; charset=utf-8"
    assert response["Content-Disposition"] == f'attachment; filename="job-{job.pk}.log"'
    with django_assert_num_queries(4):  # 10 + 10 + 5 lines, then none left
        body = b"".join(cast(Any, response).streaming_content)
    assert body.decode() == "".join(f"[{r.source}] {r.line}\n" for r in stored)


def test_download_of_one_task_is_its_stream_and_gzip_is_one_stream(job: Job) -> None:
    _lines(job, 30)
    ps = _task(job, "ps", 0)
    client = _as("alice")
    url = f"/api/v1/jobs/{job.pk}/logs/download/"
    plain = b"".join(cast(Any, client.get(url, {"task": ps.pk})).streaming_content)
    assert plain == "".join(f"ps line {i}\n" for i in range(1, 30, 2)).encode()
    for row in stored_lines(LogChunk.objects.filter(task=ps)):
        assert plain[row.offset : row.offset + len(row.line) + 1] == f"{row.line}\n".encode()
    whole = b"".join(cast(Any, client.get(url)).streaming_content)
    packed = client.get(url, HTTP_ACCEPT_ENCODING="gzip, deflate")
    assert packed["Content-Encoding"] == "gzip" and "Accept-Encoding" in packed["Vary"]
    unpacker = zlib.decompressobj(31)  # one gzip member, as a browser or httpx reads it
    assert unpacker.decompress(b"".join(cast(Any, packed).streaming_content)) == whole
    assert unpacker.eof and not unpacker.unused_data
    response = client.get(url, {"task": "x"})
    assert response.status_code == 400 and "task" in response.json()


def test_another_teams_job_is_a_404_everywhere(job: Job) -> None:
    _metrics(job, 10)
    _lines(job, 2)
    client = _as("bob")
    for url in ("metrics/", "metrics/?max_points=10", "logs/?tail=5", "logs/download/"):
        assert client.get(f"/api/v1/jobs/{job.pk}/{url}").status_code == 404, url
    assert _as("alice").get(f"/api/v1/jobs/{job.pk}/logs/download/").status_code == 200


@pytest.mark.slow
def test_a_real_server_tails_searches_and_downloads_100k_lines(web_server: str) -> None:
    """Over uvicorn (ASGI), 100,000 lines stored through ingest from two tasks: the tail,
    a search, and the download streamed (plain and gzip), the whole log byte for byte."""
    cache.clear()
    alice = make_user("alice")
    make_team("recsys", members={alice: Role.MEMBER})
    job = make_job(alice)
    worker, ps = _task(job), _task(job, "ps", 0)
    expected: list[tuple[str, str]] = []
    for start in range(0, 100_000, 1000):
        task = ps if start % 5000 == 0 else worker
        chunk = [f"line {i}" for i in range(start, start + 1000)]
        ingest_logs(task=task, stream="stdout", lines=chunk, now=NOW)
        expected += [(f"{task.role}-{task.index}", line) for line in chunk]
    auth = httpx.post(
        f"{web_server}/api/v1/auth/token/", json={"username": "alice", "password": "pw-alice"}
    ).json()
    with httpx.Client(
        base_url=f"{web_server}/api/v1/jobs/{job.pk}/",
        headers={"Authorization": f"Token {auth['token']}"},
        timeout=60,
    ) as api:
        tail = api.get("logs/", params={"tail": 100}).json()["lines"]
        assert [x["line"] for x in tail] == [f"line {i}" for i in range(99_900, 100_000)]
        found = api.get("logs/", params={"tail": 20, "q": "LINE 4242"}).json()["lines"]
        assert [x["line"] for x in found] == ["line 4242"] + [f"line 4242{d}" for d in range(10)]
        bodies = {}
        for encoding in ("identity", "gzip"):
            with api.stream(
                "GET", "logs/download/", headers={"Accept-Encoding": encoding}
            ) as response:
                assert response.status_code == 200
                assert "content-length" not in response.headers  # streamed, not buffered
                assert response.headers.get("content-encoding", "identity") == encoding
                bodies[encoding] = b"".join(response.iter_bytes())  # decoded by httpx
        ps_log = api.get("logs/download/", params={"task": ps.pk}).content
    whole = "".join(f"[{source}] {line}\n" for source, line in expected).encode()
    assert bodies == {"identity": whole, "gzip": whole}
    assert ps_log == "".join(f"{line}\n" for source, line in expected if source == "ps-0").encode()
