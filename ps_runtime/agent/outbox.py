"""Bounded, ordered buffer of messages waiting to go up the agent socket, and of those
sent but not yet acknowledged.

Reader threads add log lines and metric points; the daemon drains every 0.5 s, so each
drain yields at most one batch per (task, kind, stream) plus any task statuses, in the
order they happened. While the socket is down the buffer fills up to half its byte
budget; then `has_room()` turns false and the readers wait (the task's output stays in
its files, delivered once the socket is back). The full budget is a last line of
defence: over it, the oldest log batches are dropped first, then the oldest metric
batches; task statuses, stacks and stall-detection progress are never dropped (there
are at most a few per task attempt and minute).

`take` numbers the messages it hands out and keeps them in flight until the server
acknowledges them (`acknowledge`); after a reconnection `resend_unacknowledged` puts
them back first in line, so a cut connection loses nothing (docs/protocol.md §1). A mark
given to `take` (the daemon's offsets snapshot) comes back from `acknowledge` once
everything taken with it is acknowledged.
"""

from __future__ import annotations

import logging
import threading
from collections import deque
from dataclasses import dataclass, field
from typing import Any

from ps_runtime.agent.protocol import (
    MAX_BATCH_VALUES,
    Logs,
    LogStream,
    MessageKind,
    MetricPoint,
    Metrics,
    Progress,
    ProgressItem,
    TaskKey,
    TaskStatus,
    UpwardMessage,
)

logger = logging.getLogger(__name__)

LOGS = MessageKind.LOGS
METRICS = MessageKind.METRICS
PROGRESS = MessageKind.PROGRESS

DEFAULT_MAX_BYTES = 16 * 1024 * 1024
DEFAULT_MAX_BATCH_ITEMS = 1000
HALF_BATCH_VALUES = MAX_BATCH_VALUES // 2
# Rough per-item overhead in the JSON message, so empty lines still count.
_ITEM_OVERHEAD = 8


@dataclass
class _Batch:
    kind: MessageKind  # LOGS, METRICS or PROGRESS
    key: TaskKey
    stream: LogStream | None  # the stream of a logs batch, None for the others
    items: list[Any] = field(default_factory=list)  # log lines, MetricPoints, ProgressItems
    size: int = 0
    values: int = 0  # of a metrics batch: the values of its points (its columns' length)

    def to_message(self) -> Logs | Metrics | Progress:
        if self.stream is not None:
            return Logs(self.key, self.stream, tuple(self.items))
        if self.kind == PROGRESS:
            return Progress(self.key, tuple(self.items))
        return Metrics(self.key, tuple(self.items))


@dataclass
class _Ready:
    """A message ready to go (a task status, or one put back), with what it costs of the
    budget and the mark to return once it is acknowledged."""

    message: UpwardMessage
    size: int = 0
    mark: object | None = None


# A queued entry is an open or closed batch, or a ready message.
_Entry = _Batch | _Ready


