"""The users pages, for platform admins: every user with their teams, a new user, and one
user's e-mail and name, and deactivating or reactivating them.

The forms apply the REST API's rules (`trainhub.tenancy.accounts`) and the services write
and audit (`create_user`, `update_user`, `set_user_active`), as `POST /api/v1/users/` does.
Anyone else gets 403. A new user is added to teams on the team's page, by name or e-mail.
"""

from __future__ import annotations

from typing import Any

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.contrib.auth.models import User
from django.core.exceptions import PermissionDenied
from django.core.paginator import Paginator
from django.db.models import Prefetch
from django.http import HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, redirect
from django.views.decorators.http import require_POST

from trainhub.tenancy.models import Membership
from trainhub.tenancy.policies import can_manage_users
from trainhub.tenancy.services import (
    TenancyError,
    create_user,
    set_user_active,
    update_user,
)

from ..htmx import is_fragment_request, render_page
from ..user_forms import EditUserForm, NewUserForm

USERS_PER_PAGE = 50
LIST_PAGE, LIST_FRAGMENT = "web/user_list.html", "web/partials/user_list_body.html"
DETAIL_PAGE, DETAIL_FRAGMENT = "web/user_detail.html", "web/partials/user_profile.html"
REFUSED = "Only platform admins manage users."


def _require_admin(request: HttpRequest) -> None:
    if not can_manage_users(request.user):
        raise PermissionDenied(REFUSED)


def _memberships() -> Prefetch[Any]:
    return Prefetch("memberships", Membership.objects.select_related("team").order_by("team__slug"))


def _list_context(request: HttpRequest, **extra: Any) -> dict[str, Any]:
    users = User.objects.order_by("username").prefetch_related(_memberships())
    context: dict[str, Any] = {
        "section": "users",
        "users": Paginator(users, USERS_PER_PAGE).get_page(request.GET.get("page")),
        "user_form": NewUserForm(),
    }
    context.update(extra)
    return context


@login_required
def user_list(request: HttpRequest) -> HttpResponse:
    """`/users/`: the users (GET); a new user (POST)."""
    _require_admin(request)
    if request.method != "POST":
        return render_page(request, LIST_PAGE, LIST_FRAGMENT, _list_context(request))
    form = NewUserForm(request.POST)
    status = 400
    if form.is_valid():
        data = form.cleaned_data
        try:
            user = create_user(
                username=data["username"],
                password=data["password"],
                email=data["email"],
                first_name=data["first_name"],
                last_name=data["last_name"],
                is_platform_admin=data["is_platform_admin"],
                actor=request.user,
            )
        except TenancyError as exc:  # the name or the e-mail is taken
            form.add_error("email" if "e-mail" in str(exc) else "username", str(exc))
            status = 409
        else:
            notice = (
                f"User {user.username} created; they can sign in now. Add them to a team "
                "on the team's page, by username or e-mail."
            )
            if is_fragment_request(request):
                context = _list_context(request, notice=notice)
                return render_page(request, LIST_PAGE, LIST_FRAGMENT, context, status=201)
            messages.success(request, notice)
            return redirect("web-user-list")
    context = _list_context(request, user_form=form)
    return render_page(request, LIST_PAGE, LIST_FRAGMENT, context, status=status)


def _detail_context(request: HttpRequest, person: User, **extra: Any) -> dict[str, Any]:
    initial = {name: getattr(person, name) for name in ("email", "first_name", "last_name")}
    context: dict[str, Any] = {
        "section": "users",
        "person": person,
        "memberships": list(person.memberships.all()),
        "profile_form": EditUserForm(initial=initial),
        "is_self": person.pk == request.user.pk,
    }
    context.update(extra)
    return context


def _person(username: str) -> User:
    users = User.objects.prefetch_related(_memberships())
    return get_object_or_404(users, username=username)


@login_required
def user_detail(request: HttpRequest, username: str) -> HttpResponse:
    """`/users/<username>/`: the user (GET); their e-mail and name (POST)."""
    _require_admin(request)
    person = _person(username)
    if request.method != "POST":
        return render_page(request, DETAIL_PAGE, DETAIL_FRAGMENT, _detail_context(request, person))
    form = EditUserForm(request.POST)
    status = 400
    if form.is_valid():
        try:
            update_user(user=person, **form.cleaned_data, actor=request.user)
        except TenancyError as exc:  # another user has the e-mail
            form.add_error("email", str(exc))
            status = 409
        else:
            notice = f"Saved {person.username}'s e-mail and name."
            if not is_fragment_request(request):
                messages.success(request, notice)
                return redirect("web-user-detail", username=person.username)
            context = _detail_context(request, person, notice=notice)
            return render_page(request, DETAIL_PAGE, DETAIL_FRAGMENT, context)
    context = _detail_context(request, person, profile_form=form)
    return render_page(request, DETAIL_PAGE, DETAIL_FRAGMENT, context, status=status)


@login_required
@require_POST
def user_active(request: HttpRequest, username: str) -> HttpResponse:
    """Deactivate (`active=0`) or reactivate (`active=1`) a user; a full page answer."""
    _require_admin(request)
    person = _person(username)
    active = request.POST.get("active") == "1"
    try:
        set_user_active(user=person, active=active, actor=request.user)
    except TenancyError as exc:
        context = _detail_context(request, person, active_error=str(exc))
        return render_page(request, DETAIL_PAGE, DETAIL_PAGE, context, status=409)
    if active:
        messages.success(request, f"{person.username} is active again and can sign in.")
    else:
        messages.success(
            request,
            f"{person.username} is deactivated: they can no longer sign in and their API "
            "tokens stop working. Their memberships and jobs stay.",
        )
    return redirect("web-user-detail", username=person.username)
