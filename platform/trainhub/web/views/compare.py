"""`/jobs/compare/?ids=1,2,3`: 2 to 6 jobs' metrics overlaid and their specs side by side."""

from __future__ import annotations

from django.contrib.auth.decorators import login_required
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import render

from trainhub.jobs.models import Job
from trainhub.telemetry.finals import final_values

from ..specdiff import spec_diff

MIN_JOBS = 2
MAX_JOBS = 6


class CompareError(ValueError):
    """The ids asked for cannot be compared; the message says why."""


def parse_ids(values: list[str]) -> list[int]:
    """Job ids from `?ids=1,2,3` (or `?ids=1&ids=2`), deduplicated, in the order given."""
    ids: list[int] = []
    for raw in ",".join(values).split(","):
        text = raw.strip()
        if not text:
            continue
        if not (text.isascii() and text.isdigit()):
            raise CompareError(f"“{text[:40]}” is not a job id: give ids as ?ids=12,15.")
        if int(text) not in ids:
            ids.append(int(text))
    if not MIN_JOBS <= len(ids) <= MAX_JOBS:
        raise CompareError(
            f"Compare {MIN_JOBS} to {MAX_JOBS} jobs at a time; "
            f"{len(ids)} {'was' if len(ids) == 1 else 'were'} given. "
            "Pick them with the checkboxes of the job list."
        )
    return ids


@login_required
def job_compare(request: HttpRequest) -> HttpResponse:
    context: dict[str, object] = {"section": "jobs", "min_jobs": MIN_JOBS, "max_jobs": MAX_JOBS}
    try:
        ids = parse_ids(request.GET.getlist("ids"))
    except CompareError as exc:
        # A page that says what to fix (200, as a refused form is): not an error page.
        context["error"] = str(exc)
        return render(request, "web/job_compare.html", context)
    found = {
        job.pk: job
        for job in Job.objects.visible_to(request.user).select_related("team").filter(pk__in=ids)
    }
    if len(found) != len(ids):
        # Another team's job is not found, as on its own page.
        raise Http404("No such job.")
    jobs = [found[i] for i in ids]
    context.update(
        jobs=jobs,
        diff=spec_diff([job.spec for job in jobs]),
        finals=final_values(ids),
    )
    return render(request, "web/job_compare.html", context)
