"""Asking for a scheduling cycle when something the scheduler sees has changed.

Celery beat runs a cycle every `SCHEDULING_INTERVAL_SECONDS` regardless; these requests
make the scheduler answer a submission, a finished task or a new node at once. Requests
merge: the first one claims a Redis key (SET NX) and queues a cycle to run
`SCHEDULING_DEBOUNCE_SECONDS` later; the claim holds until that cycle *starts*
(`cycle_started`), so every request until then shares it — a burst of events (a job of
20 tasks finishing) costs one cycle, and a slow cycle has at most one waiting behind it,
however many requests came meanwhile. A claim whose cycle was lost (a worker killed
before it ran) expires after `CLAIM_TTL_SECONDS`; beat's periodic cycle covers the gap.
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
    RestartsWaiting,
    TaskStateChanged,
)
from trainhub.jobs.choices import JobState
from trainhub.opmetrics import CYCLE_REQUESTS

from . import cache
from .tasks import release_restarts, run_scheduling_cycle

_ALWAYS = (JobSubmitted, JobScaled, NodeChanged, QuotaChanged)
CLAIM_TTL_SECONDS = 30.0
# A job the cycle itself placed (starting), or whose tasks all came up (running), holds
# what the cycle already counted: those changes call for no new cycle. Every other one
# does: a finished or cancelled job frees room and quota, a requeued one waits again.
_PLACED_BY_THE_CYCLE = frozenset({JobState.STARTING, JobState.PREPARING, JobState.RUNNING})


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
    The scheduler's cache in this process notes which rows the event names (`cache.py`).
    """
    cache.on_event(event)
    if wants_cycle(event):
        _queue_cycle()
    elif isinstance(event, RestartsWaiting) and settings.CELERY_BROKER_URL.startswith("redis"):
        # A little after the backoff: the release finds the attempts due.
        release_restarts.apply_async(countdown=event.delay_s + 0.5)


def request_cycle() -> None:
    """Queue a (debounced) scheduling cycle once the current transaction commits."""
    transaction.on_commit(_queue_cycle)


def _queue_cycle() -> None:
    if not settings.CELERY_BROKER_URL.startswith("redis"):
        return  # no worker to run it (unit tests); cycles are run explicitly there
    if _claim_cycle():
        CYCLE_REQUESTS.labels("queued").inc()
        run_scheduling_cycle.apply_async(countdown=settings.SCHEDULING_DEBOUNCE_SECONDS)
    else:
        CYCLE_REQUESTS.labels("merged").inc()


@functools.cache
def _redis(url: str) -> redis.Redis:
    """One client (and connection pool) per process and URL, not one per request."""
    return redis.Redis.from_url(url, socket_timeout=2)


def _key() -> str:
    return f"{settings.REDIS_KEY_PREFIX}:scheduling:requested"


def _claim_cycle() -> bool:
    """True if no queued cycle has yet to start (so this request queues one).

    A request dropped here came before the queued cycle starts, and its change had
    committed, so that cycle sees it.
    """
    window_ms = int(settings.SCHEDULING_DEBOUNCE_SECONDS * 1000)
    if window_ms <= 0:
        return True
    ttl_ms = max(window_ms, int(CLAIM_TTL_SECONDS * 1000))
    try:
        return bool(_redis(settings.REDIS_URL).set(_key(), "1", nx=True, px=ttl_ms))
    except redis.RedisError:
        return True  # the broker is the same Redis: the send will report the outage


def cycle_started() -> None:
    """A cycle is starting: what it will read includes every change committed so far, so
    the next request must queue a cycle of its own."""
    if not settings.CELERY_BROKER_URL.startswith("redis"):
        return
    try:
        _redis(settings.REDIS_URL).delete(_key())
    except redis.RedisError:
        pass  # the claim expires by itself
