"""Asking for a scheduling cycle when something the scheduler sees has changed.

Celery beat runs a cycle every `SCHEDULING_INTERVAL_SECONDS` regardless; these requests
make the scheduler answer a submission, a finished task or a new node at once. Requests
within `SCHEDULING_DEBOUNCE_SECONDS` of each other share one cycle (a Redis key set with
NX), so a burst of events (a job of 20 tasks finishing) costs one cycle, not 20.
"""

from __future__ import annotations

import functools

import redis
from django.conf import settings
from django.db import transaction

from trainhub.events import (
    Event,
    JobScaled,
    JobStateChanged,
    JobSubmitted,
    NodeChanged,
    QuotaChanged,
    TaskStateChanged,
)
from trainhub.jobs.choices import JobState

from .tasks import run_scheduling_cycle

_ALWAYS = (JobSubmitted, JobScaled, NodeChanged, QuotaChanged)
# A job the cycle itself placed (starting), or whose tasks all came up (running), holds
# what the cycle already counted: those changes call for no new cycle. Every other one
# does: a finished or cancelled job frees room and quota, a requeued one waits again.
_PLACED_BY_THE_CYCLE = frozenset({JobState.STARTING, JobState.RUNNING})


def wants_cycle(event: Event) -> bool:
    """Whether `event` changes what the scheduler would decide."""
    if isinstance(event, TaskStateChanged):
        return event.ended  # its node has room again
    if isinstance(event, JobStateChanged):
        return event.state not in _PLACED_BY_THE_CYCLE
    return isinstance(event, _ALWAYS)


def on_event(event: Event) -> None:
    """Queue a cycle for the events that call for one (an `EVENT_HANDLERS` entry).

    Events are delivered after their transaction committed, so the cycle is sent now.
    """
    if wants_cycle(event):
        _queue_cycle()


def request_cycle() -> None:
    """Queue a (debounced) scheduling cycle once the current transaction commits."""
    transaction.on_commit(_queue_cycle)


def _queue_cycle() -> None:
    if not settings.CELERY_BROKER_URL.startswith("redis"):
        return  # no worker to run it (unit tests); cycles are run explicitly there
    if _claim_cycle():
        run_scheduling_cycle.apply_async(countdown=settings.SCHEDULING_DEBOUNCE_SECONDS)


@functools.cache
def _redis(url: str) -> redis.Redis:
    """One client (and connection pool) per process and URL, not one per request."""
    return redis.Redis.from_url(url, socket_timeout=2)


def _claim_cycle() -> bool:
    """True if no cycle was requested within the debounce window (so this one queues it).

    A request dropped here came before the queued cycle runs (it runs at the end of the
    window), and its change had committed, so that cycle sees it.
    """
    window_ms = int(settings.SCHEDULING_DEBOUNCE_SECONDS * 1000)
    if window_ms <= 0:
        return True
    key = f"{settings.REDIS_KEY_PREFIX}:scheduling:requested"
    try:
        return bool(_redis(settings.REDIS_URL).set(key, "1", nx=True, px=window_ms))
    except redis.RedisError:
        return True  # the broker is the same Redis: the send will report the outage
