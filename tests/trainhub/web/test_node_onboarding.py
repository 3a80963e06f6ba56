"""What "Add a node" and the node pages tell an admin about a node that cannot work: the
install command names `TRAINHUB_EXTERNAL_URL` and warns when that is a loopback address or
plain http, and lists what the node needs; a quarantined node shows why, in the list and
on its page, until an admin uncordons it."""

from __future__ import annotations

import re
from html import unescape
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.test import Client, override_settings
from django.utils import timezone
from trainhub.nodes.choices import NodeState
from trainhub.nodes.install import is_loopback
from trainhub.nodes.models import Node
from trainhub.nodes.quarantine import StartOutcome, note_task_end

from ..factories import make_node, make_user

pytestmark = pytest.mark.django_db


def _client(user: User) -> Client:
    client = Client()
    client.force_login(user)
    return client


def _text(html: str) -> str:
    return re.sub(r"\s+", " ", re.sub(r"<[^>]+>", " ", html)).strip()


def _install_command(html: str) -> str:
    command = re.search(r'<code id="install-command"[^>]*>(.*?)</code>', html, re.S)
    assert command, "no install command on the page"
    return unescape(command.group(1))


@pytest.mark.parametrize(
    ("url", "loopback"),
    [
        ("http://127.0.0.1:8000", True),
        ("http://127.1.2.3", True),
        ("https://localhost", True),
        ("http://app.localhost:8000/", True),
        ("http://[::1]:8000", True),
        ("http://0.0.0.0:8000", True),
        ("https://trainhub.example.com", False),
        ("http://10.0.0.5:8000", False),
        ("http://testserver", False),
    ],
)
def test_loopback_urls(url: str, loopback: bool) -> None:
    assert is_loopback(url) is loopback


def test_add_a_node_names_the_public_url_and_warns_when_other_machines_cannot_use_it() -> None:
    root = make_user("root", superuser=True)
    with override_settings(EXTERNAL_URL="http://127.0.0.1:8000"):
        html = _client(root).post("/nodes/add/").content.decode()
    command = _install_command(html)
    assert "curl -fsSL http://127.0.0.1:8000/agent/install.sh " in command
    assert "--server http://127.0.0.1:8000 --insecure " in command
    loopback = re.search(r'<p id="install-loopback">(.*?)</p>', html, re.S)
    assert loopback, "no loopback warning"
    assert "another machine that runs it reaches itself" in _text(loopback.group(1))
    assert "TRAINHUB_EXTERNAL_URL" in loopback.group(1)
    insecure = re.search(r'<p id="install-insecure">(.*?)</p>', html, re.S)
    assert insecure and "the install script, the enrollment token" in _text(insecure.group(1))
    assert "HTTPS" in insecure.group(1)

    with override_settings(EXTERNAL_URL="https://trainhub.example.com"):
        html = _client(root).post("/nodes/add/").content.decode()
    assert "--server https://trainhub.example.com " in _install_command(html)
    assert 'id="install-loopback"' not in html and 'id="install-insecure"' not in html


def test_add_a_node_says_what_the_node_needs() -> None:
    root = make_user("root", superuser=True)
    with override_settings(
        EXTERNAL_URL="https://trainhub.example.com", TASK_PORT_RANGE=(24000, 31999)
    ):
        html = _client(root).post("/nodes/add/").content.decode()
    needs = re.search(r'<details id="install-needs"[^>]*>(.*?)</details>', html, re.S)
    assert needs, "no list of what the node needs"
    text = _text(needs.group(1))
    for need in ("Linux", "Python 3.11", "bubblewrap", "Root", "24000", "31999", "o+x"):
        assert need in text, need
    assert "https://trainhub.example.com" in text


def _quarantine(node: Node, jobs: int = 3) -> None:
    for job_id in range(1, jobs + 1):
        note_task_end(
            node_id=node.pk,
            job_id=job_id,
            outcome=StartOutcome.FAILED_AT_START,
            what=f"job {job_id} worker 0: exit code 1: Permission denied",
            now=timezone.now(),
        )


def test_a_quarantined_node_shows_why_in_the_list_and_on_its_page(settings: Any) -> None:
    settings.NODE_QUARANTINE_AFTER = 3
    root = make_user("root", superuser=True)
    node, _ = make_node("broken-1")
    make_node("healthy-2")  # the last ready node is never quarantined
    _quarantine(node)
    client = _client(root)
    listed = client.get("/nodes/").content.decode()
    row = re.search(rf'<tr data-node-id="{node.pk}"[^>]*>(.*?)</tr>', listed, re.S)
    assert row and "quarantined: tasks failed at start" in _text(row.group(1))
    page = client.get(f"/nodes/{node.pk}/").content.decode()
    reason = re.search(r'<dd data-field="quarantine">(.*?)</dd>', page, re.S)
    assert reason, "no quarantine reason on the node page"
    assert "the tasks of 3 jobs in a row failed at start on this node" in _text(reason.group(1))
    assert "Permission denied" in reason.group(1)
    assert "forgets its failed starts" in page

    # The admin's uncordon puts it back and the page no longer says it.
    assert client.post(f"/nodes/{node.pk}/uncordon/").status_code == 302
    node.refresh_from_db()
    assert (node.state, node.start_failures, node.quarantine_reason) == (NodeState.ACTIVE, 0, "")
    page = client.get(f"/nodes/{node.pk}/").content.decode()
    assert 'data-field="quarantine"' not in page
