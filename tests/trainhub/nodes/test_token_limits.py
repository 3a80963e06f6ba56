"""Enrollment tokens limit the nodes they enroll (issue 26, item 1): a node declaring more
CPUs, memory or GPUs than its token allows is refused naming the field; the token's labels
override the agent's; a token that requires approval enrolls nodes cordoned until a
platform admin approves them (API, admin, web page)."""

from __future__ import annotations

from typing import Any

import pytest
from django.contrib.auth.models import User
from django.test import Client
from django.utils import timezone
from rest_framework.test import APIClient
from trainhub.audit.models import AuditEntry
from trainhub.nodes.choices import NodeState
from trainhub.nodes.models import EnrollmentToken, Node
from trainhub.nodes.services import (
    EnrollmentError,
    TokenTermsError,
    approve_node,
    create_enrollment_token,
    enroll_node,
    set_node_state,
)
from trainhub.scheduling.services import run_cycle
from trainhub.tenancy.choices import Role

from ..factories import make_job, make_team, make_user

pytestmark = pytest.mark.django_db

TOKENS = "/api/v1/enrollment-tokens/"
ENROLL = "/api/v1/nodes/enroll/"
SMALL = {"cpu": 1, "memory_mb": 512}


def _facts(**overrides: Any) -> dict[str, Any]:
    return {
        "hostname": "gpu-9",
        "address": "10.0.0.9",
        "cpus": 8,
        "memory_mb": 16384,
        "gpus": [{"index": i, "model": "NVIDIA A100", "memory_mb": 40960} for i in range(2)],
        **overrides,
    }


def _enroll(token: str, **facts: Any) -> Any:
    return APIClient().post(ENROLL, {"token": token, **_facts(**facts)}, format="json")


@pytest.fixture
def root() -> User:
    return make_user("root", superuser=True)


@pytest.fixture
def admin(root: User) -> APIClient:
    client = APIClient()
    client.force_authenticate(root)
    return client


@pytest.mark.parametrize(
    ("limit", "field", "declared"),
    [
        ({"max_cpus": 4}, "cpus", "8"),
        ({"max_memory_mb": 8192}, "memory_mb", "16384"),
        ({"max_gpus": 1}, "gpus", "2"),
        ({"max_gpus": 0}, "gpus", "2"),
    ],
)
def test_a_node_declaring_more_than_its_token_allows_is_refused_naming_the_field(
    limit: dict[str, Any], field: str, declared: str
) -> None:
    token = create_enrollment_token(**limit)
    response = _enroll(token.secret)
    assert response.status_code == 400, response.content
    (message,) = response.json()[field]
    assert f"at most {next(iter(limit.values()))}" in message
    assert f"this node declares {declared}" in message
    assert not Node.objects.exists()
    assert EnrollmentToken.objects.get().uses == 0  # the token is not spent


def test_a_node_within_its_tokens_limits_enrolls() -> None:
    token = create_enrollment_token(max_cpus=8, max_memory_mb=16384, max_gpus=2)
    response = _enroll(token.secret)
    assert response.status_code == 201, response.content
    node = Node.objects.get()
    assert (node.cpus, node.memory_mb, node.gpu_count) == (8, 16384, 2)
    assert node.state == NodeState.ACTIVE and not node.awaiting_approval


def test_a_gpu_listed_twice_is_refused() -> None:
    token = create_enrollment_token()
    twice = [{"index": 0, "model": "NVIDIA A100", "memory_mb": 40960}] * 8
    with pytest.raises(EnrollmentError) as refused:
        enroll_node(token=token.secret, facts=_facts(gpus=twice), now=timezone.now())
    assert refused.value.field == "gpus" and "index 0" in str(refused.value)


def test_the_tokens_labels_override_what_the_agent_claims() -> None:
    token = create_enrollment_token(labels={"zone": "quarantine", "pool": "untrusted"})
    response = _enroll(token.secret, labels={"zone": "eu-1", "rack": "4"})
    assert response.status_code == 201, response.content
    assert Node.objects.get().labels == {"zone": "quarantine", "pool": "untrusted", "rack": "4"}


def test_token_limits_out_of_bounds_are_refused_by_the_service() -> None:
    cases: list[tuple[dict[str, Any], str]] = [
        ({"max_cpus": 0.0}, "max_cpus"),
        ({"max_cpus": float("inf")}, "max_cpus"),
        ({"max_memory_mb": 0}, "max_memory_mb"),
        ({"max_gpus": -1}, "max_gpus"),
        ({"labels": {"Bad Key": "x"}}, "labels"),
    ]
    for terms, field in cases:
        with pytest.raises(TokenTermsError) as refused:
            create_enrollment_token(**terms)
        assert refused.value.field == field
    assert not EnrollmentToken.objects.exists()


def test_the_api_takes_and_shows_a_tokens_limits(admin: APIClient) -> None:
    terms = {
        "max_cpus": 16,
        "max_memory_mb": 65536,
        "max_gpus": 0,
        "labels": {"pool": "cpu"},
        "requires_approval": True,
    }
    created = admin.post(TOKENS, terms, format="json")
    assert created.status_code == 201, created.content
    (listed,) = admin.get(TOKENS).json()["results"]
    assert {k: listed[k] for k in terms} == terms
    refused = admin.post(TOKENS, {"max_gpus": -1, "labels": {"Bad Key": "x"}}, format="json")
    assert refused.status_code == 400
    assert set(refused.json()) >= {"max_gpus"}
    refused = admin.post(TOKENS, {"labels": {"Bad Key": "x"}}, format="json")
    assert refused.status_code == 400 and "labels" in refused.json()
    refused = admin.post(TOKENS, {"max_cpus": "8"}, format="json")  # a string, not a number
    assert refused.status_code == 400 and "max_cpus" in refused.json()
    assert EnrollmentToken.objects.count() == 1
    after = AuditEntry.objects.get(action="enrollment_token.create").after
    assert after is not None
    assert after["max_gpus"] == 0 and after["requires_approval"] is True


