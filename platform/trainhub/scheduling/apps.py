from __future__ import annotations

from django.apps import AppConfig


class SchedulingConfig(AppConfig):
    """Nothing happens at start-up: cycles are asked for by `triggers.on_event` and run by
    Celery; `settings.py` refuses an unknown `TRAINHUB_SCHEDULER_POLICY`."""

    name = "trainhub.scheduling"
