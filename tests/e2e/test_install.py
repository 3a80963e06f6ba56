"""The one-line install, end to end (issue 13, Done 1): a fresh token's `install_command`
with `--prefix <tmp> --no-service` installs the runtime from the server and enrolls; the
agent runs and the node becomes ready. The installed environment has no Django; the token
is refused a second time; an expired token is refused; running the command again upgrades
in place without re-enrolling or stopping the running agent.

Issue 26: the command as shown saves the token to a file and passes `--token-file` and,
for the plain-http test server, `--insecure`; `PREFIX/bin/trainhub-agent run` with no
flags and an empty HOME runs the agent the installer enrolled (its state file and work dir
are the prefix's).

It runs against a services-mode TrainHub of its own (own database, Redis db 13), so the
extra node never shows up in the tests that share `live_cluster` and its single node.
"""

from __future__ import annotations

import os
import secrets
import shlex
import shutil
import signal
import stat
import subprocess
import sys
import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from ps_runtime.version import runtime_version

from ..conftest import require_services
from .cluster import LiveCluster, fresh_database, sandbox_base, services_cluster
from .test_services_mode import movielens_spec

pytestmark = [pytest.mark.services, pytest.mark.slow]

INSTALL_TIMEOUT = 300


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveCluster]:
    database_url, redis_url = require_services()
    tmp = tmp_path_factory.mktemp("install-cluster")
    own_redis = redis_url.rsplit("/", 1)[0] + "/13"  # live_cluster flushes and uses 14
    with fresh_database(database_url) as db_url, services_cluster(db_url, own_redis, tmp) as c:
        yield c


def _node_env() -> dict[str, str]:
    """A shell as on a fresh node: nothing from this checkout or its virtualenv."""
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    ours = str(Path(sys.prefix) / "bin")
    env["PATH"] = os.pathsep.join(p for p in env.get("PATH", "").split(os.pathsep) if p != ours)
    env["PYTHONNOUSERSITE"] = "1"
    return env


def _sh(command: str, cwd: Path, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["sh", "-c", command],
        cwd=cwd,
        env={**_node_env(), **env},
        capture_output=True,
        text=True,
        timeout=INSTALL_TIMEOUT,
        check=False,
    )


def _fake_systemd(tmp_path: Path) -> dict[str, str]:
    """A `systemctl` that logs its arguments and reports the unit active, and a systemd
    root of its own (TRAINHUB_SYSTEMD_ROOT): the installer's service branch, on no real
    systemd."""
    (tmp_path / "sysroot" / "run" / "systemd" / "system").mkdir(parents=True)
    bin_dir = tmp_path / "fake-bin"
    bin_dir.mkdir()
    systemctl = bin_dir / "systemctl"
    systemctl.write_text(f'#!/bin/sh\necho "$*" >> {tmp_path / "systemctl.log"}\nexit 0\n')
    systemctl.chmod(0o755)
    path = f"{bin_dir}{os.pathsep}{_node_env()['PATH']}"
    return {"PATH": path, "TRAINHUB_SYSTEMD_ROOT": str(tmp_path / "sysroot")}


def _run_command(stdout: str) -> list[str]:
    """The command the installer prints on the line after "Run the agent with:"."""
    lines = stdout.splitlines()
    marks = [i for i, line in enumerate(lines) if line.endswith("Run the agent with:")]
    assert marks and marks[-1] + 1 < len(lines), stdout
    return shlex.split(lines[marks[-1] + 1])


def _node(cluster: LiveCluster, name: str) -> dict[str, Any] | None:
    nodes = cluster.api.get("/nodes/").raise_for_status().json()["results"]
    return next((n for n in nodes if n["hostname"] == name), None)


def _wait_ready(cluster: LiveCluster, name: str, agent: subprocess.Popen[bytes]) -> dict[str, Any]:
    """Ready: alive, and the agent's first heartbeat (its usage) has arrived."""
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        node = _node(cluster, name)
        if node and node["alive"] and node["usage"]:
            return node
        assert agent.poll() is None, f"the agent exited with {agent.returncode}"
        time.sleep(0.2)
    raise AssertionError(f"node {name} never became ready: {_node(cluster, name)}")


