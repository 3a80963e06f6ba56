"""`trainhub-agent` error paths: clear message, non-zero exit, nothing written."""

from __future__ import annotations

import asyncio
import json
import socket
import sys
from pathlib import Path

import pytest

from ps_runtime.agent import cli
from ps_runtime.agent.state import INSTALL_CONFIG_NAME, STATE_ENV

from .control_plane import FakeControlPlane


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_enroll_unreachable_server(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    state = tmp_path / "agent.json"
    url = f"http://127.0.0.1:{_free_port()}"
    code = cli.main(["enroll", "--server", url, "--token", "t0ken-x", "--state-file", str(state)])
    assert code == 1
    err = capsys.readouterr().err
    assert f"cannot reach the server at {url}" in err
    assert "t0ken-x" not in err
    assert not state.exists()


def test_enroll_bad_token_prints_server_message(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    state = tmp_path / "agent.json"

    async def scenario() -> int:
        cp = await FakeControlPlane().start()
        try:
            return await asyncio.to_thread(
                cli.main,
                ["enroll", "--server", cp.url, "--token", "wrong", "--state-file", str(state)],
            )
        finally:
            await cp.close()

    assert asyncio.run(scenario()) == 1
    err = capsys.readouterr().err
    assert "HTTP 400" in err and "token: Invalid or expired enrollment token." in err
    assert not state.exists()


def test_enroll_rejects_non_http_server(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    code = cli.main(
        ["enroll", "--server", "ftp://x", "--token", "t", "--state-file", str(tmp_path / "s.json")]
    )
    assert code == 1
    assert "http:// or https://" in capsys.readouterr().err


def test_run_without_state_says_to_enroll(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert cli.main(["run", "--state-file", str(tmp_path / "missing.json")]) == 1
    assert "trainhub-agent enroll" in capsys.readouterr().err


def test_run_with_no_flags_uses_the_installation_it_runs_from(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """An agent the installer put in PREFIX looks for PREFIX/etc/agent.json, not ~/.config
    (issue 26, item 4; the whole run is in tests/e2e/test_install.py)."""
    prefix = tmp_path / "agent"
    (prefix / "etc").mkdir(parents=True)
    state = prefix / "etc" / "agent.json"
    paths = {"state_file": str(state), "work_dir": str(prefix / "work")}
    (prefix / "etc" / INSTALL_CONFIG_NAME).write_text(json.dumps(paths))
    monkeypatch.delenv(STATE_ENV, raising=False)
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.setattr(sys, "prefix", str(prefix))
    assert cli.main(["run"]) == 1
    assert f"no agent state at {state};" in capsys.readouterr().err
    (prefix / "etc" / INSTALL_CONFIG_NAME).write_text("{}")
    assert cli.main(["run"]) == 1
    assert "is corrupt; run the installer again" in capsys.readouterr().err
