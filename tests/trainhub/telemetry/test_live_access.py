"""A job's live feed checks access again when the watcher's access changes: removed from
the team, deactivated, demoted from platform admin or given a new password, they stop
receiving the job's updates; a change that leaves the job visible changes nothing."""

from __future__ import annotations

from collections.abc import Callable

import pytest
from asgiref.sync import async_to_sync
from channels.db import database_sync_to_async
from channels.testing import WebsocketCommunicator
from django.contrib.auth.models import User
from trainhub import events
from trainhub.jobs.models import Job
from trainhub.telemetry import live
from trainhub.telemetry.consumers import JobStreamConsumer
from trainhub.tenancy.choices import Role
from trainhub.tenancy.models import Membership
from trainhub.tenancy.services import add_member, remove_member, save_user

from ..factories import make_job, make_team, make_user

pytestmark = pytest.mark.django_db(transaction=True)
STATE = events.JobStateChanged(job_id=0, state="running", message="")


def _feed_after(user: User, job: Job, change: Callable[[], None]) -> str:
    """Connect `user` to `job`'s feed, make `change`, send a state event: what happened."""
    outcome: list[str] = []

    async def run() -> None:
        browser = WebsocketCommunicator(JobStreamConsumer.as_asgi(), f"/ws/jobs/{job.pk}/")
        browser.scope["user"] = user
        browser.scope["url_route"] = {"kwargs": {"job_id": job.pk}}
        connected, _ = await browser.connect()
        assert connected
        assert (await browser.receive_json_from(timeout=2))["type"] == "state"  # at connect
        await database_sync_to_async(change)()
        state = events.JobStateChanged(job_id=job.pk, state="running", message="")
        await database_sync_to_async(live.on_event)(state)
        message = await browser.receive_output(timeout=2)
        if message["type"] == "websocket.close":
            outcome.append(f"closed {message['code']}")
        else:
            outcome.append("still receiving")
            await browser.disconnect()

    async_to_sync(run)()
    return outcome[0]


@pytest.fixture
def team_job() -> tuple[User, User, Job]:
    alice, bob = make_user("alice"), make_user("bob")
    make_team("recsys", members={alice: Role.ADMIN, bob: Role.MEMBER})
    return alice, bob, make_job(alice)


def test_someone_removed_from_the_team_stops_receiving(team_job: tuple[User, User, Job]) -> None:
    _, bob, job = team_job

    def remove() -> None:
        remove_member(membership=Membership.objects.get(user=bob))

    assert _feed_after(bob, job, remove) == "closed 4403"


def test_a_deactivated_user_stops_receiving(team_job: tuple[User, User, Job]) -> None:
    _, bob, job = team_job

    def deactivate() -> None:
        bob.is_active = False
        save_user(user=bob)

    assert _feed_after(bob, job, deactivate) == "closed 4403"


def test_a_former_platform_admin_outside_the_team_stops_receiving(
    team_job: tuple[User, User, Job],
) -> None:
    _, _, job = team_job
    root = make_user("root", superuser=True)

    def demote() -> None:
        root.is_superuser = root.is_staff = False
        save_user(user=root)

    assert _feed_after(root, job, demote) == "closed 4403"


def test_a_change_that_keeps_the_job_visible_keeps_the_feed(
    team_job: tuple[User, User, Job],
) -> None:
    alice, bob, job = team_job
    make_team("vision", members={alice: Role.ADMIN, bob: Role.MEMBER})

    def leave_the_other_team_and_change_role() -> None:
        remove_member(membership=Membership.objects.get(user=bob, team__slug="vision"))
        add_member(team=job.team, user=bob, role=Role.VIEWER)

    assert _feed_after(bob, job, leave_the_other_team_and_change_role) == "still receiving"


def test_another_users_change_leaves_this_feed_alone(team_job: tuple[User, User, Job]) -> None:
    alice, bob, job = team_job

    def remove_bob() -> None:
        remove_member(membership=Membership.objects.get(user=bob))

    assert _feed_after(alice, job, remove_bob) == "still receiving"
