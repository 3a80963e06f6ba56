"""The node pages `/nodes/` and `/nodes/<id>/`: state (ready, cordoned, draining, lost),
heartbeat, agent version, allocation, GPUs and tasks; the platform admins' actions (cordon,
drain, uncordon, "Add a node"), refused to everyone else with nothing changed; queries."""

from __future__ import annotations

import re
import shlex
from datetime import timedelta
from html import unescape
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.test import Client, override_settings
from django.utils import timezone
from trainhub.audit.models import AuditEntry
from trainhub.jobs.services import place_job
from trainhub.nodes.install import install_command
from trainhub.nodes.models import EnrollmentToken, Node
from trainhub.nodes.services import enroll_node
from trainhub.tenancy.choices import Role

from ..factories import gang_placements, make_job, make_node, make_team, make_user

pytestmark = pytest.mark.django_db

ACTIONS = ("cordon", "drain", "uncordon")


def _client(user: User) -> Client:
    client = Client()
    client.force_login(user)
    return client


def _text(html: str) -> str:
    return re.sub(r"\s+", " ", re.sub(r"<[^>]+>", " ", html)).strip()


def _row(html: str, node: Node) -> str:
    row = re.search(rf'<tr data-node-id="{node.pk}"[^>]*>(.*?)</tr>', html, re.S)
    assert row, f"node {node.hostname} is not listed"
    return _text(row.group(1))


@pytest.fixture
def world() -> dict[str, Any]:
    """A CPU node running a recsys job and a 2-GPU node; alice in recsys, carol in vision."""
    alice, carol = make_user("alice"), make_user("carol")
    make_team("recsys", members={alice: Role.MEMBER})
    make_team("vision", members={carol: Role.MEMBER})
    cpu_node, _ = make_node("cpu-1", cpus=4, memory_mb=8192)
    gpu_node, _ = make_node("gpu-1", cpus=16, memory_mb=65536, gpus=2)
    job = make_job(alice, team="recsys", name="mf-on-node")
    place_job(job=job, placements=gang_placements(job, cpu_node), now=timezone.now())
    return {
        "root": make_user("root", superuser=True),
        "alice": alice,
        "carol": carol,
        "cpu": cpu_node,
        "gpu": gpu_node,
        "job": job,
    }


# The list


def test_the_list_shows_state_heartbeat_agent_and_allocation(world: dict[str, Any]) -> None:
    html = _client(world["alice"]).get("/nodes/").content.decode()
    row = _row(html, world["cpu"])
    assert row.startswith("cpu-1 #")
    assert " ready " in f" {row} "
    assert "unknown" in row  # the agent reports no version yet
    assert "1.5 CPU / 4 CPU" in row and "1.5 GiB / 8 GiB" in row and row.endswith(" 3")
    assert "0 GPU / 2 GPU" in _row(html, world["gpu"])
    assert re.search(
        rf'<tr data-node-id="{world["cpu"].pk}".*?<time data-relative datetime="[^"]+">', html, re.S
    )


@pytest.mark.parametrize(
    ("change", "shown"),
    [
        ({"state": "cordoned"}, "cordoned"),
        ({"state": "draining"}, "draining"),
        ({"last_seen": None}, "lost"),
        ({"state": "cordoned", "last_seen": "old"}, "lost cordoned"),
    ],
)
def test_the_state_shown_joins_the_admin_state_with_liveness(
    world: dict[str, Any], change: dict[str, Any], shown: str
) -> None:
    if change.get("last_seen") == "old":
        change["last_seen"] = timezone.now() - timedelta(minutes=5)
    Node.objects.filter(pk=world["gpu"].pk).update(**change)
    row = _row(_client(world["alice"]).get("/nodes/").content.decode(), world["gpu"])
    assert row.split(" ", 2)[2].startswith(shown), row


def test_a_drained_node_says_it_is_safe_to_take_out(world: dict[str, Any]) -> None:
    Node.objects.filter(pk__in=[world["gpu"].pk, world["cpu"].pk]).update(state="draining")
    html = _client(world["root"]).get("/nodes/").content.decode()
    assert "drained: safe to take out" in _row(html, world["gpu"])
    assert "drained" not in _row(html, world["cpu"])  # its tasks still run


def test_a_reported_agent_version_is_shown(world: dict[str, Any]) -> None:
    Node.objects.filter(pk=world["gpu"].pk).update(agent_version="0.4.1")
    html = _client(world["alice"]).get("/nodes/").content.decode()
    assert "0.4.1" in _row(html, world["gpu"])


def test_long_lists_paginate(world: dict[str, Any]) -> None:
    for i in range(55):
        make_node(f"extra-{i:02d}")
    client = _client(world["alice"])
    first = client.get("/nodes/").content.decode()
    assert first.count("<tr data-node-id=") == 50
    assert "Page 1 of 2 (57 nodes)" in _text(first)
    second = client.get("/nodes/?page=2").content.decode()
    assert second.count("<tr data-node-id=") == 7