def _enroll(agent_bin: Path, cluster: LiveCluster, token: str, state: Path) -> Any:
    name = f"spare-{secrets.token_hex(3)}"
    command = [str(agent_bin), "enroll", "--server", cluster.url, f"--token={token}"]
    return subprocess.run(
        [*command, "--state-file", str(state), "--name", name],
        env=_node_env(),
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def _run_a_job_on(cluster: LiveCluster, hostname: str) -> None:
    """A short job placed on `hostname` alone (every other node cordoned meanwhile)."""
    others = [n for n in cluster.api.get("/nodes/").json()["results"] if n["hostname"] != hostname]
    for other in others:
        cluster.api.post(f"/nodes/{other['id']}/cordon/").raise_for_status()
    try:
        job = cluster.submit(**movielens_spec("on-installed-node", {"epochs": 1}))
        done = cluster.wait_state(job["id"], {"succeeded", "failed"}, timeout=240)
        assert done["state"] == "succeeded", cluster.logs(job["id"])
        assert {t["node"] for t in done["tasks"]} == {hostname}, done["tasks"]
    finally:
        for other in others:
            cluster.api.post(f"/nodes/{other['id']}/uncordon/").raise_for_status()


def test_one_line_install_enrolls_a_ready_node_without_django(
    cluster: LiveCluster, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    issued = cluster.api.post("/enrollment-tokens/", json={}).raise_for_status().json()
    assert issued["max_uses"] == 1
    # Where a root agent's task uids can traverse to the work dir (their sandboxes bind
    # from it as them); pytest's tmp_path sits below a 0700 directory.
    base = sandbox_base("trainhub-install-")
    prefix = base / "trainhub-agent"
    name = f"installed-{secrets.token_hex(3)}"
    # The command as shown, options appended: it saves the token to ~/trainhub-enroll-token
    # and passes --token-file and, for this plain-http server, --insecure.
    shown = issued["install_command"]
    assert shown.endswith(
        f"&& curl -fsSL {cluster.url}/agent/install.sh | sh -s -- --server {cluster.url} "
        "--insecure --token-file ~/trainhub-enroll-token"
    )
    command = f"{shown} --prefix {prefix} --name {name} --labels e2e=install,zone=local"
    operator = tmp_path / "operator-home"
    operator.mkdir()

    started = time.monotonic()
    installed = _sh(command + " --no-service", tmp_path, HOME=str(operator))
    install_seconds = time.monotonic() - started
    assert installed.returncode == 0, installed.stdout + installed.stderr
    assert "--token puts" not in installed.stderr
    token_file = operator / "trainhub-enroll-token"
    assert token_file.read_text() == issued["token"] + "\n"
    assert stat.S_IMODE(token_file.stat().st_mode) == 0o600
    run = _run_command(installed.stdout)
    assert run[:2] == [str(prefix / "bin" / "trainhub-agent"), "run"]
    # No flags, and a HOME with nothing in it: the agent finds the prefix's state and work
    # dir by itself (PREFIX/etc/trainhub-agent.json, written by the installer).
    home = tmp_path / "empty-home"
    home.mkdir()
    env = {k: v for k, v in _node_env().items() if not k.startswith("TRAINHUB_AGENT_")}
    log = (tmp_path / "agent.log").open("wb")
    agent = subprocess.Popen(
        [str(prefix / "bin" / "trainhub-agent"), "run"],
        env={**env, "HOME": str(home)},
        cwd=home,
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    try:
        node = _wait_ready(cluster, name, agent)
        seconds = time.monotonic() - started
        with capsys.disabled():
            print(
                f"\ninstall command to node ready: {seconds:.1f} s "
                f"(install and enroll {install_seconds:.1f} s, then the agent's first heartbeat)"
            )
        assert node["labels"] == {"e2e": "install", "zone": "local"}
        assert node["state"] == "active"
        # The agent reports the version it runs, this server's own: not flagged outdated.
        assert (node["agent_version"], node["outdated"]) == (runtime_version(), False)
        started_with = (tmp_path / "agent.log").read_text()
        assert f"state file {prefix}/etc/agent.json, work dir {prefix}/work" in started_with
        assert list(home.iterdir()) == []
        # It sandboxes its tasks, and a job runs there on the installation's own
        # interpreter and packages (its virtualenv's bin/python, bound into the sandbox).
        assert node["isolation"] == ("sandbox" if os.geteuid() == 0 else "sandbox-user"), node
        _run_a_job_on(cluster, name)

        state = prefix / "etc" / "agent.json"
        assert stat.S_IMODE(state.stat().st_mode) == 0o600
        python = str(prefix / "bin" / "python")
        no_django = subprocess.run(
            [python, "-c", "import django"], env=_node_env(), capture_output=True, text=True
        )
        assert no_django.returncode != 0 and "ModuleNotFoundError" in no_django.stderr
        where = subprocess.run(
            [python, "-c", "import ps_runtime; print(ps_runtime.__file__)"],
            env=_node_env(),
            capture_output=True,
            text=True,
            cwd=tmp_path,
        )
        assert where.stdout.startswith(str(prefix)), where.stdout + where.stderr

        # The same token, a second time: refused, saying it is used up.
        again = _enroll(prefix / "bin" / "trainhub-agent", cluster, issued["token"], tmp_path / "2")
        assert again.returncode == 1 and "used up" in again.stderr, again.stderr
        assert "ask a platform admin for a new one" in again.stderr
        assert not (tmp_path / "2").exists()

        # An expired token: refused, saying when it expired.
        soon = (datetime.now(UTC) + timedelta(seconds=1)).isoformat()
        expiring = cluster.api.post("/enrollment-tokens/", json={"expires_at": soon}).json()
        time.sleep(1.5)
        late = _enroll(
            prefix / "bin" / "trainhub-agent", cluster, expiring["token"], tmp_path / "3"
        )
        assert late.returncode == 1 and "expired at" in late.stderr, late.stderr

        # Running the command again, as root with the service this time, upgrades in place:
        # no new enrollment (the used token is not needed), the unit is written and enabled,
        # the running unit is restarted onto the new version (KillMode=process: its tasks
        # go on, see test_agent_restart) and the node stays ready.
        upgraded = _sh(command, tmp_path, HOME=str(operator), **_fake_systemd(tmp_path))
        assert upgraded.returncode == 0, upgraded.stdout + upgraded.stderr
        assert "upgrading the agent" in upgraded.stdout and "already enrolled" in upgraded.stdout
        if os.geteuid() == 0:
            unit = tmp_path / "sysroot" / "etc" / "systemd" / "system" / "trainhub-agent.service"
            assert f"ExecStart={' '.join(run)}\n" in unit.read_text()
            assert (tmp_path / "systemctl.log").read_text().splitlines() == [
                "daemon-reload",
                "enable --quiet trainhub-agent.service",
                "is-active --quiet trainhub-agent.service",
                "restart trainhub-agent.service",
            ]
            assert "KillMode=process\n" in unit.read_text()
            assert "its tasks kept running" in upgraded.stdout
        else:
            assert "not root, so no systemd unit was installed" in upgraded.stdout
        assert agent.poll() is None
        assert _wait_ready(cluster, name, agent)["id"] == node["id"]
        names = [n["hostname"] for n in cluster.api.get("/nodes/").json()["results"]]
        assert names.count(name) == 1
    finally:
        agent.send_signal(signal.SIGTERM)
        try:
            agent.wait(timeout=30)
        except subprocess.TimeoutExpired:
            agent.kill()
            agent.wait()
        log.close()
        extra = _node(cluster, name)
        if extra is not None:
            cluster.api.post(f"/nodes/{extra['id']}/cordon/")
        shutil.rmtree(base, ignore_errors=True)
