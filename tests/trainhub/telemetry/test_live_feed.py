"""Who may open a job's live feed (`/ws/jobs/<id>/`), through the project's ASGI application.

The browser signs in with its session cookie, as the job page does. Anyone who may not see
the job — signed out, another team's member, or asking for a job that does not exist — has
the socket closed with 4403 before anything is sent.
"""

from __future__ import annotations

from typing import Any

import pytest
from asgiref.sync import async_to_sync
from channels.testing import WebsocketCommunicator
from django.contrib.auth.models import User
from django.test import Client
from trainhub.asgi import application
from trainhub.tenancy.choices import Role
from trainhub.tenancy.models import Membership
from trainhub.tenancy.services import remove_member

from ..factories import make_job, make_team, make_user

# The consumer reads the session and the job from other threads: rows must be committed.
pytestmark = pytest.mark.django_db(transaction=True)

ORIGIN = (b"origin", b"http://localhost")


def _session_cookie(user: User | None) -> list[tuple[bytes, bytes]]:
    if user is None:
        return []
    client = Client()
    client.force_login(user)
    return [(b"cookie", f"sessionid={client.cookies['sessionid'].value}".encode())]


def _connect(job_id: int, user: User | None) -> tuple[bool, Any]:
    """(accepted, close code) of a browser socket to the job's feed."""
    headers = [ORIGIN, *_session_cookie(user)]

    async def attempt() -> tuple[bool, Any]:
        socket = WebsocketCommunicator(application, f"/ws/jobs/{job_id}/", headers=headers)
        connected, code = await socket.connect(timeout=5)
        if connected:
            await socket.disconnect()
        return connected, code

    return async_to_sync(attempt)()


@pytest.fixture
def people() -> dict[str, Any]:
    alice, bob, carol = make_user("alice"), make_user("bob"), make_user("carol")
    make_team("recsys", members={alice: Role.MEMBER, carol: Role.ADMIN})
    make_team("ads", members={bob: Role.ADMIN})
    return {
        "alice": alice,
        "bob": bob,
        "carol": carol,
        "root": make_user("root", superuser=True),
        "job": make_job(alice),
    }


def test_a_member_of_the_jobs_team_and_a_superuser_are_let_in(people: dict[str, Any]) -> None:
    job = people["job"]
    assert _connect(job.pk, people["alice"])[0]
    assert _connect(job.pk, people["carol"])[0]  # another member of the team
    assert _connect(job.pk, people["root"])[0]


def test_another_teams_member_is_closed_with_4403(people: dict[str, Any]) -> None:
    assert _connect(people["job"].pk, people["bob"]) == (False, 4403)


def test_a_signed_out_browser_is_closed_with_4403(people: dict[str, Any]) -> None:
    assert _connect(people["job"].pk, None) == (False, 4403)


def test_a_job_that_does_not_exist_is_closed_with_4403(people: dict[str, Any]) -> None:
    assert _connect(people["job"].pk + 1000, people["root"]) == (False, 4403)
    assert _connect(people["job"].pk + 1000, people["alice"]) == (False, 4403)


def test_a_user_who_left_the_team_is_closed_with_4403(people: dict[str, Any]) -> None:
    remove_member(membership=Membership.objects.get(user=people["alice"]))
    assert _connect(people["job"].pk, people["alice"]) == (False, 4403)
