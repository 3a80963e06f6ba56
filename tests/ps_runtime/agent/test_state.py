"""State file: 0600 from creation, atomic replace, helpful errors; where an installed
agent finds it."""

from __future__ import annotations

import json
import os
import stat
import sys
from pathlib import Path

import pytest

from ps_runtime.agent.state import (
    INSTALL_CONFIG_NAME,
    STATE_ENV,
    WORK_DIR_ENV,
    AgentState,
    StateError,
    default_state_path,
    default_work_dir,
    install_config_path,
    load_install_config,
    load_state,
    save_state,
)

STATE = AgentState(server="https://th.example.com", node_id=7, credential="c-123")


def test_state_file_is_0600_even_with_permissive_umask(tmp_path: Path) -> None:
    path = tmp_path / "nested" / "agent.json"
    old = os.umask(0)
    try:
        save_state(path, STATE)
    finally:
        os.umask(old)
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert stat.S_IMODE(path.parent.stat().st_mode) == 0o700
    assert load_state(path) == STATE
    assert [p.name for p in path.parent.iterdir()] == ["agent.json"]  # no temp file left


def test_save_replaces_existing_file_and_keeps_mode(tmp_path: Path) -> None:
    path = tmp_path / "agent.json"
    save_state(path, STATE)
    save_state(path, AgentState(server="http://x", node_id=8, credential="c-456"))
    assert load_state(path).node_id == 8
    assert stat.S_IMODE(path.stat().st_mode) == 0o600


def test_missing_state_says_to_enroll(tmp_path: Path) -> None:
    with pytest.raises(StateError, match="trainhub-agent enroll"):
        load_state(tmp_path / "none.json")


def test_world_readable_state_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "agent.json"
    save_state(path, STATE)
    path.chmod(0o644)
    with pytest.raises(StateError, match="chmod 600"):
        load_state(path)


def test_repr_hides_credential() -> None:
    assert "c-123" not in repr(STATE)


def _clear_env(monkeypatch: pytest.MonkeyPatch, home: Path) -> None:
    monkeypatch.delenv(STATE_ENV, raising=False)
    monkeypatch.delenv(WORK_DIR_ENV, raising=False)
    monkeypatch.setenv("HOME", str(home))


def test_an_installed_agent_finds_its_state_and_work_dir_in_its_prefix(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`PREFIX/bin/trainhub-agent run` with no flags (issue 26, item 4): the installer's
    PREFIX/etc/trainhub-agent.json, read from the running virtualenv (sys.prefix)."""
    prefix = tmp_path / "opt" / "trainhub-agent"
    (prefix / "etc").mkdir(parents=True)
    config = {"state_file": str(prefix / "etc" / "agent.json"), "work_dir": str(prefix / "work")}
    (prefix / "etc" / INSTALL_CONFIG_NAME).write_text(json.dumps(config))
    _clear_env(monkeypatch, tmp_path / "home")
    monkeypatch.setattr(sys, "prefix", str(prefix))
    assert install_config_path() == prefix / "etc" / "trainhub-agent.json"
    assert default_state_path() == prefix / "etc" / "agent.json"
    assert default_work_dir() == prefix / "work"
    # The environment still wins over the file.
    monkeypatch.setenv(STATE_ENV, str(tmp_path / "s.json"))
    monkeypatch.setenv(WORK_DIR_ENV, str(tmp_path / "w"))
    assert (default_state_path(), default_work_dir()) == (tmp_path / "s.json", tmp_path / "w")


def test_without_an_install_config_the_home_defaults(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _clear_env(monkeypatch, tmp_path / "home")
    monkeypatch.setattr(sys, "prefix", str(tmp_path / "venv"))
    assert default_state_path() == tmp_path / "home" / ".config" / "trainhub" / "agent.json"
    assert default_work_dir() == tmp_path / "home" / ".local" / "share" / "trainhub" / "agent"


@pytest.mark.parametrize(
    "content", ["{", '{"state_file": "/a"}', '{"state_file": "rel", "work_dir": "/w"}', "[]"]
)
def test_a_corrupt_install_config_says_how_to_fix_it(
    content: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "etc").mkdir()
    (tmp_path / "etc" / INSTALL_CONFIG_NAME).write_text(content)
    _clear_env(monkeypatch, tmp_path / "home")
    monkeypatch.setattr(sys, "prefix", str(tmp_path))
    with pytest.raises(StateError, match="run the installer again"):
        default_state_path()
    with pytest.raises(StateError, match="--state-file and --work-dir"):
        load_install_config()
