"""Role changes land in the audit log with who, before and after; no-op changes do not."""

from __future__ import annotations

import pytest
from rest_framework.test import APIClient
from trainhub.audit.models import AuditEntry
from trainhub.tenancy.choices import Role

from ..factories import make_team, make_user

pytestmark = pytest.mark.django_db


def test_role_changes_are_audited() -> None:
    boss, bob = make_user("boss"), make_user("bob")
    make_team("recsys", members={boss: Role.ADMIN, bob: Role.MEMBER})
    client = APIClient()
    client.force_authenticate(boss)
    url = "/api/v1/teams/recsys/members/bob/"
    assert client.patch(url, {"role": "viewer"}, format="json").status_code == 200
    assert client.patch(url, {"role": "viewer"}, format="json").status_code == 200  # no change
    assert client.delete(url).status_code == 204
    entries = list(AuditEntry.objects.filter(actor_name="boss").order_by("id"))
    assert [(e.action, e.before, e.after) for e in entries] == [
        ("member.update", {"user": "bob", "role": "member"}, {"user": "bob", "role": "viewer"}),
        ("member.remove", {"user": "bob", "role": "viewer"}, None),
    ]
