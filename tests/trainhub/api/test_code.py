"""`/api/v1/code/`: uploads are stored once per digest and counted per team; unsafe or
oversized archives leave nothing behind; only a job's own tasks fetch its archive."""

from __future__ import annotations

import hashlib
import io
from pathlib import Path
from typing import Any

import pytest
from django.contrib.auth.models import User
from rest_framework.test import APIClient
from trainhub.jobs.choices import JobState
from trainhub.jobs.models import CodeArchive, CodeUpload, Job
from trainhub.tenancy.choices import Role

from ...archive_builders import MYMODEL, tar_gz, traversal_tar, unsafe_archives, zip_bytes
from ..factories import make_job, make_node, make_team, make_user

pytestmark = pytest.mark.django_db

URL = "/api/v1/code/"


@pytest.fixture
def code_dir(settings: Any, tmp_path: Path) -> Path:
    settings.CODE_DIR = tmp_path / "code"
    settings.CODE_MAX_BYTES = 64 * 1024
    return Path(settings.CODE_DIR)


@pytest.fixture
def world() -> dict[str, Any]:
    alice, bob, vic = make_user("alice"), make_user("bob"), make_user("vic")
    recsys = make_team("recsys", members={alice: Role.MEMBER, vic: Role.VIEWER})
    vision = make_team("vision", members={bob: Role.MEMBER})
    make_node()
    return {"alice": alice, "bob": bob, "vic": vic, "recsys": recsys, "vision": vision}


def client_for(user: User | None) -> APIClient:
    client = APIClient()
    if user is not None:
        client.force_authenticate(user)
    return client


def upload(user: User | None, data: bytes, name: str = "src.tar.gz", **fields: str) -> Any:
    return client_for(user).post(
        URL, {"file": io.BytesIO(data), **fields}, format="multipart", HTTP_ACCEPT="*/*"
    )


def stored_files(code_dir: Path) -> list[Path]:
    return [p for p in code_dir.rglob("*") if p.is_file()] if code_dir.exists() else []


def test_upload_answers_digest_and_size_and_stores_once(
    world: dict[str, Any], code_dir: Path
) -> None:
    data = tar_gz({"mymodel.py": MYMODEL})
    digest = "sha256:" + hashlib.sha256(data).hexdigest()
    first = upload(world["alice"], data)
    assert first.status_code == 201, first.content
    assert first.json() == {"digest": digest, "size": len(data)}
    again = upload(world["alice"], data)
    assert again.status_code == 201
    assert again.json() == first.json()
    assert stored_files(code_dir) == [code_dir / digest.removeprefix("sha256:")]
    assert (code_dir / digest.removeprefix("sha256:")).read_bytes() == data
    assert CodeArchive.objects.count() == 1
    # Another team's upload of the same bytes: no second copy, one more team that has it.
    assert upload(world["bob"], data).json() == first.json()
    assert stored_files(code_dir) == [code_dir / digest.removeprefix("sha256:")]
    teams = set(CodeUpload.objects.values_list("team__slug", flat=True))
    assert teams == {"recsys", "vision"}


def test_zip_is_accepted(world: dict[str, Any], code_dir: Path) -> None:
    response = upload(world["alice"], zip_bytes({"mymodel.py": MYMODEL}), "src.zip")
    assert response.status_code == 201, response.content
    assert CodeArchive.objects.get().format == "zip"


@pytest.mark.parametrize("name", sorted(unsafe_archives()))
def test_unsafe_archives_get_400_naming_file_and_leave_nothing(
    world: dict[str, Any], code_dir: Path, name: str
) -> None:
    response = upload(world["alice"], unsafe_archives()[name])
    assert response.status_code == 400, response.content
    assert list(response.json()) == ["file"]
    assert "Refused" in response.json()["file"][0]
    assert not CodeArchive.objects.exists()
    assert stored_files(code_dir) == []


def test_traversal_message_is_clear(world: dict[str, Any], code_dir: Path) -> None:
    response = upload(world["alice"], traversal_tar())
    assert response.json() == {"file": ["Refused: '../evil.py' contains '..'."]}


def test_an_archive_that_expands_past_ten_times_the_limit_is_refused(
    world: dict[str, Any], code_dir: Path
) -> None:
    bomb = tar_gz({"zeros.bin": bytes(11 * 64 * 1024)})
    assert len(bomb) < 64 * 1024
    response = upload(world["alice"], bomb)
    assert response.status_code == 400
    assert "expands to more than" in response.json()["file"][0]
    assert not CodeArchive.objects.exists() and stored_files(code_dir) == []


@pytest.mark.parametrize("size", [100 * 1024, 400 * 1024])
def test_over_the_limit_is_413_naming_file(
    world: dict[str, Any], code_dir: Path, size: int
) -> None:
    # 100 KiB is read and then refused; 400 KiB is refused by its Content-Length, unread.
    response = upload(world["alice"], bytes(size))
    assert response.status_code == 413
    assert response.json() == {"file": ["The archive is larger than 0.0625 MiB."]}
    assert not CodeArchive.objects.exists() and stored_files(code_dir) == []


def test_upload_needs_a_file_a_team_and_the_right_to_submit(
    world: dict[str, Any], code_dir: Path
) -> None:
    data = tar_gz({"mymodel.py": MYMODEL})
    assert list(client_for(world["alice"]).post(URL, {}, format="multipart").json()) == ["file"]
    assert upload(None, data).status_code in (401, 403)
    assert upload(world["vic"], data).status_code == 403
    both = world["bob"]
    world["recsys"].memberships.create(user=both, role=Role.MEMBER)
    assert list(upload(both, data).json()) == ["team"]
    assert upload(both, data, team="recsys").status_code == 201
    not_hers = upload(world["alice"], data, team="vision")  # a team that is not hers: 404
    assert not_hers.status_code == 404
    assert not_hers.json()["detail"] == "You are not a member of team 'vision'."
    assert not CodeArchive.objects.filter(uploads__team__slug="vision").exists()


def job_with_code(user: User, digest: str) -> Job:
    return make_job(user, code=digest)


def fetch(job: Job | None, digest: str, token: str | None = None) -> Any:
    client = APIClient()
    if job is not None:
        client.credentials(HTTP_AUTHORIZATION=f"Job {job.pk}:{token or job.runtime_token}")
    return client.get(f"{URL}{digest}/")


def test_a_jobs_tasks_fetch_its_archive_and_nobody_else(
    world: dict[str, Any], code_dir: Path
) -> None:
    data = tar_gz({"mymodel.py": MYMODEL})
    digest = upload(world["alice"], data).json()["digest"]
    job = job_with_code(world["alice"], digest)
    response = fetch(job, digest)
    assert response.status_code == 200
    assert b"".join(response.streaming_content) == data

    assert fetch(job, digest, token="wrong").status_code == 401
    assert fetch(None, digest).status_code == 401
    # A user's own API login does not fetch archives, not even their team's.
    user_client = client_for(world["alice"])
    assert user_client.get(f"{URL}{digest}/").status_code in (401, 403)
    # Another team's job cannot fetch it with its own token.
    other = make_job(world["bob"], team="vision")
    assert fetch(other, digest).status_code == 404
    # Nor after the job is over.
    Job.objects.filter(pk=job.pk).update(state=JobState.SUCCEEDED)
    assert fetch(job, digest).status_code == 401
