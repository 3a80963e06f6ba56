"""The server's reading of agent messages: item by item, and the fast path for plain
points agreeing exactly with the strict reader."""

from __future__ import annotations

from typing import Any

import pytest

from ps_runtime.agent.delivery import AckWindow, Refusal, receive
from ps_runtime.agent.fields import JsonObject, ProtocolError
from ps_runtime.agent.metricmessages import MAX_STEP, MetricPoint, Metrics

WHEN = "2025-03-01T12:00:00+00:00"
POINTS: list[Any] = [
    {"step": 1, "time": WHEN, "values": {"loss": 0.5, "acc": 1}},
    {"step": None, "time": None, "values": {"loss": 0.5}},
    {"values": {"loss": -3}},
    {"step": 0, "values": {"x": 2**1023}},
    {"step": MAX_STEP, "values": {"x": 1.0}},
    {"step": MAX_STEP + 1, "values": {"x": 1.0}},
    {"step": -1, "values": {"x": 1.0}},
    {"step": True, "values": {"x": 1.0}},
    {"step": 1.0, "values": {"x": 1.0}},
    {"step": 1, "values": {"x": True}},
    {"step": 1, "values": {"x": float("nan")}},
    {"step": 1, "values": {"x": float("-inf")}},
    {"step": 1, "values": {"x": 10**400}},
    {"step": 1, "values": {"x": "1"}},
    {"step": 1, "values": {"": 1}},
    {"step": 1, "values": {}},
    {"step": 1, "values": None},
    {"step": 1},
    {"step": 1, "time": "2025-03-01T12:00:00", "values": {"x": 1}},
    {"step": 1, "time": "yesterday", "values": {"x": 1}},
    {"step": 1, "time": 5, "values": {"x": 1}},
    "not a point",
    [],
]


def _strict(item: Any, i: int) -> MetricPoint | str:
    try:
        return MetricPoint.from_fields(JsonObject(item, f"points[{i}]"))
    except ProtocolError as exc:
        return exc.path


@pytest.mark.parametrize("i", range(len(POINTS)))
def test_each_point_is_read_as_the_strict_reader_reads_it(i: int) -> None:
    message = {"type": "metrics", "id": 3, "attempt": 1, "seq": 9, "points": [POINTS[i]]}
    received = receive(message)
    assert received.seq == 9
    assert isinstance(received.message, Metrics)
    expected = _strict(POINTS[i], 0)
    if isinstance(expected, MetricPoint):
        assert received.message.points == (expected,)
        assert received.refusals == ()
    else:
        assert received.message.points == ()
        assert [r.field for r in received.refusals] == [expected]


def test_a_bad_envelope_refuses_the_whole_message() -> None:
    received = receive({"type": "metrics", "id": "3", "attempt": 1, "points": [], "seq": 2})
    assert received.message is None and received.seq == 2
    assert received.refusals == (Refusal("id", "id must be an integer, got '3'"),)
    assert receive({"type": "launch", "seq": "x"}).seq is None


def test_the_ack_window_skips_gaps_and_waits_for_what_is_open() -> None:
    window = AckWindow()
    for seq in (1, 2, 3, 5):
        window.received(seq)
    assert window.handled(2) is None  # 1 is still open
    assert window.handled(1) == 2
    assert window.handled(5) is None  # 3 is still open
    assert window.handled(3) == 5  # 4 never came: no stall
