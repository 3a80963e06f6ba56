from __future__ import annotations

from typing import Any

from django.apps import AppConfig
from django.conf import settings
from django.core.exceptions import ImproperlyConfigured
from django.db import transaction


def _claim_cycle() -> bool:
    """True if no cycle was requested within the debounce window (so this one queues it).

    A request dropped here came before the queued cycle runs (it runs at the end of the
    window), and its change had committed, so that cycle sees it.
    """
    window_ms = int(settings.SCHEDULING_DEBOUNCE_SECONDS * 1000)
    if window_ms <= 0:
        return True
    import redis

    try:
        client = redis.Redis.from_url(settings.REDIS_URL, socket_timeout=2)
        return bool(
            client.set(
                f"{settings.REDIS_KEY_PREFIX}:scheduling:requested", "1", nx=True, px=window_ms
            )
        )
    except redis.RedisError:
        return True  # the broker is the same Redis: the send will report the outage


def _request_cycle(**_: Any) -> None:
    """Queue a (debounced) scheduling cycle once the current transaction commits."""
    if not settings.CELERY_BROKER_URL.startswith("redis"):
        return  # no worker to run it (unit tests); cycles are run explicitly there

    def send() -> None:
        from .tasks import run_scheduling_cycle

        if _claim_cycle():
            run_scheduling_cycle.apply_async(countdown=settings.SCHEDULING_DEBOUNCE_SECONDS)

    transaction.on_commit(send)


class SchedulingConfig(AppConfig):
    name = "trainhub.scheduling"

    def ready(self) -> None:
        from trainhub.events import scheduling_needed

        from .policy import POLICIES

        if settings.SCHEDULER_POLICY not in POLICIES:
            raise ImproperlyConfigured(
                f"TRAINHUB_SCHEDULER_POLICY={settings.SCHEDULER_POLICY!r} is not a policy; "
                f"choose one of {', '.join(sorted(POLICIES))}"
            )

        scheduling_needed.connect(_request_cycle, dispatch_uid="scheduling.request_cycle")