class Outbox:
    """Thread-safe; producers are supervisor threads, the consumer is the daemon loop."""

    def __init__(
        self, max_bytes: int = DEFAULT_MAX_BYTES, max_batch_items: int = DEFAULT_MAX_BATCH_ITEMS
    ) -> None:
        self._max_bytes = max_bytes
        self._max_batch_items = max_batch_items
        self._lock = threading.Lock()
        self._entries: deque[_Entry] = deque()
        self._open: dict[tuple[MessageKind, TaskKey, LogStream | None], _Batch] = {}
        self._bytes = 0
        self._in_flight: deque[tuple[int, _Ready]] = deque()
        self._in_flight_bytes = 0
        self.dropped_items = 0

    def add_log(self, key: TaskKey, stream: LogStream, line: str) -> None:
        self._add(LOGS, key, stream, line, len(line))

    def add_metric(self, key: TaskKey, point: MetricPoint, size: int) -> None:
        self._add(METRICS, key, None, point, size, len(point.values))

    def add_progress(self, key: TaskKey, item: ProgressItem) -> None:
        """A stall-detection item (a few per task and minute; never dropped for room)."""
        self._add(PROGRESS, key, None, item, 0)

    def add_message(self, message: UpwardMessage, size: int) -> None:
        """Queue a message as it is (a task's stacks), after everything already buffered."""
        with self._lock:
            self._entries.append(_Ready(message, size))
            self._bytes += size

    def add_status(self, status: TaskStatus) -> None:
        """Queue a task_status after everything already buffered for that task."""
        with self._lock:
            for open_key in [k for k in self._open if k[1] == status.task]:
                del self._open[open_key]
            self._entries.append(_Ready(status))

    def has_room(self) -> bool:
        """False while the buffer and the messages in flight hold half the byte budget
        or more: readers then wait instead of adding more (so nothing is dropped)."""
        with self._lock:
            return self._bytes + self._in_flight_bytes < self._max_bytes // 2

    def drain(self) -> list[UpwardMessage]:
        """Everything buffered, as protocol messages in order; the buffer is left empty
        and nothing is kept in flight (for a consumer without acknowledgements)."""
        with self._lock:
            ready = self._pop_all()
        return [r.message for r in ready]

    def take(self, first_seq: int, mark: object | None = None) -> list[tuple[int, UpwardMessage]]:
        """Everything buffered, numbered from `first_seq`, kept in flight until
        acknowledged; `mark` goes with the last of them (nothing taken: it is dropped)."""
        with self._lock:
            ready = self._pop_all()
            if ready and mark is not None:
                ready[-1].mark = mark
            taken = []
            for seq, entry in enumerate(ready, start=first_seq):
                self._in_flight.append((seq, entry))
                self._in_flight_bytes += entry.size
                taken.append((seq, entry.message))
        return taken

    def acknowledge(self, upto: int, also: tuple[int, ...] = ()) -> list[object]:
        """Forget the messages in flight up to `upto`, and those numbered in `also` that
        carry no mark; the marks that went with them. (A marked message acknowledged out
        of order stays until the cumulative ack: its mark may be saved only after the
        marks of every message before it.)"""
        marks = []
        with self._lock:
            while self._in_flight and self._in_flight[0][0] <= upto:
                _, entry = self._in_flight.popleft()
                self._in_flight_bytes -= entry.size
                if entry.mark is not None:
                    marks.append(entry.mark)
            if also:
                wanted = set(also)
                kept: deque[tuple[int, _Ready]] = deque()
                for seq, entry in self._in_flight:
                    if seq in wanted and entry.mark is None:
                        self._in_flight_bytes -= entry.size
                    else:
                        kept.append((seq, entry))
                self._in_flight = kept
        return marks

    def resend_unacknowledged(self) -> int:
        """Put the messages still in flight (a connection was lost) back ahead of
        anything newer, for `take` to number again; how many there were."""
        with self._lock:
            entries = [entry for _, entry in self._in_flight]
            self._in_flight.clear()
            self._in_flight_bytes = 0
            for entry in reversed(entries):
                self._entries.appendleft(entry)
                self._bytes += entry.size
        return len(entries)

    def in_flight(self) -> int:
        with self._lock:
            return len(self._in_flight)

    def requeue(self, messages: list[UpwardMessage]) -> None:
        """Put back messages that could not be sent, ahead of anything newer."""
        with self._lock:
            for message in reversed(messages):
                entry = _Ready(message, _message_size(message))
                self._entries.appendleft(entry)
                self._bytes += entry.size

    def _pop_all(self) -> list[_Ready]:
        # Caller holds the lock.
        ready = [
            _Ready(e.to_message(), e.size) if isinstance(e, _Batch) else e for e in self._entries
        ]
        self._entries.clear()
        self._open.clear()
        self._bytes = 0
        return ready

    def __len__(self) -> int:
        with self._lock:
            return len(self._entries)

    def _add(
        self,
        kind: MessageKind,
        key: TaskKey,
        stream: LogStream | None,
        item: Any,
        size: int,
        values: int = 0,
    ) -> None:
        size += _ITEM_OVERHEAD
        with self._lock:
            batch = self._open.get((kind, key, stream))
            if batch is None:
                batch = _Batch(kind, key, stream)
                self._entries.append(batch)
                self._open[(kind, key, stream)] = batch
            batch.items.append(item)
            batch.size += size
            batch.values += values
            self._bytes += size
            # Half the values a metrics message may hold: one more point (a report line
            # of at most 64 KiB) never takes a batch over the limit.
            if len(batch.items) >= self._max_batch_items or batch.values >= HALF_BATCH_VALUES:
                del self._open[(kind, key, stream)]
            self._enforce_budget()

    def _enforce_budget(self) -> None:
        # Caller holds the lock.
        for kind in (LOGS, METRICS):
            while self._bytes > self._max_bytes:
                victim = next(
                    (e for e in self._entries if isinstance(e, _Batch) and e.kind == kind), None
                )
                if victim is None:
                    break
                self._entries.remove(victim)
                self._open.pop((victim.kind, victim.key, victim.stream), None)
                self._bytes -= victim.size
                self.dropped_items += len(victim.items)
                logger.warning(
                    "outbox full: dropped %d %s of task %s attempt %s",
                    len(victim.items),
                    "log lines" if kind == LOGS else "metric points",
                    victim.key.id,
                    victim.key.attempt,
                )


def _message_size(message: UpwardMessage) -> int:
    """The budget a requeued message takes again (log and metric batches; a status is 0)."""
    if isinstance(message, Logs):
        return sum(len(line) + _ITEM_OVERHEAD for line in message.lines)
    if isinstance(message, Metrics):
        points = len(message.points) + sum(len(c) for c in message.series.values())
        return points * (64 + _ITEM_OVERHEAD)
    if isinstance(message, Progress):
        return len(message.items) * _ITEM_OVERHEAD
    return 0
