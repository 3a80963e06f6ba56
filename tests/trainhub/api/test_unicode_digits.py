"""Ids in credentials and numbers in archives are ASCII digits: `str.isdigit()` and `int()`
also take Arabic-Indic and fullwidth digits, and `int()` raises on superscripts, so such
a header or archive is answered 401/400, never 500, and never names a real id."""

from __future__ import annotations

import io
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from asgiref.sync import async_to_sync
from channels.testing import WebsocketCommunicator
from rest_framework.test import APIClient
from trainhub.asgi import application
from trainhub.jobs.models import CodeArchive
from trainhub.tenancy.choices import Role

from ps_runtime.agent.protocol import CLOSE_UNAUTHORIZED, DESIRED_TASKS_PATH

from ...ps_runtime.test_archive_bounds import sparse_tar
from ..factories import make_job, make_node, make_team, make_user


def arabic(number: int) -> str:
    return "".join(chr(0x0660 + int(c)) for c in str(number))


def fullwidth(number: int) -> str:
    return "".join(chr(0xFF10 + int(c)) for c in str(number))


def superscript(number: int) -> str:
    return "".join("⁰¹²³⁴⁵⁶⁷⁸⁹"[int(c)] for c in str(number))


SPELLINGS: list[Callable[[int], str]] = [arabic, fullwidth, superscript]


def client(authorization: str) -> APIClient:
    api = APIClient(raise_request_exception=False)  # a crash answers 500, as in production
    api.credentials(HTTP_AUTHORIZATION=authorization)
    return api


@pytest.mark.django_db
@pytest.mark.parametrize("spell", SPELLINGS)
def test_a_node_id_in_other_digits_is_refused_with_401(spell: Callable[[int], str]) -> None:
    node, credential = make_node()
    secret = credential.partition(".")[2]
    assert client(f"Node {credential}").get(DESIRED_TASKS_PATH).status_code == 200
    # The node's own id and secret, the id in other digits: not this node, not a crash.
    response = client(f"Node {spell(node.pk)}.{secret}").get(DESIRED_TASKS_PATH)
    assert response.status_code == 401, response.content


@pytest.mark.django_db(transaction=True)
def test_the_agent_socket_refuses_a_superscript_node_id() -> None:
    _node, credential = make_node()
    secret = credential.partition(".")[2]
    # Superscripts one to three are Latin-1, so HTTP headers can carry them.
    header = f"Node {superscript(123)}.{secret}".encode("latin-1")

    async def scenario() -> None:
        socket = WebsocketCommunicator(
            application, "/ws/agent/", headers=[(b"authorization", header)]
        )
        connected, code = await socket.connect(timeout=10)
        assert not connected and code == CLOSE_UNAUTHORIZED

    async_to_sync(scenario)()


@pytest.mark.django_db
@pytest.mark.parametrize("spell", SPELLINGS)
def test_a_job_id_in_other_digits_is_refused_with_401(
    spell: Callable[[int], str], settings: Any, tmp_path: Path
) -> None:
    settings.CODE_DIR = tmp_path / "code"
    alice = make_user("alice")
    make_team("recsys", members={alice: Role.MEMBER})
    job = make_job(alice)
    url = f"/api/v1/code/sha256:{'0' * 64}/"
    # Authenticated, but the job has no such archive.
    assert client(f"Job {job.pk}:{job.runtime_token}").get(url).status_code == 404
    response = client(f"Job {spell(job.pk)}:{job.runtime_token}").get(url)
    assert response.status_code == 401, response.content


@pytest.mark.django_db
def test_an_archive_with_a_non_ascii_number_is_refused_with_400(
    settings: Any, tmp_path: Path
) -> None:
    settings.CODE_DIR = tmp_path / "code"
    alice = make_user("alice")
    make_team("recsys", members={alice: Role.MEMBER})
    api = APIClient(raise_request_exception=False)
    api.force_authenticate(alice)
    data = sparse_tar(arabic(1).encode())  # a sparse map whose count is Arabic-Indic one
    response = api.post("/api/v1/code/", {"file": io.BytesIO(data)}, format="multipart")
    assert response.status_code == 400, response.content
    assert "Refused: not a readable .tar.gz archive" in response.json()["file"][0]
    assert not CodeArchive.objects.exists()
