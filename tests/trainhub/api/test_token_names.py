"""Personal API tokens have names their owners choose ("laptop CLI", "nightly script"):
required by `POST /api/v1/tokens/`, stripped, at most 64 characters, distinct among one
user's tokens (ignoring case), listed by `GET`, gone with the token. Sign-in may name its
token (the CLI does); tokens made without a name list `name: null`."""

from __future__ import annotations

from typing import Any

import pytest
from django.contrib.auth.models import User
from knox.models import AuthToken
from rest_framework.test import APIClient
from trainhub.tenancy.models import TokenLabel
from trainhub.tenancy.tokens import issue_token

from ..factories import make_user

pytestmark = pytest.mark.django_db

REQUIRED = "Give the token a name that says what uses it, e.g. “laptop CLI”."


@pytest.fixture
def alice() -> User:
    return make_user("alice")


def _as(user: User) -> APIClient:
    client = APIClient()
    client.force_authenticate(user)
    return client


def _create(client: APIClient, body: dict[str, Any]) -> Any:
    return client.post("/api/v1/tokens/", body, format="json")


@pytest.mark.parametrize(
    ("body", "message"),
    [
        ({}, REQUIRED),
        ({"name": ""}, REQUIRED),
        ({"name": "  \t "}, REQUIRED),
        ({"name": "x" * 65}, "At most 64 characters: choose a shorter name for the token."),
        ({"name": "a\x07b"}, "A token's name cannot hold control characters: type it again."),
    ],
)
def test_a_missing_blank_long_or_odd_name_is_refused_naming_the_field(
    alice: User, body: dict[str, Any], message: str
) -> None:
    refused = _create(_as(alice), body)
    assert refused.status_code == 400
    assert refused.json() == {"name": [message]}
    assert not AuthToken.objects.exists()


def test_a_name_is_stripped_kept_and_listed(alice: User) -> None:
    client = _as(alice)
    made = _create(client, {"name": "  laptop CLI  "})
    assert made.status_code == 201, made.content
    assert made.json()["name"] == "laptop CLI"
    longest = _create(client, {"name": "n" * 64})
    assert longest.status_code == 201
    unnamed = issue_token(user=alice, expires_at=None)  # as before names, or a sign-in
    # The service strips too, whoever calls it.
    assert issue_token(user=alice, expires_at=None, name="\tcron\n").name == "cron"
    listed = client.get("/api/v1/tokens/").json()
    assert [(t["id"], t["name"]) for t in listed] == [
        (made.json()["id"], "laptop CLI"),
        (longest.json()["id"], "n" * 64),
        (unnamed.key, None),
        (listed[3]["id"], "cron"),
    ]


def test_the_same_name_twice_is_refused_naming_it(alice: User) -> None:
    client = _as(alice)
    assert _create(client, {"name": "nightly script"}).status_code == 201
    again = _create(client, {"name": "Nightly Script"})
    assert again.status_code == 400
    assert again.json() == {
        "name": ["You already have a token named “Nightly Script”: choose another name."]
    }
    assert AuthToken.objects.filter(user=alice).count() == 1
    # Another user's names are theirs.
    assert _create(_as(make_user("bob")), {"name": "nightly script"}).status_code == 201


def test_a_revoked_tokens_name_goes_with_it(alice: User) -> None:
    client = _as(alice)
    made = _create(client, {"name": "laptop CLI"}).json()
    assert client.delete(f"/api/v1/tokens/{made['id']}/").status_code == 204
    assert not TokenLabel.objects.exists()
    assert _create(client, {"name": "laptop CLI"}).status_code == 201  # free again


def test_a_password_change_ends_the_names_too(alice: User) -> None:
    issue_token(user=alice, expires_at=None, name="laptop CLI")
    alice.set_password("another password entirely")
    alice.save()
    assert not AuthToken.objects.exists() and not TokenLabel.objects.exists()


def test_the_list_reads_the_names_in_one_query(alice: User, django_assert_num_queries: Any) -> None:
    for n in range(3):
        issue_token(user=alice, expires_at=None, name=f"script {n}")
    client = _as(alice)
    with django_assert_num_queries(1):
        assert len(client.get("/api/v1/tokens/").json()) == 3


def test_sign_in_names_its_token_if_asked(alice: User) -> None:
    client = APIClient()
    credentials = {"username": "alice", "password": "pw-alice"}
    signed_in = client.post("/api/v1/auth/token/", {**credentials, "name": " my laptop "})
    assert signed_in.status_code == 201, signed_in.content
    assert signed_in.json()["name"] == "my laptop"
    plain = client.post("/api/v1/auth/token/", credentials, format="json")
    assert plain.status_code == 201 and plain.json()["name"] is None
    mine = _as(alice).get("/api/v1/tokens/").json()
    assert sorted(t["name"] or "" for t in mine) == ["", "my laptop"]

    taken = client.post("/api/v1/auth/token/", {**credentials, "name": "MY LAPTOP"})
    assert taken.status_code == 400
    assert taken.json() == {
        "name": ["You already have a token named “MY LAPTOP”: choose another name."]
    }
    assert AuthToken.objects.filter(user=alice).count() == 2


def test_sign_in_says_nothing_of_names_to_a_wrong_password(alice: User) -> None:
    issue_token(user=alice, expires_at=None, name="my laptop")
    wrong = APIClient().post(
        "/api/v1/auth/token/", {"username": "alice", "password": "nope", "name": "my laptop"}
    )
    assert wrong.status_code == 400
    assert "name" not in wrong.json()


def test_the_schema_requires_a_name_when_creating_a_token(alice: User) -> None:
    schema = _as(alice).get("/api/schema/", HTTP_ACCEPT="application/json").json()
    components = schema["components"]["schemas"]
    request = components["ApiTokenRequest"]
    assert "name" in request["required"]
    assert request["properties"]["name"]["maxLength"] == 64
    listed = components["ApiToken"]["properties"]["name"]
    assert listed["type"] == ["string", "null"]
    sign_in = components["SignInRequest"]
    assert "name" in sign_in["properties"] and "name" not in sign_in["required"]
