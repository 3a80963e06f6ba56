"""The browser's live feed of one job: its fields, events, tasks, metric points, log lines
and result."""

from __future__ import annotations

from typing import Any

from channels.db import database_sync_to_async
from channels.generic.websocket import AsyncJsonWebsocketConsumer
from django.contrib.auth import get_user_model

from trainhub.jobs.models import Job
from trainhub.opmetrics import WEBSOCKET_CLIENTS

from .live import current, job_group, user_group


class JobStreamConsumer(AsyncJsonWebsocketConsumer):
    """Read-only: the browser only listens. Closed with 4403 if the user may not see the job:
    at connect, and again whenever their access changes (`AccessChanged`: removed from a
    team, platform role or password changed, deactivated).

    The messages come from `live.on_event` (and `live.current` at connect); each handler
    below renames the channel-layer type to the one the browser reads.
    """

    job_id: int
    user_id: int | None = None

    async def connect(self) -> None:
        self.job_id = int(self.scope["url_route"]["kwargs"]["job_id"])
        user = self.scope.get("user")
        if user is None or not user.is_authenticated or not await self._visible(user.pk):
            await self.close(code=4403)
            return
        self.user_id = user.pk
        await self.channel_layer.group_add(user_group(user.pk), self.channel_name)
        await self.channel_layer.group_add(job_group(self.job_id), self.channel_name)
        await self.accept()
        WEBSOCKET_CLIENTS.labels("browser").inc()
        # After joining the group: what changed since the page was rendered (or while a
        # reconnecting page was away) is sent now, anything later comes through the group.
        for message in await database_sync_to_async(current)(self.job_id):
            await getattr(self, message["type"].replace(".", "_"))(message)

    async def disconnect(self, code: int) -> None:
        if hasattr(self, "job_id"):
            await self.channel_layer.group_discard(job_group(self.job_id), self.channel_name)
        if self.user_id is not None:
            WEBSOCKET_CLIENTS.labels("browser").dec()
            await self.channel_layer.group_discard(user_group(self.user_id), self.channel_name)

    @database_sync_to_async
    def _visible(self, user_id: int) -> bool:
        """Whether the user, as the database has them now, may see the job."""
        user = get_user_model().objects.filter(pk=user_id, is_active=True).first()
        return user is not None and Job.objects.visible_to(user).filter(pk=self.job_id).exists()

    async def access_changed(self, event: dict[str, Any]) -> None:
        if self.user_id is None or not await self._visible(self.user_id):
            await self.channel_layer.group_discard(job_group(self.job_id), self.channel_name)
            await self.close(code=4403)

    async def receive_json(self, content: Any, **kwargs: Any) -> None:
        return  # nothing to do: the feed is one-way

    async def job_state(self, event: dict[str, Any]) -> None:
        await self.send_json({k: v for k, v in event.items() if k != "type"} | {"type": "state"})

    async def job_result(self, event: dict[str, Any]) -> None:
        await self.send_json({"type": "result", "rows": event["rows"]})

    async def job_event(self, event: dict[str, Any]) -> None:
        await self.send_json({k: v for k, v in event.items() if k != "type"} | {"type": "event"})

    async def task_state(self, event: dict[str, Any]) -> None:
        await self.send_json({k: v for k, v in event.items() if k != "type"} | {"type": "task"})

    async def metrics_points(self, event: dict[str, Any]) -> None:
        await self.send_json({"type": "metrics", "points": event["points"]})

    async def log_lines(self, event: dict[str, Any]) -> None:
        await self.send_json({"type": "logs", "lines": event["lines"]})
