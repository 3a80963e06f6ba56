"""The node pages in a real browser: a platform admin cordons, drains and uncordons the
node (leaving it in service: the other tests need it), clicks "Add a node" and copies the
install command; running that command adds a node the open page shows without a reload.
A member sees the nodes but none of the actions."""

from __future__ import annotations

import os
import secrets
import shlex
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from playwright.sync_api import Browser, Page, expect

from ...conftest import require_services
from ..browser import assert_accessible, signed_in
from ..cluster import ADMIN, LiveCluster, fresh_database, second_agent, services_cluster
from .conftest import SignedIn

pytestmark = [pytest.mark.browser, pytest.mark.services, pytest.mark.slow]

LIVE_MS = 15_000  # the node pages poll every ~4 s
IN_CI = os.environ.get("CI", "").lower() == "true"


def _first_node(live_cluster: LiveCluster) -> dict[str, Any]:
    return dict(live_cluster.api.get("/nodes/").json()["results"][0])


def _state(page: Page) -> Any:
    return expect(page.locator('[data-field="state"] .state'))


def test_admin_cordons_drains_and_uncordons_a_node(
    as_person: SignedIn, live_cluster: LiveCluster
) -> None:
    node = _first_node(live_cluster)
    try:
        with as_person("admin") as page:
            page.goto(f"{live_cluster.url}/nodes/")
            row = page.locator(f'tr[data-node-id="{node["id"]}"]')
            expect(row.locator(".state")).to_have_text("ready")
            expect(row).to_contain_text("CPU")
            assert_accessible(page)

            row.get_by_role("link", name=node["hostname"]).click()
            page.wait_for_url(f"{live_cluster.url}/nodes/{node['id']}/")
            _state(page).to_have_text("ready")
            expect(page.locator('[data-field="agent-version"]')).not_to_be_empty()
            # The test cluster's agent runs as root: a uid per job, and nothing says otherwise.
            expect(page.locator('[data-field="isolation"]')).to_contain_text("sandbox")
            expect(page.locator('[data-field="isolation"]')).not_to_contain_text("not root")
            assert_accessible(page)

            page.get_by_role("button", name="Cordon").click()
            _state(page).to_have_text("cordoned")
            assert _first_node(live_cluster)["state"] == "cordoned"
            page.get_by_role("button", name="Uncordon").click()
            _state(page).to_have_text("ready")

            # Drain asks first; cancelling (here with Escape) changes nothing.
            page.get_by_role("button", name="Drain", exact=True).click()
            dialog = page.get_by_role("dialog")
            expect(dialog).to_be_visible()
            expect(dialog).to_contain_text("No new tasks")
            assert_accessible(page)
            page.keyboard.press("Escape")
            expect(dialog).to_be_hidden()
            assert _first_node(live_cluster)["state"] == "active"
            page.get_by_role("button", name="Drain", exact=True).click()
            dialog.get_by_role("button", name="Drain node").click()
            _state(page).to_have_text("draining")
            page.get_by_role("button", name="Uncordon").click()
            _state(page).to_have_text("ready")
    finally:
        live_cluster.api.post(f"/nodes/{node['id']}/uncordon/").raise_for_status()
    assert _first_node(live_cluster)["state"] == "active"


def test_a_member_sees_nodes_but_no_actions(as_person: SignedIn, live_cluster: LiveCluster) -> None:
    node = _first_node(live_cluster)
    with as_person("alice") as page:
        page.goto(f"{live_cluster.url}/nodes/")
        expect(page.locator(f'tr[data-node-id="{node["id"]}"]')).to_be_visible()
        expect(page.get_by_role("button", name="Add a node")).to_have_count(0)
        page.goto(f"{live_cluster.url}/nodes/{node['id']}/")
        expect(page.locator("#node-body")).to_be_visible()
        expect(page.get_by_role("button", name="Cordon")).to_have_count(0)
        expect(page.get_by_role("button", name="Drain")).to_have_count(0)
        assert_accessible(page)


def _add_a_node(page: Page, live_cluster: LiveCluster) -> str:
    """Click "Add a node" on the node list; the install command shown."""
    page.goto(f"{live_cluster.url}/nodes/")
    page.get_by_role("button", name="Add a node").click()
    command = page.locator("#install-command")
    expect(command).to_contain_text("--token-file ~/trainhub-enroll-token")
    text = command.inner_text().strip()
    assert text.startswith("(umask 077 && printf ")
    assert f"&& curl -fsSL {live_cluster.url}/agent/install.sh | sh -s -- " in text
    assert f"--server {live_cluster.url} --insecure " in text
    expect(page.locator("#install-insecure")).to_contain_text("for trials only")
    # The test server is at 127.0.0.1: the page says no other machine can use that address.
    expect(page.locator("#install-loopback")).to_contain_text("only works on this machine")
    expect(page.locator("#install-loopback")).to_contain_text("TRAINHUB_EXTERNAL_URL")
    expect(page.locator("#install-needs")).to_contain_text("bubblewrap")
    expect(page.locator(".arrivals")).to_contain_text("Waiting for the new node to join")
    return text


def test_add_a_node_shows_an_install_command_to_copy(
    as_person: SignedIn, live_cluster: LiveCluster
) -> None:
    with as_person("admin") as page:
        page.context.grant_permissions(
            ["clipboard-read", "clipboard-write"], origin=live_cluster.url
        )
        command = _add_a_node(page, live_cluster)
        assert_accessible(page)
        copy = page.get_by_role("button", name="Copy")
        copy.focus()
        page.keyboard.press("Enter")  # keyboard, not only the mouse
        expect(page.locator("#copy-status")).to_have_text("Copied the command to the clipboard.")
        expect(page.get_by_role("button", name="Copied")).to_be_visible()
        assert page.evaluate("navigator.clipboard.readText()") == command


