"""Admins change a node's labels through one audited service, from the admin or the API."""

from __future__ import annotations

from typing import Any

import pytest
from django.test import Client
from trainhub.audit.models import AuditEntry
from trainhub.events import NodeChanged
from trainhub.nodes.models import Node
from trainhub.nodes.services import set_node_labels

from ps_runtime.agent.labels import LabelError

from ..event_capture import HANDLER, Capture, capturer
from ..factories import make_node, make_user

pytestmark = pytest.mark.django_db

NODES = "/admin/nodes/node/"


@pytest.fixture(autouse=True)
def _events_to_the_recorder_only(settings: Any) -> None:
    settings.EVENT_HANDLERS = [HANDLER]


@pytest.fixture
def published(django_capture_on_commit_callbacks: Any) -> Capture:
    return capturer(django_capture_on_commit_callbacks)


def test_labels_are_replaced_audited_and_published(published: Capture) -> None:
    node, _ = make_node()
    root = make_user("root", superuser=True)
    with published() as events:
        returned = set_node_labels(node=node, labels={"zone": "eu-1", "rack": "4"}, actor=root)
    assert returned.labels == {"zone": "eu-1", "rack": "4"}
    assert Node.objects.get(pk=node.pk).labels == {"zone": "eu-1", "rack": "4"}
    assert events == [NodeChanged(node_id=node.pk, reason="node.set_labels")]
    entry = AuditEntry.objects.get(action="node.set_labels")
    assert (entry.actor_name, entry.object_id) == ("root", str(node.pk))
    assert entry.before == {"labels": {}}
    assert entry.after == {"labels": {"zone": "eu-1", "rack": "4"}}

    set_node_labels(node=node, labels={}, actor=root)  # {} clears them
    assert Node.objects.get(pk=node.pk).labels == {}
    assert AuditEntry.objects.filter(action="node.set_labels").count() == 2


def test_setting_the_same_labels_is_a_no_op(published: Capture) -> None:
    node, _ = make_node()
    set_node_labels(node=node, labels={"zone": "eu-1"})
    with published() as events:
        set_node_labels(node=node, labels={"zone": "eu-1"})
    assert events == []
    assert AuditEntry.objects.filter(action="node.set_labels").count() == 1


@pytest.mark.parametrize(
    ("labels", "said"),
    [
        ({"-zone": "eu-1"}, "label name '-zone'"),
        ({"zone": "eu 1"}, "label zone='eu 1'"),
        ({f"k{i}": "v" for i in range(33)}, "at most 32 labels"),
    ],
)
def test_malformed_labels_are_refused_and_nothing_changes(
    labels: dict[str, str], said: str, published: Capture
) -> None:
    node, _ = make_node()
    set_node_labels(node=node, labels={"zone": "eu-1"})
    with published() as events, pytest.raises(LabelError, match=said):
        set_node_labels(node=node, labels=labels)
    assert events == []
    assert Node.objects.get(pk=node.pk).labels == {"zone": "eu-1"}
    assert AuditEntry.objects.filter(action="node.set_labels").count() == 1


# The admin form: labels written as at install (`zone=eu-1,rack=4`).


@pytest.fixture
def admin_client() -> Client:
    client = Client()
    client.force_login(make_user("root", superuser=True))
    return client


def _form(labels: str) -> dict[str, str]:
    return {"owner": "", "labels": labels}


def test_the_admin_form_shows_and_changes_labels_through_the_service(
    admin_client: Client,
) -> None:
    node, _ = make_node()
    set_node_labels(node=node, labels={"zone": "eu-1", "gpu": ""})
    page = admin_client.get(f"{NODES}{node.pk}/change/").content.decode()
    assert 'value="gpu=,zone=eu-1"' in page  # sorted by name
    response = admin_client.post(f"{NODES}{node.pk}/change/", _form("zone=eu-2, rack=4"))
    assert response.status_code == 302, response.content.decode()[-2000:]
    assert Node.objects.get(pk=node.pk).labels == {"zone": "eu-2", "rack": "4"}
    entry = AuditEntry.objects.filter(action="node.set_labels").latest("id")
    assert entry.actor_name == "root" and entry.after == {"labels": {"zone": "eu-2", "rack": "4"}}


@pytest.mark.parametrize(
    ("text", "said"),
    [("zone", "must be written key=value"), ("zone=a,zone=b", "given twice"), ("a=b c", "b c")],
)
def test_a_malformed_label_in_the_admin_is_shown_and_nothing_changes(
    admin_client: Client, text: str, said: str
) -> None:
    node, _ = make_node()
    set_node_labels(node=node, labels={"zone": "eu-1"})
    response = admin_client.post(f"{NODES}{node.pk}/change/", _form(text))
    assert response.status_code == 200  # the form again, with the error
    assert said in response.content.decode()
    assert Node.objects.get(pk=node.pk).labels == {"zone": "eu-1"}
    assert AuditEntry.objects.filter(action="node.set_labels").count() == 1
