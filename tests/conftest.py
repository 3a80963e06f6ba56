"""Test-wide setup: service checks, and the rule that CI fails when a service is missing."""

from __future__ import annotations

import os
import socket
from pathlib import Path
from typing import NoReturn
from urllib.parse import urlparse

import pytest

IN_CI = os.environ.get("CI", "").lower() == "true"
REDIS_URL = os.environ.get("TEST_REDIS_URL", "redis://127.0.0.1:6379/15")
# The fault suite starts PostgreSQL and Redis instances of its own and never touches the
# shared ones, so a run of only that suite does not need them.
FAULTS = Path(__file__).parent / "faults"


def _reachable(url: str, default_port: int) -> bool:
    parsed = urlparse(url)
    try:
        with socket.create_connection(
            (parsed.hostname or "127.0.0.1", parsed.port or default_port), timeout=2
        ):
            return True
    except OSError:
        return False


def postgres_url() -> str | None:
    url = os.environ.get("DATABASE_URL", "")
    return url if url.startswith("postgres") else None


def _only_faults(session: pytest.Session) -> bool:
    args = [Path(arg.split("::")[0]).resolve() for arg in session.config.args]
    return bool(args) and all(arg.is_relative_to(FAULTS) for arg in args)


def pytest_sessionstart(session: pytest.Session) -> None:
    if not IN_CI or _only_faults(session):
        return
    missing = []
    pg = postgres_url()
    if pg is None or not _reachable(pg, 5432):
        missing.append(f"PostgreSQL (DATABASE_URL={os.environ.get('DATABASE_URL', '<unset>')})")
    if not _reachable(REDIS_URL, 6379):
        missing.append(f"Redis (TEST_REDIS_URL={REDIS_URL})")
    if missing:
        raise pytest.UsageError(
            "CI=true but these services are unreachable: "
            + "; ".join(missing)
            + ". Start them (see README 'Tests') — CI never skips these tests."
        )


def skip_outside_ci(reason: str) -> NoReturn:
    """Skip a test whose need this machine lacks; under CI=true fail instead (a skipped
    proof proves nothing there)."""
    if IN_CI:
        pytest.fail(f"CI=true, but {reason}")
    pytest.skip(reason)


def require_services() -> tuple[str, str]:
    """PostgreSQL and Redis URLs for a test that needs both; skip outside CI if absent."""
    pg = postgres_url()
    if pg is None or not _reachable(pg, 5432) or not _reachable(REDIS_URL, 6379):
        skip_outside_ci("needs PostgreSQL (DATABASE_URL) and Redis (TEST_REDIS_URL)")
    return pg, REDIS_URL
