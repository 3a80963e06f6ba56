"""A token cannot make a token that outlives it: `POST /api/v1/tokens/` signed with a
token caps the new one's expiry at that token's (also when the request asks for none, and
for a token held only by `TRAINHUB_TOKEN_MAX_DAYS`); signed in with a session it follows
the maximum lifetime alone, as before."""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.utils import timezone
from knox.models import AuthToken
from rest_framework.test import APIClient
from trainhub.tenancy.tokens import issue_token

from ..factories import make_user

pytestmark = pytest.mark.django_db


@pytest.fixture
def alice(settings: Any) -> User:
    settings.TOKEN_MAX_DAYS = 30
    return make_user("alice")


def _signed_with(secret: str) -> APIClient:
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Token {secret}")
    return client


def _expiry(answer: dict[str, Any]) -> datetime:
    expiry = AuthToken.objects.get(token_key=answer["id"]).expiry
    assert expiry is not None
    return expiry


def test_a_token_made_with_a_token_ends_no_later_than_it(alice: User) -> None:
    parent = issue_token(user=alice, expires_at=timezone.now() + timedelta(days=1))
    assert parent.expiry is not None
    client = _signed_with(parent.secret)

    child = client.post("/api/v1/tokens/", {"name": "child"}, format="json")
    assert child.status_code == 201, child.content
    assert _expiry(child.json()) == parent.expiry
    assert datetime.fromisoformat(child.json()["expiry"]) == parent.expiry

    # Its child in turn: no chain of tokens renews itself past the first one's end.
    grandchild = _signed_with(child.json()["token"]).post(
        "/api/v1/tokens/", {"name": "grandchild"}, format="json"
    )
    assert grandchild.status_code == 201
    assert _expiry(grandchild.json()) == parent.expiry


def test_a_later_expiry_asked_for_with_a_token_is_refused_naming_the_field(alice: User) -> None:
    parent = issue_token(user=alice, expires_at=timezone.now() + timedelta(days=1))
    assert parent.expiry is not None
    client = _signed_with(parent.secret)
    before = AuthToken.objects.count()

    later = (parent.expiry + timedelta(hours=1)).isoformat()
    refused = client.post("/api/v1/tokens/", {"name": "later", "expires_at": later}, format="json")
    assert refused.status_code == 400
    assert refused.json()["expires_at"] == [
        f"At most {parent.expiry.isoformat()}: a token cannot make one that outlives it "
        "(the token this request is signed with expires then)."
    ]
    assert AuthToken.objects.count() == before

    sooner = timezone.now() + timedelta(hours=2)
    made = client.post(
        "/api/v1/tokens/", {"name": "sooner", "expires_at": sooner.isoformat()}, format="json"
    )
    assert made.status_code == 201
    assert _expiry(made.json()) == sooner


def test_a_token_without_an_expiry_caps_at_the_maximum_lifetime_from_when_it_was_made(
    alice: User,
) -> None:
    """A token from before the limit (no expiry of its own) ends `TOKEN_MAX_DAYS` after it
    was made, so the tokens it makes do too."""
    parent = issue_token(user=alice, expires_at=None)
    made = timezone.now() - timedelta(days=20)
    AuthToken.objects.filter(token_key=parent.key).update(created=made, expiry=None)

    child = _signed_with(parent.secret).post("/api/v1/tokens/", {"name": "child"}, format="json")
    assert child.status_code == 201, child.content
    assert _expiry(child.json()) == made + timedelta(days=30)


def test_a_session_makes_tokens_by_the_maximum_lifetime_alone(alice: User) -> None:
    issue_token(user=alice, expires_at=timezone.now() + timedelta(days=1))
    client = APIClient()
    client.force_login(alice)
    made = client.post("/api/v1/tokens/", {"name": "default"}, format="json")
    assert made.status_code == 201
    assert abs(_expiry(made.json()) - (timezone.now() + timedelta(days=30))) < timedelta(minutes=1)
    later = timezone.now() + timedelta(days=20)
    asked = client.post(
        "/api/v1/tokens/", {"name": "later", "expires_at": later.isoformat()}, format="json"
    )
    assert asked.status_code == 201
    assert _expiry(asked.json()) == later
