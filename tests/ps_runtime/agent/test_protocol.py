"""The agent protocol's types (docs/protocol.md §1): round trips and strict refusals."""

from __future__ import annotations

import json
import re
from datetime import UTC, datetime
from typing import Any

import numpy as np
import pytest

from ps_runtime.agent.protocol import (
    DEFAULT_STOP_GRACE_SECONDS,
    Ack,
    AgentMessage,
    DesiredTask,
    DesiredTasks,
    Enrolled,
    ErrorMessage,
    Heartbeat,
    IsolationMode,
    LiveTask,
    Logs,
    LogStream,
    MessageKind,
    Metrics,
    ProtocolError,
    RenewedCredential,
    ReportedState,
    SeriesColumns,
    TaskKey,
    TasksChanged,
    TaskStatus,
    parse_agent_message,
    parse_desired_tasks,
    parse_enrolled,
    parse_from_agent,
    parse_from_server,
    parse_renewed_credential,
)
from ps_runtime.taskenv import Role

from .test_stallmessages import MESSAGES as STALL_MESSAGES

KEY = TaskKey(31, 2)
WHEN = datetime(2025, 1, 1, 12, 0, tzinfo=UTC)


def _task(**extra: Any) -> dict[str, Any]:
    return {
        "id": 33,
        "job_id": 12,
        "role": "coordinator",
        "index": 0,
        "attempt": 1,
        "resources": {"cpu": 1.0, "memory_mb": 1024, "gpu_indices": [0, 2]},
        "env": {"TRAINHUB_ROLE": "coordinator"},
        **extra,
    }


def _refused(parse: Any, obj: Any, field: str) -> str:
    """Parse `obj`, expect a ProtocolError whose message starts with `field`."""
    with pytest.raises(ProtocolError) as info:
        parse(obj)
    message = str(info.value)
    assert message.startswith(field + " "), message
    return message


# -- desired tasks ---------------------------------------------------------------------


def test_desired_tasks_round_trip() -> None:
    desired = DesiredTasks(
        node_id=7,
        stop_grace_seconds=5.0,
        tasks=(
            DesiredTask(
                id=33,
                attempt=1,
                job_id=12,
                role=Role.COORDINATOR,
                index=0,
                cpu=0.5,
                memory_mb=1024,
                env={"TRAINHUB_ROLE": "coordinator"},
                stop_grace_seconds=60.0,
            ),
            DesiredTask(id=34, attempt=2, job_id=12, role=Role.WORKER, index=1, gpu_indices=(1,)),
        ),
    )
    wire = json.loads(json.dumps(desired.to_wire()))
    assert "stop_grace_seconds" not in wire["tasks"][1]
    assert wire["tasks"][1]["resources"] == {"cpu": 0.0, "memory_mb": 0, "gpu_indices": [1]}
    assert parse_desired_tasks(wire) == desired


def test_per_task_stop_grace_is_optional() -> None:
    desired = parse_desired_tasks(
        {
            "stop_grace_seconds": 5,
            "tasks": [
                _task(stop_grace_seconds=60),
                _task(id=34, stop_grace_seconds=None),
                _task(id=35),
                _task(id=36, stop_grace_seconds=0.5),
            ],
        }
    )
    assert desired.stop_grace_seconds == 5.0
    assert [t.stop_grace_seconds for t in desired.tasks] == [60.0, None, None, 0.5]


def test_response_level_stop_grace_defaults() -> None:
    bodies: list[dict[str, Any]] = [{"tasks": []}, {"tasks": [], "stop_grace_seconds": None}]
    for body in bodies:
        assert parse_desired_tasks(body).stop_grace_seconds == DEFAULT_STOP_GRACE_SECONDS


def test_ended_jobs_are_a_list_of_job_ids() -> None:
    assert parse_desired_tasks({"tasks": []}).ended_jobs == frozenset()
    assert parse_desired_tasks({"tasks": [], "ended_jobs": None}).ended_jobs == frozenset()
    desired = parse_desired_tasks({"tasks": [_task()], "ended_jobs": [9, 4]})
    assert desired.ended_jobs == {4, 9}
    assert parse_desired_tasks(desired.to_wire()) == desired
    _refused(parse_desired_tasks, {"tasks": [], "ended_jobs": [9, "4"]}, "ended_jobs[1]")
    _refused(parse_desired_tasks, {"tasks": [], "ended_jobs": 9}, "ended_jobs")


