"""Node credentials expire, renew with a short overlap and can be revoked
(nodes.services); a revoked node counts as lost at once."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.test import override_settings
from django.utils import timezone
from trainhub.audit.models import AuditEntry
from trainhub.events import NodeChanged
from trainhub.nodes.credentials import (
    CREDENTIAL_OVERLAP,
    CREDENTIAL_REVOKED,
    authenticate_node,
    check_node_credential,
    renew_node_credential,
    revoke_node_credential,
)
from trainhub.nodes.models import Node
from trainhub.nodes.services import create_enrollment_token, enroll_node

from ..event_capture import HANDLER, Capture, capturer
from ..factories import make_node

pytestmark = pytest.mark.django_db

FACTS: dict[str, Any] = {"hostname": "cpu-1", "address": "10.0.0.1", "cpus": 8, "memory_mb": 16384}


@pytest.fixture(autouse=True)
def _events_to_the_recorder_only(settings: Any) -> None:
    settings.EVENT_HANDLERS = [HANDLER]


@pytest.fixture
def published(django_capture_on_commit_callbacks: Any) -> Capture:
    return capturer(django_capture_on_commit_callbacks)


def _enroll(now: Any) -> tuple[Node, str]:
    issued = enroll_node(token=create_enrollment_token(now=now).secret, facts=FACTS, now=now)
    return Node.objects.get(pk=issued.id), issued.secret


def test_a_credential_lasts_thirty_days_by_default() -> None:
    now = timezone.now()
    issued = enroll_node(token=create_enrollment_token(now=now).secret, facts=FACTS, now=now)
    assert issued.expires_at == now + timedelta(days=30)
    assert Node.objects.get(pk=issued.id).credential_expires_at == issued.expires_at


@override_settings(NODE_CREDENTIAL_DAYS=0.5)
def test_the_lifetime_is_a_setting() -> None:
    now = timezone.now()
    node, _ = _enroll(now)
    assert node.credential_expires_at == now + timedelta(hours=12)


def test_an_expired_credential_is_refused() -> None:
    now = timezone.now()
    node, credential = _enroll(now)
    assert node.credential_expires_at is not None
    assert authenticate_node(credential, now=node.credential_expires_at - timedelta(seconds=1))
    assert authenticate_node(credential, now=node.credential_expires_at) is None
    assert authenticate_node("garbage") is None
    assert authenticate_node(f"{node.pk}.wrong") is None


def test_renewal_issues_a_new_credential_and_the_old_one_overlaps_briefly() -> None:
    now = timezone.now()
    node, old = _enroll(now)
    later = now + timedelta(days=20)
    renewed = renew_node_credential(node=node, now=later)
    assert renewed.id == node.pk and renewed.secret.startswith(f"{node.pk}.")
    assert renewed.secret != old
    assert renewed.expires_at == later + timedelta(days=30)
    node.refresh_from_db()
    assert node.credential_expires_at == renewed.expires_at

    login = check_node_credential(renewed.secret, now=later)
    assert login is not None and login.valid_until == renewed.expires_at
    old_login = check_node_credential(old, now=later)
    assert old_login is not None and old_login.valid_until == later + CREDENTIAL_OVERLAP
    assert authenticate_node(old, now=later + CREDENTIAL_OVERLAP) is None
    assert authenticate_node(renewed.secret, now=later + CREDENTIAL_OVERLAP)

    # Renewed again: the first credential is no longer the previous one.
    again = renew_node_credential(node=node, now=later + timedelta(seconds=1))
    assert authenticate_node(old, now=later + timedelta(seconds=2)) is None
    assert authenticate_node(renewed.secret, now=later + timedelta(seconds=2))
    assert authenticate_node(again.secret, now=later + timedelta(seconds=2))
    entries = AuditEntry.objects.filter(action="node.renew_credential")
    assert entries.count() == 2
    assert "credential" not in str(list(entries.values("before", "after"))).replace(
        "credential_expires_at", ""
    )


def test_the_overlap_never_outlives_the_old_credential() -> None:
    now = timezone.now()
    node, old = _enroll(now)
    assert node.credential_expires_at is not None
    late = node.credential_expires_at - timedelta(seconds=5)
    renew_node_credential(node=node, now=late)
    assert authenticate_node(old, now=late + timedelta(seconds=4))
    assert authenticate_node(old, now=late + timedelta(seconds=5)) is None


def test_revocation_refuses_every_credential_and_the_node_counts_as_lost(
    published: Capture,
) -> None:
    now = timezone.now()
    admin = User.objects.create_superuser("root", password="x")
    node, old = _enroll(now)
    renewed = renew_node_credential(node=node, now=now)
    assert node.is_alive(now)
    with published() as events:
        revoke_node_credential(node=node, actor=admin, now=now)
        revoke_node_credential(node=node, actor=admin, now=now)  # a no-op
    assert events == [NodeChanged(node_id=node.pk, reason=CREDENTIAL_REVOKED)]
    assert node.credential_revoked_at == now
    assert authenticate_node(old, now=now) is None
    assert authenticate_node(renewed.secret, now=now) is None
    node.refresh_from_db()
    assert not node.is_alive(now)
    assert list(Node.objects.alive(now)) == []
    assert list(Node.objects.lost(now)) == [node]
    [entry] = AuditEntry.objects.filter(action=CREDENTIAL_REVOKED)
    assert entry.actor == admin


def test_a_revoked_node_does_not_hold_its_name() -> None:
    node, _ = make_node("cpu-1")
    revoke_node_credential(node=node)
    again, credential = make_node("cpu-1")
    assert again.pk != node.pk and authenticate_node(credential)
