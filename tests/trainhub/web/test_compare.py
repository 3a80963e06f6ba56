"""`/jobs/compare/?ids=…`: 2 to 6 visible jobs, their metrics overlaid and their specs side by
side; other counts are refused with a message on the page, another team's job is 404."""

from __future__ import annotations

import re
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.test import Client
from django.utils import timezone
from trainhub.telemetry.finals import better
from trainhub.telemetry.services import write_points
from trainhub.tenancy.choices import Role
from trainhub.web.specdiff import MISSING, flatten, spec_diff

from ..factories import make_job, make_team, make_user

pytestmark = pytest.mark.django_db


@pytest.fixture
def people() -> dict[str, User]:
    alice, bob = make_user("alice"), make_user("bob")
    make_team("recsys", members={alice: Role.MEMBER})
    make_team("ads", members={bob: Role.MEMBER})
    return {"alice": alice, "bob": bob}


def _client(user: User) -> Client:
    client = Client()
    client.force_login(user)
    return client


def _ids(*jobs: Any) -> str:
    return ",".join(str(job.pk) for job in jobs)


def test_two_jobs_side_by_side(people: dict[str, User]) -> None:
    a = make_job(people["alice"], name="small", args={"epochs": 1, "dim": 16})
    b = make_job(people["alice"], name="big", args={"epochs": 1, "dim": 64})
    response = _client(people["alice"]).get(f"/jobs/compare/?ids={_ids(a, b)}")
    assert response.status_code == 200
    page = response.content.decode()
    assert f'data-label="small #{a.pk}"' in page and f'data-label="big #{b.pk}"' in page
    assert f'data-metrics-url="/api/v1/jobs/{a.pk}/metrics/"' in page
    # Only the fields that differ are in the table; the rest is folded away.
    table = page.split('id="spec-diff"')[1].split("</table>")[0]
    assert 'data-path="name"' in table and 'data-path="args.dim"' in table
    assert "args.epochs" not in table and "workers.min" not in table
    assert "<code>16</code>" in table and "<code>64</code>" in table
    assert "the same in every job" in page


def test_ids_may_repeat_the_parameter(people: dict[str, User]) -> None:
    a, b = make_job(people["alice"]), make_job(people["alice"])
    response = _client(people["alice"]).get(f"/jobs/compare/?ids={a.pk}&ids={b.pk}")
    assert response.status_code == 200


@pytest.mark.parametrize("count", [0, 1, 7])
def test_fewer_than_two_or_more_than_six_jobs_are_refused(
    people: dict[str, User], count: int
) -> None:
    jobs = [make_job(people["alice"], name=f"j{i}") for i in range(count)]
    response = _client(people["alice"]).get(f"/jobs/compare/?ids={_ids(*jobs)}")
    assert response.status_code == 200
    page = response.content.decode()
    assert 'id="compare-error"' in page
    assert "Compare 2 to 6 jobs at a time" in page
    assert 'id="compare"' not in page


def test_the_same_job_twice_is_one_job(people: dict[str, User]) -> None:
    a = make_job(people["alice"])
    response = _client(people["alice"]).get(f"/jobs/compare/?ids={a.pk},{a.pk}")
    assert 'id="compare-error"' in response.content.decode()


def test_an_id_that_is_not_a_number_is_refused(people: dict[str, User]) -> None:
    a = make_job(people["alice"])
    response = _client(people["alice"]).get(f"/jobs/compare/?ids={a.pk},abc")
    assert response.status_code == 200
    assert "“abc” is not a job id" in response.content.decode()
    assert 'id="compare"' not in response.content.decode()


def test_another_teams_job_makes_the_comparison_not_found(people: dict[str, User]) -> None:
    mine = make_job(people["alice"], name="mine")
    theirs = make_job(people["bob"], team="ads", name="theirs-secret")
    response = _client(people["alice"]).get(f"/jobs/compare/?ids={_ids(mine, theirs)}")
    assert response.status_code == 404
    assert "theirs-secret" not in response.content.decode()
    missing = theirs.pk + 100
    assert (
        _client(people["alice"]).get(f"/jobs/compare/?ids={mine.pk},{missing}").status_code == 404
    )


def test_query_count_does_not_grow_with_the_jobs(
    people: dict[str, User], django_assert_num_queries: Any
) -> None:
    jobs = [make_job(people["alice"], name=f"j{i}") for i in range(6)]
    client = _client(people["alice"])
    for some in (jobs[:2], jobs):
        # session, user, navigation, the jobs with their teams, their metrics' finals
        with django_assert_num_queries(5):
            assert client.get(f"/jobs/compare/?ids={_ids(*some)}").status_code == 200


def test_a_table_gives_each_runs_final_and_best_value_per_metric(
    people: dict[str, User],
) -> None:
    a = make_job(people["alice"], name="small")
    b = make_job(people["alice"], name="big")
    now = timezone.now()
    points = [
        (a, "test_rmse", [(1, 1.10), (2, 0.95), (3, 0.97)]),  # its best is not its last
        (b, "test_rmse", [(1, 1.05), (2, 0.93)]),
        (a, "auc", [(1, 0.70), (2, 0.81)]),
        (b, "auc", [(1, 0.75), (2, 0.79)]),
        (a, "lr", [(1, 0.5), (2, 0.1)]),  # no direction: a range, no best
    ]
    for job, name, series in points:
        write_points(job.pk, [(name, step, value) for step, value in series], time=now)
    page = _client(people["alice"]).get(f"/jobs/compare/?ids={_ids(a, b)}").content.decode()
    table = re.search(r'<table class="grid" id="compare-finals">(.*?)</table>', page, re.S)
    assert table
    rows = {
        name: [" ".join(re.sub(r"<[^>]+>", " ", cell).split()) for cell in cells]
        for name, cells in (
            (m[0], re.findall(r"<td[^>]*>(.*?)</td>", m[1], re.S))
            for m in re.findall(r'<tr data-final="([^"]+)">(.*?)</tr>', table[1], re.S)
        )
    }
    assert list(rows) == ["auc", "lr", "test_rmse"]
    assert rows["test_rmse"] == [
        "0.97 at step 3 best 0.95",
        "0.93 at step 2 best 0.93 · best run",
    ]
    assert rows["auc"] == ["0.81 at step 2 best 0.81 · best run", "0.79 at step 2 best 0.79"]
    assert rows["lr"] == ["0.1 at step 2 0.1 to 0.5", "no points"]
    assert "lower is better" in table[1] and "higher is better" in table[1]


def test_metric_directions_come_from_their_names() -> None:
    assert [better(n) for n in ("train_loss", "test_rmse", "val_auc", "accuracy", "lr")] == [
        "lower",
        "lower",
        "higher",
        "higher",
        "",
    ]


# The spec flattening itself


def test_flatten_writes_dotted_paths_in_document_order() -> None:
    spec = {"name": "a", "workers": {"min": 1, "max": 2}, "args": {}, "tags": [1, "x"]}
    assert flatten(spec) == {
        "name": "a",
        "workers.min": "1",
        "workers.max": "2",
        "args": "{}",
        "tags": '[1, "x"]',
    }


def test_spec_diff_splits_differing_from_shared_fields() -> None:
    diff = spec_diff([{"a": 1, "b": {"c": 2}}, {"a": 1, "b": {"c": 3}, "d": True}])
    assert [(r.path, r.values) for r in diff.different] == [
        ("b.c", ("2", "3")),
        ("d", (MISSING, "true")),
    ]
    assert [r.path for r in diff.same] == ["a"]