def test_unknown_fields_are_ignored() -> None:
    [task] = parse_desired_tasks({"tasks": [_task(new_field=1)], "later": True}).tasks
    assert task.key == TaskKey(33, 1) and task.gpu_indices == (0, 2)


@pytest.mark.parametrize("bad", [-1, "60", True, [], float("nan"), float("inf")])
def test_bad_stop_grace_is_a_protocol_error(bad: Any) -> None:
    _refused(
        parse_desired_tasks,
        {"tasks": [_task(stop_grace_seconds=bad)]},
        "tasks[0].stop_grace_seconds",
    )
    _refused(parse_desired_tasks, {"tasks": [], "stop_grace_seconds": bad}, "stop_grace_seconds")


@pytest.mark.parametrize(
    ("change", "field"),
    [
        ({"resources": {"cpu": float("inf")}}, "tasks[0].resources.cpu"),  # killed reconcile
        ({"resources": {"cpu": float("nan")}}, "tasks[0].resources.cpu"),
        ({"resources": {"cpu": -1}}, "tasks[0].resources.cpu"),
        ({"resources": {"memory_mb": 1.5}}, "tasks[0].resources.memory_mb"),
        ({"resources": {"gpu_indices": [0, True]}}, "tasks[0].resources.gpu_indices[1]"),
        ({"resources": {"gpu_indices": 0}}, "tasks[0].resources.gpu_indices"),
        ({"resources": []}, "tasks[0].resources"),
        ({"id": "33"}, "tasks[0].id"),
        ({"id": None}, "tasks[0].id"),
        ({"attempt": True}, "tasks[0].attempt"),
        ({"index": -1}, "tasks[0].index"),
        ({"role": "chief"}, "tasks[0].role"),
        ({"env": {"TRAINHUB_TASK_INDEX": 0}}, "tasks[0].env.TRAINHUB_TASK_INDEX"),
    ],
)
def test_malformed_desired_task_names_the_field(change: dict[str, Any], field: str) -> None:
    _refused(
        parse_desired_tasks, {"tasks": [_task(), _task(**change)]}, field.replace("[0]", "[1]", 1)
    )


def test_malformed_desired_document() -> None:
    _refused(parse_desired_tasks, [], "the desired tasks document")
    _refused(parse_desired_tasks, {}, "tasks")
    _refused(parse_desired_tasks, {"tasks": {}}, "tasks")
    _refused(parse_desired_tasks, {"tasks": [], "node_id": "7"}, "node_id")


# -- socket messages -------------------------------------------------------------------

MESSAGES: list[AgentMessage] = [
    Heartbeat(usage={"cpu_percent": 12.5, "memory_used_mb": 900}, tasks=(LiveTask(KEY, 4242),)),
    Heartbeat(),
    Heartbeat(
        usage={"cpu_percent": 3.0},
        gpus=({"index": 0, "utilization_percent": 87.0, "memory_used_mb": 61234},),
        ports_in_use=(8080, 24000),
    ),
    Heartbeat(isolation=IsolationMode.UID_CGROUP, agent_version="0.1.0+g1a2b3c"),
    Heartbeat(usage={"cpu_percent": 3.0, "cpus": 2.5, "memory_total_mb": 16000}),
    TaskStatus(KEY, ReportedState.RUNNING),
    TaskStatus(KEY, ReportedState.FAILED, 137, "killed by SIGKILL"),
    TaskStatus(KEY, ReportedState.SUCCEEDED, 0, "exited with code 0"),
    TaskStatus(KEY, ReportedState.STOPPED, 143, ""),
    Metrics(
        KEY,
        series={
            "loss": SeriesColumns(np.array([10, 11]), np.array([0.93, 0.9]), np.array([1, 2])),
            "acc": SeriesColumns(np.array([10]), np.array([1.0])),
        },
    ),
    Logs(KEY, LogStream.STDERR, ("a", "", "ü")),
    TasksChanged(),
    ErrorMessage("id must be an integer, got '31'"),
    ErrorMessage("points[3].step must be an integer >= 0, got -1", 12, "points[3].step"),
    Ack(7),
    Ack(7, (9, 12)),
    *STALL_MESSAGES,  # stall detection's (test_stallmessages.py has the rest)
]


@pytest.mark.parametrize("message", MESSAGES, ids=lambda m: type(m).__name__)
def test_every_message_kind_round_trips(message: AgentMessage) -> None:
    wire = json.loads(json.dumps(message.to_wire(), allow_nan=False))
    assert wire["type"] == message.KIND.value
    assert parse_agent_message(wire) == message


