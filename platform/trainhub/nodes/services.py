"""Node enrollment, admin changes (state, owner, labels, approval) and liveness; node
credentials (renew, revoke, authenticate) are in `credentials.py`, GPUs checked against
heartbeats in `capacity.py`.

An enrollment token may limit the nodes it enrolls (`max_cpus`, `max_memory_mb`,
`max_gpus`: a node declaring more is refused), force labels on them, and make them start
cordoned until an admin approves them (`requires_approval`), so a leaked token cannot
bring in a node that draws every team's work.

A change that alters what the scheduler may place where (a node enrolled, cordoned,
drained, given a new owner or labels) publishes `NodeChanged`; the scheduler queues a cycle
on it.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from django.conf import settings
from django.contrib.auth.models import User
from django.db import transaction
from django.db.models import F
from django.utils import timezone

from ps_runtime.agent.labels import LabelError, check_labels
from trainhub.audit.services import Actor, record_change
from trainhub.events import NodeChanged, publish
from trainhub.tenancy.models import Team

from .choices import NodeState
from .credentials import IssuedCredential, IssuedSecret, credential_lifetime
from .enrollment_limits import refusal
from .models import EnrollmentToken, Node
from .quarantine import clear_quarantine
from .secrets_util import hash_secret, new_secret

# Enrollment tokens: one node, one hour unless asked otherwise; never longer than a week.
TOKEN_DEFAULT_LIFETIME = timedelta(hours=1)
TOKEN_MAX_LIFETIME = timedelta(days=7)
TOKEN_MAX_USES = 1_000_000
# Bounds of a token's node limits (far above any machine; they keep the numbers sane).
TOKEN_MAX_CPUS = 100_000.0
TOKEN_MAX_MEMORY_MB = 2**40
TOKEN_MAX_GPUS = 1_024
NEW_TOKEN_HINT = (
    "ask a platform admin for a new one (POST /api/v1/enrollment-tokens/ answers it with "
    "the install command)"
)


class EnrollmentError(Exception):
    """The node cannot enroll; `field` names the part of the request at fault."""

    def __init__(self, message: str, field: str = "token") -> None:
        super().__init__(message)
        self.field = field


class TokenTermsError(ValueError):
    """An enrollment token's terms are out of bounds; `field` names the one at fault."""

    def __init__(self, message: str, field: str) -> None:
        super().__init__(message)
        self.field = field


def check_token_terms(*, expires_at: datetime | None, max_uses: int, now: datetime) -> datetime:
    """The token's expiry (the default lifetime when None), or `TokenTermsError`."""
    if not 1 <= max_uses <= TOKEN_MAX_USES:
        raise TokenTermsError(f"must be between 1 and {TOKEN_MAX_USES}.", field="max_uses")
    if expires_at is None:
        return now + TOKEN_DEFAULT_LIFETIME
    if expires_at <= now:
        raise TokenTermsError("must be in the future.", field="expires_at")
    if expires_at - now > TOKEN_MAX_LIFETIME:
        raise TokenTermsError(
            f"must be at most {TOKEN_MAX_LIFETIME.days} days from now "
            f"(no later than {(now + TOKEN_MAX_LIFETIME).isoformat(timespec='seconds')}).",
            field="expires_at",
        )
    return expires_at


def check_token_limits(
    *,
    max_cpus: float | None = None,
    max_memory_mb: int | None = None,
    max_gpus: int | None = None,
    labels: Mapping[str, str] | None = None,
) -> dict[str, str]:
    """The token's labels, checked (`ps_runtime.agent.labels`), or `TokenTermsError` naming
    the limit out of bounds; None means no limit."""
    if max_cpus is not None and not (math.isfinite(max_cpus) and 0 < max_cpus <= TOKEN_MAX_CPUS):
        raise TokenTermsError(
            f"must be more than 0 and at most {TOKEN_MAX_CPUS:g}.", field="max_cpus"
        )
    if max_memory_mb is not None and not 1 <= max_memory_mb <= TOKEN_MAX_MEMORY_MB:
        raise TokenTermsError(
            f"must be between 1 and {TOKEN_MAX_MEMORY_MB}.", field="max_memory_mb"
        )
    if max_gpus is not None and not 0 <= max_gpus <= TOKEN_MAX_GPUS:
        raise TokenTermsError(f"must be between 0 and {TOKEN_MAX_GPUS}.", field="max_gpus")
    try:
        return check_labels(labels or {})
    except LabelError as exc:
        raise TokenTermsError(str(exc), field="labels") from None


