"""Node enrollment, authentication and liveness.

A change that alters what the scheduler may place where (a node enrolled, cordoned,
drained, given a new owner) publishes `NodeChanged`; the scheduler queues a cycle on it.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from django.contrib.auth.models import User
from django.db import transaction
from django.db.models import F, Q

from trainhub.audit.services import Actor, record_change
from trainhub.events import NodeChanged, publish
from trainhub.tenancy.models import Team

from .choices import NodeState
from .models import EnrollmentToken, Node
from .secrets_util import hash_secret, matches, new_secret


class EnrollmentError(Exception):
    """The enrollment token is unknown, revoked, expired or used up."""


@dataclass(frozen=True)
class IssuedSecret:
    id: int
    secret: str


@transaction.atomic
def create_enrollment_token(
    *,
    created_by: User | None = None,
    description: str = "",
    expires_at: datetime | None = None,
    max_uses: int | None = None,
) -> IssuedSecret:
    """Create an enrollment token; the secret is returned once and stored only hashed."""
    secret = new_secret()
    token = EnrollmentToken.objects.create(
        description=description,
        token_hash=hash_secret(secret),
        created_by=created_by,
        expires_at=expires_at,
        max_uses=max_uses,
    )
    record_change(
        actor=created_by,
        action="enrollment_token.create",
        target=token,
        before=None,
        after={"description": description, "expires_at": str(expires_at), "max_uses": max_uses},
    )
    return IssuedSecret(id=token.pk, secret=secret)


@transaction.atomic
def revoke_enrollment_token(*, token: EnrollmentToken, actor: Actor = None) -> None:
    """Stop the token from enrolling more nodes; revoking twice is a no-op."""
    if EnrollmentToken.objects.filter(pk=token.pk, revoked=False).update(revoked=True):
        record_change(
            actor=actor,
            action="enrollment_token.revoke",
            target=token,
            before={"revoked": False},
            after={"revoked": True},
        )
    token.revoked = True


def _change_node(
    locked: Node, *, action: str, actor: Actor, field: str, value: Any, shown: tuple[Any, Any]
) -> None:
    """Set one scheduling-relevant field of a locked node: audited and published."""
    before, after = shown
    if before == after:
        return
    Node.objects.filter(pk=locked.pk).update(**{field: value})
    record_change(
        actor=actor, action=action, target=locked, before={field: before}, after={field: after}
    )
    publish(NodeChanged(node_id=locked.pk, reason=action))


@transaction.atomic
def set_node_state(*, node: Node, state: NodeState, actor: Actor = None) -> Node:
    """Cordon, drain or uncordon a node (a no-op when it already is in `state`)."""
    locked = Node.objects.select_for_update().get(pk=node.pk)
    _change_node(
        locked,
        action=f"node.{_VERBS[state]}",
        actor=actor,
        field="state",
        value=state,
        shown=(locked.state, str(state)),
    )
    node.state = state
    return node


@transaction.atomic
def set_node_owner(*, node: Node, owner: Team | None, actor: Actor = None) -> Node:
    """Make `owner`'s jobs prefer this node (None: no team is preferred)."""
    locked = Node.objects.select_for_update(of=("self",)).select_related("owner").get(pk=node.pk)
    _change_node(
        locked,
        action="node.set_owner",
        actor=actor,
        field="owner",
        value=owner,
        shown=(locked.owner.slug if locked.owner else None, owner.slug if owner else None),
    )
    node.owner = owner
    return node


_VERBS = {NodeState.ACTIVE: "uncordon", NodeState.CORDONED: "cordon", NodeState.DRAINING: "drain"}


@transaction.atomic
def enroll_node(*, token: str, facts: dict[str, Any], now: datetime) -> IssuedSecret:
    """Register a node with an enrollment token; returns the node id and its credential."""
    usable = (
        EnrollmentToken.objects.select_for_update()
        .filter(token_hash=hash_secret(token), revoked=False)
        .filter(Q(expires_at__isnull=True) | Q(expires_at__gt=now))
        .filter(Q(max_uses__isnull=True) | Q(uses__lt=F("max_uses")))
        .first()
    )
    if usable is None:
        raise EnrollmentError(
            "Enrollment token is unknown, revoked, expired or used up; ask an admin for a new one."
        )
    EnrollmentToken.objects.filter(pk=usable.pk).update(uses=F("uses") + 1)
    secret = new_secret()
    node = Node.objects.create(
        hostname=facts["hostname"],
        address=facts["address"],
        cpus=facts["cpus"],
        memory_mb=facts["memory_mb"],
        gpus=facts.get("gpus", []),
        credential_hash=hash_secret(secret),
        last_seen=now,
    )
    publish(NodeChanged(node_id=node.pk, reason="node.enroll"))
    return IssuedSecret(id=node.pk, secret=f"{node.pk}.{secret}")


def authenticate_node(credential: str) -> Node | None:
    """The node this credential belongs to, or None."""
    node_id, _, secret = credential.partition(".")
    if not node_id.isdigit() or not secret:
        return None
    node = Node.objects.filter(pk=int(node_id)).first()
    if node is None or not matches(secret, node.credential_hash):
        return None
    return node


def record_heartbeat(*, node_id: int, usage: dict[str, Any], now: datetime) -> None:
    Node.objects.filter(pk=node_id).update(last_seen=now, usage=usage)
