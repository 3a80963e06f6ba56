"""Every sign-in form shares one rate limit, keyed on the client's address as the
configured number of trusted proxies gives it: a header the client writes picks no key."""

from __future__ import annotations

from typing import Any

import pytest
from django.test import Client
from django.test.client import MULTIPART_CONTENT

from ..factories import make_user

pytestmark = pytest.mark.django_db
RATE = 30  # TRAINHUB_AUTH_RATE's default: 30/minute


@pytest.fixture(autouse=True)
def _fast_hashing(settings: Any) -> None:
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]
    make_user("alice", superuser=True)


FORMS = {
    "api": ("/api/v1/auth/token/", 400),
    "web": ("/login/", 200),
    "admin": ("/admin/login/", 200),
}


def _content_type(form: str) -> str:
    """The API takes JSON only; the sign-in pages take their forms."""
    return "application/json" if form == "api" else MULTIPART_CONTENT


def _try(client: Client, form: str, forwarded_for: str, remote: str = "203.0.113.9") -> int:
    path = FORMS[form][0]
    return client.post(
        path,
        {"username": "alice", "password": "wrong"},
        content_type=_content_type(form),
        HTTP_X_FORWARDED_FOR=forwarded_for,
        REMOTE_ADDR=remote,
    ).status_code


@pytest.mark.parametrize("form", FORMS)
def test_a_throttled_login_stays_throttled_with_a_different_forwarded_for(form: str) -> None:
    client = Client()
    codes = [_try(client, form, f"198.51.100.{i}") for i in range(RATE)]
    assert codes == [FORMS[form][1]] * RATE
    assert _try(client, form, "192.0.2.77") == 429
    assert _try(client, form, "") == 429
    right = client.post(
        FORMS[form][0],
        {"username": "alice", "password": "pw-alice"},
        content_type=_content_type(form),
        REMOTE_ADDR="203.0.113.9",
    )
    assert right.status_code == 429  # even the right password waits
    assert int(right["Retry-After"]) > 0


def test_the_forms_share_one_budget() -> None:
    client = Client()
    codes = [_try(client, ("api", "web", "admin")[i % 3], "") for i in range(RATE)]
    assert 429 not in codes
    assert {_try(client, form, "") for form in FORMS} == {429}


def test_reading_the_login_page_is_not_a_try() -> None:
    client = Client()
    for _ in range(RATE + 5):
        assert client.get("/login/").status_code == 200
    assert _try(client, "web", "") == 200


def test_another_address_is_not_held_back() -> None:
    client = Client()
    for _ in range(RATE):
        _try(client, "web", "", remote="203.0.113.9")
    assert _try(client, "web", "", remote="203.0.113.9") == 429
    assert _try(client, "web", "", remote="203.0.113.10") == 200


def test_behind_one_trusted_proxy_the_rightmost_forwarded_address_is_the_client(
    settings: Any,
) -> None:
    settings.REST_FRAMEWORK = {**settings.REST_FRAMEWORK, "NUM_PROXIES": 1}
    client = Client()
    proxy = "10.0.0.2"  # every request comes from the proxy; it appends the client's address
    for i in range(RATE):
        assert _try(client, "api", f"198.51.100.{i}, 203.0.113.5", remote=proxy) == 400
    # The client forges entries to the left of what the proxy appended: still throttled.
    assert _try(client, "web", "192.0.2.1, 203.0.113.5", remote=proxy) == 429
    # Another client behind the same proxy is not.
    assert _try(client, "web", "203.0.113.6", remote=proxy) == 200
