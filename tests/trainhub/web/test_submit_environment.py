"""`/jobs/new/`'s Code and Environment sections (issue 27): requirements, Python and the
build timeout judged by the API's serializer with each error beside its field; a code
archive kept by the service `POST /api/v1/code/` uses, at once (`/jobs/new/code/`) or with
the form, its digest put in `code`; the job page lists the environment and `preparing`."""

from __future__ import annotations

import hashlib
import html
import io
import re
from pathlib import Path
from typing import Any

import pytest
import yaml
from django.contrib.auth.models import User
from django.core.files.uploadedfile import SimpleUploadedFile
from rest_framework.test import APIClient
from trainhub.jobs.choices import JobState
from trainhub.jobs.models import CodeArchive, CodeUpload, Job
from trainhub.tenancy.choices import Role

from ...archive_builders import MYMODEL, tar_gz, traversal_tar, zip_bytes
from ..factories import make_job, make_node, make_team, make_user, spec
from .test_submit import _client, _counts, _field_error, _form, _small_spec

pytestmark = pytest.mark.django_db

REQUIREMENTS = "environment.requirements"
BAD_LINES = "numpy>=1.26\n--index-url http://x"


@pytest.fixture
def world() -> dict[str, Any]:
    """alice: member of recsys (2 CPUs), viewer of ads; vic: only a viewer; one 2-CPU node."""
    alice, vic = make_user("alice"), make_user("vic")
    make_team("recsys", members={alice: Role.MEMBER}, cpu=2, memory_mb=8192)
    make_team("ads", members={alice: Role.VIEWER, vic: Role.VIEWER}, cpu=0, memory_mb=0)
    make_node(cpus=2, memory_mb=32768)
    return {"alice": alice, "vic": vic}


@pytest.fixture
def code_dir(settings: Any, tmp_path: Path) -> Path:
    settings.CODE_DIR = tmp_path / "code"
    settings.CODE_MAX_BYTES = 64 * 1024
    return Path(settings.CODE_DIR)


def _digest(data: bytes) -> str:
    return "sha256:" + hashlib.sha256(data).hexdigest()


def _archive(name: str, data: bytes) -> SimpleUploadedFile:
    return SimpleUploadedFile(name, data, content_type="application/gzip")


def _stored(code_dir: Path) -> list[Path]:
    return [p for p in code_dir.rglob("*") if p.is_file()] if code_dir.exists() else []


def _api_refusal(user: User, document: dict[str, Any]) -> dict[str, Any]:
    api = APIClient()
    api.force_authenticate(user)
    response = api.post("/api/v1/jobs/", document, format="json")
    assert response.status_code == 400, response.content
    return dict(response.json())


def _typed(page: str, name: str) -> str:
    """What the textarea `name` holds on the page."""
    found = re.search(rf'<textarea name="{re.escape(name)}"[^>]*>(.*?)</textarea>', page, re.S)
    assert found, f"no textarea {name}"
    return html.unescape(found.group(1)).strip("\n")


def test_the_form_has_labelled_code_and_environment_sections(world: dict[str, Any]) -> None:
    page = _client(world["alice"]).get("/jobs/new/").content.decode()
    assert 'enctype="multipart/form-data"' in page
    for legend in ("Code", "Environment"):
        assert f"<legend>{legend}</legend>" in page
    for path, label in (
        ("code_file", "Code archive (.tar.gz or .zip)"),
        ("code", "Code digest"),
        (REQUIREMENTS, "Requirements"),
        ("environment.python", "Python version"),
        ("environment.timeout_seconds", "Build timeout (s)"),
    ):
        assert f'<label for="id_{path}">{label}</label>' in page
    assert re.search(r'<input type="file" name="code_file" accept="\.tar\.gz,\.tgz,\.zip"', page)
    # The hint, and the build timeout's default.
    assert "torch&gt;=2.3" in page
    assert 'name="environment.timeout_seconds"' in page and 'placeholder="900"' in page
    # The YAML tab names the new fields too; the preview never sends the archive.
    assert "<code>environment</code> (<code>requirements</code>" in page
    assert 'hx-params="not code_file"' in page