SMALL = {"cpu": 0.25, "memory_mb": 256}


def test_a_node_whose_tasks_fail_at_start_is_quarantined_with_the_reason(
    browser: Browser, own_cluster: LiveCluster, tmp_path: Path
) -> None:
    """Jobs whose tasks fail at once (an entrypoint that does not exist) quarantine the
    node they keep landing on, once three in a row failed there; its page says why, and
    the admin's Uncordon puts it back. (A single node is never quarantined: the cluster
    here has a second one.)"""
    cluster = own_cluster
    node2 = second_agent(cluster, tmp_path)
    quarantined: dict[str, Any] | None = None
    try:
        for i in range(8):  # the jobs may land on either node: up to 8 until one is out
            job = cluster.submit(
                name=f"fails-at-start-{i}",
                team="recsys",
                entrypoint="no_such_module_here:train",
                parameter_servers={"replicas": 1, "resources": SMALL},
                workers={"min": 1, "max": 1, "resources": SMALL},
                coordinator={"resources": SMALL},
                max_restarts=0,
            )
            cluster.wait_state(job["id"], {"failed"}, timeout=120)
            nodes = cluster.api.get("/nodes/").json()["results"]
            cordoned = [n for n in nodes if n["state"] == "cordoned"]
            if cordoned:
                (quarantined,) = cordoned
                break
        assert quarantined is not None, "no node was quarantined after 8 failing jobs"
        with signed_in(browser, cluster.url, *ADMIN) as page:
            page.goto(f"{cluster.url}/nodes/")
            row = page.locator(f'tr[data-node-id="{quarantined["id"]}"]')
            expect(row).to_contain_text("quarantined: tasks failed at start")
            row.get_by_role("link", name=quarantined["hostname"]).click()
            reason = page.locator('[data-field="quarantine"]')
            expect(reason).to_contain_text("the tasks of 3 jobs in a row failed at start")
            expect(reason).to_contain_text("exit code 1")
            assert_accessible(page)
            page.get_by_role("button", name="Uncordon").click()
            _state(page).to_have_text("ready")
            expect(reason).to_have_count(0)
        states = {n["id"]: n["state"] for n in cluster.api.get("/nodes/").json()["results"]}
        assert states[quarantined["id"]] == "active"
    finally:
        # No later job may be placed where no agent runs.
        assert cluster.api.post(f"/nodes/{node2['id']}/cordon/").is_success
        cluster.group.stop(names=["agent2"])


@pytest.fixture(scope="module")
def own_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveCluster]:
    """A services-mode TrainHub of its own, so that the node this module adds never shows
    up in the tests that share `live_cluster` and its single node."""
    database_url, redis_url = require_services()
    tmp = tmp_path_factory.mktemp("add-node-cluster")
    own_redis = redis_url.rsplit("/", 1)[0] + "/12"  # live_cluster uses 14, test_install 13
    with fresh_database(database_url) as db_url, services_cluster(db_url, own_redis, tmp) as c:
        yield c


def _node_env() -> dict[str, str]:
    """A shell as on a fresh node: nothing from this checkout or its virtualenv."""
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    ours = str(Path(sys.prefix) / "bin")
    env["PATH"] = os.pathsep.join(p for p in env.get("PATH", "").split(os.pathsep) if p != ours)
    env["PYTHONNOUSERSITE"] = "1"
    return env


def _run_command(stdout: str) -> list[str]:
    """The command the installer prints on the line after "Run the agent with:"."""
    lines = stdout.splitlines()
    marks = [i for i, line in enumerate(lines) if line.rstrip().endswith("Run the agent with:")]
    assert marks and marks[-1] + 1 < len(lines), f"no run command printed:\n{stdout}"
    return shlex.split(lines[marks[-1] + 1])


def test_running_the_shown_command_adds_a_node_the_page_shows_live(
    browser: Browser, own_cluster: LiveCluster, tmp_path: Path
) -> None:
    """End to end (issue 12, Done 1): "Add a node", run the command the page shows as a
    non-root operator would (`--prefix <tmp> --no-service`), start the agent with the
    command the installer prints, and watch the open page list the node without a reload."""
    name = f"added-{secrets.token_hex(3)}"
    with signed_in(browser, own_cluster.url, *ADMIN) as page:
        command = _add_a_node(page, own_cluster)
        page.evaluate("window.__notReloaded = true")
        installed = subprocess.run(
            [
                "sh",
                "-c",
                f"{command} --prefix {shlex.quote(str(tmp_path / 'agent'))} --no-service"
                f" --name {name}",
            ],
            env={**_node_env(), "HOME": str(tmp_path)},  # where it saves the token
            capture_output=True,
            text=True,
            timeout=300,
            check=False,
        )
        assert installed.returncode == 0, installed.stdout + installed.stderr
        log = (tmp_path / "agent.log").open("wb")
        agent = subprocess.Popen(
            _run_command(installed.stdout), env=_node_env(), stdout=log, stderr=subprocess.STDOUT
        )
        try:
            row = page.locator("tr.new")
            expect(row).to_have_count(1, timeout=60_000)
            expect(row).to_contain_text(name)
            expect(row.locator(".state")).to_have_text("ready", timeout=LIVE_MS)
            expect(page.locator(".arrivals")).to_contain_text(name)
            assert page.evaluate("window.__notReloaded") is True
            assert_accessible(page)
        finally:
            agent.terminate()
            try:
                agent.wait(timeout=30)
            except subprocess.TimeoutExpired:
                agent.kill()
            log.close()
