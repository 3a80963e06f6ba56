"""Task ports skip the ports a node's agent reported in use (by other services, or by
another agent's tasks on the same host)."""

from __future__ import annotations

import pytest
from django.conf import settings
from django.utils import timezone
from trainhub.agents.services import handle_message
from trainhub.jobs.models import Task
from trainhub.scheduling.services import run_cycle
from trainhub.tenancy.choices import Role

from ..factories import make_job, make_node, make_team, make_user

pytestmark = pytest.mark.django_db


def test_reported_ports_are_never_handed_out() -> None:
    alice = make_user("alice")
    make_team("recsys", members={alice: Role.MEMBER})
    node, _ = make_node(cpus=8, memory_mb=16384)
    low, _ = settings.TASK_PORT_RANGE
    taken = [low, low + 1, low + 3]
    handle_message(
        node_id=node.pk,
        message={"type": "heartbeat", "usage": {}, "ports_in_use": [22, *taken]},
        now=timezone.now(),
    )
    job = make_job(alice)
    run_cycle(now=timezone.now())
    ports = sorted(p for p in Task.objects.filter(job=job).values_list("port", flat=True) if p)
    assert ports and not set(ports) & set(taken)
    assert ports[0] == low + 2
