"""The one line an operator pastes on a new node (docs/design.md §2, issue 13).

It fetches the installer from this server and enrolls the node with a fresh enrollment
token; the installer puts only the `trainhub-runtime` distribution on the node.
"""

from __future__ import annotations

import shlex

INSTALL_SCRIPT_PATH = "/agent/install.sh"


def install_command(server: str, token: str) -> str:
    """`curl -fsSL <server>/agent/install.sh | sh -s -- --server <server> --token <token>`."""
    base = server.rstrip("/")
    return (
        f"curl -fsSL {shlex.quote(base + INSTALL_SCRIPT_PATH)} | sh -s -- "
        f"--server {shlex.quote(base)} --token={shlex.quote(token)}"
    )
