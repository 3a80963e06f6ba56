"""The one line an operator pastes on a new node (docs/design.md §2, issue 13).

It saves a fresh enrollment token to a file only its user can read, then fetches the
installer from this server and enrolls the node with `--token-file`; the installer puts
only the `trainhub-runtime` distribution on the node.
"""

from __future__ import annotations

import ipaddress
import shlex
from urllib.parse import urlsplit

from django.conf import settings
from django.http import HttpRequest

INSTALL_SCRIPT_PATH = "/agent/install.sh"
# Where the shown line saves the token: the home of whoever runs it (root's /root, or an
# operator's own home on the `--prefix DIR --no-service` route). Left unquoted in the line
# so the shell expands `~`; it holds nothing to quote.
TOKEN_FILE = "~/trainhub-enroll-token"


def is_loopback(server: str) -> bool:
    """Whether `server` names this machine only (localhost, 127.0.0.0/8, ::1, or the
    unspecified 0.0.0.0): another machine that runs the install command reaches itself,
    not this server."""
    host = (urlsplit(server).hostname or "").rstrip(".").lower()
    if host == "localhost" or host.endswith(".localhost"):
        return True
    try:
        address = ipaddress.ip_address(host)
    except ValueError:
        return False
    return address.is_loopback or address.is_unspecified


def is_plain_http(server: str) -> bool:
    """Whether nodes reach this server over unencrypted http (the installer then needs
    `--insecure`)."""
    return server.lower().startswith("http://")


def install_command(server: str, token: str) -> str:
    """The line that saves `token` to `TOKEN_FILE` and runs the installer with it.

    `(umask 077 && printf '%s\\n' TOKEN > ~/trainhub-enroll-token) && curl -fsSL
    SERVER/agent/install.sh | sh -s -- --server SERVER [--insecure] --token-file
    ~/trainhub-enroll-token`, on one line.
    """
    base = server.rstrip("/")
    # printf is a builtin of sh, bash and zsh, so no process list shows the token (with
    # `--token TOKEN` the installer's would, and it warns). The umask sits in a subshell:
    # the file is its owner's only, and the operator's shell keeps its own umask. Like
    # any pasted line the token stays in the shell's history; it is spent once the node
    # enrolls (one use by default) and expires anyway.
    save = f"(umask 077 && printf '%s\\n' {shlex.quote(token)} > {TOKEN_FILE})"
    options = ["--server", shlex.quote(base)]
    if is_plain_http(base):
        options.append("--insecure")  # the installer refuses http:// without it
    options += ["--token-file", TOKEN_FILE]
    # No `&& rm -f` of the file at the end: options appended to the line (`--prefix DIR
    # --no-service`, `--name`, as the "Add a node" page says) would go to rm, not to the
    # installer. The file stays, its owner's only, with a token this node has used (a
    # single-use one is spent) and that expires.
    script = shlex.quote(base + INSTALL_SCRIPT_PATH)
    return f"{save} && curl -fsSL {script} | sh -s -- {' '.join(options)}"


def public_server_url(request: HttpRequest) -> str:
    """The URL nodes reach this server at: `TRAINHUB_EXTERNAL_URL`, else the request's own
    (scheme and host as the request arrived; behind a proxy set the setting)."""
    configured: str = settings.EXTERNAL_URL
    return configured or request.build_absolute_uri("/").rstrip("/")
