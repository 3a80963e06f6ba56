"""`trainhub login`: sign in to a server and remember it in the CLI's config.

With a password, the server makes a new personal API token, and the CLI names it so the
account page says where it lives: `--name`, or by default "trainhub CLI on <hostname>".
Names are distinct among a user's tokens; when an earlier login from this machine still
holds the default name, the new token takes the time of the login too (then a counter,
should two logins share a second), so signing in again just works.
"""

from __future__ import annotations

import argparse
import getpass
import socket
import sys
from collections.abc import Iterator
from datetime import datetime
from typing import Any

from . import config
from .api_client import ApiClient, ApiError

# The server's limit on a token's name (`tenancy.models.TOKEN_NAME_MAX_LENGTH`).
NAME_MAX_LENGTH = 64


def add_command(command: Any) -> None:
    p = command("login", login, "sign in to a TrainHub server and remember it", json_flag=False)
    p.add_argument("url", help="e.g. https://trainhub.example.com")
    p.add_argument("--username", "-u", help="default: ask")
    p.add_argument("--password-stdin", action="store_true", help="read the password from stdin")
    p.add_argument("--token", help="use this existing API token instead of a password")
    p.add_argument(
        "--name",
        help='name of the new token on your account page (default: "trainhub CLI on HOST")',
    )


def login(args: argparse.Namespace) -> None:
    url = args.url.rstrip("/")
    named = ""
    if args.token:
        token = args.token
    else:
        username = args.username or input("Username: ")
        if args.password_stdin:
            password = sys.stdin.readline().rstrip("\n")
        else:
            password = getpass.getpass("Password: ")
        token, name = _sign_in(ApiClient(url), username, password, args.name)
        named = f", its token named “{name}”"
    me = ApiClient(url, token).get("/users/me/")
    path = config.save(config.Login(url=url, token=token, username=me["username"]))
    teams = ", ".join(f"{t['team']} ({t['role']})" for t in me["teams"]) or "no teams yet"
    print(f"Logged in to {url} as {me['username']}: {teams}. Login saved in {path}{named}.")


def _sign_in(client: ApiClient, username: str, password: str, name: str | None) -> tuple[str, str]:
    """A new token and its name: `name`, or the first of `default_names` still free."""
    candidates = iter([name]) if name is not None else default_names()
    candidate = next(candidates)
    while True:
        body = {"username": username, "password": password, "name": candidate}
        try:
            return client.post("/auth/token/", body)["token"], candidate
        except ApiError as exc:
            # The password was right (names are checked after it) and the name is taken.
            following = next(candidates, None) if "name" in exc.fields else None
            if following is None:
                raise
            candidate = following


def default_names(host: str | None = None, now: datetime | None = None) -> Iterator[str]:
    """ "trainhub CLI on HOST", then with the time, then with a counter; each fits the
    server's limit (a long host name is cut)."""
    host = (host if host is not None else socket.gethostname()).strip() or "this machine"
    when = (now or datetime.now()).strftime("%Y-%m-%d %H:%M:%S")
    suffixes = ["", f" ({when})", *(f" ({when}, {n})" for n in range(2, 10))]
    for suffix in suffixes:
        base = "trainhub CLI on "
        room = NAME_MAX_LENGTH - len(base) - len(suffix)
        yield base + (host if len(host) <= room else host[: room - 1] + "…") + suffix
