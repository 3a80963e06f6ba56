"""The data lane's group commit (`agents/groups.py`): batches of several nodes stored in
one transaction, a failed one failing only itself, and heartbeats answered while a batch
waits on the database."""

from __future__ import annotations

import asyncio
import threading
from typing import Any

import pytest
from asgiref.sync import async_to_sync
from channels.testing import WebsocketCommunicator
from django.db import connection, transaction
from django.utils import timezone
from trainhub.agents import services as agent_services
from trainhub.agents.groups import IngestGroups, store_group
from trainhub.agents.services import DataBatch
from trainhub.asgi import application
from trainhub.jobs.models import Job, Task
from trainhub.telemetry.chunks import read_series, stored_points
from trainhub.telemetry.models import JobTelemetry, MetricRollup, MetricSeries
from trainhub.telemetry.rollups import rollup
from trainhub.telemetry.services import ingest_series
from trainhub.tenancy.choices import Role

from ps_runtime.agent.delivery import receive
from ps_runtime.agent.protocol import Metrics

from ...conftest import skip_outside_ci
from ..factories import make_node, make_team, make_user, spec

pytestmark = pytest.mark.django_db(transaction=True)


def _senders(count: int, *, jobs: int | None = None) -> list[tuple[str, int, Task]]:
    """`count` nodes with a running task each, of `jobs` jobs (default: one job each):
    (credential, node id, task)."""
    alice = make_user("alice")
    team = make_team("recsys", members={alice: Role.MEMBER})
    made = [
        Job.objects.create(
            team=team, name=f"job-{i}", submitted_by=alice, spec=spec(), state="running"
        )
        for i in range(jobs or count)
    ]
    out = []
    for i in range(count):
        node, credential = make_node(f"node-{i}", cpus=8, memory_mb=32768)
        task = Task.objects.create(
            job=made[i % len(made)], role="worker", index=i, cpu=0.5, memory_mb=512,
            node=node, state="running", attempt=1,
        )  # fmt: skip
        out.append((credential, node.pk, task))
    return out


def _metrics(task: Task, first: int, count: int = 1000, seq: int = 1) -> dict[str, Any]:
    steps = list(range(first, first + count))
    return {
        "type": "metrics",
        "id": task.pk,
        "attempt": task.attempt,
        "seq": seq,
        "series": {"loss": {"steps": steps, "values": [1.0 / (s + 1) for s in steps]}},
    }


def _batch(node_id: int, task: Task, first: int, count: int = 1000) -> DataBatch:
    message = receive(_metrics(task, first, count)).message
    assert isinstance(message, Metrics)
    return DataBatch(node_id, [message], timezone.now())


def _steps(job_id: int) -> list[int]:
    return [step for _, _, _, step, _, _ in stored_points([job_id])]


def test_a_group_of_several_jobs_batches_is_stored_as_each_alone_would_be() -> None:
    """Four batches, two of them of one job's two tasks (the same series, merged in the
    group's one statement): every point stored once, the series and rollups as if each
    batch had been stored on its own."""
    senders = _senders(3, jobs=2)  # tasks 0 and 2: job 0; task 1: job 1
    (_, n0, t0), (_, n1, t1), (_, n2, t2) = senders
    batches = [_batch(n0, t0, 0), _batch(n1, t1, 0, 500), _batch(n2, t2, 40, 100)]
    batches.append(_batch(n0, t0, 1000, 20))
    assert store_group(batches) == [[], [], [], []]
    job0, job1 = t0.job_id, t1.job_id
    assert _steps(job1) == list(range(500))
    assert _steps(job0) == sorted([*range(1020), *range(40, 140)])
    assert JobTelemetry.objects.get(pk=job0).points == 1120
    series = MetricSeries.objects.get(job_id=job0, name="loss")
    assert (series.first_step, series.last_step, series.count) == (0, 1019, 1120)
    points = [
        ("loss", s, 1.0 / (s + 1)) for first, n in ((0, 1000), (40, 100), (1000, 20))
        for s in range(first, first + n)
    ]  # fmt: skip
    expected = {
        (level, block): (s.min, s.max, s.count, s.last_step, s.last_value)
        for (_, level, block), s in rollup(points).items()
    }
    stored = {
        (r.level, r.block): (r.min_value, r.max_value, r.count, r.last_step, r.last_value)
        for r in MetricRollup.objects.filter(job_id=job0, name="loss")
    }
    assert stored == expected
    assert len(read_series(job0)["loss"]) == 1120