def test_the_environment_typed_in_the_form_is_the_jobs(world: dict[str, Any]) -> None:
    client = _client(world["alice"])
    response = client.post(
        "/jobs/new/",
        _form(
            **{
                REQUIREMENTS: "# ours\ntorch>=2.3\n\npandas[performance]==2.2.*  # io",
                "environment.python": "3.11",
                "environment.timeout_seconds": "1200",
            }
        ),
    )
    job = Job.objects.get()
    assert response["Location"] == f"/jobs/{job.pk}/"
    assert job.spec["environment"] == {
        "requirements": ["torch>=2.3", "pandas[performance]==2.2.*"],
        "python": "3.11",
        "timeout_seconds": 1200,
    }
    overview = client.get(f"/jobs/{job.pk}/").content.decode()
    listed = overview.split('id="job-requirements">')[1].split("</dd>")[0]
    assert re.findall(r"<li><code>(.*?)</code></li>", listed) == [
        "torch&gt;=2.3",
        "pandas[performance]==2.2.*",
    ]
    assert "built on each node within 1200 s" in listed
    assert '<dd id="job-python">3.11</dd>' in overview


def test_a_form_without_environment_leaves_it_out(world: dict[str, Any]) -> None:
    client = _client(world["alice"])
    client.post("/jobs/new/", _form(**{REQUIREMENTS: "\n# nothing yet\n"}))
    job = Job.objects.get()
    assert "environment" not in job.spec and "code" not in job.spec
    overview = client.get(f"/jobs/{job.pk}/").content.decode()
    assert "none: the runtime's packages only" in overview
    assert '<dd id="job-python">the nodes\' own</dd>' in overview
    assert "none: the entrypoint is installed on the nodes" in overview


def test_an_option_line_is_refused_beside_the_requirements_as_the_api_says(
    world: dict[str, Any],
) -> None:
    alice = world["alice"]
    page = _client(alice).post("/jobs/new/", _form(**{REQUIREMENTS: BAD_LINES})).content.decode()
    assert _counts() == (0, 0)
    error = _field_error(page, REQUIREMENTS)
    assert error.startswith(
        "requirements line 2 ('--index-url http://x') '--index-url' is an option"
    )
    refused = _api_refusal(
        alice,
        _small_spec(environment={"requirements": ["numpy>=1.26", "--index-url http://x"]}),
    )
    assert error == refused["environment"]["requirements"][0]
    # Typed text kept, the field marked and described by its error.
    assert _typed(page, REQUIREMENTS) == BAD_LINES
    textarea = page.split(f'name="{REQUIREMENTS}"')[1].split(">")[0]
    assert 'aria-invalid="true"' in textarea
    assert f"id_{REQUIREMENTS}_error" in textarea


def test_a_bad_line_is_named_by_its_line_in_the_textarea(world: dict[str, Any]) -> None:
    """Blank and comment lines are left out of the spec, but the error counts them."""
    typed = "# ours\n\nnumpy\n-e ./src\nhttps://example.com/x.whl"
    page = _client(world["alice"]).post("/jobs/new/", _form(**{REQUIREMENTS: typed}))
    error = _field_error(page.content.decode(), REQUIREMENTS)
    assert "requirements line 4 ('-e ./src')" in error
    assert "requirements line 5 ('https://example.com/x.whl') is a direct reference" in error
    assert _counts() == (0, 0)


@pytest.mark.parametrize(
    ("path", "typed", "message"),
    [
        ("environment.python", "2.7", "Expected a version like '3.11'."),
        ("environment.timeout_seconds", "5", "Ensure this value is greater than or equal to 10."),
        ("environment.timeout_seconds", "soon", "Expected a whole number."),
        ("code", "sha256:nope", "Expected 'sha256:<64 hex digits>'"),
    ],
)
def test_other_environment_and_code_errors_sit_beside_their_field(
    world: dict[str, Any], path: str, typed: str, message: str
) -> None:
    fields = {REQUIREMENTS: "numpy", path: typed}
    page = _client(world["alice"]).post("/jobs/new/", _form(**fields)).content.decode()
    assert _field_error(page, path).startswith(message)
    assert _counts() == (0, 0)


def test_the_preview_judges_the_environment_too(world: dict[str, Any]) -> None:
    client = _client(world["alice"])
    refused = client.post("/jobs/new/preview/", _form(**{REQUIREMENTS: BAD_LINES}))
    body = html.unescape(refused.content.decode())
    assert "Not a valid spec yet" in body
    assert f"<code>{REQUIREMENTS}</code> requirements line 2 ('--index-url http://x')" in body
    fits = client.post("/jobs/new/preview/", _form(**{REQUIREMENTS: "numpy>=1.26"}))
    assert "Fits now." in fits.content.decode()
    assert _counts() == (0, 0)


