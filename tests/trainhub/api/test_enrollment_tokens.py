"""`POST /api/v1/enrollment-tokens/` answers with the install command; the enroll
endpoint refuses spent tokens and held names, each with its reason (issue 13, item 2)."""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

import pytest
from django.test import override_settings
from django.utils import timezone
from rest_framework.test import APIClient
from trainhub.audit.models import AuditEntry
from trainhub.nodes.install import install_command
from trainhub.nodes.models import EnrollmentToken, Node

from ..factories import make_user

pytestmark = pytest.mark.django_db

TOKENS = "/api/v1/enrollment-tokens/"
ENROLL = "/api/v1/nodes/enroll/"
FACTS: dict[str, Any] = {"hostname": "gpu-9", "address": "10.0.0.9", "cpus": 4, "memory_mb": 8192}


@pytest.fixture
def admin() -> APIClient:
    client = APIClient()
    client.force_authenticate(make_user("root", superuser=True))
    return client


def _enroll(token: str, **facts: Any) -> Any:
    return APIClient().post(ENROLL, {"token": token, **FACTS, **facts}, format="json")


def test_a_new_token_comes_with_its_install_command_expiry_and_one_use(admin: APIClient) -> None:
    before = timezone.now()
    answer = admin.post(TOKENS, {}, format="json")
    assert answer.status_code == 201, answer.content
    body = answer.json()
    assert set(body) == {"id", "token", "expires_at", "max_uses", "install_command"}
    assert body["max_uses"] == 1
    expires = datetime.fromisoformat(body["expires_at"])
    assert timedelta(minutes=59) < expires - before <= timedelta(hours=1, seconds=5)
    assert body["install_command"] == install_command("http://testserver", body["token"])
    # The token only in the file the first part saves; the test server is plain http.
    assert body["install_command"] == (
        f"(umask 077 && printf '%s\\n' {body['token']} > ~/trainhub-enroll-token) && "
        "curl -fsSL http://testserver/agent/install.sh | sh -s -- "
        "--server http://testserver --insecure --token-file ~/trainhub-enroll-token"
    )


@override_settings(EXTERNAL_URL="https://trainhub.example.com")
def test_the_install_command_uses_the_public_url_when_set(admin: APIClient) -> None:
    body = admin.post(TOKENS, {"max_uses": 5}, format="json").json()
    assert body["install_command"].endswith(
        "&& curl -fsSL https://trainhub.example.com/agent/install.sh | sh -s -- "
        "--server https://trainhub.example.com --token-file ~/trainhub-enroll-token"
    )
    assert body["max_uses"] == 5


@pytest.mark.parametrize(
    ("request_body", "field", "message"),
    [
        ({"expires_at": timedelta(days=8)}, "expires_at", "at most 7 days"),
        ({"expires_at": timedelta(minutes=-1)}, "expires_at", "in the future"),
        ({"max_uses": 0}, "max_uses", "greater than or equal to 1"),
    ],
    ids=["too-long", "past", "no-uses"],
)
def test_out_of_bounds_terms_are_400_naming_the_field_and_create_nothing(
    admin: APIClient, request_body: dict[str, Any], field: str, message: str
) -> None:
    if "expires_at" in request_body:
        request_body = {"expires_at": (timezone.now() + request_body["expires_at"]).isoformat()}
    answer = admin.post(TOKENS, request_body, format="json")
    assert answer.status_code == 400
    assert list(answer.json()) == [field] and message in answer.json()[field][0]
    assert not EnrollmentToken.objects.exists() and not AuditEntry.objects.exists()


def test_only_platform_admins_create_tokens() -> None:
    member = APIClient()
    member.force_authenticate(make_user("alice"))
    assert member.post(TOKENS, {}, format="json").status_code == 403
    assert APIClient().post(TOKENS, {}, format="json").status_code in (401, 403)
    assert not EnrollmentToken.objects.exists()


def test_a_token_enrolls_one_node_then_says_it_is_used_up(admin: APIClient) -> None:
    token = admin.post(TOKENS, {}, format="json").json()["token"]
    first = _enroll(token, labels={"zone": "eu-1"})
    assert first.status_code == 201, first.content
    second = _enroll(token, hostname="gpu-10")
    assert second.status_code == 400
    [message] = second.json()["token"]
    assert "used up (1 of 1 node enrolled with it)" in message
    assert "ask a platform admin for a new one" in message
    assert list(Node.objects.values_list("hostname", flat=True)) == ["gpu-9"]
    [node] = admin.get("/api/v1/nodes/").json()["results"]
    assert node["labels"] == {"zone": "eu-1"}


def test_an_expired_token_is_refused_with_its_expiry(admin: APIClient) -> None:
    token = admin.post(TOKENS, {}, format="json").json()
    EnrollmentToken.objects.filter(pk=token["id"]).update(
        expires_at=timezone.now() - timedelta(seconds=1)
    )
    answer = _enroll(token["token"])
    assert answer.status_code == 400 and "expired at" in answer.json()["token"][0]
    assert not Node.objects.exists()
    assert EnrollmentToken.objects.get(pk=token["id"]).uses == 0


def test_a_held_name_and_bad_labels_are_refused_naming_their_field(admin: APIClient) -> None:
    token = admin.post(TOKENS, {"max_uses": 3}, format="json").json()
    assert _enroll(token["token"]).status_code == 201
    held = _enroll(token["token"])
    assert held.status_code == 400 and "--name" in held.json()["hostname"][0]
    bad = _enroll(token["token"], hostname="gpu-11", labels={"zone": "eu 1"})
    assert bad.status_code == 400 and "zone" in bad.json()["labels"][0]
    assert Node.objects.count() == 1
    assert EnrollmentToken.objects.get(pk=token["id"]).uses == 1
