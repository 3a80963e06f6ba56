"""`/jobs/`: the jobs of the user's teams, filtered as the API filters them (`JobFilter`),
paginated, with each pending job's queue position and reason.

The table is an htmx fragment: a filter change or a page link swaps just the table (and
pushes the URL, so it keeps the filters), and the table re-fetches itself every 4 s while
the page is visible. Polling rather than a WebSocket: what the list shows (queue positions
above all) changes with every cycle, not only with events of the listed jobs, and one
constant-cost query set every 4 s is cheaper than a feed per filter.
"""

from __future__ import annotations

from dataclasses import dataclass

from django.contrib.auth.decorators import login_required
from django.core.paginator import Paginator
from django.http import HttpRequest, HttpResponse

from trainhub.jobs.choices import JobState, Priority
from trainhub.jobs.filters import JobFilter
from trainhub.jobs.models import Job
from trainhub.scheduling.queue import queue_positions
from trainhub.tenancy.models import Team

from ..htmx import render_page

PAGE_SIZE = 50
REFRESH_SECONDS = 4
COMPARE_MIN, COMPARE_MAX = 2, 6


@dataclass(frozen=True)
class Row:
    job: Job
    position: int | None  # in the queue, for a pending job


@login_required
def job_list(request: HttpRequest) -> HttpResponse:
    jobs = (
        Job.objects.visible_to(request.user)
        .select_related("team", "submitted_by")
        .defer("spec", "runtime_token")
    )
    filters = JobFilter(request.GET, queryset=jobs.order_by("-id"))
    # An invalid filter (an unknown state) lists nothing, as the API refuses it.
    matching = filters.qs if filters.is_valid() else jobs.none()
    page = Paginator(matching, PAGE_SIZE).get_page(request.GET.get("page"))
    rows = list(page.object_list)
    pending = [job.pk for job in rows if job.state == JobState.PENDING]
    positions = queue_positions(pending) if pending else {}
    context = {
        "section": "jobs",
        "filters": filters,
        "page": page,
        "rows": [Row(job, positions.get(job.pk)) for job in rows],
        "teams": Team.objects.visible_to(request.user).order_by("slug").only("slug", "name"),
        "states": JobState.choices,
        "priorities": Priority.choices,
        "selected": {
            "state": request.GET.getlist("state"),
            "priority": request.GET.getlist("priority"),
        },
        "refresh_seconds": REFRESH_SECONDS,
        "compare_min": COMPARE_MIN,
        "compare_max": COMPARE_MAX,
    }
    return render_page(request, "web/job_list.html", "web/partials/job_table.html", context)
