"""What `trainhub standalone` prints once it is up: the address and the way in come last."""

from __future__ import annotations

from pathlib import Path

import pytest
from trainhub.cli import server


def _printed(capsys: pytest.CaptureFixture[str], password: str | None, data_dir: Path) -> list[str]:
    server._banner("http://127.0.0.1:8000", data_dir, password)
    return [line for line in capsys.readouterr().out.splitlines() if line.strip()]


def test_the_url_and_the_one_time_password_are_the_last_lines(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    lines = _printed(capsys, "s3cret-once", tmp_path)
    assert lines[-2] == "TrainHub is up at http://127.0.0.1:8000/"
    assert "s3cret-once" in lines[-1] and "admin" in lines[-1]


def test_it_says_how_to_reset_the_password_for_this_data_directory(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    lines = _printed(capsys, None, tmp_path)
    (reset,) = [line for line in lines if "changepassword" in line]
    assert f"TRAINHUB_DATA_DIR={tmp_path} " in reset
    assert reset.endswith("trainhub manage changepassword admin")
    assert "TRAINHUB_ADMIN_PASSWORD" in lines[-1]
