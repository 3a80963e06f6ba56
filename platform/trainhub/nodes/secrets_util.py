"""Generating and checking the random secrets that authenticate nodes."""

from __future__ import annotations

import hashlib
import hmac
import secrets


def new_secret() -> str:
    """256 random bits, URL-safe, never starting with "-": a token pasted after a command
    line option (`trainhub-agent enroll --token …`) must not read as another option."""
    while True:
        secret = secrets.token_urlsafe(32)
        if not secret.startswith("-"):
            return secret


def hash_secret(secret: str) -> str:
    # Secrets are 256 random bits, so a fast hash is enough (no dictionary to attack).
    return hashlib.sha256(secret.encode()).hexdigest()


def matches(secret: str, digest: str) -> bool:
    return hmac.compare_digest(hash_secret(secret), digest)
