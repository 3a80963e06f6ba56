"""Rate limits count across processes: with REDIS_URL set the counts live in Redis, so
another web process (here: another interpreter) sees the tries one process let through;
without it each process counts for itself (unit tests, a bare `runserver`)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis

from ...conftest import require_services

REPO = Path(__file__).resolve().parents[3]
# What a throttled view does per request, in a process of its own.
TRIES = """
import json, sys
import django
django.setup()
from django.contrib.auth.models import AnonymousUser
from django.test import RequestFactory
from rest_framework.throttling import ScopedRateThrottle


class SignIn:
    throttle_scope = "auth"


request = RequestFactory().post("/api/v1/auth/token/", REMOTE_ADDR="203.0.113.7")
request.user = AnonymousUser()
tries = int(sys.argv[1])
print(json.dumps([ScopedRateThrottle().allow_request(request, SignIn()) for _ in range(tries)]))
"""
CACHE = """
import django
django.setup()
from django.core.cache import caches
print(type(caches["default"]).__name__)
"""


def _run(script: str, *args: str, env: dict[str, str]) -> str:
    done = subprocess.run(
        [sys.executable, "-c", script, *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout.strip()


def _env(tmp_path: Path, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("DATABASE_URL", "REDIS_URL")}
    return {
        **env,
        "PYTHONPATH": os.pathsep.join([str(REPO / "platform"), str(REPO)]),
        "DJANGO_SETTINGS_MODULE": "trainhub.settings",
        "TRAINHUB_DATA_DIR": str(tmp_path),
        **extra,
    }


@pytest.fixture
def redis_env(tmp_path: Path) -> Iterator[dict[str, str]]:
    """Settings for processes of one installation on the test Redis, under a key prefix
    of this test's own (removed after)."""
    _, url = require_services()
    prefix = f"test-rates-{uuid.uuid4().hex}"
    yield _env(
        tmp_path, REDIS_URL=url, TRAINHUB_CHANNEL_PREFIX=prefix, TRAINHUB_AUTH_RATE="3/minute"
    )
    client = redis.Redis.from_url(url)
    for key in client.scan_iter(f"{prefix}*"):  # this test's installations
        client.delete(key)
    client.close()


def test_a_second_process_sees_the_tries_the_first_let_through(
    redis_env: dict[str, str],
) -> None:
    assert json.loads(_run(TRIES, "3", env=redis_env)) == [True, True, True]
    assert json.loads(_run(TRIES, "1", env=redis_env)) == [False]


def test_another_installation_on_the_same_redis_counts_apart(
    redis_env: dict[str, str],
) -> None:
    assert json.loads(_run(TRIES, "4", env=redis_env)) == [True, True, True, False]
    other = {**redis_env, "TRAINHUB_CHANNEL_PREFIX": f"{redis_env['TRAINHUB_CHANNEL_PREFIX']}b"}
    assert json.loads(_run(TRIES, "1", env=other)) == [True]


def test_without_redis_each_process_counts_in_its_own_memory(tmp_path: Path) -> None:
    assert _run(CACHE, env=_env(tmp_path)) == "LocMemCache"