def test_every_kind_has_a_type() -> None:
    assert {m.KIND for m in MESSAGES} == set(MessageKind)


def test_a_heartbeat_carries_the_node_totals_when_the_agent_sends_them() -> None:
    usage = {"cpu_percent": 3.0, "cpus": 2, "memory_total_mb": 16000}
    parsed = parse_agent_message({"type": "heartbeat", "usage": usage})
    assert isinstance(parsed, Heartbeat)
    assert (parsed.cpus, parsed.memory_total_mb) == (2, 16000)
    older = parse_agent_message({"type": "heartbeat", "usage": {"cpu_percent": 3.0}})
    assert isinstance(older, Heartbeat)
    assert (older.cpus, older.memory_total_mb) == (None, None)


def test_optional_fields_of_a_status_default() -> None:
    status = parse_from_agent({"type": "task_status", "id": 31, "attempt": 2, "state": "stopped"})
    assert status == TaskStatus(KEY, ReportedState.STOPPED, None, "")


def _status(**change: Any) -> dict[str, Any]:
    return {"type": "task_status", "id": 31, "attempt": 2, "state": "running", **change}


def _columns(**series: object) -> dict[str, Any]:
    return {"type": "metrics", "id": 31, "attempt": 2, "series": series}


def _metrics(*points: object) -> dict[str, Any]:
    return {"type": "metrics", "id": 31, "attempt": 2, "points": list(points)}


def _point(**change: Any) -> dict[str, Any]:
    return {"step": 1, "time": WHEN.isoformat(), "values": {"loss": 0.5}, **change}


def _logs(**change: Any) -> dict[str, Any]:
    return {"type": "logs", "id": 31, "attempt": 2, "stream": "stdout", "lines": ["a"], **change}


NAN, INF = float("nan"), float("inf")