@dataclass(frozen=True)
class IssuedToken(IssuedSecret):
    expires_at: datetime
    max_uses: int


@transaction.atomic
def create_enrollment_token(
    *,
    created_by: User | None = None,
    description: str = "",
    expires_at: datetime | None = None,
    max_uses: int = 1,
    max_cpus: float | None = None,
    max_memory_mb: int | None = None,
    max_gpus: int | None = None,
    labels: Mapping[str, str] | None = None,
    requires_approval: bool = False,
    now: datetime | None = None,
) -> IssuedToken:
    """Create an enrollment token; the secret is returned once and stored only hashed.

    Single use and one hour by default; at most seven days. A node enrolled with it may
    declare at most `max_cpus`, `max_memory_mb` and `max_gpus` (None: no limit), gets
    `labels` (over what its agent claims for those keys), and with `requires_approval`
    starts cordoned until an admin approves it.

    Raises:
        TokenTermsError: a term or limit out of bounds; nothing is created.
    """
    expires_at = check_token_terms(
        expires_at=expires_at, max_uses=max_uses, now=now or timezone.now()
    )
    checked_labels = check_token_limits(
        max_cpus=max_cpus, max_memory_mb=max_memory_mb, max_gpus=max_gpus, labels=labels
    )
    secret = new_secret()
    token = EnrollmentToken.objects.create(
        description=description,
        token_hash=hash_secret(secret),
        created_by=created_by,
        expires_at=expires_at,
        max_uses=max_uses,
        max_cpus=max_cpus,
        max_memory_mb=max_memory_mb,
        max_gpus=max_gpus,
        labels=checked_labels,
        requires_approval=requires_approval,
    )
    record_change(
        actor=created_by,
        action="enrollment_token.create",
        target=token,
        before=None,
        after={
            "description": description,
            "expires_at": str(expires_at),
            "max_uses": max_uses,
            "max_cpus": max_cpus,
            "max_memory_mb": max_memory_mb,
            "max_gpus": max_gpus,
            "labels": checked_labels,
            "requires_approval": requires_approval,
        },
    )
    return IssuedToken(id=token.pk, secret=secret, expires_at=expires_at, max_uses=max_uses)


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
    """Cordon, drain or uncordon a node (a no-op when it already is in `state`).

    Uncordoning a node that awaits approval approves it (`approve_node`); uncordoning
    clears a quarantine and its count of failed starts (`quarantine`).
    """
    locked = Node.objects.select_for_update().get(pk=node.pk)
    if state == NodeState.ACTIVE:
        # Back in service: failed starts counted before (a quarantine) start over.
        clear_quarantine(locked.pk)
        node.start_failures, node.quarantine_reason, node.quarantined_at = 0, "", None
    if state == NodeState.ACTIVE and locked.awaiting_approval:
        _approve(locked, actor)
        node.state, node.awaiting_approval = NodeState.ACTIVE, False
        return node
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


NODE_APPROVED = "node.approve"


@transaction.atomic
def approve_node(*, node: Node, actor: Actor = None) -> Node:
    """Put a node that awaits approval (enrolled with a token that `requires_approval`)
    into service: it is no longer cordoned. A no-op for a node that awaits nothing."""
    locked = Node.objects.select_for_update().get(pk=node.pk)
    if locked.awaiting_approval:
        _approve(locked, actor)
        node.state, node.awaiting_approval = NodeState.ACTIVE, False
    return node


def _approve(locked: Node, actor: Actor) -> None:
    Node.objects.filter(pk=locked.pk).update(awaiting_approval=False, state=NodeState.ACTIVE)
    record_change(
        actor=actor,
        action=NODE_APPROVED,
        target=locked,
        before={"awaiting_approval": True, "state": locked.state},
        after={"awaiting_approval": False, "state": str(NodeState.ACTIVE)},
    )
    publish(NodeChanged(node_id=locked.pk, reason=NODE_APPROVED))


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


