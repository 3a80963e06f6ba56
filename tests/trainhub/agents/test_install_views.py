"""`/agent/install.sh` and `/agent/dist/`: served without sign-in, no secret inside, the
wheel is the runtime alone (issue 13, item 1). The full install runs in
tests/e2e/test_install.py."""

from __future__ import annotations

import os
import subprocess
import zipfile
from pathlib import Path
from typing import Any

import pytest
from django.conf import settings
from django.template.loader import render_to_string
from django.test import Client, override_settings
from trainhub.agents import dist
from trainhub.nodes.services import create_enrollment_token

ROOT = Path(__file__).resolve().parents[3]
WHEEL = dist.wheel_name()


def _script(client: Client, tmp_path: Path) -> Path:
    answer = client.get("/agent/install.sh")
    assert answer.status_code == 200
    path = tmp_path / "install.sh"
    path.write_bytes(answer.content)
    return path


def _sh(script: Path, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["sh", str(script), *args],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        env={**os.environ, **env},
    )


@pytest.mark.django_db
def test_the_script_is_served_to_anyone_with_the_server_and_wheel_and_no_secret(
    client: Client,
) -> None:
    issued = create_enrollment_token()
    answer = client.get("/agent/install.sh")
    assert answer.status_code == 200
    assert answer["Content-Type"] == "text/plain; charset=utf-8"
    script = answer.content.decode()
    assert script.startswith("#!/bin/sh\n")
    assert "\nSERVER=http://testserver\n" in script
    assert f"\nWHEEL={WHEEL}\n" in script and "\nDIST_PATH=/agent/dist/\n" in script
    assert "set -eu" in script
    assert issued.secret not in script and settings.SECRET_KEY not in script
    assert "&lt;" not in script and "&quot;" not in script  # no HTML escaping


@override_settings(PUBLIC_URL="https://trainhub.example.com/th")
def test_the_script_names_the_public_url_when_set(client: Client) -> None:
    assert "\nSERVER=https://trainhub.example.com/th\n" in client.get("/agent/install.sh").text


def test_the_script_is_valid_sh_and_refuses_bad_arguments(client: Client, tmp_path: Path) -> None:
    script = _script(client, tmp_path)
    assert subprocess.run(["sh", "-n", str(script)], check=False).returncode == 0

    helped = _sh(script, "--help")
    assert helped.returncode == 0 and "--no-service" in helped.stdout

    refusals = {
        ("--bogus",): "unknown option: --bogus",
        ("--server", "ftp://x", "--token", "t"): "--server must be the server's http://",
        ("--prefix",): "--prefix needs a value",
        ("--prefix", str(tmp_path / "a b"), "--token=t"): "--prefix must be a path",
        ("--prefix", str(tmp_path / "p")): "--token is needed to enroll",
    }
    for args, message in refusals.items():
        done = _sh(script, *args)
        assert done.returncode != 0 and message in done.stderr, (args, done.stderr)
    assert not (tmp_path / "p").exists()


def test_the_script_says_which_python_to_install(client: Client, tmp_path: Path) -> None:
    script = _script(client, tmp_path)
    prefix = str(tmp_path / "agent")
    bad = _sh(script, "--prefix", prefix, "--token=t", TRAINHUB_PYTHON="/nonexistent/python3")
    assert bad.returncode != 0
    assert "TRAINHUB_PYTHON=/nonexistent/python3 is not a working Python 3.11" in bad.stderr
    empty = tmp_path / "empty-path"
    empty.mkdir()
    none = subprocess.run(
        ["/bin/sh", str(script), "--prefix", prefix, "--token=t"],
        capture_output=True,
        text=True,
        env={"PATH": str(empty)},
        check=False,
    )
    assert none.returncode != 0
    assert "needs Python 3.11 or newer" in none.stderr and "apt-get install" in none.stderr
    assert not Path(prefix).exists()


def test_the_unit_the_script_installs_is_the_one_in_deploy() -> None:
    unit = render_to_string("agents/trainhub-agent.service").replace(
        "${PREFIX}", "/opt/trainhub-agent"
    )
    assert unit == (ROOT / "deploy" / "systemd" / "trainhub-agent.service").read_text()


def test_the_wheel_is_built_once_and_holds_the_runtime_without_django(
    client: Client, tmp_path: Path
) -> None:
    with override_settings(AGENT_DIST_DIR=tmp_path / "dist"):
        assert f'<a href="{WHEEL}">' in client.get("/agent/dist/").text
        answer = client.get(f"/agent/dist/{WHEEL}")
        assert answer.status_code == 200, answer.content
        assert answer["Content-Type"] == "application/octet-stream"
        body = b"".join(answer.streaming_content)  # type: ignore[attr-defined]
        built = tmp_path / "dist" / WHEEL
        assert body == built.read_bytes()
        stamp = built.stat().st_mtime_ns
        again = client.get(f"/agent/dist/{WHEEL}")
        assert b"".join(again.streaming_content) == body  # type: ignore[attr-defined]
        assert built.stat().st_mtime_ns == stamp  # served, not rebuilt
        assert client.get("/agent/dist/trainhub_runtime-0.0.1-py3-none-any.whl").status_code == 404

    with zipfile.ZipFile(built) as wheel:
        names = wheel.namelist()
        [metadata] = [n for n in names if n.endswith(".dist-info/METADATA")]
        requires = [
            line.split(":", 1)[1].strip().lower()
            for line in wheel.read(metadata).decode().splitlines()
            if line.startswith("Requires-Dist:") and "extra ==" not in line  # not optional ones
        ]
    assert "ps_runtime/agent/cli.py" in names and "ps_runtime/proto/ps.proto" in names
    assert not [n for n in names if n.startswith("trainhub/")]
    assert {r.split(">")[0].split("<")[0].split(" ")[0] for r in requires} == {
        "grpcio",
        "grpcio-health-checking",
        "protobuf",
        "numpy",
        "websockets",
    }


def test_a_stale_wheel_is_rebuilt(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    first = dist.runtime_wheel(tmp_path)
    stamp = first.stat().st_mtime
    monkeypatch.setattr(dist, "_newest_source_mtime", lambda root: stamp + 60)
    second = dist.runtime_wheel(tmp_path)
    assert second == first and second.stat().st_mtime > stamp
    assert [p.name for p in tmp_path.glob("*.whl")] == [WHEEL]


def test_without_a_source_tree_a_prebuilt_wheel_is_served_or_503_says_how(
    client: Client, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(dist, "source_root", lambda: None)
    prebuilt: Any = tmp_path / WHEEL
    with override_settings(AGENT_DIST_DIR=tmp_path):
        missing = client.get(f"/agent/dist/{WHEEL}")
        assert missing.status_code == 503
        assert "pip wheel --no-deps" in missing.text and "TRAINHUB_AGENT_DIST_DIR" in missing.text
        prebuilt.write_bytes(b"prebuilt")
        served = client.get(f"/agent/dist/{WHEEL}")
        assert b"".join(served.streaming_content) == b"prebuilt"  # type: ignore[attr-defined]
