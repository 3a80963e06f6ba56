"""The metrics message of the agent socket (docs/protocol.md §1): points as columns.

An agent sends a task's points as one array each of steps, values and (optionally)
times per metric name; the server checks each batch with array operations and refuses
a bad one whole, naming the field. The per-point form of older agents (`points`:
one object per `report()` call) is still read (`MetricPoint`), item by item.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any, ClassVar

import numpy as np
import numpy.typing as npt

from ps_runtime.agent.fields import JsonObject, ProtocolError, as_number, join
from ps_runtime.agent.kinds import MessageKind
from ps_runtime.agent.taskkey import TaskKey, task_key, task_wire

# A metrics or logs message holds at most this many items (the agent batches by 1,000);
# a bigger one is refused as a whole.
MAX_BATCH_ITEMS = 1000
# A columnar metrics message holds at most this many values in all (over its series).
MAX_BATCH_VALUES = 100_000
# Steps are what a chart's x axis shows; beyond 2**53 a browser cannot tell them apart.
MAX_STEP = 2**53
# A metric's name, as the server stores it.
MAX_NAME_CHARS = 100
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_MICROSECOND = timedelta(microseconds=1)
# Times as microseconds since the epoch: from 1970 to 2200.
MAX_TIME_US = 7_258_118_400_000_000


def micros(when: datetime) -> int:
    """An aware time as whole microseconds since the epoch."""
    return (when - _EPOCH) // _MICROSECOND


def batch_items(fields: JsonObject, name: str) -> list[Any]:
    """The items of a metrics or logs batch: a list of at most `MAX_BATCH_ITEMS`."""
    items = fields.items(name, required=True)
    if len(items) > MAX_BATCH_ITEMS:
        raise ProtocolError(
            f"{fields.at(name)} must hold at most {MAX_BATCH_ITEMS} items, got {len(items)}",
            fields.at(name),
        )
    return items


@dataclass(frozen=True, slots=True)
class MetricPoint:
    """What one `ps_runtime.report(step=…, **values)` call reported."""

    values: Mapping[str, float]
    step: int | None = None
    time: datetime | None = None  # None: the server uses the time it received the point

    def to_wire(self) -> dict[str, Any]:
        return {
            "step": self.step,
            "time": None if self.time is None else self.time.isoformat(),
            "values": dict(self.values),
        }

    @classmethod
    def from_fields(cls, fields: JsonObject) -> MetricPoint:
        values = fields.obj("values", required=True)
        if "" in values.data:
            raise ProtocolError(
                f"{values.path} must not name a value with an empty string", values.path
            )
        return cls(
            values={name: as_number(v, values.at(name)) for name, v in values.data.items()},
            step=fields.optional_integer("step", minimum=0, maximum=MAX_STEP),
            time=fields.optional_time("time"),
        )


@dataclass(frozen=True, slots=True, eq=False)
class SeriesColumns:
    """The points of one metric in a batch: `steps[i]`, `values[i]` and `times[i]`
    (microseconds since the epoch; None: the server's time of receipt) go together."""

    steps: npt.NDArray[np.int64]
    values: npt.NDArray[np.float64]
    times: npt.NDArray[np.int64] | None = None

    def __len__(self) -> int:
        return len(self.steps)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, SeriesColumns):
            return NotImplemented
        same_times = (
            self.times is None and other.times is None
            if self.times is None or other.times is None
            else np.array_equal(self.times, other.times)
        )
        return (
            same_times
            and np.array_equal(self.steps, other.steps)
            and np.array_equal(self.values, other.values)
        )

    __hash__ = None  # type: ignore[assignment]

    def to_wire(self) -> dict[str, Any]:
        wire: dict[str, Any] = {"steps": self.steps.tolist(), "values": self.values.tolist()}
        if self.times is not None:
            wire["times"] = self.times.tolist()
        return wire


def series_of(points: tuple[MetricPoint, ...], now: datetime) -> dict[str, SeriesColumns]:
    """Reported points as columns per name, in report order. A point without a step is
    left out (the server never stored those); a point without a time gets `now` when
    another point of the batch has one (else the batch carries no times at all)."""
    steps: dict[str, list[int]] = {}
    values: dict[str, list[float]] = {}
    times: dict[str, list[int]] = {}
    timed = any(p.time is not None for p in points)
    default = micros(now)
    for point in points:
        if point.step is None:
            continue
        when = default if point.time is None else micros(point.time)
        for name, value in point.values.items():
            steps.setdefault(name, []).append(point.step)
            values.setdefault(name, []).append(float(value))
            times.setdefault(name, []).append(when)
    return {
        name: SeriesColumns(
            np.asarray(steps[name], dtype=np.int64),
            np.asarray(values[name], dtype=np.float64),
            np.asarray(times[name], dtype=np.int64) if timed else None,
        )
        for name in steps
    }


