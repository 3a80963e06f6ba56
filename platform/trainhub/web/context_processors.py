"""What every page's navigation shows: only the areas the signed-in user's role allows."""

from __future__ import annotations

from dataclasses import dataclass

from django.http import HttpRequest
from django.urls import reverse

from trainhub.tenancy.choices import MEMBERSHIP_MANAGERS, SUBMITTERS
from trainhub.tenancy.models import Membership


@dataclass(frozen=True)
class NavItem:
    label: str
    url: str
    section: str  # matched against the page's `section` to mark the current one


def navigation(request: HttpRequest) -> dict[str, object]:
    user = getattr(request, "user", None)
    if user is None or not user.is_authenticated:
        return {"nav_items": []}
    admin = user.is_superuser
    roles = (
        set()
        if admin
        else set(Membership.objects.filter(user=user).values_list("role", flat=True).distinct())
    )
    can_submit = admin or bool(roles & SUBMITTERS)
    items = [
        NavItem("Dashboard", reverse("web-dashboard"), "dashboard"),
        NavItem("Jobs", reverse("web-job-list"), "jobs"),
        NavItem("Experiments", reverse("web-experiment-list"), "experiments"),
        NavItem("Models", reverse("web-model-list"), "models"),
    ]
    if can_submit:
        items.append(NavItem("Submit", reverse("web-job-new"), "submit"))
    items += [
        NavItem("Nodes", reverse("web-node-list"), "nodes"),
        NavItem("Teams", reverse("web-team-list"), "teams"),
    ]
    if admin:
        items.append(NavItem("Users", reverse("web-user-list"), "users"))
    if admin or roles & MEMBERSHIP_MANAGERS:
        items.append(NavItem("What-if", reverse("web-whatif"), "whatif"))
    items.append(NavItem("Account", reverse("web-account"), "account"))
    return {"nav_items": items, "nav_can_submit": can_submit}