def _team_and_job() -> Any:
    alice = make_user("alice")
    make_team("recsys", members={alice: Role.MEMBER}, cpu=8, memory_mb=16384)
    return make_job(
        alice,
        parameter_servers={"replicas": 1, "resources": SMALL},
        workers={"min": 1, "max": 1, "resources": SMALL},
        coordinator={"resources": SMALL},
    )


def test_a_node_awaiting_approval_gets_no_work_until_approved(admin: APIClient) -> None:
    token = create_enrollment_token(requires_approval=True)
    response = _enroll(token.secret, gpus=[])
    assert response.status_code == 201, response.content
    node = Node.objects.get()
    assert node.state == NodeState.CORDONED and node.awaiting_approval
    shown = admin.get(f"/api/v1/nodes/{node.pk}/").json()
    assert shown["awaiting_approval"] is True and shown["state"] == "cordoned"

    job = _team_and_job()
    run_cycle(now=timezone.now())
    assert not job.tasks.exists()

    member = APIClient()
    member.force_authenticate(User.objects.get(username="alice"))
    assert member.post(f"/api/v1/nodes/{node.pk}/approve/").status_code == 403
    approved = admin.post(f"/api/v1/nodes/{node.pk}/approve/")
    assert approved.status_code == 200, approved.content
    assert approved.json()["awaiting_approval"] is False
    assert approved.json()["state"] == "active"
    assert AuditEntry.objects.filter(action="node.approve").count() == 1
    run_cycle(now=timezone.now())
    assert set(job.tasks.values_list("node_id", flat=True)) == {node.pk}

    # Approving again changes nothing.
    assert admin.post(f"/api/v1/nodes/{node.pk}/approve/").status_code == 200
    assert AuditEntry.objects.filter(action="node.approve").count() == 1


def test_approving_a_node_that_awaits_nothing_leaves_it_as_it_is() -> None:
    token = create_enrollment_token()
    enroll_node(token=token.secret, facts=_facts(), now=timezone.now())
    node = Node.objects.get()
    set_node_state(node=node, state=NodeState.CORDONED)
    approve_node(node=node)
    node.refresh_from_db()
    assert node.state == NodeState.CORDONED
    assert not AuditEntry.objects.filter(action="node.approve").exists()


def test_uncordoning_a_node_awaiting_approval_approves_it() -> None:
    token = create_enrollment_token(requires_approval=True)
    enroll_node(token=token.secret, facts=_facts(), now=timezone.now())
    node = Node.objects.get()
    set_node_state(node=node, state=NodeState.DRAINING)
    node.refresh_from_db()
    assert node.awaiting_approval  # cordon and drain do not approve
    set_node_state(node=node, state=NodeState.ACTIVE)
    node.refresh_from_db()
    assert node.state == NodeState.ACTIVE and not node.awaiting_approval
    assert AuditEntry.objects.filter(action="node.approve").count() == 1


def test_the_admin_action_approves_the_selected_nodes(root: User) -> None:
    token = create_enrollment_token(requires_approval=True, max_uses=2)
    for name in ("a", "b"):
        enroll_node(token=token.secret, facts=_facts(hostname=name), now=timezone.now())
    chosen, kept = Node.objects.order_by("hostname")
    client = Client()
    client.force_login(root)
    response = client.post(
        "/admin/nodes/node/", {"action": "approve", "_selected_action": [str(chosen.pk)]}
    )
    assert response.status_code == 302
    chosen.refresh_from_db()
    kept.refresh_from_db()
    assert chosen.state == NodeState.ACTIVE and not chosen.awaiting_approval
    assert kept.state == NodeState.CORDONED and kept.awaiting_approval


def test_the_admin_creates_a_token_with_limits(root: User) -> None:
    client = Client()
    client.force_login(root)
    response = client.post(
        "/admin/nodes/enrollmenttoken/add/",
        {
            "description": "lab",
            "max_uses": 1,
            "max_cpus": "4",
            "max_gpus": "0",
            "labels": "pool=lab",
            "requires_approval": "on",
        },
    )
    assert response.status_code == 302, response.content.decode()[:2000]
    token = EnrollmentToken.objects.get()
    assert (token.max_cpus, token.max_memory_mb, token.max_gpus) == (4, None, 0)
    assert token.labels == {"pool": "lab"} and token.requires_approval
    refused = client.post(
        "/admin/nodes/enrollmenttoken/add/", {"max_uses": 1, "labels": "Bad Key=x"}
    )
    assert refused.status_code == 200 and EnrollmentToken.objects.count() == 1


def test_the_node_pages_say_a_node_awaits_approval(root: User) -> None:
    token = create_enrollment_token(requires_approval=True)
    enroll_node(token=token.secret, facts=_facts(), now=timezone.now())
    node = Node.objects.get()
    client = Client()
    client.force_login(root)
    for url in ("/nodes/", f"/nodes/{node.pk}/"):
        page = client.get(url).content.decode()
        assert "awaiting approval" in page, url
    approve_node(node=node)
    assert "awaiting approval" not in client.get("/nodes/").content.decode()
