"""The agent's side of delivery on its socket (docs/protocol.md §1, "Delivery").

Every message goes up numbered (`seq`: 1, 2, 3… per connection): the outbox's statuses,
metrics and logs, and the heartbeats. The server answers with `ack` (everything up to a
seq was handled) and with `error` frames for what it refused, message or item. What is
not acknowledged when a connection ends is sent again, first, on the next one; what is
acknowledged lets the task table record how far each task's files were delivered.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from typing import Protocol

from ps_runtime.agent.outbox import Outbox
from ps_runtime.agent.protocol import Ack, ErrorMessage, Heartbeat, TaskKey

logger = logging.getLogger(__name__)

# What `Supervisor.offsets_snapshot` returns: offsets per task, and the ended tasks.
Snapshot = tuple[dict[TaskKey, dict[str, int]], set[TaskKey]]


class Socket(Protocol):
    async def send(self, message: str) -> None: ...

    async def close(self, code: int = 1000, reason: str = "") -> None: ...


class Delivered(Protocol):
    """The supervisor's side: what has been read into the outbox, and saving it."""

    def offsets_snapshot(self) -> Snapshot: ...

    def commit(self, snapshot: Snapshot) -> None: ...


def merge(snapshots: list[object]) -> Snapshot:
    """Acknowledged snapshots, oldest first, as one: the newest offsets, every ended task."""
    offsets: dict[TaskKey, dict[str, int]] = {}
    ended: set[TaskKey] = set()
    for snapshot in snapshots:
        assert isinstance(snapshot, tuple)
        offsets.update(snapshot[0])
        ended |= snapshot[1]
    return offsets, ended


class Uplink:
    """Numbers what goes up one connection at a time and handles what the server says
    about it. `connected()` starts each connection; the sends keep one order."""

    def __init__(self, outbox: Outbox, supervisor: Delivered) -> None:
        self.outbox = outbox
        self._supervisor = supervisor
        self._lock = asyncio.Lock()
        self._seq = 0  # the last sequence number sent on this connection
        self.resent = 0  # messages sent again after a connection was lost
        self.refusals = 0  # error frames received
        self._committing = 0  # acknowledged snapshots being saved

    def connected(self) -> None:
        """A new connection: numbering starts again at 1, and what the last one did not
        get acknowledged goes first (the server applies a repeated status once)."""
        self._seq = 0
        self.resent += self.outbox.resend_unacknowledged()

    async def flush(self, ws: Socket) -> None:
        async with self._lock:
            # Taken before the outbox: everything read up to these offsets is in it (or in
            # flight); saved once the server acknowledged what is taken now.
            snapshot = self._supervisor.offsets_snapshot()
            for seq, message in self.outbox.take(self._seq + 1, mark=snapshot):
                # A failed send leaves the rest in flight: sent again on the next connection.
                await ws.send(json.dumps({**message.to_wire(), "seq": seq}))
                self._seq = seq

    async def send_heartbeat(self, ws: Socket, heartbeat: Heartbeat) -> None:
        async with self._lock:
            self._seq += 1
            await ws.send(json.dumps({**heartbeat.to_wire(), "seq": self._seq}))

    async def received(self, message: Ack | ErrorMessage) -> None:
        if isinstance(message, Ack):
            await self.acknowledged(message)
        else:
            self.refused(message)

    async def acknowledged(self, ack: Ack) -> None:
        marks = self.outbox.acknowledge(ack.seq, ack.also)
        if marks:
            # Delivered: a restarted agent resumes the task files after them.
            self._committing += 1
            try:
                await asyncio.to_thread(self._supervisor.commit, merge(marks))
            finally:
                self._committing -= 1

    async def finish(self, ws: Socket, poll: float = 0.02) -> None:
        """Send what is left and wait until all of it is acknowledged and saved (the
        caller bounds the wait; the receive loop must still be running)."""
        await self.flush(ws)
        await self.settled(poll)

    async def settled(self, poll: float = 0.02) -> None:
        """Wait until everything sent is acknowledged and saved (the caller bounds it)."""
        while self.outbox.in_flight() or self._committing:
            await asyncio.sleep(poll)

    async def close(self, ws: Socket, reason: str, drain: float) -> None:
        """Close a connection that is not lost: send nothing more on it and wait (at most
        `drain` seconds) until what was sent is acknowledged, so that none of it goes
        again on the next connection and is stored twice."""
        async with self._lock:
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(drain):
                    await self.settled()
            await ws.close(reason=reason)

    def refused(self, error: ErrorMessage) -> None:
        self.refusals += 1
        logger.warning(
            "the server refused %s of message %s: %s",
            error.field or "all",
            error.seq,
            error.message,
        )
