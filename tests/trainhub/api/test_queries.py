"""List endpoints make a fixed number of queries, however many rows they return."""

from __future__ import annotations

from typing import Any

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from rest_framework.test import APIClient
from trainhub.tenancy.choices import Role

from ..factories import make_job, make_node, make_team, make_user

pytestmark = pytest.mark.django_db


def _queries(client: APIClient, url: str) -> int:
    with CaptureQueriesContext(connection) as captured:
        assert client.get(url).status_code == 200
    return len(captured)


@pytest.mark.parametrize("url", ["/api/v1/jobs/", "/api/v1/users/", "/api/v1/nodes/"])
def test_list_query_count_does_not_grow_with_rows(url: str) -> None:
    root = make_user("root", superuser=True)
    make_team("recsys", members={root: Role.ADMIN})
    make_node()
    client = APIClient()
    client.force_authenticate(root)

    def add_rows(i: int) -> Any:
        user = make_user(f"user{i}")
        make_team(f"team{i}", members={user: Role.MEMBER})
        make_node(f"node-{i + 2}")  # node-1 is the first one
        return make_job(root, name=f"job{i}")

    add_rows(0)
    few = _queries(client, url)
    for i in range(1, 6):
        add_rows(i)
    assert _queries(client, url) == few
