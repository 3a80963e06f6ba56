"""The web UI walked in a real browser, as each role that uses it (services mode).

People: `admin` (platform admin, from the cluster fixture), `alice` (member of recsys),
`bob` (admin of recsys), `carol` (member of vision only).
"""

from __future__ import annotations

from collections.abc import Callable
from contextlib import AbstractContextManager
from dataclasses import dataclass

import pytest
from playwright.sync_api import Browser, Page

from ..browser import signed_in
from ..cluster import ADMIN, LiveCluster

pytestmark = [pytest.mark.browser, pytest.mark.services, pytest.mark.slow]

PASSWORD = "a-long-test-password-1"


@dataclass(frozen=True)
class Person:
    username: str
    password: str


@pytest.fixture(scope="session")
def people(live_cluster: LiveCluster) -> dict[str, Person]:
    api = live_cluster.api
    if api.get("/teams/vision/").status_code == 404:
        api.post("/teams/", json={"slug": "vision", "name": "Vision"}).raise_for_status()
    made = {"admin": Person(*ADMIN)}
    for username, team, role in (
        ("alice", "recsys", "member"),
        ("bob", "recsys", "admin"),
        ("carol", "vision", "member"),
    ):
        created = api.post("/users/", json={"username": username, "password": PASSWORD})
        assert created.status_code in (201, 400), created.text  # 400: made by an earlier test
        added = api.post(f"/teams/{team}/members/", json={"username": username, "role": role})
        assert added.status_code in (200, 201, 400), added.text
        made[username] = Person(username, PASSWORD)
    return made


SignedIn = Callable[..., AbstractContextManager[Page]]


@pytest.fixture
def as_person(browser: Browser, live_cluster: LiveCluster, people: dict[str, Person]) -> SignedIn:
    """`with as_person("alice") as page:` a page signed in as that person; the block fails
    if any page it opened logged a JavaScript error."""

    def open_as(name: str, *, dark: bool = False) -> AbstractContextManager[Page]:
        person = people[name]
        return signed_in(browser, live_cluster.url, person.username, person.password, dark=dark)

    return open_as
