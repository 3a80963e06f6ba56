"""Enrollment tokens' terms (single use, one hour, at most a week), the reasons an
enrollment is refused, node names held by live nodes, and labels (nodes.services).

Every refusal is checked for what it leaves behind: no node, no use counted, no token.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from django.conf import settings
from django.utils import timezone
from trainhub.audit.models import AuditEntry
from trainhub.nodes.models import EnrollmentToken, Node
from trainhub.nodes.services import (
    TOKEN_DEFAULT_LIFETIME,
    TOKEN_MAX_LIFETIME,
    EnrollmentError,
    TokenTermsError,
    create_enrollment_token,
    enroll_node,
    revoke_enrollment_token,
)

pytestmark = pytest.mark.django_db

FACTS: dict[str, Any] = {"hostname": "cpu-1", "address": "10.0.0.1", "cpus": 8, "memory_mb": 16384}


def _uses(token_id: int) -> int:
    return EnrollmentToken.objects.get(pk=token_id).uses


def test_a_token_is_single_use_and_lasts_an_hour_by_default() -> None:
    now = timezone.now()
    issued = create_enrollment_token(now=now)
    token = EnrollmentToken.objects.get(pk=issued.id)
    assert (token.max_uses, token.uses) == (1, 0)
    assert token.expires_at == issued.expires_at == now + TOKEN_DEFAULT_LIFETIME
    assert issued.max_uses == 1


def test_a_token_may_last_a_week_and_enroll_several_nodes() -> None:
    now = timezone.now()
    issued = create_enrollment_token(expires_at=now + TOKEN_MAX_LIFETIME, max_uses=3, now=now)
    token = EnrollmentToken.objects.get(pk=issued.id)
    assert (token.expires_at, token.max_uses) == (now + TOKEN_MAX_LIFETIME, 3)


@pytest.mark.parametrize(
    ("terms", "field", "message"),
    [
        ({"expires_at": timedelta(days=7, seconds=1)}, "expires_at", "at most 7 days"),
        ({"expires_at": timedelta(0)}, "expires_at", "in the future"),
        ({"expires_at": timedelta(hours=-1)}, "expires_at", "in the future"),
        ({"max_uses": 0}, "max_uses", "between 1 and"),
    ],
    ids=["past-a-week", "now", "past", "no-uses"],
)
def test_terms_out_of_bounds_create_nothing(
    terms: dict[str, Any], field: str, message: str
) -> None:
    now = timezone.now()
    if "expires_at" in terms:
        terms = {**terms, "expires_at": now + terms["expires_at"]}
    with pytest.raises(TokenTermsError, match=message) as refused:
        create_enrollment_token(now=now, **terms)
    assert refused.value.field == field
    assert not EnrollmentToken.objects.exists()
    assert not AuditEntry.objects.exists()


def test_a_single_use_token_refuses_the_second_node_saying_it_is_used_up() -> None:
    now = timezone.now()
    issued = create_enrollment_token(now=now)
    enroll_node(token=issued.secret, facts=FACTS, now=now)
    with pytest.raises(EnrollmentError, match=r"used up \(1 of 1 node enrolled") as refused:
        enroll_node(token=issued.secret, facts={**FACTS, "hostname": "cpu-2"}, now=now)
    assert refused.value.field == "token"
    assert "ask a platform admin for a new one" in str(refused.value)
    assert list(Node.objects.values_list("hostname", flat=True)) == ["cpu-1"]
    assert _uses(issued.id) == 1


@pytest.mark.parametrize(
    ("spoil", "reason"),
    [("revoke", "was revoked"), ("expire", "expired at"), ("unknown", "not known")],
)
def test_each_refusal_says_why_and_changes_nothing(spoil: str, reason: str) -> None:
    now = timezone.now()
    issued = create_enrollment_token(now=now)
    secret, at = issued.secret, now
    if spoil == "revoke":
        revoke_enrollment_token(token=EnrollmentToken.objects.get(pk=issued.id))
    elif spoil == "expire":
        at = now + TOKEN_DEFAULT_LIFETIME
    else:
        secret = "x" + secret
    with pytest.raises(EnrollmentError, match=f"{reason}.*ask a platform admin for a new one"):
        enroll_node(token=secret, facts=FACTS, now=at)
    assert not Node.objects.exists()
    assert _uses(issued.id) == 0


def test_a_name_held_by_a_live_node_is_refused_until_that_node_is_lost() -> None:
    now = timezone.now()
    first = enroll_node(token=create_enrollment_token(now=now).secret, facts=FACTS, now=now)
    again = create_enrollment_token(now=now)
    with pytest.raises(EnrollmentError, match=r"named 'cpu-1' \(#\d+\).*--name") as refused:
        enroll_node(token=again.secret, facts=FACTS, now=now + timedelta(seconds=1))
    assert refused.value.field == "hostname"
    assert "stop its agent" in str(refused.value)
    assert Node.objects.count() == 1 and _uses(again.id) == 0

    # Another name is fine at once; the same name once the old node counts as lost.
    enroll_node(token=again.secret, facts={**FACTS, "hostname": "cpu-1b"}, now=now)
    later = now + timedelta(seconds=settings.NODE_LOST_AFTER_SECONDS + 1)
    third = create_enrollment_token(now=later)
    reenrolled = enroll_node(token=third.secret, facts=FACTS, now=later)
    assert reenrolled.id != first.id
    assert Node.objects.filter(hostname="cpu-1").count() == 2


def test_labels_are_stored_and_bad_ones_refused_without_using_the_token() -> None:
    now = timezone.now()
    issued = create_enrollment_token(now=now)
    with pytest.raises(EnrollmentError, match="label name 'bad key'") as refused:
        enroll_node(token=issued.secret, facts={**FACTS, "labels": {"bad key": "x"}}, now=now)
    assert refused.value.field == "labels"
    assert not Node.objects.exists() and _uses(issued.id) == 0

    labels = {"zone": "eu-1", "example.com/rack": "4", "spare": ""}
    node_id = enroll_node(token=issued.secret, facts={**FACTS, "labels": labels}, now=now).id
    assert Node.objects.get(pk=node_id).labels == labels
