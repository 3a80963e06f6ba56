"""The dashboard `/`: cluster capacity and allocation, team quota bars, the queue, running
jobs and recent events, for a small known cluster; what each person sees; how many
queries it takes (pinned, and the same however many teams, jobs and nodes there are)."""

from __future__ import annotations

import re
from datetime import timedelta
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.test import Client
from django.utils import timezone
from trainhub.jobs.services import place_job, set_pending_reasons
from trainhub.nodes.choices import NodeState
from trainhub.nodes.models import Node
from trainhub.tenancy.choices import Role

from ..factories import gang_placements, make_job, make_node, make_team, make_user

pytestmark = pytest.mark.django_db

ONE_CPU = {"cpu": 1, "memory_mb": 512}


def _client(user: User) -> Client:
    client = Client()
    client.force_login(user)
    return client


def _text(html: str) -> str:
    """The page's text with tags dropped and white space collapsed."""
    return re.sub(r"\s+", " ", re.sub(r"<[^>]+>", " ", html)).strip()


def _cell(html: str, team: str, resource: str) -> str:
    row = re.search(rf'<tr data-team="{team}">(.*?)</tr>', html, re.S)
    assert row, f"no row for team {team}"
    cell = re.search(rf'<td data-resource="{resource}">(.*?)</td>', row.group(1), re.S)
    assert cell, f"no {resource} cell for team {team}"
    return _text(cell.group(1))


def _card(html: str, resource: str) -> str:
    """The text under a capacity card's bar."""
    card = re.search(
        rf'data-resource="{resource}">.*?<p class="muted capacity-text">(.*?)</p>', html, re.S
    )
    assert card, f"no capacity card for {resource}"
    return _text(card.group(1))


@pytest.fixture
def world() -> dict[str, Any]:
    """Two 4-CPU nodes; recsys (quota 2 CPU) runs a 3-CPU job, borrowing 1 CPU that
    vision (quota 4 CPU, idle) lends; recsys also has a job waiting."""
    root = make_user("root", superuser=True)
    alice, carol = make_user("alice"), make_user("carol")
    make_team("recsys", members={alice: Role.MEMBER}, cpu=2, memory_mb=4096)
    make_team("vision", members={carol: Role.MEMBER}, cpu=4, memory_mb=8192)
    node, _ = make_node("node-a", cpus=4, memory_mb=8192)
    make_node("node-b", cpus=4, memory_mb=8192)
    running = make_job(
        alice,
        team="recsys",
        name="mf-running",
        parameter_servers={"replicas": 1, "resources": ONE_CPU},
        workers={"min": 1, "max": 1, "resources": ONE_CPU},
        coordinator={"resources": ONE_CPU},
    )
    place_job(job=running, placements=gang_placements(running, node), now=timezone.now())
    waiting = make_job(alice, team="recsys", name="mf-waiting")
    set_pending_reasons({waiting.pk: "team quota exhausted: cpu 3/2"})
    return {"root": root, "alice": alice, "carol": carol, "running": running, "waiting": waiting}


def test_the_cluster_capacity_counts_ready_nodes_against_active_tasks(
    world: dict[str, Any],
) -> None:
    html = _client(world["root"]).get("/").content.decode()
    assert "3 CPU of 8 CPU allocated (38%)" in _card(html, "cpu")
    assert "1.5 GiB of 16 GiB allocated (9%)" in _card(html, "memory_mb")
    assert "2 ready · 0 cordoned · 0 draining · 0 lost" in _text(html)


def test_a_lost_node_leaves_the_capacity(world: dict[str, Any]) -> None:
    Node.objects.filter(hostname="node-b").update(last_seen=timezone.now() - timedelta(hours=1))
    html = _client(world["root"]).get("/").content.decode()
    assert "3 CPU of 4 CPU allocated (75%)" in _card(html, "cpu")
    assert "1 ready · 0 cordoned · 0 draining · 1 lost" in _text(html)


