"""The compose file takes every secret from the env file and Redis requires a password."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest
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


def test_services_start_in_order_once_what_they_need_answers() -> None:
    services = _compose()["services"]
    for name in ("postgres", "redis"):
        assert services[name]["healthcheck"]["test"], f"{name} has no health check"
    assert services["migrate"]["depends_on"] == {"postgres": {"condition": "service_healthy"}}
    for name in ("web", "worker", "beat"):
        depends = services[name]["depends_on"]
        assert depends["migrate"] == {"condition": "service_completed_successfully"}, name
        assert (
            depends["postgres"]["condition"] == depends["redis"]["condition"] == ("service_healthy")
        ), name


def test_the_data_directory_outlives_the_containers() -> None:
    compose = _compose()
    dockerfile = (DEPLOY / "Dockerfile").read_text()
    data_dir = re.search(r"TRAINHUB_DATA_DIR=(\S+)", dockerfile)
    assert data_dir, "the image sets TRAINHUB_DATA_DIR"
    for name in ("web", "worker", "beat"):
        mounts = {v.split(":")[1]: v.split(":")[0] for v in compose["services"][name]["volumes"]}
        assert mounts.get(data_dir.group(1)) in compose["volumes"], name


def _compose_config(path: Path) -> subprocess.CompletedProcess[str]:
    """`docker-compose config` (Debian's 1.29, which checks a file without `version:`
    against the Compose Specification's schema) with every required variable set."""
    tool = shutil.which("docker-compose")
    if tool is None:
        pytest.fail("docker-compose is not installed: `apt-get install docker-compose`")
    required = set(re.findall(r"\$\{(\w+):\?", path.read_text()))
    env = {**os.environ, **{name: "set-by-the-test" for name in required}}
    return subprocess.run(
        [tool, "-f", str(path), "--project-directory", str(DEPLOY), "config", "-q"],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def test_the_compose_file_follows_the_compose_specification(tmp_path: Path) -> None:
    checked = _compose_config(DEPLOY / "docker-compose.yml")
    assert checked.returncode == 0, checked.stderr
    # The check bites: a condition the specification does not know is refused.
    wrong = tmp_path / "docker-compose.yml"
    text = (DEPLOY / "docker-compose.yml").read_text()
    wrong.write_text(text.replace("service_completed_successfully", "service_finished"))
    refused = _compose_config(wrong)
    assert refused.returncode != 0 and "service_finished" in refused.stderr, refused.stderr
