"""`TRAINHUB_SCHEDULER_POLICY` must name a policy: anything else stops the process at start."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[3]


def _load_settings(policy: str, data_dir: Path) -> subprocess.CompletedProcess[str]:
    """Import the settings in a fresh interpreter, as every TrainHub process does first."""
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(REPO / "platform"), str(REPO)]),
        "TRAINHUB_DATA_DIR": str(data_dir),
        "TRAINHUB_SCHEDULER_POLICY": policy,
    }
    return subprocess.run(
        [sys.executable, "-c", "import trainhub.settings as s; print(s.SCHEDULER_POLICY)"],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_an_unknown_policy_is_refused_naming_the_variable_and_the_choices(
    tmp_path: Path,
) -> None:
    result = _load_settings("fair", tmp_path)
    assert result.returncode != 0
    assert "ImproperlyConfigured" in result.stderr
    assert (
        "TRAINHUB_SCHEDULER_POLICY='fair' is not a policy; choose one of cfs, fifo, priority"
        in (result.stderr)
    )


@pytest.mark.parametrize("policy", ["cfs", "fifo", "priority"])
def test_every_policy_name_is_accepted(policy: str, tmp_path: Path) -> None:
    result = _load_settings(policy, tmp_path)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == policy
