"""Personal API tokens (knox: several per user, stored hashed, optional expiry).

The API (`/api/v1/tokens/`) and the account page both issue and revoke tokens here.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from django.contrib.auth.models import User
from django.db import transaction
from django.db.models import QuerySet
from django.utils import timezone
from knox.models import AuthToken


@dataclass(frozen=True)
class IssuedToken:
    key: str  # the public prefix that names the token
    secret: str  # shown once
    expiry: datetime | None


def tokens_of(user: Any) -> QuerySet[AuthToken]:
    """The user's tokens, newest first."""
    return AuthToken.objects.filter(user=user).order_by("-created")


@transaction.atomic
def issue_token(*, user: User, expires_at: datetime | None) -> IssuedToken:
    ttl = None if expires_at is None else expires_at - timezone.now()
    instance, secret = AuthToken.objects.create(user, ttl)
    return IssuedToken(key=instance.token_key, secret=secret, expiry=instance.expiry)


@transaction.atomic
def revoke_token(*, user: User, key: str) -> bool:
    """Delete the user's token named `key`; it stops working at once. False if unknown."""
    deleted, _ = AuthToken.objects.filter(user=user, token_key=key).delete()
    return bool(deleted)