def test_team_bars_say_used_borrowed_and_lent_in_words(world: dict[str, Any]) -> None:
    html = _client(world["root"]).get("/").content.decode()
    assert _cell(html, "recsys", "cpu") == "3 CPU used of 2 CPU · 1 CPU borrowed"
    assert _cell(html, "vision", "cpu") == "0 CPU used of 4 CPU · 1 CPU lent"
    assert _cell(html, "recsys", "memory_mb") == "1.5 GiB used of 4 GiB"
    assert "borrowed beyond quota" in html  # the legend


def test_team_gpus_are_shown_only_when_the_cluster_has_gpus(world: dict[str, Any]) -> None:
    client = _client(world["root"])
    assert 'data-resource="gpu"' not in client.get("/").content.decode().split("team-usage")[1]
    make_node("gpu-node", gpus=2)
    html = client.get("/").content.decode()
    assert _cell(html, "recsys", "gpu") == "0 GPU used of 0 GPU"
    assert "0 GPU of 2 GPU allocated (0%)" in _card(html, "gpu")


def test_a_member_sees_only_their_teams_and_jobs(world: dict[str, Any]) -> None:
    alice = _client(world["alice"]).get("/").content.decode()
    assert 'data-team="recsys"' in alice and 'data-team="vision"' not in alice
    assert "mf-running" in alice
    carol = _client(world["carol"]).get("/").content.decode()
    assert 'data-team="vision"' in carol and 'data-team="recsys"' not in carol
    assert "mf-running" not in carol and "mf-waiting" not in carol
    assert 'data-pending="0"' in carol
    # The cluster's capacity is everyone's to see.
    assert "3 CPU of 8 CPU allocated" in carol


def _queue(html: str) -> str:
    part = re.search(r'<section class="card queue".*?</section>', html, re.S)
    assert part, "no queue on the dashboard"
    return _text(part.group(0))


def test_a_member_reads_the_cluster_wide_queue_that_check_counts(
    world: dict[str, Any],
) -> None:
    """Carol's teams have nothing pending, but recsys's job waits: the submit page's Check
    would place her job behind it, so the dashboard says so, as a number only."""
    carol = _client(world["carol"]).get("/").content.decode()
    assert 'data-pending="0"' in carol and 'data-cluster-pending="1"' in carol
    queue = _queue(carol)
    assert queue.startswith("Queue 0 of your teams' jobs pending")
    assert (
        "1 job pending in the whole cluster (1 of other teams): a new job's place in the "
        "queue, as Check on the submit page gives it, counts them all." in queue
    )
    assert "None of your teams' jobs waits." in queue and "Nothing waits" not in queue
    assert "mf-waiting" not in carol and "quota exhausted" not in carol
    # Alice's team owns the one pending job: no other team's is counted.
    alice = _queue(_client(world["alice"]).get("/").content.decode())
    assert "1 of your teams' jobs pending 1 job pending in the whole cluster:" in alice
    # A platform admin's count is already the cluster's: said once.
    root = _client(world["root"]).get("/").content.decode()
    assert _queue(root).startswith("Queue 1 pending job ")
    assert "data-cluster-pending" not in root


def test_the_queue_counts_pending_jobs_and_ranks_their_reasons(world: dict[str, Any]) -> None:
    alice = world["alice"]
    more = [make_job(alice, team="recsys", name=f"w{i}") for i in range(8)]
    reasons = {job.pk: f"reason {'ab'[i % 2] if i < 6 else i}" for i, job in enumerate(more)}
    set_pending_reasons(reasons)  # a: 3 jobs, b: 3, then 6 and 7 with one each
    html = _client(alice).get("/").content.decode()
    assert 'data-pending="9"' in html
    listed = re.findall(r"<li><span>(.*?)</span> <span class=\"count\">(\d+) jobs?</span>", html)
    assert listed[:2] == [("reason a", "3"), ("reason b", "3")]
    assert len(listed) == 5
    assert ("team quota exhausted: cpu 3/2", "1") in listed


