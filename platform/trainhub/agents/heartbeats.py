"""Heartbeats of every agent connected to this web process, written together.

A heartbeat is soft state: the node's usage and "seen at". Each socket hands its
heartbeats to the process's `HeartbeatWriter`, which keeps the latest per node and
writes them every `FLUSH_SECONDS` in one go (`services.apply_heartbeats`); the agent's
ack does not wait for that write. A thousand agents beating every 5 s then cost a few
statements a second instead of two per beat, and the write is never more than
`FLUSH_SECONDS` behind (far inside `TRAINHUB_NODE_LOST_AFTER`).
"""

from __future__ import annotations

import asyncio
import logging
import weakref
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime

from ps_runtime.agent.protocol import Heartbeat
from trainhub.opmetrics import HEARTBEAT_WRITE_LAG

logger = logging.getLogger(__name__)

FLUSH_SECONDS = 0.25

Beats = dict[int, tuple[Heartbeat, datetime]]


class HeartbeatWriter:
    """Latest heartbeat per node, flushed by a task on the running event loop."""

    def __init__(self, write: Callable[[Beats], Awaitable[None]]) -> None:
        self._write = write
        self._pending: Beats = {}
        self._task: asyncio.Task[None] | None = None
        self.flushes = 0

    def add(self, node_id: int, heartbeat: Heartbeat, now: datetime) -> None:
        self._pending[node_id] = (heartbeat, now)
        if self._task is None or self._task.done():
            self._task = asyncio.get_running_loop().create_task(self._run())

    async def _run(self) -> None:
        while self._pending:
            await asyncio.sleep(FLUSH_SECONDS)
            await self.flush()

    async def flush(self) -> None:
        beats, self._pending = self._pending, {}
        if not beats:
            return
        try:
            await self._write(beats)
            self.flushes += 1
            written = datetime.now(UTC)
            for _, arrived in beats.values():
                HEARTBEAT_WRITE_LAG.observe((written - arrived).total_seconds())
        except Exception:  # kept for the next flush unless a newer beat replaced it
            logger.exception("writing %d heartbeats failed; retrying", len(beats))
            self._pending = {**beats, **self._pending}
            await asyncio.sleep(FLUSH_SECONDS)


_writers: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, HeartbeatWriter] = (
    weakref.WeakKeyDictionary()
)


def writer(write: Callable[[Beats], Awaitable[None]]) -> HeartbeatWriter:
    """The running event loop's writer (one per web process in practice)."""
    loop = asyncio.get_running_loop()
    found = _writers.get(loop)
    if found is None:
        found = _writers[loop] = HeartbeatWriter(write)
    return found
