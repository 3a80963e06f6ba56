"""The one line an operator pastes on a new node (docs/design.md §2, issue 13).

It fetches the installer from this server and enrolls the node with a fresh enrollment
token; the installer puts only the `trainhub-runtime` distribution on the node.
"""

from __future__ import annotations

import shlex

from django.conf import settings
from django.http import HttpRequest

INSTALL_SCRIPT_PATH = "/agent/install.sh"


def install_command(server: str, token: str) -> str:
    """`curl -fsSL <server>/agent/install.sh | sh -s -- --server <server> --token <token>`."""
    base = server.rstrip("/")
    return (
        f"curl -fsSL {shlex.quote(base + INSTALL_SCRIPT_PATH)} | sh -s -- "
        f"--server {shlex.quote(base)} --token={shlex.quote(token)}"
    )


def public_server_url(request: HttpRequest) -> str:
    """The URL nodes reach this server at: `TRAINHUB_PUBLIC_URL`, else the request's own
    (scheme and host as the request arrived; behind a proxy set the setting)."""
    configured: str = settings.PUBLIC_URL
    return configured or request.build_absolute_uri("/").rstrip("/")
