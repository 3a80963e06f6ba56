"""Running the `trainhub` client command as a user would: a separate process."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[3]


def cli_env(config: Path) -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(REPO / "platform"), str(REPO)])
    env["TRAINHUB_CONFIG"] = str(config)
    # The client is a plain HTTP client: it must not need the server's settings.
    env["DJANGO_SETTINGS_MODULE"] = "no.such.settings"
    env.pop("DATABASE_URL", None)
    return env


def trainhub(
    config: Path, *args: str, input: str | None = None, timeout: float = 60
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "trainhub.cli", *args],
        env=cli_env(config),
        input=input,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


def login(config: Path, url: str, username: str, password: str) -> None:
    done = trainhub(config, "login", url, "-u", username, "--password-stdin", input=password)
    assert done.returncode == 0, done.stderr
