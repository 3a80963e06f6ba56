from __future__ import annotations

from typing import Any

from django.apps import AppConfig
from django.conf import settings
from django.db import transaction


def _request_cycle(**_: Any) -> None:
    """Queue a scheduling cycle once the current transaction commits."""
    if not settings.CELERY_BROKER_URL.startswith("redis"):
        return  # no worker to run it (unit tests); cycles are run explicitly there

    def send() -> None:
        from .tasks import run_scheduling_cycle

        run_scheduling_cycle.delay()

    transaction.on_commit(send)


class SchedulingConfig(AppConfig):
    name = "trainhub.scheduling"

    def ready(self) -> None:
        from trainhub.events import scheduling_needed

        scheduling_needed.connect(_request_cycle, dispatch_uid="scheduling.request_cycle")
