"""Pushing job changes to browsers watching the job (over the channel layer)."""

from __future__ import annotations

from typing import Any

from asgiref.sync import async_to_sync
from channels.layers import get_channel_layer
from django.db import transaction


def job_group(job_id: int) -> str:
    return f"job-{job_id}"


def send_to_job(job_id: int, message: dict[str, Any]) -> None:
    """Send now; for use outside a transaction (e.g. from a consumer)."""
    layer = get_channel_layer()
    if layer is not None:
        async_to_sync(layer.group_send)(job_group(job_id), message)


def broadcast_on_commit(job_id: int, message: dict[str, Any]) -> None:
    transaction.on_commit(lambda: send_to_job(job_id, message))