def test_the_tabs_carry_code_and_environment_across(world: dict[str, Any]) -> None:
    client = _client(world["alice"])
    digest = "sha256:" + "ab" * 32
    fields = _form(
        **{REQUIREMENTS: "torch>=2.3\nnumpy", "environment.python": "3.12", "code": digest}
    )
    document = yaml.safe_load(
        client.post("/jobs/new/convert/", {**fields, "to": "yaml"}).json()["yaml"]
    )
    assert document["environment"] == {"requirements": ["torch>=2.3", "numpy"], "python": "3.12"}
    assert document["code"] == digest
    back = client.post("/jobs/new/convert/", {"to": "form", "spec": yaml.safe_dump(document)})
    answer = back.json()["fields"]
    assert answer[REQUIREMENTS] == "torch>=2.3\nnumpy"
    assert (answer["environment.python"], answer["code"]) == ("3.12", digest)
    assert answer["environment.timeout_seconds"] == ""


def test_a_clone_keeps_the_code_and_the_environment(world: dict[str, Any], code_dir: Path) -> None:
    alice = world["alice"]
    data = tar_gz({"mymodel.py": MYMODEL})
    _client(alice).post(
        "/jobs/new/code/", {"code_file": _archive("src.tar.gz", data), "team": "recsys"}
    )
    environment = {"requirements": ["torch>=2.3"], "python": "3.11", "timeout_seconds": 600}
    job = make_job(alice, **_small_spec(code=_digest(data), environment=environment))
    page = _client(alice).get(f"/jobs/new/?clone={job.pk}").content.decode()
    assert _typed(page, REQUIREMENTS) == "torch>=2.3"
    assert 'name="environment.python" value="3.11"' in page
    assert 'name="environment.timeout_seconds" value="600"' in page
    assert f'name="code" value="{_digest(data)}"' in page


def test_an_archive_sent_with_the_form_is_kept_and_becomes_the_jobs_code(
    world: dict[str, Any], code_dir: Path
) -> None:
    """Without JavaScript the archive goes with the form; its requirements.txt joins."""
    data = tar_gz({"mymodel.py": MYMODEL, "requirements.txt": b"numpy>=1.26\ntorch>=2.3\n"})
    fields = {**_form(**{REQUIREMENTS: "torch>=2.3"}), "code_file": _archive("src.tar.gz", data)}
    response = _client(world["alice"]).post("/jobs/new/", fields)
    job = Job.objects.get()
    assert response["Location"] == f"/jobs/{job.pk}/"
    assert job.spec["code"] == _digest(data)
    assert job.spec["environment"]["requirements"] == ["torch>=2.3", "numpy>=1.26"]
    assert _stored(code_dir) == [code_dir / _digest(data).removeprefix("sha256:")]
    upload = CodeUpload.objects.get()
    assert (upload.team.slug, upload.uploaded_by) == ("recsys", world["alice"])


def test_a_refused_spec_keeps_the_archive_it_sent_in_the_code_field(
    world: dict[str, Any], code_dir: Path
) -> None:
    data = tar_gz({"mymodel.py": MYMODEL})
    fields = {**_form(**{REQUIREMENTS: BAD_LINES}), "code_file": _archive("src.tar.gz", data)}
    page = _client(world["alice"]).post("/jobs/new/", fields).content.decode()
    assert _counts() == (0, 0)
    assert _field_error(page, REQUIREMENTS).startswith("requirements line 2")
    # Kept, and named in the form: submitting again needs no second upload.
    assert f'name="code" value="{_digest(data)}"' in page
    assert CodeArchive.objects.filter(digest=_digest(data)).exists()


@pytest.mark.parametrize(
    ("data", "message"),
    [
        (traversal_tar(), "Refused: "),
        (b"just some text, neither gzip nor zip\n", "Refused: "),
        (b"\0" * (70 * 1024), "The archive is larger than 0.0625 MiB."),
    ],
    ids=["traversal", "not-an-archive", "too-large"],
)
def test_an_unsafe_archive_sent_with_the_form_is_refused_beside_it(
    world: dict[str, Any], code_dir: Path, data: bytes, message: str
) -> None:
    fields = {**_form(), "code_file": _archive("src.tar.gz", data)}
    page = _client(world["alice"]).post("/jobs/new/", fields).content.decode()
    assert _field_error(page, "code_file").startswith(message)
    assert 'aria-describedby="id_code_file_helptext id_code_file_error"' in page
    assert _counts() == (0, 0)
    assert (CodeArchive.objects.count(), _stored(code_dir)) == (0, [])


