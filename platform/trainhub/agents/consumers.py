"""The `/ws/agent/` endpoint: one long-lived socket per node agent.

Three lanes per socket (docs/design.md, "Agent gateway"): task statuses are applied in
order by a task of the socket (one that ends a task once the data messages sent before it
are stored: a failure's cause is read from the task's stderr, and a job seen ended has its
last points and result line); heartbeats go to the process's `HeartbeatWriter` (written for
all sockets together every 0.25 s); metrics, logs, progress and stacks go to a queue that a task of
the socket drains in batches (one lookup and one insert per task and kind), so a
heartbeat never waits behind a flood of points. Database work runs on pooled connections
in worker threads (one thread for SQLite, which has one writer anyway). Every numbered message is
acknowledged once handled (`AckWindow`); what is refused, message or item, gets an error
frame naming its field, and the rest goes on.

A revoked credential closes the socket (4401) when the channel-layer notice arrives; in
case it is lost, the socket also checks its credential again at its first message
`CREDENTIAL_RECHECK_SECONDS` after the previous check (one primary-key lookup).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable
from datetime import datetime
from typing import Any, TypeVar

from channels.db import database_sync_to_async
from channels.generic.websocket import AsyncJsonWebsocketConsumer
from django.conf import settings
from django.utils import timezone

from ps_runtime.agent.delivery import AckWindow, Received, Refusal, receive
from ps_runtime.agent.protocol import (
    CLOSE_UNAUTHORIZED,
    Ack,
    CaptureStacks,
    ErrorMessage,
    Heartbeat,
    Logs,
    Metrics,
    Progress,
    ReportedState,
    Stacks,
    TasksChanged,
    TaskStatus,
)
from trainhub.nodes.credentials import check_node_credential
from trainhub.nodes.heartbeats import record_heartbeat
from trainhub.opmetrics import AGENTS_CONNECTED, REFUSED, WEBSOCKET_CLIENTS

from . import heartbeats
from .authentication import credential_from_header
from .groups import ingest_groups, store_group
from .notify import node_group
from .services import DataBatch, DataMessage, apply_control, apply_heartbeats

logger = logging.getLogger(__name__)

T = TypeVar("T")

# A batch of the data lane: at most this many messages (each up to 1,000 items).
INGEST_BATCH_MESSAGES = 64
# Messages waiting in one socket's data lane; beyond it the socket stops being read.
DATA_QUEUE_LIMIT = 512
# Groups of data-lane batches (of all sockets of a process, `groups.py`: one transaction
# each) stored at once. Each holds the GIL for its Python work; more of them at a time
# add no throughput (PostgreSQL and the CPU are the limit) and make the event loop, which
# answers heartbeats, wait longer for its turn.
INGEST_AT_ONCE = 2
# How long a status that ends a task waits for the data messages sent before it to be
# stored (a failure's cause is read from the task's stderr, `jobs.causes`; a job seen ended
# has its last points); past that, or once the data lane has stopped, it is applied anyway.
STDERR_WAIT_SECONDS = 10.0
# A socket checks its credential again (revoked? expired?) at its first message this long
# after the last check: a revocation whose notice was lost closes it within this time plus
# one heartbeat (5 s), for one lookup per socket per interval instead of one per message.
CREDENTIAL_RECHECK_SECONDS = 15.0
_SQLITE = settings.DATABASES["default"]["ENGINE"].endswith("sqlite3")


def _db(fn: Callable[..., T]) -> Callable[..., Any]:
    """`fn` on a worker thread with a pooled connection, returned to the pool after."""
    return database_sync_to_async(fn, thread_sensitive=_SQLITE)  # type: ignore[no-any-return]


# A task's statuses that end it: applied after the output the agent sent before them.
_ENDED = frozenset({ReportedState.SUCCEEDED, ReportedState.FAILED, ReportedState.STOPPED})


class AgentConsumer(AsyncJsonWebsocketConsumer):  # type: ignore[misc]
    """One node agent's socket: messages up go to the agent services, notices come down."""

    node_id: int | None = None
    # When the credential this socket was opened with expires (None: never); a message
    # after it closes the socket with 4401, so an agent that stopped renewing is refused.
    valid_until: datetime | None = None
    # That credential, and when (`time.monotonic`) it was last found valid.
    credential = ""
    checked_at = 0.0

    async def connect(self) -> None:
        headers = dict(self.scope.get("headers", []))
        raw = headers.get(b"authorization", b"").decode("latin-1")
        credential = credential_from_header(raw)
        login = await _db(check_node_credential)(credential) if credential else None
        if login is None or credential is None:
            await self.close(code=CLOSE_UNAUTHORIZED)
            return
        node = login.node
        self.node_id = node.pk
        self.valid_until = login.valid_until
        self.credential, self.checked_at = credential, time.monotonic()
        self.window = AckWindow()
        self.data: asyncio.Queue[tuple[int | None, DataMessage]] = asyncio.Queue(DATA_QUEUE_LIMIT)
        # Data messages queued and stored so far: a failed status waits for those before it.
        self.queued = self.stored = 0
        self.lane_stopped = False
        self.stored_more = asyncio.Condition()
        self.ingester = asyncio.create_task(self._ingest_loop())
        # Task statuses in order, each with the data messages queued before it.
        self.statuses: asyncio.Queue[tuple[int | None, TaskStatus, int]] = asyncio.Queue()
        self.status_lane = asyncio.create_task(self._status_loop())
        self.heartbeats = heartbeats.writer(_db(apply_heartbeats))
        await self.channel_layer.group_add(node_group(node.pk), self.channel_name)
        await self.accept()
        AGENTS_CONNECTED.inc()
        WEBSOCKET_CLIENTS.labels("agent").inc()
        await _db(record_heartbeat)(node_id=node.pk, usage=node.usage, now=timezone.now())
        logger.info("agent of node %s connected", node.pk)

    async def disconnect(self, code: int) -> None:
        if self.node_id is None:
            return
        AGENTS_CONNECTED.dec()
        WEBSOCKET_CLIENTS.labels("agent").dec()
        # What is still queued was not acknowledged: the agent sends it again.
        self.ingester.cancel()
        self.status_lane.cancel()
        for lane in (self.ingester, self.status_lane):
            with contextlib.suppress(asyncio.CancelledError):
                await lane
        await self.heartbeats.flush()
        await self.channel_layer.group_discard(node_group(self.node_id), self.channel_name)
        logger.info("agent of node %s disconnected (%s)", self.node_id, code)

    async def receive_json(self, content: Any, **kwargs: Any) -> None:
        if self.node_id is None:
            return
        if not await self._credential_valid():
            logger.info(
                "credential of node %s expired or revoked; closing its socket", self.node_id
            )
            await self.close(code=CLOSE_UNAUTHORIZED)
            return
        received = receive(content)
        if received.seq is not None:
            self.window.received(received.seq)
        await self._refuse(received, received.refusals)
        message = received.message
        if message is None:
            await self._handled([received.seq])
        elif isinstance(message, Heartbeat):
            self.heartbeats.add(self.node_id, message, timezone.now())
            await self._handled([received.seq], selective=True)
        elif isinstance(message, TaskStatus):
            # Applied by the status lane: a heartbeat after it is not held up meanwhile.
            self.statuses.put_nowait((received.seq, message, self.queued))
        else:
            assert isinstance(message, Metrics | Logs | Progress | Stacks)
            await self.data.put((received.seq, message))
            self.queued += 1

    async def _credential_valid(self) -> bool:
        """Whether the socket's credential is still valid: its expiry checked at every
        message, the database (revoked, replaced) every `CREDENTIAL_RECHECK_SECONDS`."""
        if time.monotonic() - self.checked_at >= CREDENTIAL_RECHECK_SECONDS:
            login = await _db(check_node_credential)(self.credential)
            if login is None or login.node.pk != self.node_id:
                return False
            self.valid_until, self.checked_at = login.valid_until, time.monotonic()
        return self.valid_until is None or timezone.now() < self.valid_until

    async def _ingest_loop(self) -> None:
        """The data lane: batches of queued metrics and logs, stored together."""
        node_id = self.node_id
        assert node_id is not None  # connected
        while True:
            batch = [await self.data.get()]
            while len(batch) < INGEST_BATCH_MESSAGES and not self.data.empty():
                batch.append(self.data.get_nowait())
            messages = [m for _, m in batch]
            try:
                groups = ingest_groups(_db(store_group), INGEST_AT_ONCE)
                refused = await groups.submit(DataBatch(node_id, messages, timezone.now()))
            except Exception:  # a bug or the database: not acknowledged, sent again
                logger.exception("node %s: storing %d messages failed", self.node_id, len(batch))
                async with self.stored_more:  # no status waits for this lane any more
                    self.lane_stopped = True
                    self.stored_more.notify_all()
                await self.close(code=1011)
                return
            for index, refusal in refused:
                seq = batch[index][0]
                REFUSED.labels(refusal.field or "all").inc()
                await self.send_json(ErrorMessage(refusal.reason, seq, refusal.field).to_wire())
            await self._handled([seq for seq, _ in batch])
            async with self.stored_more:
                self.stored += len(batch)
                self.stored_more.notify_all()

    async def _status_loop(self) -> None:
        """The status lane: statuses applied in the order sent; one that ends a task once
        the data messages queued before it are stored."""
        while True:
            seq, message, queued = await self.statuses.get()
            if message.state in _ENDED:
                await self._data_stored(queued)
            try:
                await _db(apply_control)(node_id=self.node_id, message=message, now=timezone.now())
            except Exception:  # a bug or the database: not acknowledged, sent again
                logger.exception("node %s: applying a task status failed", self.node_id)
                await self.close(code=1011)
                return
            await self._handled([seq], selective=True)

    async def _data_stored(self, queued: int) -> None:
        """Wait (a bounded time) until the first `queued` data messages are stored: the
        output a task wrote before it ended (a failure's cause is read from it). Only
        those: what comes after the status is no reason to hold it."""
        try:
            async with asyncio.timeout(STDERR_WAIT_SECONDS), self.stored_more:
                await self.stored_more.wait_for(lambda: self.stored >= queued or self.lane_stopped)
        except TimeoutError:
            logger.warning("node %s: an ended status applied before its output", self.node_id)

    async def _refuse(self, received: Received, refusals: tuple[Refusal, ...]) -> None:
        if not refusals:
            return
        kind = received.message.KIND.value if received.message is not None else "?"
        for refusal in refusals:
            REFUSED.labels(refusal.field or "all").inc()
            logger.warning(
                "node %s: refused %s of a %s message: %s",
                self.node_id,
                refusal.field or "all",
                kind,
                refusal.reason,
            )
            await self.send_json(
                ErrorMessage(refusal.reason, received.seq, refusal.field).to_wire()
            )

    async def _handled(self, seqs: list[int | None], *, selective: bool = False) -> None:
        """Acknowledge what was handled: the new cumulative level, if it moved; with
        `selective`, a control message handled while earlier metrics or logs are still
        being stored is named in the ack's `also`, so its answer does not wait for them."""
        level = None
        for seq in seqs:
            if seq is not None:
                level = self.window.handled(seq) or level
        if level is not None:
            await self.send_json(Ack(level).to_wire())
        elif selective and seqs[0] is not None and seqs[0] > self.window.level:
            await self.send_json(Ack(self.window.level, (seqs[0],)).to_wire())

    async def tasks_changed(self, event: dict[str, Any]) -> None:
        """The channel-layer notice `notify.TASKS_CHANGED`, passed on to the agent."""
        await self.send_json(TasksChanged().to_wire())

    async def stacks_wanted(self, event: dict[str, Any]) -> None:
        """The channel-layer notice `notify.STACKS_WANTED`: a job stalled; its stacks."""
        await self.send_json(CaptureStacks(int(event["job_id"])).to_wire())

    async def credential_revoked(self, event: dict[str, Any]) -> None:
        """The channel-layer notice `notify.CREDENTIAL_REVOKED_NOTICE`: refuse the agent."""
        logger.info("credential of node %s revoked; closing its socket", self.node_id)
        await self.close(code=CLOSE_UNAUTHORIZED)
