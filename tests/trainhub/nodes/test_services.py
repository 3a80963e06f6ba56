"""Node enrollment, credentials, heartbeats, liveness and administration (nodes.services).

Every refusal is checked for what it leaves behind: a refused enrollment creates no node
and uses up nothing, a no-op change writes no audit entry.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from django.test import override_settings
from django.utils import timezone
from trainhub.audit.models import AuditEntry
from trainhub.nodes.choices import NodeState
from trainhub.nodes.credentials import authenticate_node
from trainhub.nodes.heartbeats import record_heartbeat
from trainhub.nodes.models import EnrollmentToken, Node
from trainhub.nodes.secrets_util import hash_secret
from trainhub.nodes.services import (
    EnrollmentError,
    create_enrollment_token,
    enroll_node,
    revoke_enrollment_token,
    set_node_owner,
    set_node_state,
)

from ..factories import make_node, make_team, make_user

pytestmark = pytest.mark.django_db

FACTS: dict[str, Any] = {
    "hostname": "gpu-7",
    "address": "10.0.0.7",
    "cpus": 16,
    "memory_mb": 65536,
    "gpus": [{"index": 0, "model": "NVIDIA A100", "memory_mb": 40960}],
}


def _audit(action: str) -> list[AuditEntry]:
    return list(AuditEntry.objects.filter(action=action).order_by("id"))


# Enrollment tokens


def test_a_token_is_stored_hashed_and_its_creation_audited() -> None:
    root = make_user("root", superuser=True)
    issued = create_enrollment_token(created_by=root, description="rack 3", max_uses=5)
    token = EnrollmentToken.objects.get(pk=issued.id)
    assert token.token_hash == hash_secret(issued.secret) != issued.secret
    assert (token.description, token.max_uses, token.uses, token.revoked) == ("rack 3", 5, 0, False)
    assert token.created_by == root
    [entry] = _audit("enrollment_token.create")
    assert (entry.actor, entry.object_id) == (root, str(token.pk))
    assert entry.after is not None and entry.after["max_uses"] == 5
    assert issued.secret not in str(entry.after)


def test_revoking_is_audited_once_and_twice_is_a_no_op() -> None:
    root = make_user("root", superuser=True)
    token = EnrollmentToken.objects.get(pk=create_enrollment_token().id)
    revoke_enrollment_token(token=token, actor=root)
    revoke_enrollment_token(token=token, actor=root)
    token.refresh_from_db()
    assert token.revoked
    [entry] = _audit("enrollment_token.revoke")
    assert (entry.actor, entry.before, entry.after) == (root, {"revoked": False}, {"revoked": True})


# Enrolling a node


def test_enrolling_creates_a_live_node_and_counts_the_use() -> None:
    now = timezone.now()
    issued = create_enrollment_token()
    node_credential = enroll_node(token=issued.secret, facts=FACTS, now=now)
    node = Node.objects.get(pk=node_credential.id)
    assert (node.hostname, node.address, node.cpus, node.memory_mb) == (
        "gpu-7",
        "10.0.0.7",
        16,
        65536,
    )
    assert node.gpus == FACTS["gpus"] and node.gpu_count == 1
    assert node.state == NodeState.ACTIVE and node.last_seen == now and node.is_alive(now)
    assert node_credential.secret.startswith(f"{node.pk}.")
    assert (
        node.credential_hash and node_credential.secret.split(".", 1)[1] not in node.credential_hash
    )
    assert EnrollmentToken.objects.get(pk=issued.id).uses == 1


def test_a_node_without_gpus_in_its_facts_has_none() -> None:
    facts = {k: v for k, v in FACTS.items() if k != "gpus"}
    issued = enroll_node(token=create_enrollment_token().secret, facts=facts, now=timezone.now())
    assert Node.objects.get(pk=issued.id).gpus == []


def _refused(
    secret: str, now: Any, token_id: int | None = None, uses: int = 0, why: str = ""
) -> None:
    with pytest.raises(EnrollmentError, match=f"{why}.*ask a platform admin for a new one"):
        enroll_node(token=secret, facts=FACTS, now=now)
    assert not Node.objects.exists()
    if token_id is not None:
        assert EnrollmentToken.objects.get(pk=token_id).uses == uses


def test_an_unknown_token_enrolls_nothing() -> None:
    create_enrollment_token()
    _refused("not-a-token", timezone.now(), why="not known")
    _refused("", timezone.now(), why="not known")


def test_a_revoked_token_enrolls_nothing() -> None:
    issued = create_enrollment_token()
    revoke_enrollment_token(token=EnrollmentToken.objects.get(pk=issued.id))
    _refused(issued.secret, timezone.now(), issued.id, why="revoked")


def test_an_expired_token_enrolls_nothing_from_its_expiry_on() -> None:
    now = timezone.now()
    issued = create_enrollment_token(expires_at=now + timedelta(minutes=5))
    _refused(issued.secret, now + timedelta(minutes=5), issued.id, why="expired at")
    _refused(issued.secret, now + timedelta(days=1), issued.id, why="expired at")
    enroll_node(token=issued.secret, facts=FACTS, now=now + timedelta(minutes=4))
    assert Node.objects.count() == 1


def test_a_token_enrolls_at_most_max_uses_nodes() -> None:
    now = timezone.now()
    issued = create_enrollment_token(max_uses=2)
    enroll_node(token=issued.secret, facts=FACTS, now=now)
    enroll_node(token=issued.secret, facts={**FACTS, "hostname": "gpu-8"}, now=now)
    with pytest.raises(EnrollmentError):
        enroll_node(token=issued.secret, facts={**FACTS, "hostname": "gpu-9"}, now=now)
    assert sorted(Node.objects.values_list("hostname", flat=True)) == ["gpu-7", "gpu-8"]
    assert EnrollmentToken.objects.get(pk=issued.id).uses == 2


def test_facts_without_a_hostname_enroll_nothing_and_use_nothing() -> None:
    issued = create_enrollment_token(max_uses=1)
    facts = {k: v for k, v in FACTS.items() if k != "hostname"}
    with pytest.raises(Exception):  # noqa: B017 - the agent API validates facts first
        enroll_node(token=issued.secret, facts=facts, now=timezone.now())
    assert not Node.objects.exists()
    assert EnrollmentToken.objects.get(pk=issued.id).uses == 0


# Node credentials


def test_a_node_authenticates_with_its_credential_only() -> None:
    node, credential = make_node()
    other, other_credential = make_node("node-2")
    assert authenticate_node(credential) == node
    assert authenticate_node(other_credential) == other
    node_id, _, secret = credential.partition(".")
    for wrong in (
        f"{node_id}.{secret}x",  # a wrong secret
        f"{other.pk}.{secret}",  # another node's id with this secret
        f"{other.pk + 100}.{secret}",  # an unknown node
        secret,  # no id
        f"{node_id}.",  # no secret
        f"x{node_id}.{secret}",  # an id that is not a number
        "",
    ):
        assert authenticate_node(wrong) is None, wrong


# Heartbeats and liveness


def test_a_heartbeat_records_the_time_and_usage() -> None:
    node, _ = make_node()
    later = timezone.now() + timedelta(seconds=42)
    record_heartbeat(node_id=node.pk, usage={"cpu_percent": 12.5}, now=later)
    node.refresh_from_db()
    assert (node.last_seen, node.usage) == (later, {"cpu_percent": 12.5})


def test_a_heartbeat_for_an_unknown_node_changes_nothing() -> None:
    node, _ = make_node()
    before = Node.objects.values().get(pk=node.pk)
    record_heartbeat(node_id=node.pk + 1, usage={"cpu_percent": 99}, now=timezone.now())
    assert list(Node.objects.values()) == [before]


@override_settings(NODE_LOST_AFTER_SECONDS=30)
def test_a_node_is_lost_once_not_heard_from_for_the_grace_period() -> None:
    start = timezone.now()
    fresh, _ = make_node("fresh")
    stale, _ = make_node("stale")
    never, _ = make_node("never")
    Node.objects.filter(pk=fresh.pk).update(last_seen=start)
    Node.objects.filter(pk=stale.pk).update(last_seen=start - timedelta(seconds=31))
    Node.objects.filter(pk=never.pk).update(last_seen=None)

    def names(qs: Any) -> list[str]:
        return sorted(n.hostname for n in qs)

    assert names(Node.objects.alive(start)) == ["fresh"]
    assert names(Node.objects.lost(start)) == ["never", "stale"]
    at_edge = start + timedelta(seconds=30)
    assert names(Node.objects.alive(at_edge)) == ["fresh"]
    past = start + timedelta(seconds=30, milliseconds=1)
    assert names(Node.objects.alive(past)) == []
    for node in Node.objects.all():
        assert node.is_alive(start) == (node.hostname == "fresh")
        assert not node.is_alive(past)


# Cordon, drain and ownership


@pytest.mark.parametrize(
    ("state", "action"),
    [
        (NodeState.CORDONED, "node.cordon"),
        (NodeState.DRAINING, "node.drain"),
    ],
)
def test_cordon_and_drain_are_audited_and_uncordon_undoes_them(
    state: NodeState, action: str
) -> None:
    root = make_user("root", superuser=True)
    node, _ = make_node()
    set_node_state(node=node, state=state, actor=root)
    assert Node.objects.get(pk=node.pk).state == state and node.state == state
    [entry] = _audit(action)
    assert (entry.actor, entry.before, entry.after) == (root, {"state": "active"}, {"state": state})

    set_node_state(node=node, state=NodeState.ACTIVE, actor=root)
    assert Node.objects.get(pk=node.pk).state == NodeState.ACTIVE
    [back] = _audit("node.uncordon")
    assert (back.before, back.after) == ({"state": str(state)}, {"state": "active"})


def test_setting_the_state_a_node_has_changes_nothing() -> None:
    node, _ = make_node()
    set_node_state(node=node, state=NodeState.ACTIVE)
    assert Node.objects.get(pk=node.pk).state == NodeState.ACTIVE
    assert not AuditEntry.objects.filter(action__startswith="node.").exists()


def test_an_owner_is_set_audited_and_cleared() -> None:
    root = make_user("root", superuser=True)
    team = make_team("recsys")
    node, _ = make_node()
    set_node_owner(node=node, owner=team, actor=root)
    assert Node.objects.get(pk=node.pk).owner == team
    set_node_owner(node=node, owner=team, actor=root)  # the same owner: nothing to record
    set_node_owner(node=node, owner=None, actor=root)
    assert Node.objects.get(pk=node.pk).owner is None
    changes = [(e.before, e.after) for e in _audit("node.set_owner")]
    assert changes == [
        ({"owner": None}, {"owner": "recsys"}),
        ({"owner": "recsys"}, {"owner": None}),
    ]
