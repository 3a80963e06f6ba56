"""The account page: personal API tokens (created with a name and an expiry, at most
`TRAINHUB_TOKEN_MAX_DAYS` away; the secret shown once; revoked at once), how to sign the
CLI in to this server, and notifications (`views/notifications.py`)."""

from __future__ import annotations

from typing import Any

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.contrib.auth.models import User
from django.core.paginator import Paginator
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.utils import timezone
from django.views.decorators.http import require_POST

from trainhub.tenancy.tokens import (
    TokenLifetimeError,
    TokenNameError,
    issue_token,
    revoke_token,
    tokens_of,
)

from ..htmx import is_fragment_request, render_page
from ..notification_context import account_notifications
from ..team_forms import TokenForm

TOKENS_PER_PAGE = 50
PAGE, FRAGMENT = "web/account.html", "web/partials/account_tokens.html"


def _user(request: HttpRequest) -> User:
    assert isinstance(request.user, User), "login_required lets only signed-in users in"
    return request.user


def _context(request: HttpRequest, **extra: Any) -> dict[str, Any]:
    tokens = Paginator(tokens_of(request.user), TOKENS_PER_PAGE).get_page(request.GET.get("page"))
    context: dict[str, Any] = {
        "section": "account",
        "tokens": tokens,
        "token_form": TokenForm(),
        "server_url": request.build_absolute_uri("/").rstrip("/"),
        "now": timezone.now(),
    }
    if not is_fragment_request(request):  # the page's other section (views/notifications.py)
        context.update(account_notifications(_user(request)))
    context.update(extra)
    return context


def account_page(request: HttpRequest, *, status: int, **extra: Any) -> HttpResponse:
    """The whole page, with `extra` (a refused form, a new secret) in its context."""
    return render(request, PAGE, _context(request, **extra), status=status)


@login_required
def account(request: HttpRequest) -> HttpResponse:
    return render_page(request, PAGE, FRAGMENT, _context(request))


@login_required
@require_POST
def token_create(request: HttpRequest) -> HttpResponse:
    """Issue a token and show its secret, this once (never stored, never in a URL)."""
    form = TokenForm(request.POST)
    if not form.is_valid():
        return render_page(request, PAGE, FRAGMENT, _context(request, token_form=form), status=400)
    try:
        issued = issue_token(
            user=_user(request),
            expires_at=form.cleaned_data["expires_at"],
            name=form.cleaned_data["name"],
        )
    except TokenNameError as exc:  # taken, or a control character: beside the field
        form.add_error("name", str(exc))
        return render_page(request, PAGE, FRAGMENT, _context(request, token_form=form), status=400)
    except TokenLifetimeError as exc:  # the form checks too; this is the last word
        form.add_error(None, str(exc))
        return render_page(request, PAGE, FRAGMENT, _context(request, token_form=form), status=400)
    return render_page(request, PAGE, FRAGMENT, _context(request, issued=issued), status=201)


@login_required
@require_POST
def token_revoke(request: HttpRequest, key: str) -> HttpResponse:
    """Revoke one of the user's own tokens; another user's is as unknown as a made-up one."""
    revoked = revoke_token(user=_user(request), key=key)
    if revoked is None:
        raise Http404("You have no token with this id.")
    called = f"“{revoked.name}”" if revoked.name is not None else f"{revoked.key}…"
    notice = f"Token {called} revoked: it no longer works."
    if not is_fragment_request(request):
        messages.success(request, notice)
        return redirect("web-account")
    return render_page(request, PAGE, FRAGMENT, _context(request, notice=notice))
