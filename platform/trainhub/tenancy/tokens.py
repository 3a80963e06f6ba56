"""Personal API tokens (knox: several per user, stored hashed, each expiring).

The API (`/api/v1/tokens/`) and the account page both issue and revoke tokens here. No
token outlives `TOKEN_MAX_DAYS` (`TRAINHUB_TOKEN_MAX_DAYS`), none made by a request signed
with a token outlives that token, and a password change ends all of the user's tokens
(`revoke_on_password_change`, connected by `TenancyConfig`).

Each token made by the API or the page has a name its owner chose ("laptop CLI"), kept in
`TokenLabel` beside knox's model, so a list of tokens says which is which; one user's names
are distinct (ignoring case). Sign-in may give one (the CLI does); older tokens have none.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from django.conf import settings
from django.contrib.auth.hashers import check_password
from django.contrib.auth.models import User
from django.db import IntegrityError, transaction
from django.db.models import QuerySet
from django.utils import timezone
from knox.models import AuthToken

from trainhub.events import AccessChanged, publish

from .models import TOKEN_NAME_MAX_LENGTH, TokenLabel

# The messages for a missing, blank or long name: the API and the page say the same.
NAME_REQUIRED = "Give the token a name that says what uses it, e.g. “laptop CLI”."
NAME_TOO_LONG = f"At most {TOKEN_NAME_MAX_LENGTH} characters: choose a shorter name for the token."


class TokenLifetimeError(ValueError):
    """The expiry asked for is later than `TOKEN_MAX_DAYS` allows."""

    field = "expires_at"


class TokenNameError(ValueError):
    """The name asked for is blank, too long, or one of the user's tokens has it."""

    field = "name"


@dataclass(frozen=True)
class IssuedToken:
    key: str  # the public prefix that identifies the token
    secret: str  # shown once
    expiry: datetime | None
    name: str | None


@dataclass(frozen=True)
class RevokedToken:
    key: str
    name: str | None


def tokens_of(user: Any) -> QuerySet[AuthToken]:
    """The user's tokens, newest first, with their names (one query however many)."""
    return AuthToken.objects.filter(user=user).select_related("label").order_by("-created")


def name_of(token: AuthToken) -> str | None:
    """The name the token's owner gave it; None for a token made without one."""
    try:
        return str(token.label.name)
    except TokenLabel.DoesNotExist:
        return None


def clean_name(name: str) -> str:
    """`name` stripped, if it can name a token (`issue_token` sees that it is new).

    Raises:
        TokenNameError: it is blank, longer than `TOKEN_NAME_MAX_LENGTH` or holds a control
            character.
    """
    name = name.strip()
    if not name:
        raise TokenNameError(NAME_REQUIRED)
    if len(name) > TOKEN_NAME_MAX_LENGTH:
        raise TokenNameError(NAME_TOO_LONG)
    if any(ord(c) < 32 or 127 <= ord(c) < 160 for c in name):
        raise TokenNameError("A token's name cannot hold control characters: type it again.")
    return name


def latest_expiry(now: datetime) -> datetime:
    """The latest a token issued at `now` may expire."""
    return now + timedelta(days=settings.TOKEN_MAX_DAYS)


def expiry_of(token: AuthToken) -> datetime:
    """When `token` stops working: its own expiry, or `TOKEN_MAX_DAYS` after it was made
    if that is sooner (`BoundedTokenAuthentication` holds it to that)."""
    limit = token.created + timedelta(days=settings.TOKEN_MAX_DAYS)
    return limit if token.expiry is None else min(token.expiry, limit)


def lifetime_problem(
    expires_at: datetime, now: datetime, *, not_after: datetime | None = None
) -> str | None:
    """Why `expires_at` is too late for a token issued at `now` (and, when the request
    is signed with a token, ending at `not_after`); None when it is not."""
    if expires_at > latest_expiry(now):
        days = settings.TOKEN_MAX_DAYS
        return f"At most {days} days from now (the server's TRAINHUB_TOKEN_MAX_DAYS)."
    if not_after is not None and expires_at > not_after:
        return (
            f"At most {not_after.isoformat()}: a token cannot make one that outlives it "
            "(the token this request is signed with expires then)."
        )
    return None


@transaction.atomic
def issue_token(
    *,
    user: User,
    expires_at: datetime | None,
    not_after: datetime | None = None,
    name: str | None = None,
) -> IssuedToken:
    """A new token expiring at `expires_at`; None: as late as allowed.

    Args:
        user: whose token it is.
        expires_at: when it stops working; at most `TOKEN_MAX_DAYS` from now.
        not_after: for a request signed with a token, when that token expires
            (`expiry_of`): the new one expires no later, so a token that leaks cannot
            renew itself for ever. None for a signed-in session.
        name: what its owner calls it (`clean_name`; new among the user's, ignoring
            case); None: no name (a sign-in that gave none). The API and the account
            page require one.

    Raises:
        TokenLifetimeError: `expires_at` is later than that.
        TokenNameError: `name` cannot name it (`clean_name`) or is taken.
    """
    if name is not None:
        name = clean_name(name)
    now = timezone.now()
    if expires_at is None:
        expires_at = latest_expiry(now)
        if not_after is not None:
            expires_at = min(expires_at, not_after)
    problem = lifetime_problem(expires_at, now, not_after=not_after)
    if problem:
        raise TokenLifetimeError(problem)
    instance, secret = AuthToken.objects.create(user, expires_at - now)
    # knox adds the lifetime to its own clock, a moment after `now`: end exactly on time.
    AuthToken.objects.filter(pk=instance.pk).update(expiry=expires_at)
    instance.expiry = expires_at
    if name is not None:
        try:
            with transaction.atomic():
                TokenLabel.objects.create(token=instance, user=user, name=name)
        except IntegrityError as exc:
            # The unique index on (lower(name), user) is the one check, races included;
            # the token made above goes back with the transaction.
            raise TokenNameError(
                f"You already have a token named “{name}”: choose another name."
            ) from exc
    return IssuedToken(key=instance.token_key, secret=secret, expiry=instance.expiry, name=name)


@transaction.atomic
def revoke_token(*, user: User, key: str) -> RevokedToken | None:
    """Delete the user's token whose key is `key` (its name goes with it); it stops
    working at once. None if the user has no such token."""
    token = tokens_of(user).filter(token_key=key).first()
    if token is None:
        return None
    revoked = RevokedToken(key=token.token_key, name=name_of(token))
    token.delete()
    return revoked


def note_password_change(sender: Any, instance: User, raw: bool = False, **kwargs: Any) -> None:
    """`pre_save` of a user: remember whether this save gives it another password.

    Saving the same password again (Django re-hashing it on sign-in when its hasher's
    settings change) is no change.
    """
    update_fields = kwargs.get("update_fields")
    instance._password_changed = False  # type: ignore[attr-defined]
    if (
        raw
        or instance.pk is None
        or (update_fields is not None and "password" not in update_fields)
    ):
        return
    stored = User.objects.filter(pk=instance.pk).values_list("password", flat=True).first()
    if stored is None or stored == instance.password:
        return
    raw_password = getattr(instance, "_password", None)
    same = raw_password is not None and check_password(raw_password, stored)
    instance._password_changed = not same  # type: ignore[attr-defined]


def revoke_on_password_change(sender: Any, instance: User, **kwargs: Any) -> None:
    """`post_save` of a user: a new password ends every personal API token it had."""
    if getattr(instance, "_password_changed", False):
        AuthToken.objects.filter(user=instance).delete()
        instance._password_changed = False  # type: ignore[attr-defined]
        publish(AccessChanged(user_id=instance.pk))
