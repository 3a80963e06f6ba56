"""The dashboard `/`: cluster capacity and allocation, the capacity no team's quota
covers, every visible team's quota, the queue, running jobs and recent events.

Live by polling: the page's body is an htmx fragment (`web/partials/dashboard_body.html`)
that `frontend/src/pages/dashboard.js` asks this same view for every ~4 s while the page
is visible. Polling, not a WebSocket, because no cluster-wide feed exists (the live feeds
are per job, `/ws/jobs/<id>/`) and the fragment is cheap: a fixed number of queries
whatever the size of the cluster (pinned in tests/trainhub/web/test_dashboard.py).
"""

from __future__ import annotations

from django.contrib.auth.decorators import login_required
from django.http import HttpRequest, HttpResponse
from django.utils import timezone

from trainhub.jobs.choices import JOB_PLACED
from trainhub.jobs.models import Job
from trainhub.jobs.selectors import pending_summary, recent_events
from trainhub.jobs.usage import quota_usage
from trainhub.nodes.models import Node
from trainhub.tenancy.models import Team
from trainhub.tenancy.selectors import quotas_in_all

from ..cluster import cluster_summary, team_usage, unassigned_capacity
from ..htmx import render_page

RUNNING_SHOWN = 10
EVENTS_SHOWN = 15
RUNNING_FIELDS = (
    "id",
    "name",
    "state",
    "priority",
    "started_at",
    "team__slug",
    "submitted_by__username",
)


@login_required
def dashboard(request: HttpRequest) -> HttpResponse:
    now = timezone.now()
    user = request.user
    jobs = Job.objects.visible_to(user)
    teams = list(Team.objects.visible_to(user).select_related("quota").order_by("slug"))
    running = jobs.filter(state__in=JOB_PLACED)
    cluster = cluster_summary(Node.objects.all(), now)
    context = {
        "section": "dashboard",
        "cluster": cluster,
        # Held, borrowed and lent only: what the jobs request is for the team page.
        "teams": team_usage(
            teams,
            quota_usage((t.pk for t in teams), requested=False),
            gpus_in_cluster=cluster.gpus > 0,
        ),
        "queue": pending_summary(jobs),
        "running": list(
            running.select_related("team", "submitted_by")
            .only(*RUNNING_FIELDS)
            .order_by("-started_at", "-id")[:RUNNING_SHOWN]
        ),
        "running_count": running.count(),
        # Over every team's quota, not only the visible ones: what nobody is promised.
        "unassigned": unassigned_capacity(cluster.capacity, quotas_in_all()),
        "events": recent_events(jobs, EVENTS_SHOWN),
    }
    return render_page(request, "web/dashboard.html", "web/partials/dashboard_body.html", context)