@transaction.atomic
def set_node_labels(*, node: Node, labels: Mapping[str, str], actor: Actor = None) -> Node:
    """Replace the node's labels (`{}` clears them); a no-op when they are the same.

    Raises:
        LabelError: a label is malformed (`ps_runtime.agent.labels`); nothing changes.
    """
    checked = check_labels(labels)
    locked = Node.objects.select_for_update().get(pk=node.pk)
    _change_node(
        locked,
        action="node.set_labels",
        actor=actor,
        field="labels",
        value=checked,
        shown=(locked.labels, checked),
    )
    node.labels = checked
    return node


_VERBS = {NodeState.ACTIVE: "uncordon", NodeState.CORDONED: "cordon", NodeState.DRAINING: "drain"}


def _usable_token(token: str, now: datetime) -> EnrollmentToken:
    """The locked token row, or `EnrollmentError` saying why it cannot enroll a node."""
    found = EnrollmentToken.objects.select_for_update().filter(token_hash=hash_secret(token))
    row = found.first()
    if row is None:
        why = "This enrollment token is not known to this server (mistyped, or from another one)"
    elif row.revoked:
        why = "This enrollment token was revoked"
    elif row.expires_at <= now:
        why = f"This enrollment token expired at {row.expires_at.isoformat(timespec='seconds')}"
    elif row.uses >= row.max_uses:
        why = (
            f"This enrollment token is used up ({row.uses} of {row.max_uses} "
            f"node{'s' if row.max_uses != 1 else ''} enrolled with it)"
        )
    else:
        return row
    raise EnrollmentError(f"{why}; {NEW_TOKEN_HINT}.")


def _check_name_free(hostname: str, now: datetime) -> None:
    """Refuse a name that a live node holds: two agents would share one identity."""
    holder = Node.objects.alive(now).filter(hostname=hostname).order_by("-last_seen").first()
    if holder is None:
        return
    lost_after = settings.NODE_LOST_AFTER_SECONDS
    raise EnrollmentError(
        f"A node named {hostname!r} (#{holder.pk}) is already enrolled and its agent is "
        f"connected. To enroll this machine as well, give it another name (--name). To "
        f"enroll that machine again, stop its agent, wait {lost_after:g} s until the node "
        "counts as lost, and enroll with a new token.",
        field="hostname",
    )


@transaction.atomic
def enroll_node(*, token: str, facts: dict[str, Any], now: datetime) -> IssuedCredential:
    """Register a node with an enrollment token; returns the node id and its credential,
    which expires after `credential_lifetime()`.

    The node gets the token's labels over those its agent sent for the same keys; with
    a token that `requires_approval` it starts cordoned, awaiting an admin's approval.

    Raises:
        EnrollmentError: the token is unknown, revoked, expired or used up, the name is
            held by a live node, the node declares more than the token's limits or a GPU
            twice, or the labels are malformed; nothing changes. `field` names the part
            of the request at fault.
    """
    usable = _usable_token(token, now)
    _check_name_free(facts["hostname"], now)
    refused = refusal(usable, facts, hint=NEW_TOKEN_HINT)
    if refused is not None:
        raise EnrollmentError(refused.message, field=refused.field)
    try:
        labels = check_labels({**(facts.get("labels") or {}), **usable.labels})
    except LabelError as exc:
        raise EnrollmentError(str(exc), field="labels") from None
    EnrollmentToken.objects.filter(pk=usable.pk).update(uses=F("uses") + 1)
    secret = new_secret()
    node = Node.objects.create(
        hostname=facts["hostname"],
        address=facts["address"],
        cpus=facts["cpus"],
        memory_mb=facts["memory_mb"],
        gpus=facts.get("gpus", []),
        labels=labels,
        state=NodeState.CORDONED if usable.requires_approval else NodeState.ACTIVE,
        awaiting_approval=usable.requires_approval,
        agent_version=facts.get("agent_version") or "",
        credential_hash=hash_secret(secret),
        credential_expires_at=now + credential_lifetime(),
        last_seen=now,
    )
    publish(NodeChanged(node_id=node.pk, reason="node.enroll"))
    assert node.credential_expires_at is not None
    return IssuedCredential(
        id=node.pk, secret=f"{node.pk}.{secret}", expires_at=node.credential_expires_at
    )