def test_choosing_an_archive_uploads_it_at_once_as_the_api_does(
    world: dict[str, Any], code_dir: Path
) -> None:
    alice = world["alice"]
    data = zip_bytes({"mymodel.py": MYMODEL})
    kept = _client(alice).post(
        "/jobs/new/code/", {"code_file": _archive("src.zip", data), "team": "recsys"}
    )
    assert kept.status_code == 201
    assert kept.json() == {"digest": _digest(data), "size": len(data)}
    api = APIClient()
    api.force_authenticate(alice)
    same = api.post(
        "/api/v1/code/", {"file": io.BytesIO(data), "team": "recsys"}, format="multipart"
    ).json()
    assert same == kept.json()
    assert _stored(code_dir) == [code_dir / _digest(data).removeprefix("sha256:")]
    # The digest is the job's code.
    _client(alice).post("/jobs/new/", _form(code=_digest(data)))
    assert Job.objects.get().spec["code"] == _digest(data)


def test_an_unsafe_archive_chosen_is_refused_with_the_apis_words(
    world: dict[str, Any], code_dir: Path
) -> None:
    alice = world["alice"]
    api = APIClient()
    api.force_authenticate(alice)
    expected = api.post(
        "/api/v1/code/", {"file": io.BytesIO(traversal_tar()), "team": "recsys"}, format="multipart"
    ).json()["file"][0]
    refused = _client(alice).post(
        "/jobs/new/code/", {"code_file": _archive("evil.tar.gz", traversal_tar()), "team": "recsys"}
    )
    assert refused.status_code == 400
    assert refused.json() == {"error": expected}
    too_large = _client(alice).post(
        "/jobs/new/code/",
        {"code_file": _archive("big.tar.gz", b"\0" * (70 * 1024)), "team": "recsys"},
    )
    assert (too_large.status_code, too_large.json()) == (
        413,
        {"error": "The archive is larger than 0.0625 MiB."},
    )
    assert (CodeArchive.objects.count(), _stored(code_dir)) == (0, [])


def test_an_archive_is_kept_only_for_a_team_one_may_submit_to(
    world: dict[str, Any], code_dir: Path
) -> None:
    data = tar_gz({"mymodel.py": MYMODEL})
    # alice only views ads.
    refused = _client(world["alice"]).post(
        "/jobs/new/code/", {"code_file": _archive("src.tar.gz", data), "team": "ads"}
    )
    assert refused.status_code == 400
    assert "choose a team you may submit to" in refused.json()["error"]
    missing = _client(world["alice"]).post("/jobs/new/code/", {"team": "recsys"})
    assert (missing.status_code, missing.json()) == (
        400,
        {"error": "Choose a .tar.gz or .zip file."},
    )
    viewer = _client(world["vic"]).post(
        "/jobs/new/code/", {"code_file": _archive("src.tar.gz", data), "team": "ads"}
    )
    assert viewer.status_code == 403
    assert (CodeArchive.objects.count(), _stored(code_dir)) == (0, [])


def test_the_job_page_shows_preparing_with_what_it_waits_for(world: dict[str, Any]) -> None:
    job = make_job(world["alice"], **spec(environment={"requirements": ["numpy"]}))
    Job.objects.filter(pk=job.pk).update(state=JobState.PREPARING)
    page = _client(world["alice"]).get(f"/jobs/{job.pk}/").content.decode()
    assert '<span id="job-state" class="state state-preparing">preparing</span>' in page
    reason = html.unescape(page.split('<span id="job-reason">')[1].split("</span>")[0])
    assert reason == "a node is building the job's Python environment (its tasks show how far)"
    assert "<li><code>numpy</code></li>" in page


def test_a_long_requirements_list_shows_its_first_lines(world: dict[str, Any]) -> None:
    lines = [f"package-{n}" for n in range(15)]
    job = make_job(world["alice"], **spec(environment={"requirements": lines}))
    page = _client(world["alice"]).get(f"/jobs/{job.pk}/").content.decode()
    listed = page.split('id="job-requirements">')[1].split("</dd>")[0]
    assert listed.count("<li>") == 12
    assert "and 3 more (Configuration tab)" in listed
