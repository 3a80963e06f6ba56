"""`trainhub login` names the token it makes: `--name`, or "trainhub CLI on <hostname>";
signing in again from the same machine takes the time of the login too, so it just works."""

from __future__ import annotations

import socket
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest
from django.core.cache import cache
from trainhub.cli.login import default_names
from trainhub.tenancy.models import TokenLabel

from ..factories import make_user
from .helpers import trainhub

pytestmark = pytest.mark.django_db(transaction=True)


def _login(config: Path, url: str, *extra: str) -> Any:
    return trainhub(
        config, "login", url, "-u", "alice", "--password-stdin", *extra, input="pw-alice"
    )


def _names() -> list[str]:
    return list(TokenLabel.objects.order_by("token__created").values_list("name", flat=True))


def test_login_names_its_token_after_the_machine_and_again_with_the_time(
    live_server: Any, tmp_path: Path
) -> None:
    cache.clear()
    make_user("alice")
    config = tmp_path / "cli.json"
    host = socket.gethostname()

    first = _login(config, live_server.url)
    assert first.returncode == 0, first.stderr
    assert f"its token named “trainhub CLI on {host}”" in first.stdout
    second = _login(config, live_server.url)
    assert second.returncode == 0, second.stderr
    first_name, second_name = _names()
    assert first_name == f"trainhub CLI on {host}"
    assert second_name.startswith(f"trainhub CLI on {host} (20") and second_name.endswith(")")
    assert f"its token named “{second_name}”" in second.stdout


def test_login_takes_a_name_and_refuses_one_already_taken(live_server: Any, tmp_path: Path) -> None:
    cache.clear()
    make_user("alice")
    config = tmp_path / "cli.json"
    named = _login(config, live_server.url, "--name", "ci runner")
    assert named.returncode == 0, named.stderr
    assert _names() == ["ci runner"]

    taken = _login(tmp_path / "other.json", live_server.url, "--name", "CI runner")
    assert taken.returncode == 1
    assert "You already have a token named “CI runner”: choose another name." in taken.stderr
    assert _names() == ["ci runner"] and not (tmp_path / "other.json").exists()


def test_default_names_fit_the_servers_limit_whatever_the_host() -> None:
    when = datetime(2026, 11, 28, 9, 5, 7)
    names = list(default_names("laptop", when))
    assert names[:3] == [
        "trainhub CLI on laptop",
        "trainhub CLI on laptop (2026-11-28 09:05:07)",
        "trainhub CLI on laptop (2026-11-28 09:05:07, 2)",
    ]
    assert len(set(names)) == len(names)
    long = list(default_names("h" * 100, when))
    assert all(len(name) == 64 and "h…" in name for name in long)
    assert next(default_names("  ", when)) == "trainhub CLI on this machine"
