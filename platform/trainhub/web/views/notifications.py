"""Notifications on the account page (what the user is told about, by e-mail and their
own webhooks, with the delivery log) and the team page (the team's webhooks, for its
admins), through the services the API calls (`trainhub.notifications.services`). A
webhook's secret is shown once, in the answer that made it."""

from __future__ import annotations

from typing import Any

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.contrib.auth.models import User
from django.core.exceptions import PermissionDenied
from django.http import HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.views.decorators.http import require_POST

from trainhub.notifications.choices import NotifyEvent, WebhookFormat
from trainhub.notifications.models import Webhook
from trainhub.notifications.policies import can_manage_team_webhooks
from trainhub.notifications.services import (
    CreatedWebhook,
    WebhookError,
    create_webhook,
    delete_webhook,
    set_choices,
)
from trainhub.tenancy.models import Team

from ..htmx import is_fragment_request
from ..notification_context import account_notifications, team_notifications
from ..notification_forms import NotificationChoicesForm, TeamWebhookForm, WebhookForm
from .account import account_page
from .teams import team_detail_page, visible_team

ACCOUNT_PART = "web/partials/account_notifications.html"
TEAM_PART = "web/partials/team_webhooks.html"
TEAM_REFUSED = "Only team admins set the team's webhooks."


def _user(request: HttpRequest) -> User:
    assert isinstance(request.user, User), "login_required lets only signed-in users in"
    return request.user


def _account_answer(
    request: HttpRequest, notice: str = "", *, status: int = 200, **extra: Any
) -> HttpResponse:
    """The section for htmx; otherwise back to the page (the page itself when it shows a
    refusal or a new secret)."""
    if is_fragment_request(request):
        context = {"notifications_notice": notice, **account_notifications(_user(request))}
        return render(request, ACCOUNT_PART, {**context, **extra}, status=status)
    if status == 200:
        messages.success(request, notice)
        return redirect("web-account")
    return account_page(request, status=status, **extra)


@login_required
@require_POST
def notification_choices(request: HttpRequest) -> HttpResponse:
    form = NotificationChoicesForm(request.POST)
    if not form.is_valid():
        return _account_answer(request, status=400, choices_form=form)
    set_choices(
        user=_user(request),
        events=[NotifyEvent(e) for e in form.cleaned_data["events"]],
        email=form.cleaned_data["email"],
    )
    return _account_answer(request, "Notifications saved.")


def _created(form: WebhookForm, **owner: Any) -> CreatedWebhook | None:
    """The webhook, or None with the refusal beside the field it names."""
    try:
        return create_webhook(
            url=form.cleaned_data["url"],
            fmt=WebhookFormat(form.cleaned_data["format"]),
            events=form.cleaned_data.get("events"),
            **owner,
        )
    except WebhookError as exc:
        form.add_error(exc.field, str(exc))
        return None


@login_required
@require_POST
def own_webhook_create(request: HttpRequest) -> HttpResponse:
    form = WebhookForm(request.POST)
    created = _created(form, user=_user(request), actor=request.user) if form.is_valid() else None
    if created is None:
        return _account_answer(request, status=400, webhook_form=form)
    return _account_answer(request, status=201, issued_webhook=created)


@login_required
@require_POST
def own_webhook_delete(request: HttpRequest, webhook_id: int) -> HttpResponse:
    """Another user's webhook is as unknown as a made-up one."""
    webhook = get_object_or_404(Webhook, pk=webhook_id, user=_user(request))
    delete_webhook(webhook, actor=request.user)
    return _account_answer(request, "Webhook deleted with its delivery log.")


def _managed_team(request: HttpRequest, slug: str) -> Team:
    team = visible_team(request, slug)
    if not can_manage_team_webhooks(request.user, team):
        raise PermissionDenied(TEAM_REFUSED)
    return team


def _team_answer(
    request: HttpRequest, team: Team, notice: str = "", *, status: int = 200, **extra: Any
) -> HttpResponse:
    if is_fragment_request(request):
        context = {"team": team, "webhooks_notice": notice, **team_notifications(team)}
        return render(request, TEAM_PART, {**context, **extra}, status=status)
    if status == 200:
        messages.success(request, notice)
        return redirect("web-team-detail", slug=team.slug)
    return team_detail_page(request, team, status=status, **extra)


@login_required
@require_POST
def team_webhook_create(request: HttpRequest, slug: str) -> HttpResponse:
    team = _managed_team(request, slug)
    form = TeamWebhookForm(request.POST)
    created = _created(form, team=team, actor=request.user) if form.is_valid() else None
    if created is None:
        return _team_answer(request, team, status=400, team_webhook_form=form)
    return _team_answer(request, team, status=201, issued_webhook=created)


@login_required
@require_POST
def team_webhook_delete(request: HttpRequest, slug: str, webhook_id: int) -> HttpResponse:
    team = _managed_team(request, slug)
    delete_webhook(get_object_or_404(Webhook, pk=webhook_id, team=team), actor=request.user)
    return _team_answer(request, team, "Webhook deleted with its delivery log.")
