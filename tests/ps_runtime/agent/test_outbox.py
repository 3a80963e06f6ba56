"""Outbox: batching, ordering, bounded buffering while disconnected."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from ps_runtime.agent.outbox import Outbox
from ps_runtime.agent.protocol import (
    MAX_BATCH_VALUES,
    LogStream,
    MetricPoint,
    Metrics,
    ReportedState,
    TaskKey,
    TaskStatus,
)

KEY = TaskKey(31, 1)
OUT, ERR = LogStream.STDOUT, LogStream.STDERR
WHEN = datetime(2025, 1, 1, tzinfo=UTC)


def _wire(box: Outbox) -> list[dict[str, Any]]:
    return [m.to_wire() for m in box.drain()]


def test_lines_are_batched_per_stream_and_status_comes_after_output() -> None:
    box = Outbox()
    box.add_log(KEY, OUT, "a")
    box.add_log(KEY, ERR, "e")
    box.add_log(KEY, OUT, "b")
    box.add_metric(KEY, MetricPoint({"loss": 1.0}, step=1, time=WHEN), 40)
    box.add_status(TaskStatus(KEY, ReportedState.FAILED, 1, "exited with code 1"))
    box.add_log(KEY, OUT, "late")
    messages = _wire(box)
    assert [m["type"] for m in messages] == ["logs", "logs", "metrics", "task_status", "logs"]
    assert messages[0] == {
        "type": "logs",
        "id": 31,
        "attempt": 1,
        "stream": "stdout",
        "lines": ["a", "b"],
    }
    micros = int(WHEN.timestamp()) * 1_000_000
    assert messages[2]["series"] == {"loss": {"steps": [1], "values": [1.0], "times": [micros]}}
    assert messages[3] == {
        "type": "task_status",
        "id": 31,
        "attempt": 1,
        "state": "failed",
        "exit_code": 1,
        "message": "exited with code 1",
    }
    assert messages[4]["lines"] == ["late"]
    assert box.drain() == []


def test_batches_are_capped() -> None:
    box = Outbox(max_batch_items=2)
    for line in "abcde":
        box.add_log(KEY, OUT, line)
    assert [m["lines"] for m in _wire(box)] == [["a", "b"], ["c", "d"], ["e"]]


def test_over_budget_drops_oldest_logs_first_never_statuses() -> None:
    box = Outbox(max_bytes=300, max_batch_items=2)
    box.add_status(TaskStatus(KEY, ReportedState.RUNNING))
    box.add_metric(KEY, MetricPoint({"loss": 1.0}, step=1, time=WHEN), 50)
    for i in range(10):
        box.add_log(KEY, OUT, f"line-{i:02d}" + "x" * 30)
    messages = _wire(box)
    assert messages[0]["type"] == "task_status"
    assert any(m["type"] == "metrics" for m in messages)  # logs went first
    kept = [line[:7] for m in messages if m["type"] == "logs" for line in m["lines"]]
    assert kept and kept[-1] == "line-09" and "line-00" not in kept
    assert box.dropped_items > 0


def test_requeue_puts_unsent_messages_first() -> None:
    box = Outbox()
    box.add_log(KEY, OUT, "a")
    unsent = box.drain()
    box.add_log(KEY, OUT, "b")
    box.requeue(unsent)
    assert [m["lines"] for m in _wire(box)] == [["a"], ["b"]]


def test_has_room_until_half_the_budget_then_again_after_a_drain() -> None:
    box = Outbox(max_bytes=200)
    assert box.has_room()
    for i in range(5):
        box.add_log(KEY, OUT, f"line-{i}" + "x" * 20)
    assert not box.has_room()  # about 150 bytes: readers wait from here
    assert box.dropped_items == 0
    unsent = box.drain()
    assert box.has_room()
    box.requeue(unsent)  # a failed send puts them back, and they count again
    assert not box.has_room()


def test_taken_messages_stay_in_flight_until_acknowledged() -> None:
    box = Outbox()
    box.add_status(TaskStatus(KEY, ReportedState.RUNNING))
    box.add_log(KEY, OUT, "a")
    taken = box.take(1, mark="snapshot-1")
    assert [seq for seq, _ in taken] == [1, 2]
    assert box.in_flight() == 2 and len(box) == 0
    box.add_log(KEY, OUT, "b")
    assert [seq for seq, _ in box.take(3, mark="snapshot-2")] == [3]
    assert box.acknowledge(1) == []  # the mark goes with the last message of its take
    assert box.acknowledge(3) == ["snapshot-1", "snapshot-2"]
    assert box.in_flight() == 0


def test_an_ack_out_of_order_forgets_only_unmarked_messages() -> None:
    box = Outbox()
    box.add_log(KEY, OUT, "a")
    box.take(1)  # 1: logs, still being stored by the server
    box.add_status(TaskStatus(KEY, ReportedState.RUNNING))
    box.take(2)  # 2: a status, handled at once
    box.add_status(TaskStatus(KEY, ReportedState.SUCCEEDED))
    box.take(3, mark="m")  # 3: a status carrying the offsets read so far
    assert box.acknowledge(0, (2, 3)) == []
    assert box.in_flight() == 2  # 1, and 3 whose mark waits for 1's ack
    assert box.acknowledge(3) == ["m"]
    assert box.in_flight() == 0


def test_a_lost_connection_sends_the_unacknowledged_again_first() -> None:
    box = Outbox()
    box.add_status(TaskStatus(KEY, ReportedState.RUNNING))
    box.add_log(KEY, OUT, "a")
    box.take(1, mark="m")
    box.acknowledge(1)  # the status arrived; the log batch's ack was lost with the socket
    box.add_log(KEY, OUT, "b")
    assert box.resend_unacknowledged() == 1
    again = box.take(1)  # a new connection numbers from 1
    assert [(seq, m.to_wire().get("lines")) for seq, m in again] == [(1, ["a"]), (2, ["b"])]
    assert box.acknowledge(2) == ["m"]  # the mark came back with its message


def test_messages_in_flight_count_against_the_room() -> None:
    box = Outbox(max_bytes=200)
    for i in range(5):
        box.add_log(KEY, OUT, f"line-{i}" + "x" * 20)
    box.take(1)
    assert not box.has_room()  # sent but not acknowledged: still held
    box.acknowledge(1)
    assert box.has_room()


def test_a_metrics_batch_closes_at_half_the_values_a_message_may_hold() -> None:
    box = Outbox()
    wide = {f"m{i}": float(i) for i in range(1000)}
    for step in range(60):
        box.add_metric(KEY, MetricPoint(wide, step=step, time=WHEN), 40)
    batches = [m for m in box.drain() if isinstance(m, Metrics)]
    sizes = [sum(len(c) for c in m.columns(WHEN).values()) for m in batches]
    assert sizes == [50_000, 10_000]
    assert all(size <= MAX_BATCH_VALUES for size in sizes)
