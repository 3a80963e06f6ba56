"""`PATCH /api/v1/nodes/{id}/ {"labels": {…}}`: platform admins replace a node's labels."""

from __future__ import annotations

from typing import Any

import pytest
from rest_framework.test import APIClient
from trainhub.audit.models import AuditEntry
from trainhub.nodes.models import Node
from trainhub.nodes.services import set_node_labels

from ..factories import make_node, make_user

pytestmark = pytest.mark.django_db


@pytest.fixture
def node() -> Node:
    node, _ = make_node()
    set_node_labels(node=node, labels={"zone": "eu-1"})
    return node


def _as(user: Any) -> APIClient:
    client = APIClient()
    client.force_authenticate(user)
    return client


def _patch(client: APIClient, node: Node, body: Any) -> Any:
    return client.patch(f"/api/v1/nodes/{node.pk}/", body, format="json")


def _unchanged(node: Node) -> None:
    assert Node.objects.get(pk=node.pk).labels == {"zone": "eu-1"}
    assert AuditEntry.objects.filter(action="node.set_labels").count() == 1


def test_a_platform_admin_replaces_the_labels(node: Node) -> None:
    admin = _as(make_user("root", superuser=True))
    response = _patch(admin, node, {"labels": {"zone": "eu-2", "rack": "4", "spot": ""}})
    assert response.status_code == 200, response.content
    assert response.json()["labels"] == {"zone": "eu-2", "rack": "4", "spot": ""}
    assert response.json()["id"] == node.pk and "outdated" in response.json()
    assert Node.objects.get(pk=node.pk).labels == {"zone": "eu-2", "rack": "4", "spot": ""}
    entry = AuditEntry.objects.filter(action="node.set_labels").latest("id")
    assert entry.actor_name == "root"
    cleared = _patch(admin, node, {"labels": {}})
    assert cleared.status_code == 200 and cleared.json()["labels"] == {}


def test_other_users_cannot_change_labels(node: Node) -> None:
    response = _patch(_as(make_user("alice")), node, {"labels": {"zone": "mine"}})
    assert response.status_code == 403
    assert APIClient().patch(f"/api/v1/nodes/{node.pk}/", {}, format="json").status_code in (
        401,
        403,
    )
    _unchanged(node)


@pytest.mark.parametrize(
    ("body", "said"),
    [
        ({"labels": {"-zone": "eu-1"}}, "label name '-zone'"),
        ({"labels": {"zone": "eu 1"}}, "label zone='eu 1'"),
        ({"labels": {f"k{i}": "v" for i in range(33)}}, "at most 32 labels"),
        ({"labels": {"zone": 4}}, "Expected a string"),
        ({"labels": {"zone": None}}, "null"),
        ({"labels": ["zone=eu-1"]}, "Expected an object"),
        ({"labels": "zone=eu-1"}, "Expected an object"),
    ],
)
def test_bad_labels_are_400_naming_labels_and_change_nothing(
    node: Node, body: Any, said: str
) -> None:
    response = _patch(_as(make_user("root", superuser=True)), node, body)
    assert response.status_code == 400, response.content
    assert list(response.json()) == ["labels"]
    assert said in str(response.json()["labels"])
    _unchanged(node)


def test_a_patch_without_labels_leaves_them_as_they_are(node: Node) -> None:
    response = _patch(_as(make_user("root", superuser=True)), node, {})
    assert response.status_code == 200, response.content
    assert response.json()["labels"] == {"zone": "eu-1"}
    _unchanged(node)


def test_only_labels_can_be_changed(node: Node) -> None:
    admin = _as(make_user("root", superuser=True))
    response = _patch(admin, node, {"labels": {"zone": "eu-2"}, "hostname": "x", "cpus": 1})
    assert response.status_code == 400
    assert sorted(response.json()) == ["cpus", "hostname"]
    _unchanged(node)
    put = admin.put(f"/api/v1/nodes/{node.pk}/", {"labels": {}}, format="json")
    assert put.status_code == 405
    _unchanged(node)


def test_an_unknown_node_is_404() -> None:
    response = _patch(_as(make_user("root", superuser=True)), Node(pk=999999), {"labels": {}})
    assert response.status_code == 404
