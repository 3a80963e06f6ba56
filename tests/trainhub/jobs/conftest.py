"""Job service tests: a team with a member, one live node, events captured."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pytest
from django.contrib.auth.models import User
from trainhub.nodes.models import Node
from trainhub.tenancy.choices import Role
from trainhub.tenancy.models import Team

from ..event_capture import HANDLER, Capture, capturer
from ..factories import make_node, make_team, make_user


@pytest.fixture(autouse=True)
def _events_to_the_recorder_only(settings: Any) -> None:
    """No browser feed, agent notices or scheduler trigger here: only the recorder hears
    the events (the real handlers have their own tests)."""
    settings.EVENT_HANDLERS = [HANDLER]


@pytest.fixture
def published(django_capture_on_commit_callbacks: Any) -> Capture:
    """`with published() as events:` collects what the block publishes, once it commits."""
    return capturer(django_capture_on_commit_callbacks)


@dataclass
class World:
    alice: User
    team: Team
    node: Node


@pytest.fixture
def world(db: Any) -> World:
    alice = make_user("alice")
    team = make_team("recsys", members={alice: Role.MEMBER})
    node, _ = make_node(cpus=8, memory_mb=32768)
    return World(alice=alice, team=team, node=node)
