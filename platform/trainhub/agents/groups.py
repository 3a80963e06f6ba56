"""Group commit of the gateway's data lane: the batches of many sockets, one transaction.

Each socket's data lane hands its batch (`services.DataBatch`) to the process's
`IngestGroups` and waits for it. Whatever batches are waiting when a slot frees (at most
`GROUP_MESSAGES` messages) are stored together (`store_group`): one transaction, one
lookup of their tasks, one commit, and each socket acknowledges its batch after that
commit. The points of the whole group are written in one statement at its end
(`telemetry.storing.deferred_writes`). A group that fails is rolled back whole and its
batches stored again one by one, each in a transaction of its own, so a bad batch fails
only itself: the others are stored once, it not at all (its socket closes; the agent
sends it again).
"""

from __future__ import annotations

import asyncio
import logging
import weakref
from collections.abc import Awaitable, Callable
from typing import Any

from django.db import transaction

from ps_runtime.agent.delivery import Refusal
from trainhub.telemetry.storing import deferred_writes

from .services import DataBatch, ingest_batches

logger = logging.getLogger(__name__)

# Messages of one group at most (each up to 1,000 items); a socket's batch (up to 64
# messages) is never split.
GROUP_MESSAGES = 128

Refused = list[tuple[int, Refusal]]
# Per batch of a group: its refusals once stored, or why it was not stored.
Outcome = Refused | BaseException


def store_group(batches: list[DataBatch]) -> list[Outcome]:
    """Store `batches` in one transaction; if that fails, each in its own. Per batch, in
    order, its refusals (`services.ingest_batch`) or the exception that failed it."""
    try:
        with transaction.atomic(), deferred_writes():
            return list(ingest_batches(batches))
    except Exception as exc:
        if len(batches) == 1:
            return [exc]
        logger.warning("a group of %d batches failed (%r); storing each alone", len(batches), exc)
    outcomes: list[Outcome] = []
    for batch in batches:
        try:
            with transaction.atomic(), deferred_writes():
                outcomes.extend(ingest_batches([batch]))
        except Exception as exc:
            outcomes.append(exc)
    return outcomes


Store = Callable[[list[DataBatch]], Awaitable[list[Outcome]]]


class IngestGroups:
    """Batches waiting to be stored, and the tasks (at most `at_once`) storing them."""

    def __init__(self, store: Store, at_once: int) -> None:
        self._store = store
        self._at_once = at_once
        self._waiting: list[tuple[DataBatch, asyncio.Future[Refused]]] = []
        self._running: set[asyncio.Task[None]] = set()
        self.groups = 0  # groups stored so far (for tests and benchmarks)

    async def submit(self, batch: DataBatch) -> Refused:
        """Store `batch` with whatever else is waiting; its refusals once committed.
        Raises what failed it (nothing of it is then stored)."""
        future: asyncio.Future[Refused] = asyncio.get_running_loop().create_future()
        self._waiting.append((batch, future))
        if len(self._running) < self._at_once:
            task = asyncio.get_running_loop().create_task(self._drain())
            self._running.add(task)
            task.add_done_callback(self._running.discard)
        return await future

    def _take(self) -> list[tuple[DataBatch, asyncio.Future[Refused]]]:
        """The next group: waiting batches, oldest first, while they fit (at least one);
        those whose socket stopped waiting (it closed) are left out."""
        group: list[tuple[DataBatch, asyncio.Future[Refused]]] = []
        size = 0
        while self._waiting:
            batch, future = self._waiting[0]
            if future.done():
                self._waiting.pop(0)
                continue
            if group and size + len(batch.messages) > GROUP_MESSAGES:
                break
            group.append(self._waiting.pop(0))
            size += len(batch.messages)
        return group

    async def _drain(self) -> None:
        while group := self._take():
            outcomes: list[Any]
            try:
                outcomes = await self._store([batch for batch, _ in group])
            except Exception as exc:  # the worker thread itself failed
                outcomes = [exc] * len(group)
            self.groups += 1
            for (_, future), outcome in zip(group, outcomes, strict=True):
                if future.done():
                    continue
                if isinstance(outcome, BaseException):
                    future.set_exception(outcome)
                else:
                    future.set_result(outcome)


_groups: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, IngestGroups] = (
    weakref.WeakKeyDictionary()
)


def ingest_groups(store: Store, at_once: int) -> IngestGroups:
    """The running event loop's (the process's) `IngestGroups`."""
    loop = asyncio.get_running_loop()
    found = _groups.get(loop)
    if found is None:
        found = _groups[loop] = IngestGroups(store, at_once)
    return found
