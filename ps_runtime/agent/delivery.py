"""Delivery on the agent socket: sequence numbers, acknowledgements, refusals item by item.

Every message an agent sends carries `seq` (1, 2, 3… per connection); the server answers
with `ack` frames (`seq`: every message up to it was handled) and with an `error` frame
for each refused message or item, naming its field. The server reads what it receives
with `receive`: a columnar metrics batch with a bad series is refused whole, the field
named; a per-point batch of an older agent with one bad point is applied without that
point (and the point is refused alone); a message whose envelope is bad is refused whole.
`AckWindow` is the server's count of what it may acknowledge. docs/protocol.md §1.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from ps_runtime.agent.fields import JsonObject, ProtocolError, join
from ps_runtime.agent.kinds import MessageKind
from ps_runtime.agent.messages import Heartbeat, Logs, TaskStatus, UpwardMessage, parse_from_agent
from ps_runtime.agent.metricmessages import MAX_STEP, MetricPoint, Metrics, batch_items
from ps_runtime.agent.stallmessages import Progress, Stacks


@dataclass(frozen=True, slots=True)
class Refusal:
    """Why a message (`field` empty) or one of its items (`field` names it) was refused."""

    field: str
    reason: str


@dataclass(frozen=True, slots=True)
class Received:
    """One message as the server read it: `message` is None when it was refused whole."""

    seq: int | None
    message: UpwardMessage | None
    refusals: tuple[Refusal, ...] = ()


def _seq(obj: object) -> int | None:
    """The message's `seq`, when it has a usable one (a bad one is no reason to refuse)."""
    if isinstance(obj, dict):
        seq = obj.get("seq")
        if isinstance(seq, int) and not isinstance(seq, bool) and seq >= 1:
            return seq
    return None


def receive(obj: object) -> Received:
    """Read one decoded message from an agent, refusing bad items one by one."""
    seq = _seq(obj)
    try:
        fields = JsonObject(obj)
        kind = fields.choice("type", MessageKind)
        if kind == MessageKind.METRICS and "series" not in fields.data and "points" in fields.data:
            return _metrics(seq, fields)  # the per-point form of older agents
        message = parse_from_agent(obj)
    except ProtocolError as exc:
        return Received(seq, None, (Refusal(exc.path, str(exc)),))
    return Received(seq, message)


def _metrics(seq: int | None, fields: JsonObject) -> Received:
    probe = Metrics.from_fields(JsonObject({**fields.data, "points": []}))  # the envelope
    where = fields.at("points")
    points: list[MetricPoint] = []
    refusals: list[Refusal] = []
    for i, item in enumerate(batch_items(fields, "points")):
        point = _plain_point(item)
        if point is not None:
            points.append(point)
            continue
        try:  # the strict reader: the point is refused by name (or was fine after all)
            points.append(MetricPoint.from_fields(JsonObject(item, join(where, i))))
        except ProtocolError as exc:
            refusals.append(Refusal(exc.path or join(where, i), str(exc)))
    return Received(seq, Metrics(probe.task, tuple(points)), tuple(refusals))


def _plain_point(item: Any) -> MetricPoint | None:
    """The common, well-formed point, read in a few type checks (a metric flood is
    thousands per second); None sends it to the strict reader, which says what is wrong.
    Accepts exactly what `MetricPoint.from_fields` accepts."""
    if type(item) is not dict:
        return None
    values = item.get("values")
    step = item.get("step")
    if type(values) is not dict or not values or "" in values:
        return None
    if step is not None and (type(step) is not int or not 0 <= step <= MAX_STEP):
        return None
    for value in values.values():
        kind = type(value)
        if kind is float:
            if not math.isfinite(value):
                return None
        elif kind is not int or abs(value) > 2**1023:
            return None
    time = item.get("time")
    when: datetime | None = None
    if time is not None:
        if type(time) is not str:
            return None
        try:
            when = datetime.fromisoformat(time)
        except ValueError:
            return None
        if when.tzinfo is None:
            return None
    return MetricPoint(values=values, step=step, time=when)


def is_control(message: UpwardMessage) -> bool:
    """Heartbeats and task statuses are answered at once; the rest (metrics, logs, progress,
    stacks) may queue."""
    return isinstance(message, Heartbeat | TaskStatus)


def is_data(message: UpwardMessage) -> bool:
    return isinstance(message, Metrics | Logs | Progress | Stacks)


class AckWindow:
    """What a connection may acknowledge: the highest seq such that every message up to
    it that was received has been handled (gaps in the agent's numbering do not stall)."""

    def __init__(self) -> None:
        self._open: set[int] = set()
        self._highest = 0
        self._acked = 0

    def received(self, seq: int) -> None:
        self._open.add(seq)
        self._highest = max(self._highest, seq)

    @property
    def level(self) -> int:
        """The seq acknowledged so far: every message up to it was handled."""
        return self._acked

    def handled(self, seq: int) -> int | None:
        """Mark `seq` handled; the new ack level when it moved, else None."""
        self._open.discard(seq)
        level = min(self._open) - 1 if self._open else self._highest
        if level > self._acked:
            self._acked = level
            return level
        return None


__all__ = ["AckWindow", "Received", "Refusal", "is_control", "is_data", "receive"]
