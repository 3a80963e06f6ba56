"""State file: 0600 from creation, atomic replace, helpful errors."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from ps_runtime.agent.state import AgentState, StateError, load_state, save_state

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