def test_running_jobs_link_to_their_pages_and_events_show_both_times(
    world: dict[str, Any],
) -> None:
    html = _client(world["alice"]).get("/").content.decode()
    job = world["running"]
    assert f'<a href="/jobs/{job.pk}/">mf-running</a>' in html
    assert "pending → starting" in html
    assert re.search(
        r'<time data-relative datetime="[^"]+">\d{4}-\d\d-\d\d \d\d:\d\d:\d\d</time>', html
    )


def test_the_body_alone_is_the_htmx_fragment_that_refreshes_itself(
    world: dict[str, Any],
) -> None:
    client = _client(world["alice"])
    fragment = client.get("/", HTTP_HX_REQUEST="true").content.decode()
    assert 'id="dashboard-body"' in fragment and 'hx-trigger="poll"' in fragment
    assert "<html" not in fragment
    page = client.get("/").content.decode()
    assert "<html" in page and "trainhub/pages/dashboard.js" in page


# Queries: pinned, and independent of how big the cluster is.

# Session, user; teams; nodes, their loads; usage (quotas, held: not what the jobs
# request, which the dashboard does not show); the queue (its count, for a member together
# with the whole cluster's in one query; reasons); running jobs
# (a page of them, their count); events; all teams' quotas added up (unassigned capacity).
ADMIN_QUERIES = 13
MEMBER_QUERIES = ADMIN_QUERIES + 1  # the navigation asks whether the user may submit


def _grow(world: dict[str, Any]) -> None:
    """More teams, nodes, running and waiting jobs."""
    alice = world["alice"]
    for i in range(3):
        make_team(f"extra{i}", members={alice: Role.VIEWER}, cpu=1, memory_mb=1024)
        node, _ = make_node(f"more-{i}", cpus=8, memory_mb=16384)
        job = make_job(alice, team="recsys", name=f"more-{i}")
        place_job(job=job, placements=gang_placements(job, node), now=timezone.now())
        make_job(alice, team="recsys", name=f"more-waiting-{i}")


@pytest.mark.parametrize(("who", "expected"), [("root", ADMIN_QUERIES), ("alice", MEMBER_QUERIES)])
def test_the_dashboard_takes_a_fixed_number_of_queries(
    world: dict[str, Any], django_assert_num_queries: Any, who: str, expected: int
) -> None:
    client = _client(world[who])
    with django_assert_num_queries(expected):
        client.get("/")
    _grow(world)
    with django_assert_num_queries(expected):
        assert client.get("/").status_code == 200
    with django_assert_num_queries(expected):
        client.get("/", HTTP_HX_REQUEST="true")


# Unassigned capacity: the ready nodes' capacity that no team's quota covers.


def _unassigned(html: str) -> str:
    part = re.search(r'<div class="unassigned" id="unassigned">(.*?)</div>', html, re.S)
    assert part, "no unassigned capacity on the dashboard"
    return _text(part.group(1))


def test_the_dashboard_shows_capacity_no_teams_quota_covers(world: dict[str, Any]) -> None:
    # 8 CPU and 16 GiB on two ready nodes; the quotas add up to 6 CPU and 12 GiB.
    text = _unassigned(_client(world["root"]).get("/").content.decode())
    assert "2 CPU · 4 GiB · 0 GPU no team's quota covers" in text
    assert "any team may borrow it" in text and "on the team's page" in text
    # Every team's quota counts, also for a member who sees only their own team.
    member = _unassigned(_client(world["alice"]).get("/").content.decode())
    assert "2 CPU · 4 GiB · 0 GPU" in member
    assert "A platform admin assigns it on a team's page." in member


def test_quotas_beyond_the_capacity_are_said_to_be(world: dict[str, Any]) -> None:
    make_team("ads", cpu=3, memory_mb=1024)
    Node.objects.filter(hostname="node-b").update(state=NodeState.CORDONED)  # 4 CPU ready
    text = _unassigned(_client(world["root"]).get("/").content.decode())
    assert "0 CPU · 0 MiB · 0 GPU" in text
    assert "CPU: the quotas add up to 5 CPU more than the ready nodes have" in text
    assert "Memory: the quotas add up to 5 GiB more" in text
