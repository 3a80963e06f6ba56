"""The account page: personal API tokens made (each named by its owner), shown once and
revoked, through the services the API uses; how to sign the CLI in to this server."""

from __future__ import annotations

import re
from datetime import timedelta
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.test import Client
from django.utils import timezone
from knox.models import AuthToken
from trainhub.tenancy.tokens import issue_token

from ..factories import make_user

pytestmark = pytest.mark.django_db

HTMX = {"HX-Request": "true"}


@pytest.fixture
def alice() -> User:
    return make_user("alice")


def _client(user: User) -> Client:
    client = Client()
    client.force_login(user)
    return client


def _secret(page: str) -> str:
    found = re.search(r'<code id="token-secret">([^<]+)</code>', page)
    assert found, "no secret on the page"
    return found.group(1)


def _api_status(secret: str) -> int:
    return Client().get("/api/v1/users/me/", HTTP_AUTHORIZATION=f"Token {secret}").status_code


def test_the_page_says_how_to_sign_the_cli_in_to_this_server(alice: User) -> None:
    page = _client(alice).get("/account/").content.decode()
    assert "trainhub login http://testserver --username alice" in page
    assert "You have no API tokens." in page


def test_a_new_tokens_secret_is_shown_once_and_works(alice: User) -> None:
    client = _client(alice)
    data = {"name": " laptop CLI ", "expires_in_days": "", "expires_on": ""}
    response = client.post("/account/tokens/", data)
    assert response.status_code == 201
    page = response.content.decode()
    secret = _secret(page)
    assert f"trainhub login http://testserver --token {secret}" in page
    assert "It expires" in page and "It never expires." not in page
    assert "<h3>New token “laptop CLI”</h3>" in page  # stripped
    assert _api_status(secret) == 200
    token = AuthToken.objects.get(user=alice)
    # Neither field: the longest the server allows (TRAINHUB_TOKEN_MAX_DAYS, 90 by default).
    assert token.expiry is not None
    assert abs(token.expiry - (timezone.now() + timedelta(days=90))) < timedelta(minutes=1)
    again = client.get("/account/").content.decode()
    assert secret not in again and f"{token.token_key}…" in again
    assert token.label.name == "laptop CLI"


def test_a_token_expires_after_the_days_or_at_the_end_of_the_date_given(alice: User) -> None:
    client = _client(alice)
    before = timezone.now()
    assert client.post("/account/tokens/", {"name": "a", "expires_in_days": "7"}).status_code == 201
    day = timezone.localdate() + timedelta(days=3)
    assert (
        client.post(
            "/account/tokens/", {"name": "b", "expires_on": day.isoformat()}, headers=HTMX
        ).status_code
        == 201
    )
    in_days, on_date = AuthToken.objects.filter(user=alice).order_by("created")
    assert in_days.expiry is not None and on_date.expiry is not None
    assert abs(in_days.expiry - (before + timedelta(days=7))) < timedelta(minutes=1)
    assert on_date.expiry.date() == day + timedelta(days=1) and on_date.expiry.hour == 0


@pytest.mark.parametrize(
    ("data", "field", "message"),
    [
        ({"expires_on": "2000-01-01"}, "expires_on", "Must be in the future."),
        ({"expires_in_days": "0"}, "expires_in_days", "greater than or equal to 1"),
        ({"expires_in_days": "x"}, "expires_in_days", "Enter a whole number."),
    ],
)
def test_a_bad_expiry_is_refused_beside_its_field(
    alice: User, data: dict[str, str], field: str, message: str
) -> None:
    response = _client(alice).post("/account/tokens/", {"name": "cli", **data}, headers=HTMX)
    assert response.status_code == 400
    page = response.content.decode()
    assert re.search(f'<p class="field-error" id="id_{field}_error">[^<]*{message}', page)
    assert f'value="{next(iter(data.values()))}"' in page  # the typed input survives
    assert not AuthToken.objects.filter(user=alice).exists()


def test_days_and_a_date_together_are_refused(alice: User) -> None:
    data = {
        "name": "cli",
        "expires_in_days": "3",
        "expires_on": (timezone.localdate() + timedelta(days=9)).isoformat(),
    }
    response = _client(alice).post("/account/tokens/", data)
    assert response.status_code == 400
    assert "Give a number of days or a date, not both." in response.content.decode()
    assert not AuthToken.objects.filter(user=alice).exists()


def test_revoking_a_token_stops_it_at_once(alice: User) -> None:
    issued = issue_token(user=alice, expires_at=None, name="nightly script")
    client = _client(alice)
    response = client.post(f"/account/tokens/{issued.key}/revoke/", headers=HTMX)
    assert response.status_code == 200
    page = response.content.decode()
    assert page.startswith('<section id="tokens"')
    assert "Token “nightly script” revoked: it no longer works." in page
    assert f'id="token-{issued.key}"' not in page
    assert _api_status(issued.secret) == 401
    response = client.post(f"/account/tokens/{issued.key}/revoke/")
    assert response.status_code == 404  # already gone


