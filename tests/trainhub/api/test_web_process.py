"""The web process as `trainhub web` and the standalone start it (uvicorn)."""

from __future__ import annotations

from pathlib import Path

import httpx


def test_the_web_process_starts_without_a_warning(web_server: str, tmp_path: Path) -> None:
    """An operator reads every line a start prints: a deprecation warning on each start
    (uvicorn's legacy `websockets` implementation) reads as something to fix."""
    assert httpx.get(f"{web_server}/healthz").status_code == 200
    log = (tmp_path / "logs" / "web.log").read_text()
    assert "Started server process" in log  # the log is the web process's own
    assert "Warning" not in log, log
