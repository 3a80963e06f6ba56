"""Personal API tokens end with a password change and never outlive the maximum lifetime;
passwords are held to Django's validators with a minimum length of 12."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.test import Client, override_settings
from django.utils import timezone
from knox.models import AuthToken
from rest_framework.test import APIClient
from trainhub.tenancy.tokens import issue_token

from ..factories import make_user

pytestmark = pytest.mark.django_db
NEW_PASSWORD = "a-brand-new-passphrase"


@pytest.fixture(autouse=True)
def _fast_password_hasher() -> Iterator[None]:
    with override_settings(PASSWORD_HASHERS=["django.contrib.auth.hashers.MD5PasswordHasher"]):
        yield


def _status(secret: str) -> int:
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Token {secret}")
    return client.get("/api/v1/users/me/").status_code


def test_a_password_change_ends_the_users_old_tokens() -> None:
    alice, bob = make_user("alice"), make_user("bob")
    first = issue_token(user=alice, expires_at=None).secret
    second = issue_token(user=alice, expires_at=timezone.now() + timedelta(days=1)).secret
    bobs = issue_token(user=bob, expires_at=None).secret
    assert _status(first) == _status(second) == _status(bobs) == 200

    alice.set_password(NEW_PASSWORD)
    alice.save()

    assert _status(first) == _status(second) == 401
    assert not AuthToken.objects.filter(user=alice).exists()
    assert _status(bobs) == 200  # only her tokens
    assert _status(issue_token(user=alice, expires_at=None).secret) == 200  # new ones work


def test_the_admins_password_form_ends_the_tokens_too() -> None:
    root, alice = make_user("root", superuser=True), make_user("alice")
    secret = issue_token(user=alice, expires_at=None).secret
    admin = Client()
    admin.force_login(root)
    response = admin.post(
        f"/admin/auth/user/{alice.pk}/password/",
        {"password1": NEW_PASSWORD, "password2": NEW_PASSWORD, "usable_password": "true"},
    )
    assert response.status_code == 302, response.content.decode()[-2000:]
    assert _status(secret) == 401


def test_saving_a_user_without_a_new_password_keeps_the_tokens() -> None:
    alice = make_user("alice")
    secret = issue_token(user=alice, expires_at=None).secret
    alice.email = "alice@example.com"
    alice.save()
    alice.set_password("pw-alice")  # the same password again (a re-hash on sign-in)
    alice.save(update_fields=["password"])
    assert Client().login(username="alice", password="pw-alice")  # updates last_login
    assert _status(secret) == 200


def test_a_token_past_the_maximum_lifetime_is_refused_with_the_field_named(settings: Any) -> None:
    settings.TOKEN_MAX_DAYS = 30
    client = APIClient()
    client.force_authenticate(make_user("alice"))
    too_late = timezone.now() + timedelta(days=31)
    late = {"name": "late", "expires_at": too_late.isoformat()}
    refused = client.post("/api/v1/tokens/", late, format="json")
    assert refused.status_code == 400
    assert "30 days" in refused.json()["expires_at"][0]
    default = client.post("/api/v1/tokens/", {"name": "default"}, format="json")
    assert default.status_code == 201
    expiry = AuthToken.objects.get(token_key=default.json()["id"]).expiry
    assert expiry is not None
    assert abs(expiry - (timezone.now() + timedelta(days=30))) < timedelta(minutes=1)


def test_the_account_page_refuses_a_token_past_the_maximum_lifetime(settings: Any) -> None:
    settings.TOKEN_MAX_DAYS = 30
    client = Client()
    client.force_login(make_user("alice"))
    in_days = client.post("/account/tokens/", {"name": "cli", "expires_in_days": "31"})
    assert in_days.status_code == 400
    late = (timezone.localdate() + timedelta(days=40)).isoformat()
    on_date = client.post("/account/tokens/", {"name": "cli", "expires_on": late})
    assert on_date.status_code == 400 and "30 days" in on_date.content.decode()
    assert not AuthToken.objects.exists()


def test_a_token_older_than_the_maximum_lifetime_stops_working(settings: Any) -> None:
    alice = make_user("alice")
    secret = issue_token(user=alice, expires_at=None).secret
    # A token from before the limit was lowered (or set): made 40 days ago, never expiring.
    AuthToken.objects.filter(user=alice).update(
        created=timezone.now() - timedelta(days=40), expiry=None
    )
    settings.TOKEN_MAX_DAYS = 60
    assert _status(secret) == 200
    settings.TOKEN_MAX_DAYS = 30
    assert _status(secret) == 401
    assert not AuthToken.objects.filter(user=alice).exists()


@pytest.mark.parametrize(
    ("password", "why"),
    [
        ("short-pw-11", "at least 12 characters"),
        ("123456789012345", "entirely numeric"),
        ("password1234", "too common"),
        ("carol-the-user", "too similar"),
    ],
)
def test_new_passwords_meet_the_validators(password: str, why: str) -> None:
    client = APIClient()
    client.force_authenticate(make_user("root", superuser=True))
    response = client.post(
        "/api/v1/users/", {"username": "carol-the-user", "password": password}, format="json"
    )
    assert response.status_code == 400
    assert any(why in message for message in response.json()["password"]), response.json()
    assert not User.objects.filter(username="carol-the-user").exists()