@pytest.mark.parametrize(
    ("message", "field", "said"),
    [
        ([], "message", "a JSON object"),
        ({}, "type", "is required"),
        ({"type": "nonsense"}, "type", "one of 'heartbeat'"),
        ({"type": 3}, "type", "one of"),
        ({"type": "heartbeat", "usage": {"cpu_percent": NAN}}, "usage.cpu_percent", "finite"),
        ({"type": "heartbeat", "usage": {"cpu_percent": INF}}, "usage.cpu_percent", "finite"),
        ({"type": "heartbeat", "usage": {"cpu_percent": 10**400}}, "usage.cpu_percent", "finite"),
        ({"type": "heartbeat", "usage": {"cpu_percent": True}}, "usage.cpu_percent", "number"),
        ({"type": "heartbeat", "usage": []}, "usage", "a JSON object"),
        ({"type": "heartbeat", "usage": {"cpus": 0}}, "usage.cpus", "a finite number > 0"),
        ({"type": "heartbeat", "usage": {"cpus": -2}}, "usage.cpus", "a finite number > 0"),
        ({"type": "heartbeat", "usage": {"cpus": INF}}, "usage.cpus", "finite"),
        ({"type": "heartbeat", "usage": {"cpus": "8"}}, "usage.cpus", "a finite number"),
        (
            {"type": "heartbeat", "usage": {"memory_total_mb": 0}},
            "usage.memory_total_mb",
            "an integer >= 1",
        ),
        (
            {"type": "heartbeat", "usage": {"memory_total_mb": 1024.5}},
            "usage.memory_total_mb",
            "an integer",
        ),
        (
            {"type": "heartbeat", "usage": {"memory_total_mb": True}},
            "usage.memory_total_mb",
            "an integer",
        ),
        ({"type": "heartbeat", "usage": {"cpu\u0000": 1}}, "usage", "snake_case"),
        ({"type": "heartbeat", "usage": {"x" * 65: 1}}, "usage", "snake_case"),
        (
            {"type": "heartbeat", "usage": {f"m{i}": 1 for i in range(33)}},
            "usage",
            "at most 32 fields",
        ),
        ({"type": "heartbeat", "tasks": {}}, "tasks", "a list"),
        (
            {"type": "heartbeat", "tasks": [{"id": 1, "attempt": 1, "pid": True}]},
            "tasks[0].pid",
            "an integer",
        ),
        ({"type": "heartbeat", "tasks": [{"id": 1, "pid": 5}]}, "tasks[0].attempt", "is required"),
        ({"type": "heartbeat", "ports_in_use": [80, 70000]}, "ports_in_use[1]", "<= 65535"),
        ({"type": "heartbeat", "ports_in_use": [True]}, "ports_in_use[0]", "an integer"),
        ({"type": "heartbeat", "ports_in_use": [0]}, "ports_in_use[0]", ">= 1"),
        (
            {"type": "heartbeat", "gpus": [{"index": 0, "utilization_percent": NAN}]},
            "gpus[0].utilization_percent",
            "finite",
        ),
        (
            {"type": "heartbeat", "gpus": [{"index": 0, "utilization_percent": 5}]},
            "gpus[0].memory_used_mb",
            "is required",
        ),
        ({"type": "heartbeat", "agent_version": 1}, "agent_version", "a string"),
        ({"type": "heartbeat", "agent_version": None}, "agent_version", "a string"),
        ({"type": "heartbeat", "agent_version": ""}, "agent_version", "must not be empty"),
        ({"type": "heartbeat", "agent_version": "0.1.0 "}, "agent_version", "such as 0.1.0"),
        ({"type": "heartbeat", "agent_version": "-1"}, "agent_version", "such as 0.1.0"),
        ({"type": "heartbeat", "agent_version": "1" * 65}, "agent_version", "at most 64"),
        (_status(id="31"), "id", "an integer"),
        (_status(id=31.0), "id", "an integer"),
        (_status(attempt=True), "attempt", "an integer"),
        (
            _status(state="exploded"),
            "state",
            "one of 'preparing', 'running', 'succeeded', 'failed', 'stopped'",
        ),
        (_status(state=None), "state", "is required"),
        (_status(exit_code=1.5), "exit_code", "an integer"),
        (_status(exit_code=False), "exit_code", "an integer"),
        (_status(message=3), "message", "a string"),
        (_metrics(_point(), _point(values={"loss": NAN})), "points[1].values.loss", "finite"),
        (_metrics(_point(values={"loss": -INF})), "points[0].values.loss", "finite"),
        (_metrics(_point(values={"loss": "0.5"})), "points[0].values.loss", "a finite number"),
        (_metrics(_point(values={"": 1})), "points[0].values", "an empty string"),
        (_metrics(_point(values=None)), "points[0].values", "is required"),
        (_metrics(_point(step=True)), "points[0].step", "an integer"),
        (_metrics(_point(step=-1)), "points[0].step", ">= 0"),
        (_metrics(_point(step=10**30)), "points[0].step", f"<= {2**53}"),
        (_metrics(*[_point()] * 1001), "points", "at most 1000 items, got 1001"),
        (_logs(lines=["a"] * 1001), "lines", "at most 1000 items"),
        (_metrics(_point(time="yesterday")), "points[0].time", "an ISO 8601 time"),
        (_metrics(_point(time="2025-01-01T12:00:00")), "points[0].time", "with a timezone"),
        (_metrics(_point(time=1.0)), "points[0].time", "a string"),
        ({"type": "metrics", "id": 31, "attempt": 2}, "series", "is required"),
        (_columns(loss={"steps": [1, 2], "values": [1.0]}), "series.loss.values", "as many"),
        (_columns(loss={"steps": [1], "values": [NAN]}), "series.loss.values[0]", "finite"),
        (_columns(loss={"steps": [1, 2], "values": [1, INF]}), "series.loss.values[1]", "finite"),
        (_columns(loss={"steps": [1], "values": ["1"]}), "series.loss.values[0]", "a finite"),
        (_columns(loss={"steps": [1], "values": [True]}), "series.loss.values[0]", "a finite"),
        (_columns(loss={"steps": [True], "values": [1.0]}), "series.loss.steps[0]", "an integer"),
        (_columns(loss={"steps": [1.5], "values": [1.0]}), "series.loss.steps[0]", "an integer"),
        (_columns(loss={"steps": [3, -1], "values": [1, 2]}), "series.loss.steps[1]", "0 to"),
        (_columns(loss={"steps": [2**53 + 1], "values": [1]}), "series.loss.steps[0]", "0 to"),
        (_columns(loss={"steps": [10**30], "values": [1]}), "series.loss.steps", "out of range"),
        (_columns(loss={"values": [1.0]}), "series.loss.steps", "is required"),
        (_columns(loss={"steps": [1], "values": [1], "times": [1, 2]}), "series.loss.times", "as"),
        (
            _columns(loss={"steps": [1], "values": [1], "times": [-5]}),
            "series.loss.times[0]",
            "0 to",
        ),
        (_columns(**{"": {"steps": [1], "values": [1]}}), "series", "names must be 1 to 100"),
        (_columns(loss=[1, 2]), "series.loss", "a JSON object"),
        (
            _columns(
                **{f"m{i}": {"steps": [0] * 30_000, "values": [0] * 30_000} for i in range(4)}
            ),
            "series",
            "at most 100000 values",
        ),
        (_metrics("x"), "points[0]", "a JSON object"),
        (_logs(stream="stdin"), "stream", "one of 'stdout', 'stderr'"),
        (_logs(lines=["a", 5]), "lines[1]", "a string"),
        (_logs(lines="abc"), "lines", "a list"),
    ],
)
def test_malformed_field_is_refused_by_name(message: Any, field: str, said: str) -> None:
    text = _refused(parse_agent_message, message, field)
    assert said in text


