"""`trainhub standalone` enrolls its own agent anew when the stored credential expired."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

from trainhub.cli.server import _local_credential_usable

from ps_runtime.agent.state import AgentState, save_state


def test_a_missing_or_expired_local_credential_is_enrolled_anew(tmp_path: Path) -> None:
    path = tmp_path / "agent.json"
    assert not _local_credential_usable(path)
    now = datetime.now(UTC)
    save_state(path, AgentState("http://x", 1, "1.c", now, now + timedelta(days=30)))
    assert _local_credential_usable(path)
    save_state(path, AgentState("http://x", 1, "1.c", now - timedelta(days=31), now))
    assert not _local_credential_usable(path)
    save_state(path, AgentState("http://x", 1, "1.c"))  # from before credentials expired
    assert _local_credential_usable(path)
    path.chmod(0o644)  # unusable: left to the agent, which says why
    assert _local_credential_usable(path)
