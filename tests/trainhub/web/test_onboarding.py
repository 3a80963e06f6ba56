"""Onboarding a team without leaving TrainHub: platform admins create and rename teams and
create, edit and deactivate users on TrainHub's pages; team admins add members by username
or e-mail. The same rules as the REST API, refusals beside the field they name with
nothing changed, the API's audit entries, and pinned query counts for the new pages."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.test import Client
from rest_framework.exceptions import ValidationError
from trainhub.audit.models import AuditEntry
from trainhub.tenancy.choices import Role
from trainhub.tenancy.models import Quota, Team
from trainhub.tenancy.services import add_member

from ..factories import make_job, make_team, make_user

pytestmark = pytest.mark.django_db

HTMX = {"HX-Request": "true"}
PASSWORD = "a-long-enough-password-7"


@dataclass
class World:
    root: User
    bob: User  # admin of recsys
    alice: User  # member of recsys
    recsys: Team


@pytest.fixture
def world() -> World:
    root = make_user("root", superuser=True)
    bob, alice = make_user("bob"), make_user("alice")
    recsys = make_team("recsys", members={bob: Role.ADMIN, alice: Role.MEMBER}, cpu=4)
    return World(root, bob, alice, recsys)


def _client(user: User) -> Client:
    client = Client()
    client.force_login(user)
    return client


def _actions() -> list[str]:
    return list(AuditEntry.objects.order_by("pk").values_list("action", flat=True))


def _new_user(**overrides: Any) -> dict[str, Any]:
    data: dict[str, Any] = {
        "username": "dana",
        "email": "dana@example.com",
        "first_name": "Dana",
        "last_name": "Scully",
        "password": PASSWORD,
    }
    data.update(overrides)
    return data


# Who may


@pytest.mark.parametrize(
    ("path", "data"),
    [
        ("/teams/", {"slug": "ads", "name": "Ads"}),
        ("/teams/recsys/rename/", {"name": "Taken over"}),
        ("/teams/recsys/active/", {"active": "0"}),
        ("/users/", _new_user()),
        ("/users/alice/", {"email": "x@example.com"}),
        ("/users/alice/active/", {"active": "0"}),
    ],
)
@pytest.mark.parametrize("who", ["alice", "bob"])
def test_members_and_team_admins_may_not_create_teams_or_manage_users(
    world: World, who: str, path: str, data: dict[str, str]
) -> None:
    before = (
        sorted(Team.objects.values_list("slug", "name")),
        sorted(User.objects.values_list("username", "email", "is_active")),
        _actions(),
    )
    response = _client(getattr(world, who)).post(path, data)
    assert response.status_code == 403
    after = (
        sorted(Team.objects.values_list("slug", "name")),
        sorted(User.objects.values_list("username", "email", "is_active")),
        _actions(),
    )
    assert after == before


@pytest.mark.parametrize("path", ["/users/", "/users/alice/"])
def test_only_platform_admins_see_the_users_pages(world: World, path: str) -> None:
    assert _client(world.alice).get(path).status_code == 403
    assert _client(world.bob).get(path).status_code == 403
    assert Client().get(path).status_code == 302  # to the login page
    assert _client(world.root).get(path).status_code == 200


def test_the_navigation_offers_users_to_platform_admins_only(world: World) -> None:
    assert 'href="/users/"' in _client(world.root).get("/teams/").content.decode()
    assert 'href="/users/"' not in _client(world.bob).get("/teams/").content.decode()


def test_only_platform_admins_get_the_new_team_and_rename_forms(world: World) -> None:
    assert "Create team" in _client(world.root).get("/teams/").content.decode()
    assert "Create team" not in _client(world.bob).get("/teams/").content.decode()
    assert "Rename team" in _client(world.root).get("/teams/recsys/").content.decode()
    assert "Rename team" not in _client(world.bob).get("/teams/recsys/").content.decode()


# Teams


def test_a_platform_admin_creates_a_team(world: World) -> None:
    client = _client(world.root)
    response = client.post("/teams/", {"slug": "ads", "name": "Ads ranking"})
    assert (response.status_code, response["Location"]) == (302, "/teams/ads/")
    team = Team.objects.get(slug="ads")
    assert team.name == "Ads ranking"
    assert Quota.objects.get(team=team).cpu == 0
    assert _actions()[-1] == "team.create"
    assert "Team ads created." in client.get("/teams/ads/").content.decode()


def test_creating_a_team_through_htmx_sends_the_browser_to_it(world: World) -> None:
    response = _client(world.root).post("/teams/", {"slug": "ads", "name": "Ads"}, headers=HTMX)
    assert (response.status_code, response["HX-Redirect"]) == (204, "/teams/ads/")


@pytest.mark.parametrize(
    ("data", "status", "field", "message"),
    [
        ({"slug": "no spaces", "name": "X"}, 400, "slug", "Enter a valid “slug”"),
        ({"slug": "ads", "name": ""}, 400, "name", "This field is required."),
        ({"slug": "recsys", "name": "Again"}, 409, "slug", "A team &#x27;recsys&#x27; already"),
    ],
)
def test_a_refused_team_is_named_beside_its_field_and_nothing_is_made(
    world: World, data: dict[str, str], status: int, field: str, message: str
) -> None:
    before = (sorted(Team.objects.values_list("slug", "name")), _actions())
    for headers in ({}, HTMX):
        response = _client(world.root).post("/teams/", data, headers=headers)
        assert response.status_code == status
        page = response.content.decode()
        assert f'<p class="field-error" id="id_{field}_error">{message}' in page
        assert 'aria-invalid="true"' in page
    assert page.lstrip().startswith('<details id="team-new"')  # the form alone, for htmx
    assert (sorted(Team.objects.values_list("slug", "name")), _actions()) == before


def test_a_platform_admin_renames_a_team(world: World) -> None:
    response = _client(world.root).post("/teams/recsys/rename/", {"name": "Recommenders"})
    assert (response.status_code, response["Location"]) == (302, "/teams/recsys/")
    assert Team.objects.get(slug="recsys").name == "Recommenders"
    entry = AuditEntry.objects.get(action="team.update")
    assert (entry.before, entry.after) == ({"name": "Recsys"}, {"name": "Recommenders"})


def test_an_empty_name_is_refused_beside_the_field(world: World) -> None:
    response = _client(world.root).post("/teams/recsys/rename/", {"name": ""}, headers=HTMX)
    assert response.status_code == 400
    assert 'id="id_name_error">This field is required.' in response.content.decode()
    assert Team.objects.get(slug="recsys").name == "Recsys"


def test_a_platform_admin_deactivates_and_reactivates_a_team(world: World) -> None:
    client = _client(world.root)
    response = client.post("/teams/recsys/active/", {"active": "0"})
    assert (response.status_code, response["Location"]) == (302, "/teams/recsys/")
    team = Team.objects.get(slug="recsys")
    assert not team.is_active and Quota.objects.get(team=team).cpu == 0
    entry = AuditEntry.objects.get(action="team.update")
    assert (entry.before, entry.after) == ({"is_active": True}, {"is_active": False})
    assert AuditEntry.objects.get(action="quota.update").before["cpu"] == 4  # type: ignore[index]
    with pytest.raises(ValidationError) as refused:
        make_job(world.alice, team="recsys")
    assert "Team 'recsys' is deactivated" in str(refused.value.detail)
    assert "This team is deactivated" in client.get("/teams/recsys/").content.decode()
    assert "deactivated" in _client(world.alice).get("/teams/").content.decode()
    assert client.post("/teams/recsys/active/", {"active": "1"}).status_code == 302
    assert Team.objects.get(slug="recsys").is_active
    make_job(world.alice, team="recsys")  # takes jobs again (it borrows: its quota is 0)


def test_a_team_with_active_jobs_is_not_deactivated(world: World) -> None:
    make_job(world.alice, team="recsys")  # pending: active
    before = _actions()
    response = _client(world.root).post("/teams/recsys/active/", {"active": "0"})
    assert response.status_code == 409
    assert "The team has 1 active job; cancel them or let them end first." in (
        response.content.decode()
    )
    assert Team.objects.get(slug="recsys").is_active
    assert Quota.objects.get(team=world.recsys).cpu == 4 and _actions() == before


# Members by e-mail


def test_a_team_admin_adds_a_member_by_e_mail(world: World) -> None:
    User.objects.create_user("dana", "Dana@Example.com", PASSWORD)
    response = _client(world.bob).post(
        "/teams/recsys/members/", {"username": "dana@example.com", "role": "viewer"}, headers=HTMX
    )
    assert response.status_code == 200
    assert "dana is now a viewer." in response.content.decode()
    assert world.recsys.memberships.get(user__username="dana").role == Role.VIEWER
    assert _actions()[-1] == "member.add"


@pytest.mark.parametrize(
    ("typed", "message"),
    [
        ("nobody@example.com", "No user &#x27;nobody@example.com&#x27;."),
        ("twin@example.com", "Several users have the e-mail &#x27;twin@example.com&#x27;"),
        ("gone", "gone is deactivated; a platform admin can reactivate them."),
    ],
)
def test_an_e_mail_that_names_no_one_user_is_refused_beside_the_field(
    world: World, typed: str, message: str
) -> None:
    User.objects.create_user("twin1", "twin@example.com")
    User.objects.create_user("twin2", "TWIN@example.com")
    User.objects.create_user("gone", "", is_active=False)
    before = dict(world.recsys.memberships.values_list("user__username", "role"))
    response = _client(world.bob).post(
        "/teams/recsys/members/", {"username": typed, "role": "member"}, headers=HTMX
    )
    assert response.status_code == 400
    assert f'id="id_username_error">{message}' in response.content.decode()
    assert dict(world.recsys.memberships.values_list("user__username", "role")) == before


# Users


def test_a_platform_admin_creates_a_user_who_can_sign_in(world: World) -> None:
    response = _client(world.root).post("/users/", _new_user())
    assert (response.status_code, response["Location"]) == (302, "/users/")
    dana = User.objects.get(username="dana")
    assert (dana.email, dana.get_full_name(), dana.is_superuser) == (
        "dana@example.com",
        "Dana Scully",
        False,
    )
    entry = AuditEntry.objects.get(action="user.create")
    assert entry.actor == world.root
    assert (entry.after or {}).get("email") == "dana@example.com"
    assert Client().login(username="dana", password=PASSWORD)


def test_creating_a_user_through_htmx_answers_with_the_list(world: World) -> None:
    response = _client(world.root).post("/users/", _new_user(), headers=HTMX)
    assert response.status_code == 201
    page = response.content.decode()
    assert page.lstrip().startswith('<div id="users-body">')
    assert 'id="user-dana"' in page and "User dana created" in page


@pytest.mark.parametrize(
    ("overrides", "status", "field", "message"),
    [
        ({"username": "no spaces"}, 400, "username", "Letters, digits and @ . + - _ only"),
        ({"password": "short"}, 400, "password", "This password is too short."),
        ({"password": "dana@example.com!"}, 400, "password", "too similar to the email"),
        ({"email": "not-an-address"}, 400, "email", "Enter a valid email address."),
        ({"username": "alice"}, 409, "username", "A user &#x27;alice&#x27; already exists."),
        ({"email": "BOB@example.com"}, 409, "email", "Another user has the e-mail"),
    ],
)
def test_a_refused_user_is_named_beside_its_field_and_nothing_is_made(
    world: World, overrides: dict[str, str], status: int, field: str, message: str
) -> None:
    User.objects.filter(pk=world.bob.pk).update(email="bob@example.com")
    before = (sorted(User.objects.values_list("username", "email")), _actions())
    response = _client(world.root).post("/users/", _new_user(**overrides), headers=HTMX)
    assert response.status_code == status
    page = response.content.decode()
    assert f'<p class="field-error" id="id_{field}_error">' in page
    assert message in page.split(f'id="id_{field}_error">')[1].split("</p>")[0]
    assert 'value="Scully"' in page  # the typed input survives
    assert 'value="a-long-enough' not in page  # a password is never sent back
    assert (sorted(User.objects.values_list("username", "email")), _actions()) == before


def test_a_platform_admin_edits_a_users_e_mail_and_name(world: World) -> None:
    response = _client(world.root).post(
        "/users/alice/",
        {"email": "alice@example.com", "first_name": "Alice", "last_name": "Liddell"},
        headers=HTMX,
    )
    assert response.status_code == 200
    assert "Saved alice&#x27;s e-mail and name." in response.content.decode()
    alice = User.objects.get(username="alice")
    assert (alice.email, alice.get_full_name()) == ("alice@example.com", "Alice Liddell")
    entry = AuditEntry.objects.get(action="user.update")
    assert entry.after == {
        "email": "alice@example.com",
        "first_name": "Alice",
        "last_name": "Liddell",
    }


def test_another_users_e_mail_is_refused_beside_the_field(world: World) -> None:
    User.objects.filter(pk=world.bob.pk).update(email="bob@example.com")
    response = _client(world.root).post("/users/alice/", {"email": "bob@example.com"})
    assert response.status_code == 409
    assert 'id="id_email_error">Another user has the e-mail' in response.content.decode()
    assert User.objects.get(username="alice").email == ""
    assert "user.update" not in _actions()


def test_a_platform_admin_deactivates_and_reactivates_a_user(world: World) -> None:
    alice = _client(world.alice)
    assert alice.get("/teams/").status_code == 200
    admin = _client(world.root)
    response = admin.post("/users/alice/active/", {"active": "0"})
    assert (response.status_code, response["Location"]) == (302, "/users/alice/")
    assert not User.objects.get(username="alice").is_active
    assert alice.get("/teams/").status_code == 302  # signed out: to the login page
    assert not Client().login(username="alice", password="pw-alice")
    assert world.recsys.memberships.filter(user=world.alice).exists()  # kept
    entry = AuditEntry.objects.get(action="user.roles")
    assert ((entry.before or {}).get("is_active"), (entry.after or {}).get("is_active")) == (
        True,
        False,
    )
    assert "deactivated" in admin.get("/users/").content.decode()
    assert admin.post("/users/alice/active/", {"active": "1"}).status_code == 302
    assert Client().login(username="alice", password="pw-alice")


def test_a_platform_admin_cannot_deactivate_themselves(world: World) -> None:
    response = _client(world.root).post("/users/root/active/", {"active": "0"})
    assert response.status_code == 409
    assert "You cannot deactivate yourself" in response.content.decode()
    assert User.objects.get(username="root").is_active


def test_an_unknown_user_is_not_found(world: World) -> None:
    assert _client(world.root).get("/users/nobody/").status_code == 404


# Queries: pinned, and the same however many users and teams there are.

# session, user; count, the page of users, their memberships with teams
USERS_QUERIES = 5
# session, user; the user, their memberships with teams
USER_QUERIES = 4


def test_the_users_pages_make_a_fixed_number_of_queries(
    world: World, django_assert_num_queries: Any
) -> None:
    client = _client(world.root)
    with django_assert_num_queries(USERS_QUERIES):
        assert client.get("/users/").status_code == 200
    with django_assert_num_queries(USER_QUERIES):
        assert client.get("/users/alice/").status_code == 200
    for n in range(6):
        team = make_team(f"team-{n}")
        add_member(team=team, user=world.alice, role=Role.MEMBER)
        add_member(team=team, user=make_user(f"user-{n}"), role=Role.VIEWER)
    with django_assert_num_queries(USERS_QUERIES):
        assert client.get("/users/").status_code == 200
    with django_assert_num_queries(USERS_QUERIES):
        assert client.get("/users/", headers=HTMX).status_code == 200
    with django_assert_num_queries(USER_QUERIES):
        assert client.get("/users/alice/").status_code == 200


# The Django admin's team page, for whoever still opens it


def test_the_admins_team_page_names_its_sections_and_units_and_leads_back(world: World) -> None:
    client = _client(world.root)
    page = client.get(f"/admin/tenancy/team/{world.recsys.pk}/change/")
    assert page.status_code == 200
    html = page.content.decode()
    assert "Priority caps (empty = no cap on that resource)" in html
    assert "resource)s" not in html.lower()  # was "…RESOURCE)S" once upper-cased
    assert "Memory (MiB)" in html and "Memory mb" not in html
    view_on_site = re.search(r'href="(/admin/r/[^"]+)"', html)
    assert view_on_site, "no link back to the team's own page"
    assert client.get(view_on_site.group(1))["Location"].endswith("/teams/recsys/")
