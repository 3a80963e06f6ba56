"""The teams pages: who sees which team, its usage and members; team admins change the
members and platform admins the quota, through the API's services, and a refusal says why
beside the field it names and changes nothing."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.test import Client
from django.utils import timezone
from trainhub.jobs.services import place_job
from trainhub.tenancy.choices import Role
from trainhub.tenancy.models import Membership, PriorityCap, Quota, Team
from trainhub.tenancy.services import add_member

from ..factories import gang_placements, make_job, make_node, make_team, make_user

pytestmark = pytest.mark.django_db

HTMX = {"HX-Request": "true"}


@dataclass
class World:
    root: User
    bob: User  # admin of recsys
    alice: User  # member of recsys
    carol: User  # member of vision
    dave: User  # in no team
    recsys: Team
    vision: Team


@pytest.fixture
def world() -> World:
    root = make_user("root", superuser=True)
    bob, alice, carol, dave = (make_user(n) for n in ("bob", "alice", "carol", "dave"))
    recsys = make_team("recsys", members={bob: Role.ADMIN, alice: Role.MEMBER}, cpu=4)
    vision = make_team("vision", members={carol: Role.MEMBER}, cpu=8, gpu=2)
    return World(root, bob, alice, carol, dave, recsys, vision)


def _client(user: User) -> Client:
    client = Client()
    client.force_login(user)
    return client


def _roles(team: Team) -> dict[str, str]:
    return dict(team.memberships.values_list("user__username", "role"))


def _quota_post(**overrides: Any) -> dict[str, Any]:
    data: dict[str, Any] = {"cpu": "6", "memory_mb": "65536", "gpu": "1"}
    data.update(overrides)
    return data


# The list


def test_the_list_shows_the_teams_a_user_belongs_to(world: World) -> None:
    assert "recsys" in _client(world.alice).get("/teams/").content.decode()
    assert "vision" not in _client(world.alice).get("/teams/").content.decode()
    everything = _client(world.root).get("/teams/").content.decode()
    assert 'href="/teams/recsys/"' in everything and 'href="/teams/vision/"' in everything
    nothing = _client(world.dave).get("/teams/").content.decode()
    assert "not in any team yet" in nothing


def test_the_list_shows_usage_against_the_quota(world: World) -> None:
    node, _ = make_node(cpus=16)
    job = make_job(world.alice, team="recsys")  # 1.5 cpu at its minimum
    place_job(job=job, placements=gang_placements(job, node), now=timezone.now())
    page = _client(world.alice).get("/teams/").content.decode()
    assert "1.5 used of 4" in page
    assert 'class="used" style="width: 37.50%"' in page
    assert "Member" in page  # alice's role


def test_the_list_makes_as_many_queries_for_many_teams_as_for_two(
    world: World, django_assert_num_queries: Any
) -> None:
    client = _client(world.root)
    # session, user, count, teams, then usage: quotas, held tasks, active jobs
    with django_assert_num_queries(7):
        assert client.get("/teams/").status_code == 200
    for n in range(5):
        make_team(f"team-{n}", members={world.bob: Role.ADMIN})
    with django_assert_num_queries(7):
        assert client.get("/teams/").status_code == 200


# One team's page


def test_a_team_outside_the_users_teams_is_not_found(world: World) -> None:
    assert _client(world.carol).get("/teams/recsys/").status_code == 404
    assert _client(world.dave).get("/teams/recsys/").status_code == 404
    assert _client(world.root).get("/teams/nope/").status_code == 404


def test_members_see_the_members_read_only(world: World) -> None:
    page = _client(world.alice).get("/teams/recsys/").content.decode()
    assert "bob" in page and "Team admin" in page
    assert "Add member" not in page and "Change role" not in page and "Remove" not in page
    assert 'href="/jobs/?team=recsys"' in page
    assert "Edit the quota" not in page


def test_team_admins_get_the_member_forms_and_platform_admins_the_quota_form(
    world: World,
) -> None:
    page = _client(world.bob).get("/teams/recsys/").content.decode()
    assert "Add member" in page and "Change role" in page and 'data-opens="remove-alice"' in page
    assert "Edit the quota" not in page
    page = _client(world.root).get("/teams/recsys/").content.decode()
    assert "Edit the quota" in page and "/admin/tenancy/team/" in page


def test_the_page_shows_quota_caps_and_recent_jobs(world: World) -> None:
    PriorityCap.objects.create(team=world.recsys, priority="production", cpu=2)
    make_job(world.alice, team="recsys", name="mf-small")
    page = _client(world.alice).get("/teams/recsys/").content.decode()
    assert "0 / 2" in page  # production: holds 0 cpu of a cap of 2
    assert "mf-small" in page


def test_the_page_makes_as_many_queries_for_many_members_as_for_two(
    world: World, django_assert_num_queries: Any
) -> None:
    client = _client(world.bob)
    make_job(world.alice, team="recsys")
    # session, user, team, usage (3), caps, role (policy), members count and page, jobs,
    # whether the navigation offers Submit, and (a team admin's) webhooks and deliveries
    with django_assert_num_queries(14):
        assert client.get("/teams/recsys/").status_code == 200
    for n in range(6):
        add_member(team=world.recsys, user=make_user(f"user-{n}"), role=Role.VIEWER)
        make_job(world.alice, team="recsys")
    with django_assert_num_queries(14):
        assert client.get("/teams/recsys/").status_code == 200


# Changing the members


def test_a_team_admin_adds_a_member(world: World) -> None:
    response = _client(world.bob).post(
        "/teams/recsys/members/", {"username": "dave", "role": "viewer"}
    )
    assert (response.status_code, response["Location"]) == (302, "/teams/recsys/")
    assert _roles(world.recsys)["dave"] == Role.VIEWER


def test_adding_through_htmx_answers_with_the_members_section(world: World) -> None:
    response = _client(world.bob).post(
        "/teams/recsys/members/", {"username": "dave", "role": "member"}, headers=HTMX
    )
    assert response.status_code == 200
    page = response.content.decode()
    assert page.startswith('<section id="members"') and 'id="member-dave"' in page
    assert "dave is now a member." in page


def test_a_team_admin_changes_a_role_and_removes_a_member(world: World) -> None:
    client = _client(world.bob)
    assert client.post("/teams/recsys/members/alice/role/", {"role": "admin"}).status_code == 302
    assert _roles(world.recsys)["alice"] == Role.ADMIN
    assert client.post("/teams/recsys/members/alice/remove/").status_code == 302
    assert "alice" not in _roles(world.recsys)


def test_an_unknown_username_is_refused_beside_the_field(world: World) -> None:
    before = _roles(world.recsys)
    response = _client(world.bob).post(
        "/teams/recsys/members/", {"username": "nobody", "role": "member"}, headers=HTMX
    )
    assert response.status_code == 400
    page = response.content.decode()
    assert '<p class="field-error" id="id_username_error">No user &#x27;nobody&#x27;.</p>' in page
    assert 'value="nobody"' in page  # the typed input survives
    assert 'aria-invalid="true"' in page
    assert _roles(world.recsys) == before


@pytest.mark.parametrize(
    ("method", "path", "data"),
    [
        ("post", "/teams/recsys/members/", {"username": "dave", "role": "admin"}),
        ("post", "/teams/recsys/members/bob/role/", {"role": "viewer"}),
        ("post", "/teams/recsys/members/bob/remove/", {}),
    ],
)
def test_a_member_may_not_change_the_members(
    world: World, method: str, path: str, data: dict[str, str]
) -> None:
    before = _roles(world.recsys)
    assert getattr(_client(world.alice), method)(path, data).status_code == 403
    assert getattr(_client(world.carol), method)(path, data).status_code == 404
    assert _roles(world.recsys) == before


def test_the_last_admin_cannot_be_removed(world: World) -> None:
    response = _client(world.bob).post("/teams/recsys/members/bob/remove/", headers=HTMX)
    assert response.status_code == 409
    assert "last admin; make someone else admin first" in response.content.decode()
    assert _roles(world.recsys)["bob"] == Role.ADMIN


def test_the_last_admin_cannot_step_down(world: World) -> None:
    response = _client(world.bob).post(
        "/teams/recsys/members/bob/role/", {"role": Role.MEMBER}, headers=HTMX
    )
    assert response.status_code == 409
    assert "last admin; make someone else admin first" in response.content.decode()
    assert _roles(world.recsys)["bob"] == Role.ADMIN


def test_an_admin_who_removes_themselves_goes_back_to_the_team_list(world: World) -> None:
    add_member(team=world.recsys, user=world.alice, role=Role.ADMIN)
    client = _client(world.bob)
    response = client.post("/teams/recsys/members/bob/remove/")
    assert (response.status_code, response["Location"]) == (302, "/teams/")
    response = client.post("/teams/recsys/members/alice/remove/", headers=HTMX)
    assert response.status_code == 404  # bob no longer sees recsys
    assert set(_roles(world.recsys)) == {"alice"}


def test_an_unknown_member_is_not_found(world: World) -> None:
    response = _client(world.bob).post("/teams/recsys/members/carol/role/", {"role": "viewer"})
    assert response.status_code == 404


# The quota


def test_a_platform_admin_sets_the_quota_and_caps(world: World) -> None:
    data = _quota_post(
        borrowing_limit_cpu="2",
        lending_limit_gpu="0",
        cap_production_cpu="3",
        cap_experiment_gpu="",
    )
    response = _client(world.root).post("/teams/recsys/quota/", data)
    assert (response.status_code, response["Location"]) == (302, "/teams/recsys/")
    quota = Quota.objects.get(team=world.recsys)
    assert (quota.cpu, quota.memory_mb, quota.gpu) == (6, 65536, 1)
    assert (quota.borrowing_limit_cpu, quota.borrowing_limit_gpu) == (2, None)
    assert quota.lending_limit_gpu == 0
    caps = {c.priority: (c.cpu, c.memory_mb, c.gpu) for c in world.recsys.priority_caps.all()}
    assert caps == {"production": (3, None, None)}


def test_the_quota_form_through_htmx_answers_with_the_quota_section(world: World) -> None:
    response = _client(world.root).post("/teams/recsys/quota/", _quota_post(), headers=HTMX)
    assert response.status_code == 200
    page = response.content.decode()
    assert page.startswith('<section id="quota"') and "Quota saved" in page
    assert "6 used of" not in page and "0 used of 6" in page


def test_a_team_admin_may_not_set_the_quota(world: World) -> None:
    response = _client(world.bob).post("/teams/recsys/quota/", _quota_post())
    assert response.status_code == 403
    assert Quota.objects.get(team=world.recsys).cpu == 4


def test_a_bad_quota_value_is_refused_beside_its_field(world: World) -> None:
    response = _client(world.root).post(
        "/teams/recsys/quota/", _quota_post(cpu="-1", cap_normal_gpu="x")
    )
    assert response.status_code == 400
    page = response.content.decode()
    assert 'id="id_cpu_error">Ensure this value is greater than or equal to 0.' in page
    assert 'id="id_cap_normal_gpu_error">Enter a whole number.' in page
    assert 'value="-1"' in page
    assert Quota.objects.get(team=world.recsys).cpu == 4
    assert not world.recsys.priority_caps.exists()


def test_the_quota_may_not_go_below_what_production_jobs_hold(world: World) -> None:
    node, _ = make_node(cpus=16)
    job = make_job(world.alice, team="recsys", priority="production")
    place_job(job=job, placements=gang_placements(job, node), now=timezone.now())
    response = _client(world.root).post(
        "/teams/recsys/quota/", _quota_post(cpu="1", cap_normal_cpu="1"), headers=HTMX
    )
    assert response.status_code == 400
    page = response.content.decode()
    assert "production jobs hold cpu 1.5; the quota cannot be set below that" in page
    assert Quota.objects.get(team=world.recsys).cpu == 4
    assert not world.recsys.priority_caps.exists()


def test_signed_out_browsers_go_to_the_login_page(world: World) -> None:
    for path in ("/teams/", "/teams/recsys/"):
        response = Client().get(path)
        assert (response.status_code, response["Location"]) == (302, f"/login/?next={path}")
    assert Client().post("/teams/recsys/members/", {"username": "dave"}).status_code == 302
    assert Membership.objects.filter(user=world.dave).count() == 0