# A node's page


def test_a_node_page_lists_its_tasks_linked_for_members_of_the_jobs_team(
    world: dict[str, Any],
) -> None:
    job = world["job"]
    alice = _client(world["alice"]).get(f"/nodes/{world['cpu'].pk}/").content.decode()
    assert f'<a href="/jobs/{job.pk}/">mf-on-node</a>' in alice
    assert {"coordinator-0", "ps-0", "worker-0"} <= set(_text(alice).split())
    assert "1.5 CPU of 4 CPU allocated (38%)" in _text(alice)
    carol = _client(world["carol"]).get(f"/nodes/{world['cpu'].pk}/").content.decode()
    assert "mf-on-node" not in carol and f"/jobs/{job.pk}/" not in carol
    assert "a job of another team" in carol


def test_a_node_page_lists_its_gpus(world: dict[str, Any]) -> None:
    html = _client(world["alice"]).get(f"/nodes/{world['gpu'].pk}/").content.decode()
    text = _text(html)
    assert "0 NVIDIA A100 40 GiB free" in text and "1 NVIDIA A100 40 GiB free" in text
    assert "0 GPU of 2 GPU allocated (0%)" in text


def test_a_node_page_shows_isolation_labels_and_credential(world: dict[str, Any]) -> None:
    Node.objects.filter(pk=world["cpu"].pk).update(isolation="none", labels={"zone": "eu-1"})
    text = _text(_client(world["alice"]).get(f"/nodes/{world['cpu'].pk}/").content.decode())
    assert "Task isolation none" in text and "one team's jobs at a time" in text
    assert "zone=eu-1" in text
    Node.objects.filter(pk=world["cpu"].pk).update(
        isolation="uid+cgroup", credential_revoked_at=timezone.now()
    )
    text = _text(_client(world["alice"]).get(f"/nodes/{world['cpu'].pk}/").content.decode())
    assert "Task isolation uid+cgroup" in text and "Credential revoked" in text


def test_a_missing_node_is_not_found(world: dict[str, Any]) -> None:
    assert _client(world["alice"]).get("/nodes/999999/").status_code == 404


# Admin actions


def test_only_platform_admins_see_the_node_actions(world: dict[str, Any]) -> None:
    node = world["cpu"]
    admin = _client(world["root"])
    for html in (admin.get("/nodes/").content.decode(),):
        assert "Add a node" in html
    detail = admin.get(f"/nodes/{node.pk}/").content.decode()
    assert f'action="/nodes/{node.pk}/cordon/"' in detail
    assert f'action="/nodes/{node.pk}/drain/"' in detail and 'id="drain-dialog"' in detail
    for who in ("alice", "carol"):
        client = _client(world[who])
        assert "Add a node" not in client.get("/nodes/").content.decode()
        member = client.get(f"/nodes/{node.pk}/").content.decode()
        assert "/cordon/" not in member and "/drain/" not in member and "drain-dialog" not in member


@pytest.mark.parametrize("action", ACTIONS)
def test_a_member_is_refused_every_action_and_nothing_changes(
    world: dict[str, Any], action: str
) -> None:
    node = world["cpu"]
    if action == "uncordon":
        Node.objects.filter(pk=node.pk).update(state="cordoned")
    before = Node.objects.get(pk=node.pk).state
    audit = AuditEntry.objects.count()
    response = _client(world["alice"]).post(f"/nodes/{node.pk}/{action}/")
    assert response.status_code == 403
    assert Node.objects.get(pk=node.pk).state == before
    assert AuditEntry.objects.count() == audit


def test_an_admin_cordons_drains_and_uncordons(world: dict[str, Any]) -> None:
    node = world["cpu"]
    admin = _client(world["root"])
    for action, state in (("cordon", "cordoned"), ("drain", "draining"), ("uncordon", "active")):
        response = admin.post(f"/nodes/{node.pk}/{action}/")
        assert (response.status_code, response["Location"]) == (302, f"/nodes/{node.pk}/")
        assert Node.objects.get(pk=node.pk).state == state
    assert list(
        AuditEntry.objects.filter(action__startswith="node.")
        .order_by("id")
        .values_list("action", flat=True)
    ) == ["node.cordon", "node.drain", "node.uncordon"]
    page = admin.get(f"/nodes/{node.pk}/").content.decode()
    assert f'action="/nodes/{node.pk}/cordon/"' in page


def test_actions_are_posts(world: dict[str, Any]) -> None:
    node = world["cpu"]
    admin = _client(world["root"])
    for action in ACTIONS:
        assert admin.get(f"/nodes/{node.pk}/{action}/").status_code == 405
    assert admin.get("/nodes/add/").status_code == 405
    assert Node.objects.get(pk=node.pk).state == "active"


