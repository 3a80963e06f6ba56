"""Outbox: batching, ordering, bounded buffering while disconnected."""

from __future__ import annotations

from ps_runtime.agent import protocol
from ps_runtime.agent.outbox import Outbox
from ps_runtime.agent.protocol import TaskKey

KEY = TaskKey(31, 1)


def test_lines_are_batched_per_stream_and_status_comes_after_output() -> None:
    box = Outbox()
    box.add_log(KEY, "stdout", "a")
    box.add_log(KEY, "stderr", "e")
    box.add_log(KEY, "stdout", "b")
    box.add_metric(KEY, {"step": 1, "time": "t", "values": {"loss": 1.0}}, 40)
    box.add_status(protocol.task_status_message(KEY, "failed", 1, "exited with code 1"))
    box.add_log(KEY, "stdout", "late")
    messages = box.drain()
    assert [m["type"] for m in messages] == ["logs", "logs", "metrics", "task_status", "logs"]
    assert messages[0] == {
        "type": "logs",
        "id": 31,
        "attempt": 1,
        "stream": "stdout",
        "lines": ["a", "b"],
    }
    assert messages[2]["points"] == [{"step": 1, "time": "t", "values": {"loss": 1.0}}]
    assert messages[4]["lines"] == ["late"]
    assert box.drain() == []


def test_batches_are_capped() -> None:
    box = Outbox(max_batch_items=2)
    for line in "abcde":
        box.add_log(KEY, "stdout", line)
    assert [m["lines"] for m in box.drain()] == [["a", "b"], ["c", "d"], ["e"]]


def test_over_budget_drops_oldest_logs_first_never_statuses() -> None:
    box = Outbox(max_bytes=300, max_batch_items=2)
    box.add_status(protocol.task_status_message(KEY, "running"))
    box.add_metric(KEY, {"step": 1, "time": "t", "values": {}}, 50)
    for i in range(10):
        box.add_log(KEY, "stdout", f"line-{i:02d}" + "x" * 30)
    messages = box.drain()
    assert messages[0]["type"] == "task_status"
    assert any(m["type"] == "metrics" for m in messages)  # logs went first
    kept = [line[:7] for m in messages if m["type"] == "logs" for line in m["lines"]]
    assert kept and kept[-1] == "line-09" and "line-00" not in kept
    assert box.dropped_items > 0


def test_requeue_puts_unsent_messages_first() -> None:
    box = Outbox()
    box.add_log(KEY, "stdout", "a")
    unsent = box.drain()
    box.add_log(KEY, "stdout", "b")
    box.requeue(unsent)
    assert [m["lines"] for m in box.drain()] == [["a"], ["b"]]
