"""`/healthz` and `/readyz`: a load balancer stops sending traffic on a 503 from `/readyz`,
so it must answer 503 whenever the database or the broker cannot be reached. Which check
failed, and how, only a signed-in caller learns."""

from __future__ import annotations

import socket
from collections.abc import Iterator
from typing import Any
from unittest import mock

import pytest
from django.db import OperationalError, connections
from django.test import Client, override_settings
from trainhub.tenancy.tokens import issue_token

from ...conftest import require_services
from ..factories import make_user

pytestmark = pytest.mark.django_db


@pytest.fixture
def closed_port() -> Iterator[int]:
    """A loopback port that refuses connections: bound (so nothing else takes it), not listening."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        yield sock.getsockname()[1]


def _client(*, signed_in: bool = True) -> Client:
    client = Client()
    if signed_in:
        client.force_login(make_user("ops"))
    return client


def _get(path: str, *, signed_in: bool = True, client: Client | None = None) -> tuple[int, Any]:
    response = (client or _client(signed_in=signed_in)).get(path)
    return response.status_code, response.json()


@override_settings(REDIS_URL="")
def test_anonymous_callers_get_the_status_alone() -> None:
    assert _get("/readyz", signed_in=False) == (200, {"status": "ok"})


def test_anonymous_callers_learn_nothing_of_a_broken_broker(closed_port: int) -> None:
    with override_settings(REDIS_URL=f"redis://127.0.0.1:{closed_port}/0"):
        assert _get("/readyz", signed_in=False) == (503, {"status": "unavailable"})


@override_settings(REDIS_URL="")
def test_an_api_token_gets_the_details() -> None:
    secret = issue_token(user=make_user("ops"), expires_at=None).secret
    response = Client().get("/readyz", HTTP_AUTHORIZATION=f"Token {secret}")
    assert response.json() == {"status": "ok", "checks": {"database": "ok"}}
    forged = Client().get("/readyz", HTTP_AUTHORIZATION="Token not-a-real-token-at-all")
    assert forged.json() == {"status": "ok"}


def test_healthz_answers_while_the_process_is_up() -> None:
    assert _get("/healthz") == (200, {"status": "ok"})


@override_settings(REDIS_URL="")
def test_ready_without_a_broker_when_the_database_answers() -> None:
    assert _get("/readyz") == (200, {"status": "ok", "checks": {"database": "ok"}})


def test_ready_when_the_database_and_the_broker_answer() -> None:
    _, redis_url = require_services()  # skips outside CI when absent, fails under CI=true
    with override_settings(REDIS_URL=redis_url):
        status, body = _get("/readyz")
    assert (status, body) == (200, {"status": "ok", "checks": {"database": "ok", "broker": "ok"}})


def test_unready_when_the_broker_is_unreachable(closed_port: int) -> None:
    with override_settings(REDIS_URL=f"redis://127.0.0.1:{closed_port}/0"):
        status, body = _get("/readyz")
    assert status == 503
    assert body["status"] == "unavailable"
    assert body["checks"]["database"] == "ok"
    assert body["checks"]["broker"].startswith("error: ")


@override_settings(REDIS_URL="")
def test_unready_when_the_database_is_unreachable() -> None:
    broken = OperationalError("connection refused")
    client = _client()  # signed in while the database answers
    with mock.patch.object(connections["default"], "cursor", side_effect=broken):
        status, body = _get("/readyz", client=client)
    assert status == 503
    # Without the database no one can be told signed in: the status alone.
    assert body == {"status": "unavailable"}


def test_unready_when_both_are_unreachable(closed_port: int) -> None:
    broken = OperationalError("connection refused")
    client = _client()
    with (
        override_settings(REDIS_URL=f"redis://127.0.0.1:{closed_port}/0"),
        mock.patch.object(connections["default"], "cursor", side_effect=broken),
    ):
        status, body = _get("/readyz", client=client)
    assert (status, body) == (503, {"status": "unavailable"})
