"""Recording changes in the audit log; every audited service calls `record_change`."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from django.contrib.auth.models import AbstractBaseUser, AnonymousUser, User
from django.db import models
from django.utils import timezone

from .models import AuditEntry

Actor = AbstractBaseUser | AnonymousUser | None


def record_change(
    *,
    actor: Actor,
    action: str,
    target: models.Model,
    before: dict[str, Any] | None,
    after: dict[str, Any] | None,
    now: datetime | None = None,
) -> AuditEntry | None:
    """Add an entry for a change of `target`; nothing when before and after are equal."""
    if before is not None and before == after:
        return None
    user = actor if isinstance(actor, User) and actor.pk is not None else None
    return AuditEntry.objects.create(
        time=now or timezone.now(),
        actor=user,
        actor_name=user.get_username() if user is not None else "system",
        action=action,
        object_type=target._meta.label_lower,
        object_id=str(target.pk),
        object_repr=str(target)[:200],
        before=before,
        after=after,
    )
