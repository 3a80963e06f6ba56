"""A real web server process (uvicorn, as `trainhub web` runs it) on the test database."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from django.core.cache import cache
from django.db import connection
from trainhub.standalone.processes import ProcessGroup, child_env, wait_http_ok, web_command

from ...conftest import skip_outside_ci
from ...e2e.cluster import free_port


@pytest.fixture(autouse=True)
def _fresh_rate_limits() -> None:
    """Throttle counters live in the (per-process) cache; each test starts with none."""
    cache.clear()


def database_url() -> str:
    """This test's database (pytest-django's), as a URL for other processes."""
    db = connection.settings_dict
    auth = db["USER"] + (f":{db['PASSWORD']}" if db["PASSWORD"] else "")
    return f"postgres://{auth}@{db['HOST'] or '127.0.0.1'}:{db['PORT'] or 5432}/{db['NAME']}"


@contextmanager
def live_web(tmp_path: Path, **extra: str) -> Iterator[str]:
    """A uvicorn server with two worker processes on this test's (PostgreSQL) database,
    its environment plus `extra`; yields its URL."""
    if connection.vendor != "postgresql":
        skip_outside_ci("needs PostgreSQL (DATABASE_URL)")
    port = free_port()
    env = child_env(
        {"DATABASE_URL": database_url(), "TRAINHUB_DATA_DIR": str(tmp_path / "data"), **extra}
    )
    env.pop("REDIS_URL", None)
    group = ProcessGroup(env=env, log_dir=tmp_path / "logs")
    group.start("web", [*web_command("127.0.0.1", port), "--workers", "2"])
    try:
        wait_http_ok(f"http://127.0.0.1:{port}/healthz", timeout=60, procs=group)
        yield f"http://127.0.0.1:{port}"
    finally:
        group.stop()


@pytest.fixture
def web_server(transactional_db: Any, tmp_path: Path) -> Iterator[str]:
    """URL of a uvicorn server with two worker processes, sharing this test's database."""
    with live_web(tmp_path) as url:
        yield url
