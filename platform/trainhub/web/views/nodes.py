"""The node pages: `/nodes/` (a table), `/nodes/<id>/`, and the platform admins' actions:
cordon, drain, uncordon, and "Add a node" (an enrollment token and its install command).

Every signed-in user reads the nodes (as in the API); a job of another team running on a
node shows no name or link. The actions call the same services as the API
(`trainhub.nodes.services`); anyone but a platform admin gets 403 and nothing changes.
Both pages refresh their body every few seconds (`frontend/src/pages/nodes.js`), so a new
node shows up without a reload.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from urllib.parse import urlencode

from django.conf import settings
from django.contrib.auth.decorators import login_required
from django.contrib.auth.models import User
from django.core.exceptions import PermissionDenied
from django.core.paginator import Paginator
from django.http import HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, redirect
from django.urls import reverse
from django.utils import timezone
from django.utils.dateparse import parse_datetime
from django.views.decorators.http import require_POST

from trainhub.jobs.selectors import tasks_on_node
from trainhub.nodes.choices import NodeState
from trainhub.nodes.install import (
    install_command,
    is_loopback,
    is_plain_http,
    public_server_url,
)
from trainhub.nodes.models import Node
from trainhub.nodes.services import create_enrollment_token, set_node_state
from trainhub.tenancy.models import Team
from trainhub.tenancy.policies import is_platform_admin

from ..cluster import gpu_rows, node_rows, task_rows
from ..htmx import render_page

PAGE_SIZE = 50
# An "Add a node" token enrolls one node within this time.
INSTALL_TOKEN_LIFETIME = timedelta(hours=1)


@dataclass(frozen=True)
class InstallOffer:
    """What "Add a node" shows once: the command with the token's secret in it."""

    command: str
    expires_at: datetime
    insecure: bool  # the server is plain http: the command passes --insecure
    loopback: bool  # the server's URL names this machine: no other machine reaches it
    server: str  # the URL the command names (`TRAINHUB_EXTERNAL_URL`, else the request's)
    port_min: int  # the task ports, which nodes keep free and reach each other on
    port_max: int


@login_required
def node_list(request: HttpRequest) -> HttpResponse:
    return _node_list(request, since=_since(request), install=None)


@login_required
@require_POST
def node_add(request: HttpRequest) -> HttpResponse:
    """Make a single-use enrollment token and show the command that installs and enrolls
    an agent with it; the list below then marks nodes that joined since."""
    _require_platform_admin(request)
    admin = request.user
    assert isinstance(admin, User)  # signed in (login_required)
    now = timezone.now()
    expires_at = now + INSTALL_TOKEN_LIFETIME
    issued = create_enrollment_token(
        created_by=admin,
        description="Add a node (web)",
        max_uses=1,
        expires_at=expires_at,
    )
    server = public_server_url(request)
    install = InstallOffer(
        install_command(server, issued.secret),
        expires_at,
        insecure=is_plain_http(server),
        loopback=is_loopback(server),
        server=server,
        port_min=settings.TASK_PORT_RANGE[0],
        port_max=settings.TASK_PORT_RANGE[1],
    )
    return _node_list(request, since=now, install=install)


def _node_list(
    request: HttpRequest, *, since: datetime | None, install: InstallOffer | None
) -> HttpResponse:
    now = timezone.now()
    page = Paginator(Node.objects.order_by("hostname", "id"), PAGE_SIZE).get_page(
        request.GET.get("page")
    )
    query = {"page": page.number, **({"since": since.isoformat()} if since else {})}
    arrivals = (
        list(
            Node.objects.filter(enrolled_at__gt=since)
            .only("id", "hostname", "enrolled_at")
            .order_by("enrolled_at")
        )
        if since
        else []
    )
    context = {
        "section": "nodes",
        "page": page,
        "rows": node_rows(page.object_list, now, since=since),
        "since": since,
        "arrivals": arrivals,
        "since_query": urlencode({"since": since.isoformat()}) if since else "",
        "poll_url": f"{reverse('web-node-list')}?{urlencode(query)}",
        "install": install,
        "can_manage": is_platform_admin(request.user),
    }
    return render_page(request, "web/node_list.html", "web/partials/node_table.html", context)


@login_required
def node_detail(request: HttpRequest, node_id: int) -> HttpResponse:
    node = get_object_or_404(Node.objects.select_related("owner"), pk=node_id)
    admin = is_platform_admin(request.user)
    visible = (
        None if admin else set(Team.objects.visible_to(request.user).values_list("pk", flat=True))
    )
    tasks = task_rows(tasks_on_node(node), visible)
    context = {
        "section": "nodes",
        "node": node,
        "row": node_rows([node], timezone.now())[0],
        "tasks": tasks,
        "gpus": gpu_rows(node, tasks),
        "can_manage": admin,
        "quarantine_after": settings.NODE_QUARANTINE_AFTER,
    }
    return render_page(request, "web/node_detail.html", "web/partials/node_body.html", context)


@login_required
@require_POST
def node_cordon(request: HttpRequest, node_id: int) -> HttpResponse:
    return _set_state(request, node_id, NodeState.CORDONED)


@login_required
@require_POST
def node_drain(request: HttpRequest, node_id: int) -> HttpResponse:
    return _set_state(request, node_id, NodeState.DRAINING)


@login_required
@require_POST
def node_uncordon(request: HttpRequest, node_id: int) -> HttpResponse:
    return _set_state(request, node_id, NodeState.ACTIVE)


def _set_state(request: HttpRequest, node_id: int, state: NodeState) -> HttpResponse:
    _require_platform_admin(request)
    node = get_object_or_404(Node, pk=node_id)
    set_node_state(node=node, state=state, actor=request.user)
    return redirect("web-node-detail", node_id=node.pk)


def _require_platform_admin(request: HttpRequest) -> None:
    if not is_platform_admin(request.user):
        raise PermissionDenied("Only platform admins manage nodes.")


def _since(request: HttpRequest) -> datetime | None:
    """The `since` of a list that marks nodes which joined after it (ISO 8601)."""
    raw = request.GET.get("since")
    try:
        parsed = parse_datetime(raw) if raw else None
    except ValueError:
        return None
    if parsed is not None and timezone.is_naive(parsed):
        parsed = timezone.make_aware(parsed)
    return parsed
