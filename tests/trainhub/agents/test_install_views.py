"""`/agent/install.sh` and `/agent/dist/`: served without sign-in, no secret inside, the
wheel is the runtime alone (issue 13, item 1); the script takes the token from a file,
refuses plain http without --insecure and installs only the wheel whose sha256 it carries
(issue 26). The full install runs in tests/e2e/test_install.py."""

from __future__ import annotations

import hashlib
import http.server
import os
import re
import subprocess
import sys
import threading
import zipfile
from collections.abc import Iterator
from functools import partial
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


@pytest.fixture(scope="module")
def dist_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One wheel for the module: the script's digest is computed from it."""
    return tmp_path_factory.mktemp("agent-dist")


@pytest.fixture(autouse=True)
def _serve_wheel_from(dist_dir: Path, settings: Any) -> None:
    settings.AGENT_DIST_DIR = dist_dir


def _script(client: Client, tmp_path: Path) -> Path:
    answer = client.get("/agent/install.sh")
    assert answer.status_code == 200
    path = tmp_path / "install.sh"
    path.write_bytes(answer.content)
    return path


def _sh(script: Path, *args: str, stdin: str = "", **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["sh", str(script), *args],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        input=stdin,
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


@override_settings(EXTERNAL_URL="https://trainhub.example.com/th")
def test_the_script_names_the_public_url_when_set(client: Client) -> None:
    assert "\nSERVER=https://trainhub.example.com/th\n" in client.get("/agent/install.sh").text


def test_the_script_is_valid_sh_and_refuses_bad_arguments(client: Client, tmp_path: Path) -> None:
    script = _script(client, tmp_path)
    assert subprocess.run(["sh", "-n", str(script)], check=False).returncode == 0

    helped = _sh(script, "--help")
    assert helped.returncode == 0 and "--no-service" in helped.stdout

    refusals = {
        ("--bogus",): "unknown option: --bogus",
        ("--server", "ftp://x", "--token", "t"): "--server must be the server's https:// URL",
        ("--prefix",): "--prefix needs a value",
        ("--insecure", "--prefix", str(tmp_path / "a b"), "--token=t"): "--prefix must be a path",
        ("--insecure", "--prefix", str(tmp_path / "p")): "an enrollment token is needed",
        ("--insecure", "--token=t", "--token-file", "f"): "--token-file or --token, not both",
    }
    for args, message in refusals.items():
        done = _sh(script, *args)
        assert done.returncode != 0 and message in done.stderr, (args, done.stderr)
    assert not (tmp_path / "p").exists()


def test_the_script_says_which_python_to_install(client: Client, tmp_path: Path) -> None:
    script = _script(client, tmp_path)
    prefix = str(tmp_path / "agent")
    bad = _sh(
        script,
        "--insecure",
        "--prefix",
        prefix,
        "--token=t",
        TRAINHUB_PYTHON="/nonexistent/python3",
    )
    assert bad.returncode != 0
    assert "TRAINHUB_PYTHON=/nonexistent/python3 is not a working Python 3.11" in bad.stderr
    empty = tmp_path / "empty-path"
    empty.mkdir()
    none = subprocess.run(
        ["/bin/sh", str(script), "--insecure", "--prefix", prefix, "--token=t"],
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
        "uv",  # builds jobs' own environments on the node
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


NO_PYTHON = {"TRAINHUB_PYTHON": "/nonexistent/python3"}  # stops the script after its checks


def test_a_plain_http_server_is_refused_without_insecure(client: Client, tmp_path: Path) -> None:
    """Loopback too: the flag is what says plain http is meant (issue 26, item 2)."""
    script = _script(client, tmp_path)
    prefix = str(tmp_path / "agent")
    for server in ([], ["--server", "http://127.0.0.1:8000"], ["--server=http://localhost/"]):
        refused = _sh(script, *server, "--prefix", prefix, "--token-file", "/dev/null")
        assert refused.returncode != 0
        assert "refusing the plain-http server http://" in refused.stderr
        assert "unencrypted" in refused.stderr and "https:// URL" in refused.stderr
        assert "pass --insecure" in refused.stderr
    allowed = _sh(script, "--insecure", "--prefix", prefix, "--token=t", **NO_PYTHON)
    assert "warning: --insecure: talking to http://testserver over plain http" in allowed.stderr
    assert "TRAINHUB_PYTHON=/nonexistent/python3" in allowed.stderr  # got past the check
    assert not Path(prefix).exists()


def test_the_token_comes_from_a_file_or_stdin_and_on_the_command_line_with_a_warning(
    client: Client, tmp_path: Path
) -> None:
    """Issue 26, item 1: `--token-file PATH` / `--token-file -`; `--token` still works."""
    script = _script(client, tmp_path)
    base = ("--insecure", "--prefix", str(tmp_path / "agent"))
    past_the_token = "TRAINHUB_PYTHON=/nonexistent/python3 is not a working Python"
    token_file = tmp_path / "token"
    token_file.write_text("s3cret-token\r\n")
    for args, stdin in ((("--token-file", str(token_file)), ""), (("--token-file=-",), "t\n")):
        done = _sh(script, *base, *args, stdin=stdin, **NO_PYTHON)
        assert past_the_token in done.stderr and "--token puts" not in done.stderr, done.stderr

    on_line = _sh(script, *base, "--token=s3cret-token", **NO_PYTHON)
    assert past_the_token in on_line.stderr
    assert "warning: --token puts the enrollment token in the process list" in on_line.stderr
    assert "shell history" in on_line.stderr and "--token-file PATH" in on_line.stderr

    (tmp_path / "empty").write_text("\n")
    refusals = {
        ("--token-file", str(tmp_path / "missing")): "cannot read the token file",
        ("--token-file", str(tmp_path / "empty")): "no enrollment token on the first line of",
        ("--token-file", "-"): "no enrollment token on the first line of standard input",
    }
    for args, message in refusals.items():
        done = _sh(script, *base, *args, **NO_PYTHON)
        assert done.returncode != 0 and message in done.stderr, (args, done.stderr)
        assert past_the_token not in done.stderr


def _digest(script: str) -> str:
    found = re.search(r"^WHEEL_SHA256=([0-9a-f]{64})$", script, re.M)
    assert found, script[:2000]
    return found.group(1)


def test_the_script_carries_the_sha256_of_the_wheel_served_beside_it(client: Client) -> None:
    """Issue 26, item 3: the server computes it from the wheel it serves (dist.py)."""
    digest = _digest(client.get("/agent/install.sh").text)
    wheel = client.get(f"/agent/dist/{WHEEL}")
    body = b"".join(wheel.streaming_content)  # type: ignore[attr-defined]
    assert hashlib.sha256(body).hexdigest() == digest


def test_without_a_wheel_the_script_is_a_503_that_says_why(
    client: Client, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(dist, "source_root", lambda: None)
    with override_settings(AGENT_DIST_DIR=tmp_path / "empty"):
        answer = client.get("/agent/install.sh")
    assert answer.status_code == 503
    (tmp_path / "install.sh").write_bytes(answer.content)
    done = _sh(tmp_path / "install.sh")
    assert done.returncode == 1
    assert done.stderr.startswith("trainhub-agent install: error: the agent wheel ")
    assert "pip wheel --no-deps" in done.stderr


@pytest.fixture
def file_server(tmp_path: Path) -> Iterator[tuple[str, Path]]:
    """A static http server standing in for the TrainHub server's /agent/dist/."""
    root = tmp_path / "www"
    (root / "agent" / "dist").mkdir(parents=True)
    handler = partial(http.server.SimpleHTTPRequestHandler, directory=str(root))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", root / "agent" / "dist" / WHEEL
    finally:
        server.shutdown()
        server.server_close()


def test_a_wheel_that_does_not_match_the_scripts_sha256_is_not_installed(
    client: Client, tmp_path: Path, dist_dir: Path, file_server: tuple[str, Path]
) -> None:
    """Issue 26, item 3: a tampered wheel, or a tampered digest, and nothing is installed."""
    url, served = file_server
    script = _script(client, tmp_path)
    genuine = (dist_dir / WHEEL).read_bytes()
    (tmp_path / "token").write_text("t\n")
    # A Python that has hashlib but cannot make the virtualenv: the script stops right after
    # the check when the wheel passes it.
    python = tmp_path / "python3"
    python.write_text(f'#!/bin/sh\n[ "$1" = -m ] && exit 1\nexec {sys.executable} "$@"\n')
    python.chmod(0o755)

    def install(prefix: Path) -> subprocess.CompletedProcess[str]:
        args = ["--server", url, "--insecure", "--token-file", str(tmp_path / "token")]
        args += ["--prefix", str(prefix), "--no-service"]
        return _sh(script, *args, TRAINHUB_PYTHON=str(python))

    served.write_bytes(genuine)
    passed = install(tmp_path / "control")
    assert "could not create a virtualenv" in passed.stderr, passed.stdout + passed.stderr

    prefix = tmp_path / "agent"
    served.write_bytes(genuine[:-1] + bytes([genuine[-1] ^ 1]))  # one bit changed
    tampered = install(prefix)
    assert tampered.returncode != 0
    assert f"the downloaded {WHEEL} does not match the sha256 this script carries" in (
        tampered.stderr
    )
    assert "nothing was installed" in tampered.stderr and not prefix.exists()

    served.write_bytes(genuine)
    text = script.read_text()
    script.write_text(text.replace(_digest(text), hashlib.sha256(b"other").hexdigest()))
    other_digest = install(prefix)
    assert other_digest.returncode != 0
    assert "does not match the sha256 this script carries" in other_digest.stderr
    assert not prefix.exists()
