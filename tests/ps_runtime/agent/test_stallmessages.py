"""Stall detection on the agent socket (docs/protocol.md §1): `progress` and `stacks` up,
`capture_stacks` down; the agent reads progress lines from a task's metrics file."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from types import SimpleNamespace
from typing import Any

import pytest

from ps_runtime.agent import taskfiles
from ps_runtime.agent.delivery import is_data, receive
from ps_runtime.agent.outbox import Outbox
from ps_runtime.agent.protocol import (
    AgentMessage,
    CaptureStacks,
    LogStream,
    MetricPoint,
    Metrics,
    PhaseState,
    Progress,
    ProgressItem,
    ProtocolError,
    StackMethod,
    Stacks,
    TaskKey,
    parse_agent_message,
    parse_from_agent,
    parse_from_server,
)
from ps_runtime.agent.stallmessages import (
    MAX_PROGRESS_ITEMS,
    MAX_STACKS_CHARS,
    read_progress_line,
)

KEY = TaskKey(31, 2)
WHEN = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)
STACKS = Stacks(KEY, StackMethod.PY_SPY, "Thread 1 (idle)\n  wait (train.py:12)")
MESSAGES: list[AgentMessage] = [
    Progress(
        KEY,
        (
            ProgressItem(WHEN, closures=120),
            ProgressItem(WHEN, phase="evaluation", state=PhaseState.BEGIN),
            ProgressItem(WHEN, phase="evaluation", state=PhaseState.END),
        ),
    ),
    STACKS,
    Stacks(KEY, StackMethod.NONE, ""),
    CaptureStacks(12),
]


@pytest.mark.parametrize("message", MESSAGES, ids=lambda m: type(m).__name__)
def test_each_message_round_trips(message: AgentMessage) -> None:
    wire = json.loads(json.dumps(message.to_wire(), allow_nan=False))
    assert wire["type"] == message.KIND.value
    assert parse_agent_message(wire) == message


def test_each_side_refuses_the_others_kinds() -> None:
    with pytest.raises(ProtocolError, match="sent by the server"):
        parse_from_agent(CaptureStacks(12).to_wire())
    with pytest.raises(ProtocolError, match="sent by an agent"):
        parse_from_server(MESSAGES[0].to_wire())


def _refused(obj: dict[str, Any], field: str) -> None:
    with pytest.raises(ProtocolError) as info:
        parse_agent_message(obj)
    assert str(info.value).startswith(field + " "), info.value


def test_bad_fields_are_refused_by_name() -> None:
    base = {"type": "progress", "id": 31, "attempt": 2}
    _refused({**base, "items": [{"time": WHEN.isoformat(), "closures": -1}]}, "items[0].closures")
    _refused({**base, "items": [{"time": "yesterday", "closures": 1}]}, "items[0].time")
    bad_phase = {"time": WHEN.isoformat(), "phase": "Eval!", "state": "begin"}
    _refused({**base, "items": [bad_phase]}, "items[0].phase")
    _refused({**base, "items": [{**bad_phase, "phase": "eval", "state": "x"}]}, "items[0].state")
    _refused({**base, "items": [{"closures": 1}] * (MAX_PROGRESS_ITEMS + 1)}, "items")
    stacks = {"type": "stacks", "id": 31, "attempt": 2, "method": "gdb", "text": ""}
    _refused(stacks, "method")
    _refused({**stacks, "method": "py-spy", "text": "x" * (MAX_STACKS_CHARS + 1)}, "text")
    _refused({"type": "capture_stacks", "job_id": "12"}, "job_id")


def test_a_nul_in_stacks_is_replaced_not_refused() -> None:
    wire = {"type": "stacks", "id": 31, "attempt": 2, "method": "py-spy", "text": "a\x00b"}
    assert parse_agent_message(wire) == Stacks(KEY, StackMethod.PY_SPY, "a\ufffdb")


def test_progress_and_stacks_go_to_the_data_lane() -> None:
    received = receive({**MESSAGES[0].to_wire(), "seq": 4})
    assert (received.seq, received.message) == (4, MESSAGES[0])
    assert is_data(MESSAGES[0]) and is_data(STACKS)  # type: ignore[arg-type]


def test_the_agent_reads_progress_lines_and_leaves_metric_lines_alone() -> None:
    line = json.dumps({"progress": {"closures": 7}, "time": WHEN.isoformat()})
    assert read_progress_line(line) == ProgressItem(WHEN, closures=7)
    phase = json.dumps({"phase": "checkpoint", "state": "end", "time": WHEN.isoformat()})
    assert read_progress_line(phase) == ProgressItem(WHEN, phase="checkpoint", state=PhaseState.END)
    metric = json.dumps({"step": 1, "time": WHEN.isoformat(), "values": {"phase": 2}})
    assert read_progress_line(metric) is None
    assert read_progress_line('{"phase": "x", "state": "later"}') is None
    assert read_progress_line('{"progress": 3}') is None


def test_a_tasks_metrics_file_feeds_progress_and_metrics_to_the_outbox() -> None:
    outbox = Outbox()
    task: Any = SimpleNamespace(key=KEY)
    for obj in (
        {"step": 5, "time": WHEN.isoformat(), "values": {"loss": 0.5}},
        {"progress": {"closures": 9}, "time": WHEN.isoformat()},
        {"phase": "evaluation", "state": "begin", "time": WHEN.isoformat()},
    ):
        taskfiles._read_metric(task, json.dumps(obj).encode() + b"\n", outbox)
    assert outbox.drain() == [
        Metrics(KEY, (MetricPoint({"loss": 0.5}, step=5, time=WHEN),)),
        Progress(
            KEY,
            (
                ProgressItem(WHEN, closures=9),
                ProgressItem(WHEN, phase="evaluation", state=PhaseState.BEGIN),
            ),
        ),
    ]


def test_the_outbox_never_drops_progress_or_stacks_for_room() -> None:
    outbox = Outbox(max_bytes=200)
    outbox.add_progress(KEY, ProgressItem(WHEN, closures=1))
    outbox.add_message(STACKS, 40)
    for n in range(50):
        outbox.add_log(KEY, LogStream.STDOUT, f"line {n} " * 4)
    kinds = [type(m).__name__ for m in outbox.drain()]
    assert kinds[:2] == ["Progress", "Stacks"]