def test_add_a_node_makes_one_single_use_token_and_shows_its_install_command(
    world: dict[str, Any],
) -> None:
    made_before = set(EnrollmentToken.objects.values_list("pk", flat=True))  # by make_node
    response = _client(world["root"]).post("/nodes/add/")
    assert response.status_code == 200
    token = EnrollmentToken.objects.exclude(pk__in=made_before).get()
    assert (token.max_uses, token.uses, token.created_by) == (1, 0, world["root"])
    assert token.expires_at is not None
    lifetime = token.expires_at - token.created_at
    assert timedelta(minutes=59) < lifetime <= timedelta(hours=1)
    html = response.content.decode()
    text = _install_command(html)
    # The token goes to a file the installer reads, not on its command line.
    saved = re.fullmatch(r"\(umask 077 && printf '%s\\n' (\S+) > (\S+)\) && curl .*", text)
    assert saved
    secret = shlex.split(saved.group(1))[0]
    assert text == install_command("http://testserver", secret)
    assert text.endswith(
        "&& curl -fsSL http://testserver/agent/install.sh | sh -s -- "
        f"--server http://testserver --insecure --token-file {saved.group(2)}"
    )
    assert f"saves the token to <code>{saved.group(2)}</code>" in html
    assert 'data-copy="install-command"' in html
    assert "Waiting for the new node to join" in html
    # The secret shown is the token's: it enrolls exactly one node.
    facts = {"hostname": "fresh", "address": "127.0.0.2", "cpus": 2, "memory_mb": 2048}
    enroll_node(token=secret, facts=facts, now=timezone.now())
    token.refresh_from_db()
    assert token.uses == 1


def _install_command(html: str) -> str:
    command = re.search(r'<code id="install-command"[^>]*>(.*?)</code>', html, re.S)
    assert command, "no install command on the page"
    return unescape(command.group(1))


def test_add_a_node_on_a_plain_http_server_says_it_is_for_trials_only(
    world: dict[str, Any],
) -> None:
    html = _client(world["root"]).post("/nodes/add/").content.decode()
    assert " --insecure " in _install_command(html)
    note = re.search(r'<p id="install-insecure">(.*?)</p>', html, re.S)
    assert note and "for trials only" in _text(note.group(1))
    with override_settings(EXTERNAL_URL="https://trainhub.example.com"):
        html = _client(world["root"]).post("/nodes/add/").content.decode()
    assert "--insecure" not in _install_command(html)
    assert "--server https://trainhub.example.com " in _install_command(html)
    assert 'id="install-insecure"' not in html


def test_a_member_cannot_add_a_node(world: dict[str, Any]) -> None:
    tokens = EnrollmentToken.objects.count()
    response = _client(world["alice"]).post("/nodes/add/")
    assert response.status_code == 403
    assert EnrollmentToken.objects.count() == tokens


def test_nodes_that_joined_since_the_token_are_marked_new(world: dict[str, Any]) -> None:
    since = timezone.now()
    fresh, _ = make_node("fresh-node")
    client = _client(world["root"])
    html = client.get("/nodes/", {"since": since.isoformat()}, HTTP_HX_REQUEST="true")
    fragment = html.content.decode()
    assert "<html" not in fragment
    assert "Joined since the token was made: fresh-node" in _text(fragment)
    assert "new" in _row(fragment, fresh).split()
    assert "new" not in _row(fragment, world["cpu"]).split()
    assert 'class="new"' in fragment
    poll = re.search(r'hx-get="([^"]+)"', fragment)
    assert poll and "since=" in poll.group(1)
    # A since that is not a time is ignored.
    assert client.get("/nodes/?since=yesterday").status_code == 200


# Queries: pinned, and the same however many nodes and tasks there are.

LIST_QUERIES = 5  # session, user, count, the page of nodes, their loads
DETAIL_QUERIES = 5  # session, user, node, its loads, its tasks


def _grow(world: dict[str, Any], step: int) -> None:
    alice = world["alice"]
    for i in range(3):
        node, _ = make_node(f"grown-{step}-{i}", cpus=8, memory_mb=16384)
        job = make_job(alice, team="recsys", name=f"grown-{step}-{i}")
        place_job(job=job, placements=gang_placements(job, node), now=timezone.now())
        job = make_job(alice, team="recsys", name=f"grown-cpu-{step}-{i}")
        place_job(job=job, placements=gang_placements(job, world["cpu"]), now=timezone.now())


@pytest.mark.parametrize(("who", "extra"), [("root", 0), ("alice", 2)])
def test_the_node_pages_take_a_fixed_number_of_queries(
    world: dict[str, Any], django_assert_num_queries: Any, who: str, extra: int
) -> None:
    """`extra`: a member's navigation asks whether they may submit, and their node page
    asks which teams are theirs."""
    client = _client(world[who])
    detail = f"/nodes/{world['cpu'].pk}/"
    for step in range(2):
        with django_assert_num_queries(LIST_QUERIES + min(extra, 1)):
            assert client.get("/nodes/").status_code == 200
        with django_assert_num_queries(DETAIL_QUERIES + extra):
            assert client.get(detail).status_code == 200
        _grow(world, step)