def test_without_htmx_a_revocation_goes_back_to_the_page(alice: User) -> None:
    issued = issue_token(user=alice, expires_at=None)
    response = _client(alice).post(f"/account/tokens/{issued.key}/revoke/")
    assert (response.status_code, response["Location"]) == (302, "/account/")
    assert not AuthToken.objects.filter(user=alice).exists()


def test_a_token_without_a_name_is_revoked_by_its_key(alice: User) -> None:
    issued = issue_token(user=alice, expires_at=None)
    response = _client(alice).post(f"/account/tokens/{issued.key}/revoke/", headers=HTMX)
    assert f"Token {issued.key}… revoked: it no longer works." in response.content.decode()


def test_the_table_names_each_token_first_and_unnamed_ones_say_so(alice: User) -> None:
    named = issue_token(user=alice, expires_at=None, name="laptop CLI")
    unnamed = issue_token(user=alice, expires_at=None)
    page = _client(alice).get("/account/").content.decode()
    assert '<tr><th scope="col">Name</th><th scope="col">Token</th>' in page
    for key, cell in [
        (named.key, "laptop CLI"),
        (unnamed.key, '<span class="muted">(unnamed)</span>'),
    ]:
        row = re.search(f'<tr id="token-{key}">\\s*<th scope="row">([^\\n]*)</th>', page)
        assert row and row.group(1) == cell, key
    assert 'aria-label="Revoke token “laptop CLI”…"' in page
    assert f'aria-label="Revoke token {unnamed.key}…"' in page


@pytest.mark.parametrize(
    ("name", "message"),
    [
        ("", "Give the token a name that says what uses it, e.g. “laptop CLI”."),
        ("   ", "Give the token a name that says what uses it, e.g. “laptop CLI”."),
        ("x" * 65, "At most 64 characters: choose a shorter name for the token."),
        ("LAPTOP cli", "You already have a token named “LAPTOP cli”: choose another name."),
    ],
)
def test_a_missing_long_or_taken_name_is_refused_beside_its_field(
    alice: User, name: str, message: str
) -> None:
    issue_token(user=alice, expires_at=None, name="laptop CLI")
    response = _client(alice).post("/account/tokens/", {"name": name}, headers=HTMX)
    assert response.status_code == 400
    page = response.content.decode()
    assert f'<p class="field-error" id="id_name_error">{message}</p>' in page
    assert AuthToken.objects.filter(user=alice).count() == 1


def test_another_user_may_use_the_same_name(alice: User) -> None:
    issue_token(user=make_user("bob"), expires_at=None, name="laptop CLI")
    response = _client(alice).post("/account/tokens/", {"name": "laptop CLI"})
    assert response.status_code == 201


def test_another_users_token_cannot_be_revoked(alice: User) -> None:
    bob = make_user("bob")
    issued = issue_token(user=bob, expires_at=None)
    assert issued.key not in _client(alice).get("/account/").content.decode()
    response = _client(alice).post(f"/account/tokens/{issued.key}/revoke/")
    assert response.status_code == 404
    assert AuthToken.objects.filter(user=bob).count() == 1
    assert _api_status(issued.secret) == 200


def test_an_expired_token_is_marked(alice: User) -> None:
    issue_token(user=alice, expires_at=timezone.now() + timedelta(hours=1))
    AuthToken.objects.filter(user=alice).update(expiry=timezone.now() - timedelta(hours=1))
    assert "expired" in _client(alice).get("/account/").content.decode()


def test_the_page_makes_as_many_queries_for_many_tokens_as_for_one(
    alice: User, django_assert_num_queries: Any
) -> None:
    client = _client(alice)
    issue_token(user=alice, expires_at=None, name="first")
    # session, user, tokens count and page (with their names), whether the navigation
    # offers Submit; notifications: choices, webhooks, deliveries
    with django_assert_num_queries(8):
        assert client.get("/account/").status_code == 200
    for n in range(5):
        issue_token(user=alice, expires_at=timezone.now() + timedelta(days=1), name=f"t{n}")
    with django_assert_num_queries(8):
        assert client.get("/account/").status_code == 200


def test_signed_out_browsers_go_to_the_login_page() -> None:
    response = Client().get("/account/")
    assert (response.status_code, response["Location"]) == (302, "/login/?next=/account/")
    assert Client().post("/account/tokens/").status_code == 302
    assert not AuthToken.objects.exists()
