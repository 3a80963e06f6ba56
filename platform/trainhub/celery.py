"""The Celery application: scheduling cycles and other background work."""

from __future__ import annotations

import os

from celery import Celery

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "trainhub.settings")

app = Celery("trainhub")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks()


@app.on_after_finalize.connect
def _install_beat_schedule(sender: Celery, **_: object) -> None:
    from django.conf import settings

    sender.add_periodic_task(
        settings.SCHEDULING_INTERVAL_SECONDS,
        sender.signature("trainhub.scheduling.tasks.run_scheduling_cycle"),
        name="scheduling cycle",
    )
    # Notification deliveries that are due: retries, and any a lost message or worker left.
    sender.add_periodic_task(
        settings.NOTIFY_SWEEP_SECONDS,
        sender.signature("trainhub.notifications.tasks.sweep_deliveries"),
        name="notification deliveries",
    )
    # Stall detection: running jobs without progress for longer than their limit.
    sender.add_periodic_task(
        10.0,  # trainhub.telemetry.stallcheck.INTERVAL_SECONDS (not imported before setup)
        sender.signature("trainhub.telemetry.tasks.check_stalls"),
        name="stall check",
    )
    # Experiments move on when a trial's job ends; this covers a lost message.
    sender.add_periodic_task(
        10.0,
        sender.signature("trainhub.experiments.tasks.advance_all"),
        name="experiments",
    )
    if settings.TELEMETRY_RETENTION_DAYS > 0:
        sender.add_periodic_task(
            settings.TELEMETRY_RETENTION_INTERVAL_SECONDS,
            sender.signature("trainhub.telemetry.tasks.purge_expired_telemetry"),
            name="telemetry retention",
        )