def test_a_failed_batch_fails_alone_and_the_others_are_stored_once(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A batch whose storing raises rolls back its group; the others are stored again
    each alone (once: nothing of the rolled-back attempt stays), it not at all; sent
    again, it is stored once."""
    (_, n0, t0), (_, n1, t1), (_, n2, t2) = _senders(3)

    def failing(*, task: Task, **kwargs: Any) -> Any:
        if task.pk == t1.pk:
            raise RuntimeError("the database refused this batch")
        return ingest_series(task=task, **kwargs)

    monkeypatch.setattr(agent_services, "ingest_series", failing)
    batches = [_batch(n0, t0, 0), _batch(n1, t1, 0), _batch(n2, t2, 0)]
    outcomes = store_group(batches)
    assert outcomes[0] == [] and outcomes[2] == []
    assert isinstance(outcomes[1], RuntimeError)
    assert _steps(t0.job_id) == list(range(1000))
    assert _steps(t2.job_id) == list(range(1000))
    assert _steps(t1.job_id) == []
    counted = dict(JobTelemetry.objects.values_list("job_id", "points"))
    assert counted.get(t0.job_id) == counted.get(t2.job_id) == 1000
    assert counted.get(t1.job_id, 0) == 0
    monkeypatch.undo()
    assert store_group([batches[1]]) == [[]]
    assert _steps(t1.job_id) == list(range(1000))
    assert MetricSeries.objects.get(job_id=t0.job_id).count == 1000


def test_waiting_batches_are_stored_together_each_told_its_own_outcome() -> None:
    """With one group at a time, what arrives while a group is stored forms the next
    group; each submitter gets its own batch's outcome (a refusal, or its error)."""
    groups: list[list[int]] = []

    async def store(batches: list[DataBatch]) -> list[Any]:
        groups.append([b.node_id for b in batches])
        await asyncio.sleep(0.05)
        return [ValueError(b.node_id) if b.node_id == 3 else [(0, b.node_id)] for b in batches]

    async def scenario() -> list[Any]:
        ingest = IngestGroups(store, at_once=1)
        first = asyncio.ensure_future(ingest.submit(DataBatch(0, [], timezone.now())))
        await asyncio.sleep(0.01)  # its group is being stored
        more = [ingest.submit(DataBatch(i, [], timezone.now())) for i in range(1, 5)]
        return await asyncio.gather(first, *more, return_exceptions=True)

    outcomes = asyncio.run(scenario())
    assert groups == [[0], [1, 2, 3, 4]]
    assert outcomes[:3] == [[(0, 0)], [(0, 1)], [(0, 2)]] and outcomes[4] == [(0, 4)]
    assert isinstance(outcomes[3], ValueError)


def test_a_heartbeat_is_answered_while_a_batch_waits_on_a_lock() -> None:
    """Another transaction holds the job's budget row: the batch's group waits on it; a
    heartbeat sent after the batch is acknowledged (`also`) meanwhile, and the batch once
    the lock is released."""
    if connection.vendor != "postgresql":
        skip_outside_ci("row locks: SQLite locks the whole database")
    [(credential, _, task)] = _senders(1)
    JobTelemetry.objects.create(job_id=task.job_id)
    locked, release = threading.Event(), threading.Event()

    def hold() -> None:
        with transaction.atomic():
            JobTelemetry.objects.select_for_update().get(pk=task.job_id)
            locked.set()
            release.wait(20)
        connection.close()

    holder = threading.Thread(target=hold)
    holder.start()
    assert locked.wait(10)

    async def scenario() -> None:
        agent = WebsocketCommunicator(
            application, "/ws/agent/", headers=[(b"authorization", f"Node {credential}".encode())]
        )
        assert (await agent.connect())[0]
        await agent.send_json_to(_metrics(task, 0, seq=1))
        await agent.send_json_to({"type": "heartbeat", "usage": {"cpu_percent": 1}, "seq": 2})
        while True:
            frame = await agent.receive_json_from(timeout=5)
            assert frame["type"] == "ack" and frame["seq"] < 1, frame  # batch not stored
            if 2 in frame.get("also", []):
                break
        release.set()
        while (await agent.receive_json_from(timeout=10))["seq"] < 2:
            pass
        await agent.disconnect(timeout=10)

    try:
        async_to_sync(scenario)()
    finally:
        release.set()
        holder.join()
    assert _steps(task.job_id) == list(range(1000))


def test_one_nodes_batch_of_two_jobs_is_stored_in_one_transaction() -> None:
    """A node running tasks of two jobs: its batch locks both jobs' budget rows (in id
    order) in the batch's transaction, and stores both."""
    (_, node_id, first), (_, _, second) = _senders(2)
    Task.objects.filter(pk=second.pk).update(node_id=node_id)
    messages = [receive(_metrics(t, 0, 10)).message for t in (second, first)]
    assert all(isinstance(m, Metrics) for m in messages)
    assert agent_services.ingest_batch(node_id=node_id, messages=messages, now=timezone.now()) == []  # type: ignore[arg-type]
    assert _steps(first.job_id) == _steps(second.job_id) == list(range(10))
