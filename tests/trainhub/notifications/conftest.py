"""People and teams for notification tests, events handled by notifications alone, and a
worker's attempts driven on a clock the test controls."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import pytest
from django.contrib.auth.models import User
from trainhub.jobs.choices import JobState
from trainhub.jobs.models import Job
from trainhub.jobs.services import transition_job
from trainhub.notifications.selectors import due_delivery_ids
from trainhub.notifications.services import attempt_delivery
from trainhub.tenancy.choices import Role
from trainhub.tenancy.models import Team

from ..factories import make_team, make_user

HANDLER = "trainhub.notifications.handlers.on_event"


@dataclass(frozen=True)
class World:
    alice: User  # member of recsys, with an e-mail address
    bob: User  # admin of recsys
    carol: User  # member of vision only
    recsys: Team
    vision: Team


@pytest.fixture
def world(db: Any, settings: Any) -> World:
    settings.EVENT_HANDLERS = [HANDLER]
    settings.WEBHOOK_ALLOW_PRIVATE = True  # the receiver listens on loopback
    alice, bob, carol = make_user("alice"), make_user("bob"), make_user("carol")
    alice.email = "alice@example.com"
    alice.save(update_fields=["email"])
    recsys = make_team("recsys", members={alice: Role.MEMBER, bob: Role.ADMIN})
    vision = make_team("vision", members={carol: Role.MEMBER})
    return World(alice, bob, carol, recsys, vision)


Committed = Callable[[], AbstractContextManager[None]]


@pytest.fixture
def committed(django_capture_on_commit_callbacks: Any) -> Committed:
    """`with committed():` runs the block's on-commit callbacks (the event handlers), as a
    real commit would."""

    @contextmanager
    def block() -> Iterator[None]:
        with django_capture_on_commit_callbacks(execute=True):
            yield

    return block


def run_due(now: datetime) -> list[str]:
    """What a worker does when the sweep runs at `now`: attempt every due delivery."""
    return [str(attempt_delivery(i, now=now)) for i in due_delivery_ids(now=now)]


def end_job(job: Job, state: JobState, **fields: Any) -> None:
    """Through the job services, as a report or a cancel would."""
    from django.utils import timezone

    assert transition_job(job, state, reason="test", actor="test", now=timezone.now(), **fields)
