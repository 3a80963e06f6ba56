"""A job accepted while the cluster could hold it, which then shrank (a node drained,
revoked or removed), waits with a reason that says it can never start, with the numbers
and what to do, and has no expected start; the policy's own reason stays for a job that
could still fit."""

from __future__ import annotations

from collections.abc import Callable
from datetime import timedelta
from typing import Any

import pytest
from django.core.cache import cache
from django.test import Client
from django.utils import timezone
from trainhub.jobs.choices import JobState
from trainhub.jobs.models import Job
from trainhub.nodes.choices import NodeState
from trainhub.nodes.credentials import revoke_node_credential
from trainhub.nodes.models import Node
from trainhub.nodes.services import set_node_state
from trainhub.scheduling.preview import forecast_start
from trainhub.scheduling.reasons import kind_of
from trainhub.scheduling.services import run_cycle
from trainhub.tenancy.choices import Role

from ..factories import make_job, make_node, make_team, make_user

pytestmark = pytest.mark.django_db

ONE = {"cpu": 1, "memory_mb": 512}
GANG_REASON = (
    "can never start on this cluster: it needs 3 CPUs in all at its smallest size, the "
    "whole cluster has 2 (1 node); cancel it and submit a smaller one, or add nodes"
)


@pytest.fixture
def alice() -> Any:
    """alice of recsys, whose quota (2 CPUs) the waiting jobs below exceed: the policy
    alone says "team quota exhausted: cpu 0/2; no idle quota to borrow" or "not enough
    free cpu in the cluster", as if the job's turn would come."""
    user = make_user("alice")
    make_team("recsys", members={user: Role.MEMBER}, cpu=2, memory_mb=65536)
    return user


def _job(user: Any, **spec: Any) -> Job:
    """Coordinator, one PS and one worker of 1 CPU each (3 CPUs), unless `spec` says."""
    fields: dict[str, Any] = {
        "parameter_servers": {"replicas": 1, "resources": ONE},
        "workers": {"min": 1, "max": 1, "resources": ONE},
        "coordinator": {"resources": ONE},
        **spec,
    }
    return make_job(user, **fields)


def _drain(node: Node) -> None:
    set_node_state(node=node, state=NodeState.DRAINING)


def _revoke(node: Node) -> None:
    revoke_node_credential(node=node)


def _delete(node: Node) -> None:
    Node.objects.filter(pk=node.pk).delete()


def _reason_after_a_cycle(job: Job) -> str:
    run_cycle(now=timezone.now())
    job.refresh_from_db()
    assert job.state == JobState.PENDING
    return job.pending_reason


@pytest.mark.parametrize("shrink", [_drain, _revoke, _delete], ids=["drain", "revoke", "delete"])
def test_a_job_the_shrunk_cluster_can_never_hold_says_so(
    alice: Any, shrink: Callable[[Node], None]
) -> None:
    make_node("node-1", cpus=2, memory_mb=8192)
    leaving, _ = make_node("node-2", cpus=2, memory_mb=8192)
    job = _job(alice)  # 3 CPUs of 4: accepted
    shrink(leaving)
    reason = _reason_after_a_cycle(job)
    assert reason == GANG_REASON
    assert kind_of(reason) == "never_fits"  # what /metrics groups it by


def test_a_task_larger_than_every_node_left_names_the_role_and_the_largest_node(
    alice: Any,
) -> None:
    make_node("small", cpus=2, memory_mb=8192)
    big, _ = make_node("big", cpus=4, memory_mb=8192)
    job = _job(alice, workers={"min": 1, "max": 1, "resources": {"cpu": 3, "memory_mb": 512}})
    _drain(big)
    assert _reason_after_a_cycle(job) == (
        "can never start on this cluster: a worker needs 3 CPUs, the largest node has 2 "
        "CPUs; cancel it and submit a smaller one, or add a larger node"
    )


def test_a_job_that_could_still_fit_keeps_the_policys_reason(alice: Any) -> None:
    """A cordoned node is expected back, and a cluster with no counted node may still
    get one: neither makes a job one that can never start."""
    make_node("node-1", cpus=2, memory_mb=8192)
    cordoned, _ = make_node("node-2", cpus=2, memory_mb=8192)
    job = _job(alice)
    set_node_state(node=cordoned, state=NodeState.CORDONED)
    assert _reason_after_a_cycle(job) == "not enough free cpu in the cluster: needs 3, 2 free"
    for node in Node.objects.all():
        _drain(node)
    assert _reason_after_a_cycle(job) == "no nodes are available"


def test_a_job_that_can_never_start_has_no_expected_start(
    alice: Any, django_assert_num_queries: Any
) -> None:
    cache.clear()
    make_node("node-1", cpus=2, memory_mb=8192)
    leaving, _ = make_node("node-2", cpus=2, memory_mb=8192)
    # History, so that the forecast would have runtimes to go by.
    past = _job(alice, name="done")
    ended = timezone.now() - timedelta(hours=1)
    Job.objects.filter(pk=past.pk).update(
        state=JobState.SUCCEEDED, started_at=ended - timedelta(minutes=10), finished_at=ended
    )
    job = _job(alice)
    _drain(leaving)
    assert _reason_after_a_cycle(job) == GANG_REASON
    with django_assert_num_queries(0):  # no forecast is run for it
        assert forecast_start(job, now=timezone.now()) is None
    client = Client()
    client.force_login(alice)
    fragment = client.get(f"/jobs/{job.pk}/queue/", headers={"HX-Request": "true"})
    text = fragment.content.decode()
    assert GANG_REASON in text and "Expected start" not in text, text
