"""ASGI entry point: HTTP through Django, WebSockets through Channels."""

from __future__ import annotations

import os
import sys

from django.core.asgi import get_asgi_application

# The event loop answers heartbeats while worker threads store metrics; a thread holding
# the GIL gives it up after this long (Python's default: 5 ms), so the loop waits less
# for its turn. bench/telemetry.py measures the effect on heartbeat round trips.
sys.setswitchinterval(0.001)

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "trainhub.settings")
django_asgi_app = get_asgi_application()

from channels.auth import AuthMiddlewareStack  # noqa: E402 - needs Django set up first
from channels.routing import ProtocolTypeRouter, URLRouter  # noqa: E402
from channels.security.websocket import AllowedHostsOriginValidator  # noqa: E402
from django.urls import path  # noqa: E402

from trainhub.agents.consumers import AgentConsumer  # noqa: E402
from trainhub.telemetry.consumers import JobStreamConsumer  # noqa: E402

application = ProtocolTypeRouter(
    {
        "http": django_asgi_app,
        "websocket": URLRouter(
            [
                # Agents authenticate with their node credential, not a browser session.
                path("ws/agent/", AgentConsumer.as_asgi()),
                path(
                    "ws/jobs/<int:job_id>/",
                    AllowedHostsOriginValidator(AuthMiddlewareStack(JobStreamConsumer.as_asgi())),
                ),
            ]
        ),
    }
)