def test_log_lines_are_cleaned_not_refused() -> None:
    """NUL and lone surrogates (invalid UTF-8 on the way) become U+FFFD; nothing is lost."""
    logs = parse_from_agent(_logs(lines=["a\x00b", "c\ud800d", "fine ü"]))
    assert isinstance(logs, Logs)
    assert logs.lines == ("a\ufffdb", "c\ufffd\ufffd\ufffdd", "fine ü")


def test_directions_are_kept_apart() -> None:
    _refused(parse_from_agent, {"type": "tasks_changed"}, "type 'tasks_changed'")
    _refused(parse_from_server, {"type": "heartbeat"}, "type 'heartbeat'")
    assert parse_from_server({"type": "error", "message": "x"}) == ErrorMessage("x")
    assert parse_from_server({"type": "ack", "seq": 3}) == Ack(3)
    _refused(parse_from_agent, {"type": "ack", "seq": 3}, "type 'ack'")
    assert parse_from_server({"type": "ack", "seq": 3, "also": [5]}) == Ack(3, (5,))
    _refused(parse_from_server, {"type": "ack", "seq": 3, "also": [0]}, "also[0]")
    _refused(parse_from_server, {"type": "ack", "seq": 3, "also": "5"}, "also")
    assert isinstance(parse_from_agent({"type": "heartbeat"}), Heartbeat)


def test_error_messages_say_what_was_sent() -> None:
    text = _refused(parse_agent_message, _status(state="x" * 200), "state")
    assert len(text) < 200 and re.search(r"got 'x+\.\.\.$", text)


def test_enrollment_answer() -> None:
    expires = datetime(2026, 12, 24, 12, 0, tzinfo=UTC)
    enrolled = Enrolled(node_id=7, credential="7.s3cret", credential_expires_at=expires)
    assert parse_enrolled(json.loads(json.dumps(enrolled.to_wire()))) == enrolled
    assert "s3cret" not in repr(enrolled)
    when = expires.isoformat()
    _refused(
        parse_enrolled,
        {"node_id": "7", "credential": "x", "credential_expires_at": when},
        "node_id",
    )
    _refused(
        parse_enrolled,
        {"node_id": 7, "credential": "", "credential_expires_at": when},
        "credential",
    )
    _refused(parse_enrolled, {"node_id": 7, "credential": "x"}, "credential_expires_at")
    _refused(
        parse_enrolled,
        {"node_id": 7, "credential": "x", "credential_expires_at": "2026-12-24T12:00:00"},
        "credential_expires_at",
    )
    _refused(parse_enrolled, "ok", "the enrollment answer")


def test_renewal_answer() -> None:
    expires = datetime(2026, 12, 24, 12, 0, tzinfo=UTC)
    renewed = RenewedCredential(credential="7.n3w", credential_expires_at=expires)
    assert parse_renewed_credential(json.loads(json.dumps(renewed.to_wire()))) == renewed
    assert "n3w" not in repr(renewed)
    _refused(parse_renewed_credential, {"credential": "7.n3w"}, "credential_expires_at")
    _refused(
        parse_renewed_credential,
        {"credential": 7, "credential_expires_at": expires.isoformat()},
        "credential",
    )
    _refused(parse_renewed_credential, [], "the credential renewal answer")


def test_the_agent_version_is_optional_and_sent_only_when_known() -> None:
    assert "agent_version" not in Heartbeat().to_wire()
    assert parse_from_agent({"type": "heartbeat"}) == Heartbeat()
    beat = parse_from_agent({"type": "heartbeat", "agent_version": "1!2.0rc1.post3"})
    assert isinstance(beat, Heartbeat) and beat.agent_version == "1!2.0rc1.post3"
