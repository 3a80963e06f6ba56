"""Node credentials: issued at enrollment (`services.enroll_node`), checked on every agent
request, renewed by the agent two thirds into their lifetime, revoked by admins."""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import datetime, timedelta

from django.conf import settings
from django.db import transaction
from django.utils import timezone

from trainhub.audit.services import Actor, record_change
from trainhub.events import NodeChanged, publish

from .models import Node
from .secrets_util import hash_secret, matches, new_secret

# The credential an agent renewed stays valid this long, so its requests already on the
# way (and its socket's reconnect) do not fail during the swap.
CREDENTIAL_OVERLAP = timedelta(minutes=10)
# `NodeChanged.reason` of a revocation; the agent gateway closes the node's socket on it.
CREDENTIAL_REVOKED = "node.revoke_credential"
# A node id as a credential spells it: ASCII digits only (str.isdigit() and int() also
# take Arabic-Indic and fullwidth digits, and int() fails on superscripts), short enough
# for a bigint.
_NODE_ID = re.compile(r"[0-9]{1,18}")


@dataclass(frozen=True)
class IssuedSecret:
    id: int
    secret: str


@dataclass(frozen=True)
class IssuedCredential(IssuedSecret):
    """A node credential, `"<node id>.<secret>"`, and when it expires."""

    expires_at: datetime


def credential_lifetime() -> timedelta:
    """How long a node credential is valid (`TRAINHUB_NODE_CREDENTIAL_DAYS`, default 30)."""
    return timedelta(days=settings.NODE_CREDENTIAL_DAYS)


@dataclass(frozen=True)
class NodeLogin:
    """A node whose credential was accepted, and until when that credential is valid."""

    node: Node
    valid_until: datetime | None


def check_node_credential(credential: str, now: datetime | None = None) -> NodeLogin | None:
    """The node this credential belongs to, or None: unknown, expired or revoked.

    The credential a renewal replaced is still accepted for `CREDENTIAL_OVERLAP`.
    """
    now = now or timezone.now()
    node_id, _, secret = credential.partition(".")
    if not _NODE_ID.fullmatch(node_id) or not secret:
        return None
    node = Node.objects.filter(pk=int(node_id)).first()
    if node is None or node.credential_revoked_at is not None:
        return None
    if matches(secret, node.credential_hash):
        valid_until = node.credential_expires_at
    elif node.previous_credential_hash and matches(secret, node.previous_credential_hash):
        valid_until = node.previous_credential_until
    else:
        return None
    if valid_until is not None and valid_until <= now:
        return None
    return NodeLogin(node=node, valid_until=valid_until)


def authenticate_node(credential: str, now: datetime | None = None) -> Node | None:
    """The node this credential belongs to, or None: unknown, expired or revoked."""
    login = check_node_credential(credential, now)
    return None if login is None else login.node


@transaction.atomic
def renew_node_credential(*, node: Node, now: datetime | None = None) -> IssuedCredential:
    """Give the node a new credential with a full lifetime; the one it replaces stays
    valid for `CREDENTIAL_OVERLAP` (never past its own expiry).

    Call it only for a node that authenticated just now (the agent's renewal request).
    """
    now = now or timezone.now()
    locked = Node.objects.select_for_update().get(pk=node.pk)
    secret = new_secret()
    overlap_until = now + CREDENTIAL_OVERLAP
    if locked.credential_expires_at is not None:
        overlap_until = min(overlap_until, locked.credential_expires_at)
    expires_at = now + credential_lifetime()
    Node.objects.filter(pk=locked.pk).update(
        credential_hash=hash_secret(secret),
        credential_expires_at=expires_at,
        previous_credential_hash=locked.credential_hash,
        previous_credential_until=overlap_until,
    )
    record_change(
        actor=None,
        action="node.renew_credential",
        target=locked,
        before={"credential_expires_at": str(locked.credential_expires_at)},
        after={"credential_expires_at": str(expires_at)},
    )
    node.credential_expires_at = expires_at
    return IssuedCredential(id=node.pk, secret=f"{node.pk}.{secret}", expires_at=expires_at)


@transaction.atomic
def revoke_node_credential(*, node: Node, actor: Actor = None, now: datetime | None = None) -> Node:
    """Refuse every credential of this node from now on (revoking twice is a no-op).

    The node counts as lost at once: it gets no new work and the scheduler releases what
    ran there; its agent's socket is closed (4401). To bring the machine back, enroll it
    again with a new token.
    """
    now = now or timezone.now()
    if Node.objects.filter(pk=node.pk, credential_revoked_at__isnull=True).update(
        credential_revoked_at=now
    ):
        record_change(
            actor=actor,
            action=CREDENTIAL_REVOKED,
            target=node,
            before={"credential_revoked_at": None},
            after={"credential_revoked_at": str(now)},
        )
        publish(NodeChanged(node_id=node.pk, reason=CREDENTIAL_REVOKED))
    node.refresh_from_db(fields=["credential_revoked_at"])
    return node
