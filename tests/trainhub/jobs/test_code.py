"""The spec's `code`: validated against the archives the submitter's teams uploaded, kept
in the stored spec, and handed to the coordinator and workers (never PS shards)."""

from __future__ import annotations

import io
from pathlib import Path
from typing import Any

import pytest
from django.utils import timezone
from rest_framework import serializers
from trainhub.jobs.codearchives import code_path, store_code_archive
from trainhub.jobs.jobspec import JobSpec
from trainhub.jobs.selectors import desired_tasks
from trainhub.jobs.services import place_job
from trainhub.jobs.spec import parse_job_spec
from trainhub.tenancy.choices import Role

from ps_runtime import taskenv

from ...archive_builders import MYMODEL, tar_gz
from ..factories import gang_placements, make_job, make_team, make_user, spec
from .conftest import World


@pytest.fixture(autouse=True)
def code_dir(settings: Any, tmp_path: Path) -> Path:
    settings.CODE_DIR = tmp_path / "code"
    return Path(settings.CODE_DIR)


def uploaded(world: World, data: bytes | None = None) -> str:
    data = data or tar_gz({"mymodel.py": MYMODEL})
    stored = store_code_archive(data=io.BytesIO(data), team=world.team, user=world.alice)
    return stored.archive.digest


def code_error(document: dict[str, Any], user: Any) -> Any:
    with pytest.raises(serializers.ValidationError) as caught:
        parse_job_spec(document, user=user)
    detail: Any = caught.value.detail
    assert list(detail) == ["code"]
    return detail["code"][0]


def test_a_spec_names_an_archive_of_its_team(world: World, code_dir: Path) -> None:
    digest = uploaded(world)
    assert code_path(digest).is_file()
    parsed = parse_job_spec(spec(entrypoint="mymodel:train", code=digest), user=world.alice)
    assert parsed.code == digest
    assert parsed.to_dict()["code"] == digest
    assert JobSpec.from_dict(parsed.to_dict()) == parsed


def test_a_spec_without_code_reads_as_before(world: World) -> None:
    parsed = parse_job_spec(spec(), user=world.alice)
    assert parsed.code is None
    assert "code" not in parsed.to_dict()
    assert parse_job_spec(spec(code=None), user=world.alice).code is None


def test_malformed_unknown_and_other_teams_archives_are_refused(world: World) -> None:
    assert "sha256:<64 hex digits>" in code_error(spec(code="abc"), world.alice)
    missing = "sha256:" + "0" * 64
    assert "was uploaded by your teams" in code_error(spec(code=missing), world.alice)
    bob = make_user("bob")
    vision = make_team("vision", members={bob: Role.MEMBER})
    theirs = store_code_archive(data=io.BytesIO(tar_gz({"x.py": b""})), team=vision, user=bob)
    digest = theirs.archive.digest
    assert "was uploaded by your teams" in code_error(spec(code=digest), world.alice)
    # Once alice's team uploads the same bytes, she may use them.
    uploaded(world, tar_gz({"x.py": b""}))
    assert parse_job_spec(spec(code=digest), user=world.alice).code == digest


def test_coordinator_and_workers_get_the_digest_ps_shards_do_not(world: World) -> None:
    digest = uploaded(world)
    job = make_job(world.alice, entrypoint="mymodel:train", code=digest)
    assert place_job(job=job, placements=gang_placements(job, world.node), now=timezone.now())
    by_role = {t.role.value: t.env for t in desired_tasks(world.node).tasks}
    assert set(by_role) == {"coordinator", "ps", "worker"}
    assert by_role["coordinator"][taskenv.CODE.name] == digest
    assert by_role["worker"][taskenv.CODE.name] == digest
    assert taskenv.CODE.name not in by_role["ps"]
    assert taskenv.CODE_DIR.name not in by_role["worker"]  # the agent adds it