def _array(items: list[Any], path: str, integers: bool) -> npt.NDArray[Any]:
    """A JSON list of numbers as an array, every item checked at once: integers (not
    bools) for steps and times, finite numbers for values."""
    kinds = set(map(type, items))
    allowed = {int} if integers else {int, float}
    if not kinds <= allowed:
        bad = next(i for i, item in enumerate(items) if type(item) not in allowed)
        want = "an integer" if integers else "a finite number"
        where = join(path, bad)
        raise ProtocolError(f"{where} must be {want}, got {items[bad]!r}", where)
    try:
        array = np.asarray(items, dtype=np.int64 if integers else np.float64)
    except OverflowError:
        raise ProtocolError(f"{path} holds a number out of range", path) from None
    if not integers and not bool(np.isfinite(array).all()):
        bad = int(np.flatnonzero(~np.isfinite(array))[0])
        where = join(path, bad)
        raise ProtocolError(f"{where} must be a finite number, got {items[bad]!r}", where)
    return array


def _in_range(array: npt.NDArray[np.int64], path: str, low: int, high: int) -> None:
    outside = (array < low) | (array > high)
    if bool(outside.any()):
        bad = int(np.flatnonzero(outside)[0])
        where = join(path, bad)
        raise ProtocolError(f"{where} must be {low} to {high}, got {int(array[bad])}", where)


def parse_series(fields: JsonObject) -> dict[str, SeriesColumns]:
    """The `series` object of a metrics message, checked with array operations.

    Raises:
        ProtocolError: naming the first bad field (the whole batch is refused).
    """
    series = fields.obj("series", required=True)
    if len(series.data) > MAX_BATCH_ITEMS:
        raise ProtocolError(
            f"{series.path} must hold at most {MAX_BATCH_ITEMS} series, got {len(series.data)}",
            series.path,
        )
    out: dict[str, SeriesColumns] = {}
    total = 0
    for name in series.data:
        if not name or len(name) > MAX_NAME_CHARS:
            raise ProtocolError(
                f"{series.path} names must be 1 to {MAX_NAME_CHARS} characters, got {name!r}",
                series.path,
            )
        one = series.obj(name, required=True)
        steps_path, values_path = one.at("steps"), one.at("values")
        steps = _array(one.items("steps", required=True), steps_path, integers=True)
        values = _array(one.items("values", required=True), values_path, integers=False)
        if len(values) != len(steps):
            raise ProtocolError(
                f"{values_path} must hold as many items as {steps_path} "
                f"({len(steps)}), got {len(values)}",
                values_path,
            )
        _in_range(steps, steps_path, 0, MAX_STEP)
        times = None
        if one.data.get("times") is not None:
            times_path = one.at("times")
            times = _array(one.items("times"), times_path, integers=True)
            if len(times) != len(steps):
                raise ProtocolError(
                    f"{times_path} must hold as many items as {steps_path} "
                    f"({len(steps)}), got {len(times)}",
                    times_path,
                )
            _in_range(times, times_path, 0, MAX_TIME_US)
        total += len(steps)
        if total > MAX_BATCH_VALUES:
            raise ProtocolError(
                f"{series.path} must hold at most {MAX_BATCH_VALUES} values in all",
                series.path,
            )
        out[name] = SeriesColumns(steps, values, times)
    return out


@dataclass(frozen=True, slots=True)
class Metrics:
    """A batch of a task attempt's reported points (at most every 0.5 s): the agent
    fills `points`; on the wire, and as the server reads it, they are `series` (the
    server reads the per-point form of older agents into `points`)."""

    KIND: ClassVar[MessageKind] = MessageKind.METRICS
    task: TaskKey
    points: tuple[MetricPoint, ...] = ()
    series: Mapping[str, SeriesColumns] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.points and self.series:
            raise ValueError("a Metrics message holds points or series, not both")

    def columns(self, now: datetime) -> dict[str, SeriesColumns]:
        """Every point of the message as columns per name (`now`: for points without a
        time, when others have one)."""
        return series_of(self.points, now) if self.points else dict(self.series)

    def to_wire(self, now: datetime | None = None) -> dict[str, Any]:
        columns = self.columns(now or datetime.now(UTC))
        return {
            **task_wire(self.KIND, self.task),
            "series": {name: c.to_wire() for name, c in columns.items()},
        }

    @classmethod
    def from_fields(cls, fields: JsonObject) -> Metrics:
        """The columnar form (`series`), or the per-point form of older agents (`points`)."""
        task = task_key(fields)
        if "series" in fields.data or "points" not in fields.data:
            return cls(task=task, series=parse_series(fields))
        where = fields.at("points")
        points = batch_items(fields, "points")
        return cls(
            task=task,
            points=tuple(
                MetricPoint.from_fields(JsonObject(p, join(where, i))) for i, p in enumerate(points)
            ),
        )
