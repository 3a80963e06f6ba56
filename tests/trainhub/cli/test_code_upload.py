"""`trainhub submit job.yaml --code DIR`: pack (honouring .trainhubignore), upload, submit."""

from __future__ import annotations

import io
import json
import tarfile
from pathlib import Path
from typing import Any

import pytest
from django.core.cache import cache
from trainhub.cli import codepack
from trainhub.jobs.models import CodeArchive, Job
from trainhub.tenancy.choices import Role

from ...archive_builders import MYMODEL
from ..factories import make_node, make_team, make_user
from .helpers import login, trainhub

JOB_YAML = """\
name: user-code
team: recsys
entrypoint: mymodel:train
parameter_servers: {replicas: 1, resources: {cpu: 0.5, memory_mb: 512}}
workers: {min: 1, max: 1, resources: {cpu: 0.5, memory_mb: 512}}
coordinator: {resources: {cpu: 0.5, memory_mb: 512}}
"""


def source_tree(root: Path) -> Path:
    files = {
        "mymodel.py": MYMODEL,
        "pkg/__init__.py": b"",
        "pkg/__pycache__/x.cpython-311.pyc": b"\0",
        "pkg/notes.log": b"log",
        "data/big.bin": b"\0" * 10,
        "data/keep.txt": b"keep",
        "nested/data/other.bin": b"1",
        ".git/HEAD": b"ref",
        "build/out.txt": b"o",
        "tools/build": b"a file named build",
    }
    for name, data in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_bytes(data)
    (root / ".trainhubignore").write_text(
        "# comments and blank lines are skipped\n\n*.log\n/data/*\n!/data/keep.txt\nbuild/\n"
    )
    return root


def test_pack_honours_trainhubignore(tmp_path: Path) -> None:
    root = source_tree(tmp_path / "src")
    assert codepack.included_files(root) == [
        ".trainhubignore",
        "data/keep.txt",
        "mymodel.py",
        "nested/data/other.bin",
        "pkg/__init__.py",
        "tools/build",
    ]
    packed = io.BytesIO()
    assert codepack.pack(root, packed) == 6
    with tarfile.open(fileobj=io.BytesIO(packed.getvalue()), mode="r:gz") as tar:
        names = tar.getnames()
        assert all(m.mtime == 0 and m.uid == 0 for m in tar.getmembers())
    assert "mymodel.py" in names and "pkg/notes.log" not in names


def test_packing_is_reproducible(tmp_path: Path) -> None:
    root = source_tree(tmp_path / "src")
    first, second = io.BytesIO(), io.BytesIO()
    codepack.pack(root, first)
    (root / "mymodel.py").touch()  # a new mtime changes nothing
    codepack.pack(root, second)
    assert first.getvalue() == second.getvalue()


@pytest.mark.django_db(transaction=True)
def test_submit_with_code_uploads_and_names_the_archive(
    live_server: Any, tmp_path: Path, settings: Any
) -> None:
    settings.CODE_DIR = tmp_path / "code-store"
    cache.clear()
    alice = make_user("alice")
    make_team("recsys", members={alice: Role.MEMBER}, cpu=4, memory_mb=8192)
    make_node()
    config = tmp_path / "cli.json"
    login(config, live_server.url, "alice", "pw-alice")
    (tmp_path / "job.yaml").write_text(JOB_YAML)
    src = source_tree(tmp_path / "src")

    done = trainhub(config, "submit", str(tmp_path / "job.yaml"), "--code", str(src), "--json")
    assert done.returncode == 0, done.stderr
    job = json.loads(done.stdout)
    archive = CodeArchive.objects.get()
    assert job["spec"]["code"] == archive.digest
    assert Job.objects.get(pk=job["id"]).job_spec.code == archive.digest
    assert f"(6 files, {archive.size} bytes) as {archive.digest}" in done.stderr

    # The same tree again: the same digest, still one archive.
    again = trainhub(config, "submit", str(tmp_path / "job.yaml"), "--code", str(src), "--json")
    assert json.loads(again.stdout)["spec"]["code"] == archive.digest
    assert CodeArchive.objects.count() == 1

    missing = trainhub(config, "submit", str(tmp_path / "job.yaml"), "--code", "/no/such/dir")
    assert missing.returncode == 2 and "not a directory" in missing.stderr

    (src / "escape").symlink_to("../../etc")
    refused = trainhub(config, "submit", str(tmp_path / "job.yaml"), "--code", str(src))
    assert refused.returncode == 1
    assert "file: Refused: link 'escape' points outside the archive" in refused.stderr
