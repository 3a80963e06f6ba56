"""The compose file takes every secret from the env file and Redis requires a password."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import yaml

DEPLOY = Path(__file__).resolve().parents[1] / "deploy"


def _compose() -> dict:
    return yaml.safe_load((DEPLOY / "docker-compose.yml").read_text())


def test_no_password_is_written_into_the_compose_file() -> None:
    compose = _compose()
    postgres = compose["services"]["postgres"]["environment"]["POSTGRES_PASSWORD"]
    assert re.fullmatch(r"\$\{POSTGRES_PASSWORD:\?[^}]+\}", postgres)
    env = compose["x-trainhub"]["environment"]
    assert "${POSTGRES_PASSWORD:?" in env["DATABASE_URL"]
    assert env["REDIS_URL"].startswith("redis://:${REDIS_PASSWORD:?")
    assert env["TRAINHUB_SECRET_KEY"].startswith("${TRAINHUB_SECRET_KEY:?")


def test_redis_requires_the_password() -> None:
    command = _compose()["services"]["redis"]["command"]
    assert command[:2] == ["redis-server", "--requirepass"]
    assert command[2].startswith("${REDIS_PASSWORD:?")


def test_the_example_env_file_names_every_variable_and_holds_no_secret() -> None:
    text = (DEPLOY / "docker-compose.yml").read_text()
    used = set(re.findall(r"\$\{(\w+)[:?}-]", text))
    example = dict(
        line.split("=", 1)
        for line in (DEPLOY / ".env.example").read_text().splitlines()
        if line and not line.startswith("#")
    )
    assert used <= set(example), used - set(example)
    for secret in ("POSTGRES_PASSWORD", "REDIS_PASSWORD", "TRAINHUB_SECRET_KEY"):
        assert example[secret] == ""


def test_the_real_env_file_is_never_committed() -> None:
    ignored = subprocess.run(
        ["git", "check-ignore", "-q", str(DEPLOY / ".env")], cwd=DEPLOY, check=False
    )
    assert ignored.returncode == 0
