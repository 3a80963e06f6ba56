"""Settings read from the environment, checked when the settings load: a bad value stops
the process naming the variable (not a 500 at the first request that needs it)."""

from __future__ import annotations

import os
import re

from django.core.exceptions import ImproperlyConfigured


def env_flag(name: str, default: bool) -> bool:
    value = os.environ.get(name, "").strip().lower()
    if not value:
        return default
    if value not in ("1", "true", "yes", "0", "false", "no"):
        raise ImproperlyConfigured(f"{name}={value!r}: use 1 or 0")
    return value in ("1", "true", "yes")


def env_list(name: str, default: str = "") -> list[str]:
    """A comma-separated list (`default` when unset); blanks around and between the items
    are dropped."""
    return [item.strip() for item in os.environ.get(name, default).split(",") if item.strip()]


def env_count(name: str, default: int) -> int:
    value = os.environ.get(name, "").strip() or str(default)
    if not value.isdigit():
        raise ImproperlyConfigured(f"{name}={value!r}: must be a whole number, 0 or more")
    return int(value)


_RATE = re.compile(r"[1-9][0-9]*/(s|sec|seconds?|m|min|minutes?|h|hours?|d|days?)")


def env_rate(name: str, default: str) -> str:
    """A rate limit as DRF reads it (`30/minute`), checked here rather than at the first
    request it would have failed."""
    value = os.environ.get(name, "").strip() or default
    if not _RATE.fullmatch(value):
        raise ImproperlyConfigured(
            f"{name}={value!r}: use requests per second, minute, hour or day, e.g. {default!r}"
        )
    return value
