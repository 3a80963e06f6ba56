"""One services-mode TrainHub shared by the end-to-end tests of a session."""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest
from playwright.sync_api import Browser, sync_playwright

from ..conftest import require_services
from .browser import CHROMIUM_FLAGS, chromium_path
from .cluster import LiveCluster, fresh_database, sandbox_base, services_cluster


@pytest.fixture(scope="session")
def live_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveCluster]:
    database_url, redis_url = require_services()
    tmp: Path = tmp_path_factory.mktemp("services")
    redis_e2e = redis_url.rsplit("/", 1)[0] + "/14"
    with fresh_database(database_url) as db_url, services_cluster(db_url, redis_e2e, tmp) as c:
        yield c


@pytest.fixture
def sandboxed_home() -> Iterator[Path]:
    """A directory for a standalone's data (its agent's work dir and checkpoints) that a
    root agent's task uids can traverse: pytest's tmp_path sits below a 0700 directory,
    which would make the agent refuse every task."""
    base = sandbox_base("trainhub-standalone-")
    try:
        yield base
    finally:
        shutil.rmtree(base, ignore_errors=True)


@pytest.fixture(scope="module")
def browser() -> Iterator[Browser]:
    """A headless Chromium (Debian's) for the browser tests of one module.

    Not session-wide: Playwright's sync API keeps an event loop running in the main thread
    while it is open, and tests that run after it call `asyncio.run()` there.
    """
    with sync_playwright() as playwright:
        instance = playwright.chromium.launch(executable_path=chromium_path(), args=CHROMIUM_FLAGS)
        yield instance
        instance.close()
