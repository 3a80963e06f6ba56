"""The rules for a user's name, e-mail and password, shared by the REST API's serializer
and the web pages' forms so both refuse the same things with the same words, and the
lookup of a user by username or e-mail (adding a member takes either)."""

from __future__ import annotations

import re

from django.contrib.auth.models import User
from django.contrib.auth.password_validation import validate_password
from django.core.exceptions import ValidationError

USERNAME_PATTERN = r"^[\w.@+-]{1,150}$"
USERNAME_RULE = "Letters, digits and @ . + - _ only, at most 150 characters."


def username_problem(username: str) -> str | None:
    return None if re.fullmatch(USERNAME_PATTERN, username) else USERNAME_RULE


def password_problems(password: str, *, username: str, email: str = "", **names: str) -> list[str]:
    """What `settings.AUTH_PASSWORD_VALIDATORS` find wrong with a new user's password
    (they compare it with the username, e-mail and `first_name`/`last_name`)."""
    user = User(username=username, email=email, **names)
    try:
        validate_password(password, user=user)
    except ValidationError as exc:
        return list(exc.messages)
    return []


class UserNotFound(Exception):
    """No one user answers to the name or e-mail given; the message says why."""


def find_user(name_or_email: str) -> User:
    """The user with this username, else the one user with this e-mail (any case).

    Raises:
        UserNotFound: nobody, several users with that e-mail, or a deactivated user.
    """
    text = name_or_email.strip()
    user = User.objects.filter(username=text).first()
    if user is None and "@" in text:
        matches = list(User.objects.filter(email__iexact=text)[:2])
        if len(matches) > 1:
            raise UserNotFound(f"Several users have the e-mail '{text}'; give the username.")
        user = matches[0] if matches else None
    if user is None:
        raise UserNotFound(f"No user '{text}'.")
    if not user.is_active:
        raise UserNotFound(f"{user.username} is deactivated; a platform admin can reactivate them.")
    return user


def email_taken(email: str, *, other_than: User | None = None) -> bool:
    """Whether another user has this e-mail already (a blank one is never taken)."""
    if not email:
        return False
    users = User.objects.filter(email__iexact=email)
    if other_than is not None:
        users = users.exclude(pk=other_than.pk)
    return users.exists()
