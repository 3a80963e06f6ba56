"""The Django admin for nodes and enrollment tokens, driven as an administrator would."""

from __future__ import annotations

import re
from typing import Any

import pytest
from django.contrib.messages import get_messages
from django.test import Client
from django.utils import timezone
from trainhub.audit.models import AuditEntry
from trainhub.nodes.choices import NodeState
from trainhub.nodes.models import EnrollmentToken, Node
from trainhub.nodes.services import EnrollmentError, create_enrollment_token, enroll_node

from ..factories import make_node, make_user

pytestmark = pytest.mark.django_db

TOKENS = "/admin/nodes/enrollmenttoken/"
NODES = "/admin/nodes/node/"
FACTS: dict[str, Any] = {"hostname": "n", "address": "10.0.0.1", "cpus": 4, "memory_mb": 4096}


@pytest.fixture
def admin_client() -> Client:
    client = Client()
    client.force_login(make_user("root", superuser=True))
    return client


def _action(client: Client, url: str, action: str, ids: list[int]) -> Any:
    """POST the changelist's action form, as the "Go" button does."""
    return client.post(url, {"action": action, "_selected_action": [str(i) for i in ids]})


def test_the_revoke_action_revokes_the_selected_tokens_only(admin_client: Client) -> None:
    first, second, kept = (create_enrollment_token(description=d) for d in ("a", "b", "c"))
    response = _action(admin_client, TOKENS, "revoke", [first.id, second.id])
    assert response.status_code == 302
    revoked = dict(EnrollmentToken.objects.values_list("id", "revoked"))
    assert revoked == {first.id: True, second.id: True, kept.id: False}
    entries = AuditEntry.objects.filter(action="enrollment_token.revoke")
    assert sorted(entries.values_list("object_id", flat=True)) == sorted(
        [str(first.id), str(second.id)]
    )
    assert {e.actor_name for e in entries} == {"root"}
    # A revoked token enrolls nothing any more; the one left alone still does.
    with pytest.raises(EnrollmentError):
        enroll_node(token=first.secret, facts=FACTS, now=timezone.now())
    enroll_node(token=kept.secret, facts=FACTS, now=timezone.now())
    assert Node.objects.count() == 1


def test_a_user_who_is_not_staff_cannot_revoke() -> None:
    token = create_enrollment_token()
    client = Client()
    client.force_login(make_user("mallory"))
    response = _action(client, TOKENS, "revoke", [token.id])
    assert response.status_code == 302 and "/admin/login/" in response["Location"]
    assert not EnrollmentToken.objects.get(pk=token.id).revoked
    assert not AuditEntry.objects.filter(action="enrollment_token.revoke").exists()


def test_adding_a_token_shows_its_secret_once_and_stores_only_the_hash(
    admin_client: Client,
) -> None:
    response = admin_client.post(TOKENS + "add/", {"description": "rack 4", "max_uses": "1"})
    assert response.status_code == 302
    shown = " ".join(str(m) for m in get_messages(response.wsgi_request))
    match = re.search(r"copy it now\): (\S+)", shown)
    assert match is not None, shown
    secret = match.group(1)
    token = EnrollmentToken.objects.get()
    assert (token.description, token.max_uses) == ("rack 4", 1)
    assert token.created_by is not None and token.created_by.username == "root"
    assert secret not in token.token_hash
    assert AuditEntry.objects.filter(action="enrollment_token.create").count() == 1
    enroll_node(token=secret, facts=FACTS, now=timezone.now())
    # The next page shows the message; no page shows the secret again.
    assert secret in admin_client.get(TOKENS).content.decode()
    assert secret not in admin_client.get(TOKENS).content.decode()
    assert secret not in admin_client.get(f"{TOKENS}{token.pk}/change/").content.decode()


def test_tokens_cannot_be_deleted_only_revoked(admin_client: Client) -> None:
    """Deleting would lose the token from the audit trail; revoking keeps it."""
    token = create_enrollment_token()
    admin_client.post(
        TOKENS,
        {"action": "delete_selected", "_selected_action": [str(token.id)], "post": "yes"},
    )
    assert admin_client.post(f"{TOKENS}{token.id}/delete/", {"post": "yes"}).status_code == 403
    assert EnrollmentToken.objects.filter(pk=token.id).exists()


@pytest.mark.parametrize(
    ("action", "state"),
    [("cordon", NodeState.CORDONED), ("drain", NodeState.DRAINING)],
)
def test_node_state_actions_change_the_selected_nodes(
    admin_client: Client, action: str, state: NodeState
) -> None:
    chosen, _ = make_node("chosen")
    make_node("other")
    assert _action(admin_client, NODES, action, [chosen.pk]).status_code == 302
    states = dict(Node.objects.values_list("hostname", "state"))
    assert states == {"chosen": state, "other": NodeState.ACTIVE}
    assert AuditEntry.objects.get(action=f"node.{action}").object_id == str(chosen.pk)

    assert _action(admin_client, NODES, "uncordon", [chosen.pk]).status_code == 302
    assert Node.objects.get(pk=chosen.pk).state == NodeState.ACTIVE
