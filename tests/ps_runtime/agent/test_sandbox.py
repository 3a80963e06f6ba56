"""What the sandbox holds of the runtime, and what it never may."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from ps_runtime.agent import sandbox


def test_a_virtualenvs_interpreter_is_in_the_sandbox_at_its_own_path(tmp_path: Path) -> None:
    venv = tmp_path / "opt" / "trainhub-agent"
    (venv / "bin").mkdir(parents=True)
    (venv / "bin" / "python").symlink_to(sys.executable)
    site = venv / "lib" / "python3.11" / "site-packages"
    (site / "ps_runtime").mkdir(parents=True)
    mounts = sandbox.runtime_mounts(str(venv / "bin" / "python"), [str(site)])
    assert str(venv / "bin" / "python") in mounts  # tasks start it by that path
    assert str(site) in mounts
    assert str(venv) not in mounts  # not the installation's etc/ (the credential)


def test_a_checkout_lends_its_package_only(tmp_path: Path) -> None:
    (tmp_path / "ps_runtime").mkdir()
    (tmp_path / "secrets.txt").write_text("not for tasks")
    mounts = sandbox.runtime_mounts("/usr/bin/python3", [str(tmp_path)])
    assert mounts == (str(tmp_path / "ps_runtime"),)


def test_no_mount_may_hold_the_agents_own_files(tmp_path: Path) -> None:
    site = tmp_path / "site-packages"
    site.mkdir()
    state = site / "agent.json"
    with pytest.raises(sandbox.SandboxError, match="holds the agent's"):
        sandbox.runtime_mounts("/usr/bin/python3", [str(site)], private=[state])
    assert sandbox.runtime_mounts("/usr/bin/python3", [str(site)], private=[tmp_path / "w"])


def test_only_the_tasks_gpus_and_the_control_devices_are_bound(tmp_path: Path) -> None:
    # Regular files are not device nodes: nothing is bound for them.
    (tmp_path / "nvidia0").write_text("")
    assert sandbox.gpu_args(tmp_path, [0]) == []
    assert sandbox.gpu_args(Path("/dev"), []) == []
